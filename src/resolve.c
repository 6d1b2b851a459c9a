/*
 * Resolving the keys of a decision: the lookup, insert and migration that
 * run before any charge, off the fast path.  Callers: decide.c.
 */
#include "resolve.h"
#include "table_cells.h"

/*
 * Insert g's key under `pol`; g->e stays NULL with SLUICE_F_FULL if full.
 * A call that fails after this takes the key back (decide.c), and must not
 * need memory to do so: what retires the entry then is allocated first, so
 * that out of memory the call fails before it has made anything.
 */
static int sl_target_insert(struct sl_thread *t, struct sl_target *g, struct sl_policy *pol,
                            uint64_t now)
{
    struct sl_limbo *back = g->pinned != NULL ? g->takeback : sl_limbo_one(t, g->l);
    struct sl_entry *e;
    int rc;

    if (back == NULL)
        return -ENOMEM;
    rc = sl_key_insert(t, g, pol, now, true, false, &e);
    if (rc < 0 && g->pinned == NULL)
        sl_limbo_retire(t, back); /* empty: kept or freed now */
    if (rc == -ENOSPC) {
        sl_count(&g->l->full, 1);
        g->flags |= SLUICE_F_FULL;
        sl_target_use(g, NULL, pol, now);
        return 0;
    }
    if (rc < 0)
        return rc;
    g->flags |= SLUICE_F_NEW_KEY;
    sl_target_unpin(g); /* an earlier insert of this call, since replaced */
    g->pinned = e;
    g->takeback = back;
    sl_target_use(g, e, pol, now);
    return 0;
}

/*
 * g's entry (in *ep, or NULL) and the policy the key decides under: its
 * override, else the default.  The default is read before and after the
 * lookup and must be the same, so both held at the lookup: a newer default
 * paired with an entry read before an override replaced it would be a
 * policy the key never had (an -E2BIG no serial order gives).  The slot
 * loads are acquire, so the second read cannot move before them.
 */
struct sl_policy *sl_key_policy(struct sl_target *g, struct sl_entry **ep)
{
    for (;;) {
        struct sl_policy *cur = atomic_load_explicit(&g->l->policy, memory_order_acquire);
        struct sl_entry *e = sl_table_get(g->s, g->h, g->key, g->len);
        if (atomic_load_explicit(&g->l->policy, memory_order_acquire) != cur)
            continue; /* a set_policy ran meanwhile */
        *ep = e;
        return e != NULL && e->pol->is_override ? e->pol : cur;
    }
}

/*
 * Find (or, if create, make) g's entry under the policy it should have now.
 * Called inside an epoch section.  cost is checked against that policy
 * before anything is created.
 */
int sl_target_resolve(struct sl_thread *t, struct sl_target *g, uint64_t cost, uint64_t now,
                      bool create)
{
    if (g->l->shm != NULL)
        return sl_shm_resolve(t, g, cost, now, create);
    for (;;) {
        struct sl_entry *e;
        struct sl_policy *want;
        int rc;

        if (g->peek && (rc = sl_cell_view(g, now)) != -ENOENT) {
            if (rc == 0 && cost > g->pol->min_cap)
                return -E2BIG;
            if (rc != -EBUSY)
                return rc;
            sl_target_wait(g); /* frozen: a writer is moving it; look again */
            continue;
        }
        want = sl_key_policy(g, &e);

        if (cost > want->min_cap)
            return -E2BIG;
        if (e != NULL && e->pol == want) {
            if (sl_target_use_present(g, e, want, now, create))
                return 0;
            rc = sl_entry_replace(t, g, e, want, SL_MOVE_EXPIRED, now);
        } else if (e == NULL && !create) {
            /* a peek does not reap: it says when an acquire would have to */
            if (sl_load_rlx(&g->l->nkeys) >= g->l->max_keys)
                g->flags |= SLUICE_F_AT_MAX_KEYS;
            sl_target_use_absent(g, want, now, sl_load_rlx(&g->l->reap_floor));
            return 0;
        } else if (e != NULL && g->peek &&
                   (rc = sl_entry_view(g, e, e->pol, want,
                                       atomic_load_explicit(&g->l->policy, memory_order_acquire),
                                       now)) != -EAGAIN) {
            /* a peek: its policy changed, read as migrated, nothing changed */
            if (rc != -EBUSY)
                return rc;
            sl_target_wait(g); /* frozen: a writer is moving it; look again */
            rc = -EAGAIN;
        } else if (e != NULL) /* its policy changed: migrate, then look again */
            rc = sl_entry_replace(t, g, e, want, SL_MOVE_CARRY, now);
        else if ((rc = sl_target_insert(t, g, want, now)) == 0)
            return 0;
        if (rc != -EAGAIN && rc != 0)
            return rc;
    }
}

/* The charge found a frozen entry: let its writer finish. */
void sl_target_wait(struct sl_target *g)
{
    (void)sl_target_settled(g, NULL);
}

/* The same, and then *w read while still holding the shard lock, so that
 * no other writer is midway through the entry (sl_undo_carried). */
uint64_t sl_target_settled(struct sl_target *g, sl_aword *w)
{
    uint64_t v = 0;

    if (g->l->shm != NULL) {
        sl_shm_wait(g, w, &v);
        return v;
    }
    sl_shard_lock(g->s);
    if (w != NULL)
        v = sl_load_acq(w);
    sl_shard_unlock(g->s);
    return v;
}

bool sl_target_take_back(struct sl_target *g)
{
    bool back;

    if (g->l->shm != NULL)
        return sl_shm_unpublish_untouched(g);
    back = sl_table_unpublish_untouched(g->s, g->h, g->pinned, g->takeback);
    g->takeback = NULL;
    return back;
}

/* A key the table had no room for, of a limiter that fails closed, denies
 * the whole request; one that fails open is admitted untracked. */
bool sl_full_denies(const struct sl_target *g, size_t n, size_t *which)
{
    for (size_t i = 0; i < n; i++)
        if ((g[i].flags & SLUICE_F_FULL) && g[i].l->when_full == SLUICE_FULL_DENY) {
            *which = i;
            return true;
        }
    return false;
}

/* -E2BIG before anything is created: a request that some key's policy can
 * never admit must not insert the keys before it (an error charges and
 * makes nothing; the resolve loop checks again against a racing change). */
int sl_cost_check(struct sl_target *g, size_t n, uint64_t cost)
{
    for (size_t i = 0; i < n; i++) {
        struct sl_entry *e;
        struct sl_policy *pol =
            g[i].l->shm != NULL ? sl_shm_key_policy(&g[i]) : sl_key_policy(&g[i], &e);
        if (cost > pol->min_cap)
            return -E2BIG;
    }
    return 0;
}

/* The same key twice in one request is one key, charged once: keep the
 * first of each (limiter, bytes), remembering its index in keys[].  Two
 * handles of one shared file are one limiter: charged twice, the key
 * passed each copy's read-only check and failed the second charge, and
 * the call retried that race for ever.  Each key is hashed first, so
 * distinct keys differ by hash and only a repeat (or a collision) compares
 * bytes. */
size_t sl_unique_keys(const struct sluice_key *keys, size_t n, struct sl_target *g,
                      unsigned *orig)
{
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        struct sl_target *c = &g[m];
        bool dup = false;
        sl_target_init(c, keys[i].limiter, keys[i].key, keys[i].len);
        for (size_t k = 0; k < m && !dup; k++)
            dup = g[k].h == c->h && sl_same_limiter(g[k].l, c->l) && g[k].len == c->len &&
                  (c->len == 0 || memcmp(g[k].key, c->key, c->len) == 0);
        if (!dup)
            orig[m++] = (unsigned)i;
    }
    return m;
}
