/*
 * Keys into the table: the one insert routine (decisions and override_set
 * both insert through sl_key_insert), making room at max_keys, and the one
 * replace routine (policy migration, overrides and resets).  Below
 * decide.c and admin.c, above the table and entries: neither of them calls
 * the other.
 */
#include <stdlib.h>

#include "internal.h"
#include "table_cells.h"

/*
 * A full table reaps from the insert path, in bounded steps: each new key
 * scans up to SL_FULL_SCAN slots, of its own shard first, then of other
 * shards in turn (those it can lock at once), each from its cursor, and
 * removes at most SL_FULL_REMOVE idle keys.  Successive new keys so visit
 * every slot in turn, and an idle key is found within about
 * slots / SL_FULL_SCAN new keys (at once when idle keys are common).  Once
 * scans have covered the whole table without finding room, the next ones
 * wait SL_FULL_QUIET_NS per key of max_keys (of the callers' time): under a
 * flood of fresh keys at max_keys, reaping takes a bounded share of time.
 */
#define SL_FULL_SCAN 1024
#define SL_FULL_REMOVE 16
#define SL_FULL_QUIET_NS 100

static bool sl_key_take(struct sluice *l)
{
    /* CAS, not add-then-undo: the count never reads above max_keys */
    uint64_t n = sl_load_rlx(&l->nkeys);

    while (n < l->max_keys)
        if (atomic_compare_exchange_weak_explicit(&l->nkeys, &n, n + 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    return false;
}

/* A fruitless scan: count it, and once the whole table has been scanned
 * in vain, pause the scans (relaxed: hints; racing writers only make one
 * scan more or less). */
static void sl_room_fruitless(struct sluice *l, uint64_t scanned, uint64_t now, uint64_t quiet)
{
    uint64_t slots = 4 * (uint64_t)l->max_keys + 64 * (uint64_t)l->nshards;

    if (atomic_fetch_add_explicit(&l->room_fruitless, scanned, memory_order_relaxed) + scanned <
        slots)
        return;
    sl_store_rlx(&l->room_fruitless, 0);
    sl_store_rlx(&l->room_quiet_until, sl_last_encode(now + quiet));
}

/* Free room for a new key: s (locked by us) first, then other shards that
 * are free at once (trylock: we hold s, so waiting could deadlock).
 * exhaustive (override_set): every slot of every shard it can lock. */
static size_t sl_reap_for_room(struct sluice *l, struct sl_shard *s, uint64_t now, bool exhaustive)
{
    uint64_t quiet = sl_min64(l->max_keys, UINT64_MAX / SL_FULL_QUIET_NS) * SL_FULL_QUIET_NS;
    uint64_t until = sl_load_rlx(&l->room_quiet_until); /* 1 + time, 0: none */
    uint64_t start = exhaustive ? UINT64_MAX : SL_FULL_SCAN, budget = start;
    size_t freed;

    /* modular: a clock stepped back far ends the quiet time, never extends it */
    if (!exhaustive && until != 0 && (until - 1) - now - 1 < quiet)
        return 0;
    freed = sl_shard_reap_some(s, now, l->idle_ttl_ns, &budget, SL_FULL_REMOVE);
    for (unsigned k = 1; k < l->nshards && freed == 0 && budget > 0; k++) {
        /* Some other shard: the next in turn (relaxed: only spreads the
         * scans over the shards), counted from s so that a turn never
         * falls on s itself, which with two shards left the only other
         * one unscanned. */
        unsigned step = exhaustive ? k
                                   : 1 + (unsigned)(atomic_fetch_add_explicit(&l->reap_next, 1,
                                                                              memory_order_relaxed) %
                                                    (l->nshards - 1));
        struct sl_shard *o = &l->shards[((unsigned)(s - l->shards) + step) & (l->nshards - 1)];
        if (!sl_shard_trylock(o))
            continue;
        if (exhaustive)
            budget = UINT64_MAX;
        freed = sl_shard_reap_some(o, now, l->idle_ttl_ns, &budget, SL_FULL_REMOVE);
        sl_shard_unlock(o);
    }
    if (freed != 0)
        sl_store_rlx(&l->room_fruitless, 0);
    else if (!exhaustive)
        sl_room_fruitless(l, start - budget, now, quiet);
    return freed;
}

/* Make room for one more key (reserving it), reaping if needed; s is ours. */
static bool sl_key_reserve(struct sluice *l, struct sl_shard *s, uint64_t now, bool exhaustive)
{
    SL_ASSERT(sl_shard_held(s));
    if (sl_key_take(l))
        return true;
    return sl_reap_for_room(l, s, now, exhaustive) != 0 && sl_key_take(l);
}

/*
 * The pin: an entry inserted for a decision is published pinned
 * (sl_entry.pinned), so no reap takes it before that decision is over; the
 * decision unpins it.  exhaustive (override_set): room is made by scanning
 * every shard it can lock, not by the decisions' bounded scan.
 */
int sl_key_insert(struct sl_thread *t, struct sl_target *g, struct sl_policy *pol, uint64_t now,
                  bool pin, bool exhaustive, struct sl_entry **out)
{
    struct sluice *l = g->l;
    struct sl_entry *e, *found;
    int rc = sl_entry_new(l, pol, g->key, g->len, &e);

    if (rc < 0)
        return rc;
    /* relaxed: e is private until the insert publishes it (release) */
    if (pin)
        atomic_store_explicit(&e->pinned, 1, memory_order_relaxed);
    sl_shard_lock(g->s);
    if ((rc = sl_table_get_locked_err(g->s, g->h, g->key, g->len, &found)) != 0) {
        ; /* in a cell still, with no memory to move it out */
    } else if (found != NULL || sl_policy_stale(l, pol)) {
        rc = -EAGAIN; /* someone else inserted it (use theirs), or a policy
                         change came first (insert under the new one) */
    } else if (!sl_key_reserve(l, g->s, now, exhaustive)) {
        rc = -ENOSPC;
    } else if (sl_table_insert_locked(g->s, g->h, e) != 0) {
        sl_uncount(&l->nkeys, 1);
        rc = -ENOMEM;
    } else {
        sl_count(&l->inserted, 1);
        *out = e;
    }
    sl_shard_unlock(g->s);
    if (rc != 0)
        sl_entry_discard(l, e);
    sl_epoch_poll(t);
    return rc;
}

int sl_key_insert_cell(struct sl_thread *t, struct sluice *l, struct sl_shard *s, uint64_t h,
                       const void *key, size_t len, struct sl_policy *pol, uint64_t now)
{
    int rc;

    if (!l->cells_on || len > SL_CELL_KEY_MAX || !pol->gcra_alone || pol->is_override)
        return -EAGAIN;
    sl_shard_lock(s);
    if (sl_policy_stale_private(l, pol))
        rc = -EAGAIN; /* the default changed: the general path, under the new one */
    else if (sl_cell_present_locked(s, h, key, len) || sl_table_get_entry(s, h, key, len) != NULL)
        rc = -EEXIST; /* made meanwhile: decide on it */
    else if (!sl_key_reserve(l, s, now, false))
        rc = -ENOSPC; /* the general path decides what a full limiter does */
    else if ((rc = sl_cells_insert_locked(s, h, key, len, pol)) != 0)
        sl_uncount(&l->nkeys, 1);
    else
        sl_count(&l->inserted, 1);
    sl_shard_unlock(s);
    sl_epoch_poll(t);
    return rc;
}

int sl_entry_replace(struct sl_thread *t, struct sl_target *g, struct sl_entry *e,
                     struct sl_policy *to, enum sl_move how, uint64_t now)
{
    struct sluice *l = g->l;
    struct sl_entry *ne = NULL;
    struct sl_limbo *batch = NULL;
    int rc = sl_entry_new(l, to, g->key, g->len, &ne);

    if (rc == 0 && (batch = sl_limbo_one(t, l)) == NULL)
        rc = -ENOMEM;
    if (rc < 0)
        goto out;
    sl_shard_lock(g->s);
    if (sl_table_get_locked(g->s, g->h, g->key, g->len) != e || sl_policy_stale(l, to) ||
        !sl_entry_freeze(e)) {
        rc = -EAGAIN;
    } else {
        /* The key this call made, moved before its decision while no
         * charge stands in it: the pin goes with it, so that a failure
         * after the move (a racing set_policy's -E2BIG) still takes it
         * back.  Charged meanwhile by another call, the key stands, though
         * the move may start it fresh (another algorithm): the pin stays on
         * e, which no take-back finds now (relaxed: published below,
         * release). */
        bool pin_moves = g->pinned == e && sl_entry_frozen_untouched(e, e->pol);
        if (pin_moves)
            atomic_store_explicit(&ne->pinned, 1, memory_order_relaxed);
        (void)sl_entry_commits_done(e, true, NULL); /* threads of this process: never stopped alone */
        unsigned kept = sl_entry_move_state(
            e, e->pol, ne, to, atomic_load_explicit(&l->policy, memory_order_acquire), how, now,
            NULL);
        /* The key is present: its slot is overwritten in place, nothing can fail. */
        if (sl_table_replace_locked(g->s, g->h, e, ne) != 0)
            abort();
        sl_entry_mark_moved(e, e->pol, to, kept, sl_word_id(ne->w));
        sl_unaccount(&l->memory, sl_entry_footprint(e->pol, e->key_len));
        sl_limbo_add(batch, e);
        if (pin_moves)
            g->pinned = ne;
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
