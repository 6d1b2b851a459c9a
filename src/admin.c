/*
 * Run-time administration: policy changes, per-key overrides, resets.
 * All of them replace an entry by a new one under the shard lock, never
 * stopping decisions on other keys (or readers of the same shard).
 */
#include <stdlib.h>

#include "internal.h"

int sl_entry_replace(struct sl_thread *t, struct sl_target *g, struct sl_entry *e,
                     struct sl_policy *to, bool carry, uint64_t now)
{
    struct sluice *l = g->l;
    struct sl_entry *ne = NULL;
    struct sl_limbo *batch = NULL;
    int rc = sl_entry_new(l, to, g->key, g->len, &ne);

    if (rc == 0 && (batch = sl_limbo_new(l, 1)) == NULL)
        rc = -ENOMEM;
    if (rc < 0)
        goto out;
    sl_shard_lock(g->s);
    if (sl_table_get(g->s, g->h, g->key, g->len) != e || sl_policy_stale(l, to) ||
        !sl_entry_freeze(e)) {
        rc = -EAGAIN;
    } else {
        uint64_t last;
        /* Read the state at the key's own latest admission: administrative
         * calls pass the limiter clock, which _at callers may not use. */
        if (carry)
            sl_policy_carry(e->pol, e->w, to, ne->w, sl_entry_last(e, &last) ? last : now);
        /* seq_cst: after the freeze's fence (sl_entry_freeze) */
        sl_store_rlx(&ne->last_ns, atomic_load_explicit(&e->last_ns, memory_order_seq_cst));
        /* The key is present: its slot is overwritten in place, nothing can fail. */
        if (sl_table_replace_locked(g->s, g->h, e, ne) != 0)
            abort();
        sl_unaccount(&l->memory, sl_entry_footprint(e->pol, e->key_len));
        sl_limbo_add(batch, e);
        ne = NULL;
    }
    sl_shard_unlock(g->s);
out:
    if (ne != NULL)
        sl_entry_discard(l, ne);
    if (batch != NULL)
        sl_limbo_retire(t, batch);
    sl_epoch_poll(t);
    return rc;
}

/* Replace g's existing entry (-ENOENT if absent) by one for the policy that
 * pick() chooses; loops while the entry changes under us. */
static int sl_admin_replace(struct sluice *l, const void *key, size_t len, struct sl_policy *to,
                            bool carry, bool need_override, bool insert)
{
    struct sl_thread *t;
    struct sl_target g;
    uint64_t now;
    int rc;

    rc = sl_key_check(l, key, len);
    if (rc < 0)
        return rc;
    t = sl_thread_get();
    if (t == NULL)
        return -ENOMEM;
    now = sluice_now(l);
    sl_target_init(&g, l, key, len);
    sl_epoch_begin(t);
    do {
        struct sl_entry *e = sl_table_get(g.s, g.h, key, len);
        struct sl_policy *dest = to;
        if (e == NULL && insert) {
            struct sl_entry *ne;
            rc = sl_entry_new(l, to, key, len, &ne);
            if (rc < 0)
                break;
            rc = -EAGAIN;
            sl_shard_lock(g.s);
            if (sl_table_get(g.s, g.h, key, len) == NULL) {
                rc = !sl_key_reserve(l, g.s, now, true)           ? -ENOSPC
                     : sl_table_insert_locked(g.s, g.h, ne) != 0 ? -ENOMEM
                                                                   : 0;
                if (rc == -ENOMEM)
                    sl_uncount(&l->nkeys, 1);
                if (rc == 0)
                    sl_count(&l->inserted, 1);
            }
            sl_shard_unlock(g.s);
            if (rc != 0)
                sl_entry_discard(l, ne);
            continue;
        }
        if (e == NULL || (need_override && !e->pol->is_override)) {
            rc = -ENOENT;
            break;
        }
        if (dest == NULL) /* back to (or a fresh state under) the default */
            dest = e->pol->is_override && !need_override
                       ? e->pol
                       : atomic_load_explicit(&l->policy, memory_order_acquire);
        rc = sl_entry_replace(t, &g, e, dest, carry, now);
    } while (rc == -EAGAIN);
    sl_epoch_end(t);
    return rc;
}

int sluice_reset(sluice_t *l, const void *key, size_t len)
{
    if (l != NULL && l->shm != NULL && sl_key_check(l, key, len) == 0)
        return sl_shm_reset(l, key, len);
    return sl_admin_replace(l, key, len, NULL, false, false, false);
}

int sluice_override_clear(sluice_t *l, const void *key, size_t len)
{
    if (l != NULL && l->shm != NULL)
        return -EOPNOTSUPP; /* shared limiters have no overrides (sluice.h) */
    return sl_admin_replace(l, key, len, NULL, true, true, false);
}

int sluice_override_set(sluice_t *l, const void *key, size_t len, const struct sluice_policy *p)
{
    struct sl_policy *pol;
    int rc;

    rc = sl_key_check(l, key, len);
    if (rc < 0)
        return rc;
    if (p != NULL && !sl_policy_reserved_zero(p))
        return -EINVAL;
    if (l->shm != NULL)
        return -EOPNOTSUPP;
    rc = sl_policy_new(p, true, &pol);
    if (rc < 0)
        return rc;
    rc = sl_admin_replace(l, key, len, pol, true, false, true);
    if (rc == 0) {
        struct sl_thread *t = sl_thread_get(); /* made by sl_admin_replace */
        sl_epoch_begin(t);
        sl_policy_unref(pol); /* the entry holds its own reference */
        sl_epoch_end(t);
    } else {
        sl_policy_discard(pol); /* never published */
    }
    return rc;
}

int sluice_set_policy(sluice_t *l, const struct sluice_policy *p)
{
    struct sl_thread *t;
    struct sl_policy *pol, *old;
    int rc;

    if (l == NULL)
        return -EINVAL;
    if (p != NULL && !sl_policy_reserved_zero(p))
        return -EINVAL;
    if (l->shm != NULL)
        return p == NULL ? -EINVAL : sl_shm_set_policy(l, p);
    rc = sl_policy_new(p, false, &pol);
    if (rc < 0)
        return rc;
    /* Keys migrate lazily: each decision compares its entry's policy with
     * this one (acq_rel: the compiled policy is visible to whoever sees it). */
    t = sl_thread_get();
    if (t == NULL) {
        sl_policy_discard(pol);
        return -ENOMEM;
    }
    /* In a section: the old policy may be retired here (its last reference),
     * and ck wants that inside the section that unpublished it. */
    sl_epoch_begin(t);
    old = atomic_exchange_explicit(&l->policy, pol, memory_order_acq_rel);
    sl_policy_unref(old);
    sl_epoch_end(t);
    return 0;
}
