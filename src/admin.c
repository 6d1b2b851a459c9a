/*
 * Run-time administration: policy changes, per-key overrides, resets.
 * All of them replace an entry by a new one under the shard lock, never
 * stopping decisions on other keys (or readers of the same shard).
 */
#include "internal.h"

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
            rc = sl_key_insert(t, &g, to, sl_admin_reap_time(sl_load_rlx(&l->reap_floor)),
                               false, true, &ne);
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
        rc = sl_entry_replace(t, &g, e, dest, carry ? SL_MOVE_CARRY : SL_MOVE_FRESH, now);
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
    if (l != NULL && l->shm != NULL && sl_key_check(l, key, len) == 0)
        return sl_shm_override_clear(l, key, len);
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
        return p == NULL ? -EINVAL : sl_shm_override_set(l, key, len, p);
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
    /* numbered after the default it replaces, so a racing set_policy makes
     * it number again (acq_rel: the compiled policy is visible to whoever
     * sees it, and the one replaced is read whole) */
    old = atomic_load_explicit(&l->policy, memory_order_acquire);
    do
        sl_policy_follow(pol, old);
    while (!atomic_compare_exchange_weak_explicit(&l->policy, &old, pol, memory_order_acq_rel,
                                                  memory_order_acquire));
    sl_policy_unref(old);
    sl_epoch_end(t);
    return 0;
}
