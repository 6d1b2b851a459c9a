/*
 * Keys in cells, the limiter's side (cells.h is the structure).
 *
 * Which keys: those of a private limiter, up to 16 bytes, under a default
 * policy of one GCRA limit, made by a decision that asked for no result
 * (acquire.c; insert.c makes them).  Each shard's cell array is under one
 * policy (its owner, referenced): a cell is decided only while that policy
 * is the limiter's default, and the array takes new keys only then.
 *
 * Every other path works on entries: sl_table_get moves a key it finds in
 * a cell to an entry first (under the shard lock: the cell frozen, its
 * state and exact time carried word for word into an entry under the
 * same policy, the entry published, then the cell removed), and the
 * entry's own machinery does the rest (policy migration, overrides,
 * resets, results, acquire_all).  A key never goes back to a cell.
 *
 * Above table.c, cells.c and entry.c; below insert.c and the decisions.
 */
#include "cells.h"
#include "table.h"
#include "table_cells.h"

uint64_t sl_cells_hash(void *ctx, const void *key, size_t len)
{
    struct sluice *l = ctx;

    return sl_hash(&l->hkey, key, len);
}

/* The key's cell in the shard's current array, the lock held (no
 * migration runs then: writers hold the lock). */
static struct sl_cell *sl_cell_find_locked(struct sl_shard *s, uint64_t h, const void *key,
                                           size_t len, struct sl_cells **in)
{
    struct sl_cells *t = atomic_load_explicit(&s->cells, memory_order_relaxed);
    uint64_t k[2];

    SL_ASSERT(sl_shard_held(s));
    if (t == NULL || len > SL_CELL_KEY_MAX)
        return NULL;
    SL_ASSERT(atomic_load_explicit(&t->prev, memory_order_relaxed) == NULL);
    sl_cell_key_pack(key, len, k);
    *in = t;
    return sl_cells_probe(t, h, k, sl_ctrl_want(h, len));
}

bool sl_cell_present_locked(struct sl_shard *s, uint64_t h, const void *key, size_t len)
{
    struct sl_cells *t;

    return sl_cell_find_locked(s, h, key, len, &t) != NULL;
}

/* Move c's key to an entry under t's policy: 0, or an error with the cell
 * as it was. */
static int sl_cell_to_entry_locked(struct sl_shard *s, uint64_t h, const void *key, size_t len,
                                   struct sl_cells *t, struct sl_cell *c)
{
    struct sluice *l = s->owner;
    struct sl_policy *pol = t->owner;
    struct sl_entry *e;
    uint64_t was[2];
    int rc = sl_entry_new(l, pol, key, len, &e);

    if (rc < 0)
        return rc;
    if (!sl_cell_freeze(c, was)) {
        /* frozen by a writer, and writers hold the lock we hold: never */
        sl_entry_discard(l, e);
        return -EAGAIN;
    }
    /* private until published; the time word for word (no new key: it
     * keeps its latest admission's exact time, sl_table_insert_locked) */
    sl_store_rlx(&e->w[pol->lim[0].off], was[0]);
    sl_store_rlx(&e->last_ns, was[1]);
    rc = sl_table_insert_locked(s, h, e);
    if (rc != 0) {
        sl_store_rel(&c->state, was[0]); /* thawed: no charge could land meanwhile */
        sl_entry_discard(l, e);
        return rc;
    }
    sl_cells_remove(t, c);
    return 0;
}

int sl_table_get_locked_err(struct sl_shard *s, uint64_t h, const void *key, size_t len,
                            struct sl_entry **out)
{
    struct sl_cells *t;
    struct sl_cell *c = sl_cell_find_locked(s, h, key, len, &t);
    int rc;

    if (c != NULL && (rc = sl_cell_to_entry_locked(s, h, key, len, t, c)) != 0) {
        *out = NULL;
        return rc;
    }
    *out = sl_table_get_entry(s, h, key, len);
    return 0;
}

struct sl_entry *sl_table_get_locked(struct sl_shard *s, uint64_t h, const void *key, size_t len)
{
    struct sl_entry *e;

    (void)sl_table_get_locked_err(s, h, key, len, &e);
    return e;
}

struct sl_entry *sl_table_get(struct sl_shard *s, uint64_t h, const void *key, size_t len)
{
    if (len <= SL_CELL_KEY_MAX && atomic_load_explicit(&s->cells, memory_order_acquire) != NULL) {
        uint64_t k[2];
        sl_cell_key_pack(key, len, k);
        if (sl_cells_lookup(&s->cells, h, k, len) != NULL) {
            struct sl_entry *e;
            sl_shard_lock(s);
            e = sl_table_get_locked(s, h, key, len); /* NULL out of memory: the insert says so */
            sl_shard_unlock(s);
            return e;
        }
    }
    return sl_table_get_entry(s, h, key, len);
}

int sl_cell_view(struct sl_target *g, uint64_t now)
{
    struct sluice *l = g->l;
    struct sl_cells *in;
    struct sl_cell *c;
    uint64_t k[2];

    if (g->len > SL_CELL_KEY_MAX || atomic_load_explicit(&g->s->cells, memory_order_acquire) == NULL)
        return -ENOENT;
    sl_cell_key_pack(g->key, g->len, k);
    if ((c = sl_cells_lookup_in(&g->s->cells, g->h, k, g->len, &in)) == NULL)
        return -ENOENT;
    /* acquire: the policy's limits as published; a key in a cell has no
     * override, so the default is the policy it decides under */
    struct sl_policy *cur = atomic_load_explicit(&l->policy, memory_order_acquire);
    uint64_t lastw = sl_load_acq(&c->last);
    /* Idle beyond its range under the policy it is kept for: fresh, as an
     * entry reads then (sl_target_use_present).  Viewed as it is, GCRA's
     * word past its range read as spent: a peek refused what the acquire
     * after it admitted (a reviewer, 2^62 ns on). */
    if (in->owner == cur && lastw != 0 && lastw != SL_LAST_SEALED &&
        sl_idle_beyond(now, lastw - 1, cur->idle_fresh_ns)) {
        sl_target_use(g, NULL, cur, now);
        return 0;
    }
    return sl_state_view(g, &c->state, &c->last, in->owner, cur, cur, now);
}

/* The shard's array for new cells under pol: the current one if it is
 * pol's, or an empty one for pol if the current one holds no key. */
static struct sl_cells *sl_cells_for(struct sl_shard *s, struct sl_policy *pol)
{
    struct sluice *l = s->owner;
    struct sl_cells *old = atomic_load_explicit(&s->cells, memory_order_relaxed), *t;
    struct sl_thread *th = sl_thread_get();

    if (old != NULL && old->owner == pol)
        return old;
    if ((old != NULL && old->live != 0) || th == NULL)
        return NULL; /* keys under an older policy: entries until they are gone */
    if ((t = sl_cells_new(&l->memory, 0)) == NULL)
        return NULL;
    if (!sl_policy_tryref(pol)) {
        sl_cells_free(&l->memory, t);
        return NULL;
    }
    t->owner = pol;
    atomic_store_explicit(&s->cells, t, memory_order_release); /* its zeroed words first */
    if (old != NULL) {
        sl_policy_unref(old->owner); /* to the epoch at its last reference */
        sl_cells_retire(th, &l->memory, old);
    }
    return t;
}

int sl_cells_insert_locked(struct sl_shard *s, uint64_t h, const void *key, size_t len,
                           struct sl_policy *pol)
{
    struct sluice *l = s->owner;
    struct sl_cells *t = sl_cells_for(s, pol);

    SL_ASSERT(sl_shard_held(s) && len <= SL_CELL_KEY_MAX && pol->gcra_alone);
    if (t == NULL)
        return -EAGAIN;
    if (sl_cells_reserve(&s->cells, &l->memory, sl_cells_hash, l) != 0)
        return -ENOMEM;
    t = atomic_load_explicit(&s->cells, memory_order_relaxed);
    /* a new key: fresh (GCRA's 0), decided no earlier than the latest reap
     * (as sl_table_insert_locked's entries) */
    (void)sl_cells_insert(t, h, key, len, 0, sl_load_rlx(&l->reap_floor));
    return 0;
}

bool sl_cell_take_back(struct sl_shard *s, uint64_t h, const void *key, size_t len)
{
    struct sluice *l = s->owner;
    struct sl_cells *t;
    struct sl_cell *c;
    bool back = false;

    sl_shard_lock(s);
    if ((c = sl_cell_find_locked(s, h, key, len, &t)) != NULL) {
        /* no charge stands (GCRA's 0: a cell's charge is its one CAS,
         * undone only by a CAS back from exactly the words it wrote, an
         * acquire_all's on a later key's race), frozen from exactly that:
         * a charge landing first keeps the key, one coming after finds it
         * frozen and goes the general way, which finds the key absent */
        uint64_t seen[2] = {0, sl_load_acq(&c->last)};
        uint64_t next[2] = {SL_DEAD, seen[1]};
        if (sl_cas_pair_acqrel(&c->state, seen, next)) {
            sl_cells_remove(t, c);
            sl_uncount(&l->nkeys, 1);
            sl_uncount(&l->inserted, 1);
            back = true;
        }
    }
    sl_shard_unlock(s);
    return back;
}

/*
 * Reap idle cells, as sl_table_reap_some reaps entries: up to *budget
 * cells from the shard's cursor, at most max_remove.  A cell is idle at
 * now if its latest admission is idle_ttl behind and its GCRA state fresh
 * at the time it would be decided at; it is frozen by CAS from exactly
 * the words that test read, so a charge landing between keeps it.
 */
static size_t sl_cells_reap_some(struct sl_shard *s, uint64_t now, uint64_t idle_ttl,
                                 uint64_t *budget, size_t max_remove)
{
    struct sluice *l = s->owner;
    struct sl_cells *t = atomic_load_explicit(&s->cells, memory_order_relaxed);
    uint64_t scanned = 0, j;
    size_t removed = 0;

    if (t == NULL)
        return 0;
    const struct sl_policy *pol = t->owner;
    const struct sl_lim *lim = &pol->lim[0];
    now = sl_reap_time(now); /* as sl_table_reap_some */
    j = s->cells_cursor < t->cap ? s->cells_cursor : 0;
    for (; scanned < t->cap && scanned < *budget && removed < max_remove;
         scanned++, j = sl_cells_next(t, j)) {
        struct sl_cell *c = sl_cells_at(t, j);
        uint64_t seen[2], last, at;
        if (!(atomic_load_explicit(&t->ctrl[j], memory_order_relaxed) & SL_CTRL_LIVE))
            continue;
        seen[0] = sl_load_acq(&c->state);
        seen[1] = sl_load_acq(&c->last);
        last = seen[1] - 1;
        if (seen[0] & SL_DEAD)
            continue;
        if ((seen[1] != 0 ? sl_sat_add(last, idle_ttl) : idle_ttl) > now)
            continue;
        at = sl_decide_time(seen[1], pol, now);
        if (!lim->ops->is_fresh(lim, seen[0], &c->state, at))
            continue;
        {
            uint64_t next[2] = {seen[0] | SL_DEAD, seen[1]};
            if (!sl_cas_pair_acqrel(&c->state, seen, next))
                continue; /* charged meanwhile: not idle */
        }
        sl_cells_remove(t, c);
        removed++;
    }
    s->cells_cursor = j;
    *budget -= scanned;
    if (removed != 0) {
        sl_time_raise(&l->reap_floor, now); /* as sl_table_reap_some */
        sl_uncount(&l->nkeys, removed);
        sl_count(&l->reaped, removed);
        /* tombstones are never reused: a migration drops them, and gives
         * memory back once the array is mostly empty */
        if (t->used * 4 > t->cap * 3 || (t->cap > 64 && t->live * 8 < t->cap))
            (void)sl_cells_migrate(&s->cells, &l->memory, sl_cells_cap_for(t->live), sl_cells_hash,
                                   l);
    }
    return removed;
}

size_t sl_shard_reap_some(struct sl_shard *s, uint64_t now, uint64_t idle_ttl, uint64_t *budget,
                          size_t max_remove)
{
    size_t removed = sl_table_reap_some(s, now, idle_ttl, budget, max_remove);

    if (removed < max_remove && *budget > 0)
        removed += sl_cells_reap_some(s, now, idle_ttl, budget, max_remove - removed);
    return removed;
}

size_t sl_shard_reap(struct sl_shard *s, uint64_t now, uint64_t idle_ttl)
{
    uint64_t all = UINT64_MAX;

    s->cells_cursor = 0;
    return sl_table_reap_shard(s, now, idle_ttl) +
           sl_cells_reap_some(s, now, idle_ttl, &all, SIZE_MAX);
}
