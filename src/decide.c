/*
 * Decisions: acquire, peek and acquire_all share one path.
 *
 *   resolve every key (lock-free lookup; insert or migrate under the shard
 *   lock only when the key is new or its policy changed)
 *   charge every limit of every key in order; a denial rolls back the
 *   charges made so far, so it is all-or-nothing and never over-admits
 *   fill the result from the binding limit
 *
 * A charge that meets a frozen entry (being reaped or replaced) rolls back,
 * waits for the shard's writer and starts over on the new entry.
 */
#include <string.h>

#include "charge.h"
#include "resolve.h"
#include "result.h"
#include "cells.h"


/*
 * A single limit decided by its charge alone, on g as resolved.  SL_FROZEN
 * or SL_RACED (the charge taken back) when it must be decided again; res
 * filled, not finished, as sl_decide_once leaves it.
 */
static int sl_charge_one(struct sl_target *g, uint64_t cost, struct sluice_result *res)
{
    const struct sl_lim *lim = &g->pol->lim[0];
    int rc;

    sl_floor_ahead(g, cost);
    rc = lim->ops->charge(lim, g->w + lim->off, g->at, cost, g->receipt[0]);
    if (rc == SL_FROZEN)
        return rc;
    if (rc == SL_NO && sl_policy_stale(g->l, g->pol))
        return SL_RACED; /* denied under limits replaced meanwhile: sl_any_stale */
    if (rc == SL_OK &&
        (!sl_floor_holds(g) || sl_policy_stale(g->l, g->pol))) {
        sl_undo_limit(g, 0, cost);
        return SL_RACED; /* decided again, at the newer time */
    }
    if (rc == SL_OK && !sl_commit(g)) {
        sl_undo_limit(g, 0, cost);
        return SL_FROZEN; /* sealed: decided again on the new entry */
    }
    if (res != NULL) {
        struct sl_report r;
        uint64_t asked = rc == SL_OK ? 0 : cost; /* admitted: the state after it */
        if (lim->ops->report(lim, g->w + lim->off, g->at, asked, &r) == SL_FROZEN)
            r = (struct sl_report){0, 0, 0, 0};
        sl_report_for_caller(&r, g, asked);
        sl_result_fill(res, g, 0, 0, &r);
    }
    return rc;
}

static void sl_count_decision(struct sl_thread *t, struct sl_target *g, size_t n, bool allowed)
{
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = sl_same_limiter(g[k].l, g[i].l); /* a file's counters once */
        if (!seen)
            sl_stat_add(g[i].l, t, allowed);
    }
}

/*
 * g's key present under the policy in force (its override, or the default
 * now current), found by one lookup, and cost within that policy's least
 * capacity: g is resolved to it.  false (nothing written) otherwise.
 * Always inline: out of line it added 20 instructions to a hot decision.
 */
static inline __attribute__((always_inline)) bool sl_target_present(struct sl_target *g,
                                                                  uint64_t cost, uint64_t now)
{
    struct sluice *l = g->l;
    struct sl_entry *e;

    /* a peek of a key in a cell is decided on a view (resolve.c), which
     * the general path makes */
    if (g->peek && l->shm == NULL && g->len <= SL_CELL_KEY_MAX &&
        atomic_load_explicit(&g->s->cells, memory_order_acquire) != NULL)
        return false;
    e = l->shm != NULL ? sl_shm_get_current(g) : sl_table_get(g->s, g->h, g->key, g->len);
    struct sl_policy *pol;
    uint64_t lastw;

    if (e == NULL)
        return false;
    pol = l->shm != NULL ? g->pol : e->pol; /* shared: set by sl_shm_get_current */
    /* one load of last_ns for both the decision time (sl_entry_time) and
     * the idle test (sl_entry_expired) */
    lastw = sl_load_rlx(&e->last_ns);
    if (!sl_present_decidable(l, pol, lastw, cost, now))
        return false;
    g->flags = 0;
    g->charged = 0;
    sl_target_use_at(g, e, pol, now, sl_decide_time(lastw, pol, now));
    return true;
}

/*
 * Every key present under the policy in force: resolved with one lookup
 * each, their slot lines and then their entries fetched together first, so
 * the misses overlap rather than queue.  false (nothing written) when
 * some key needs the general path: absent, its policy changed, cost above
 * its least capacity.  acquire_all.c's lean path resolves its keys the
 * same way, on locals: a step changed here changes there too.
 */
static bool sl_resolve_present(struct sl_target *g, size_t n, uint64_t cost, uint64_t now)
{
    for (size_t i = 0; i < n; i++)
        if (g[i].l->shm == NULL)
            sl_table_prefetch(g[i].s, g[i].h);
    for (size_t i = 0; n > 1 && i < n; i++) /* then every entry, as their slot lines come in */
        if (g[i].l->shm == NULL)
            sl_table_prefetch_entry(g[i].s, g[i].h);
    for (size_t i = 0; i < n; i++)
        if (!sl_target_present(&g[i], cost, now))
            return false;
    return true;
}

/* Resolve every key (inserting or migrating as needed), then charge (or
 * only report); loops while entries are replaced. */
static int sl_decide_resolving(struct sl_thread *t, struct sl_target *g, size_t n, uint64_t cost,
                               uint64_t now, bool charge, struct sluice_result *res,
                               unsigned *flags)
{
    size_t frozen = 0, full;
    int rc = 0;

    if (n > 1 && (rc = sl_cost_check(g, n, cost)) < 0)
        return rc;
    /* Several keys, some absent or moving: decided read-only first, as a
     * peek at this instant (absent keys read as fresh, made by nothing).
     * A denial ends here, having made no key: a key made for a request
     * that an already spent key denies would take a place under max_keys
     * for nothing (one spent IP, sending a new user id with every refused
     * request, filled the user limiter).  A fresh key never denies, so
     * the denial is an existing key's, and a serial order gives it. */
    if (charge && n > 1) {
        rc = sl_decide_resolving(t, g, n, cost, now, false, res, flags);
        *flags &= ~SLUICE_F_AT_MAX_KEYS; /* a peek's flag: an acquire reaps instead */
        if (rc != SL_OK)
            return rc;
        rc = 0;
    }
    for (;;) {
        *flags = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            g[i].flags = 0;
            g[i].charged = 0;
            rc = sl_target_resolve(t, &g[i], cost, now, charge);
            *flags |= g[i].flags;
        }
        if (rc < 0)
            return rc;
        if (sl_full_denies(g, n, &full)) {
            sl_result_full(g, full, cost, res);
            return SL_NO;
        }
        rc = sl_decide_once(g, n, cost, charge, res, &frozen);
        if (rc == SL_OK || rc == SL_NO)
            return rc;
        if (rc == SL_FROZEN)
            sl_target_wait(&g[frozen]);
        rc = 0; /* SL_RACED: decide again from a fresh read */
    }
}

/* One pass when every key is present (acquire_all, peek; a single-key
 * acquire tried that in sl_acquire_fast already), else the general path. */
static int sl_decide(struct sl_thread *t, struct sl_target *g, size_t n, uint64_t cost,
                     uint64_t now, bool charge, struct sluice_result *res)
{
    unsigned flags = 0;
    size_t frozen = 0;
    bool made_back = false, made_stands = false;
    int rc = -EAGAIN;

    SL_ASSERT(sl_epoch_active(t));
    if (!(n == 1 && charge) && sl_resolve_present(g, n, cost, now)) {
        rc = sl_decide_once(g, n, cost, charge, res, &frozen);
        if (rc == SL_OK || rc == SL_NO) {
            for (size_t i = 0; i < n; i++)
                flags |= g[i].flags;
        } else
            rc = -EAGAIN; /* every charge taken back: the general path decides */
    }
    if (rc == -EAGAIN)
        rc = sl_decide_resolving(t, g, n, cost, now, charge, res, &flags);
    /* Cost 0 asks for nothing, so nothing is refused, even where a lowered
     * limit leaves a key more spent than its new count: res still tells
     * the state as it is. */
    if (cost == 0 && rc == SL_NO)
        rc = SL_OK;
    /* An error makes nothing, nor does a denial: a key this call inserted
     * before a later key failed (a racing set_policy's -E2BIG, -ENOMEM) or
     * denied (a full limiter failing closed, a charge that lost a race) is
     * taken out again, unless it was charged or moved since (this call's
     * own charge taken back included): it would hold a place under
     * max_keys for nothing. */
    for (size_t i = 0; i < n; i++) {
        if (g[i].view != NULL)
            sl_entry_view_free(&g[i]);
        if (g[i].pinned == NULL)
            continue;
        if ((rc < 0 || rc == SL_NO) && sl_target_take_back(&g[i])) {
            made_back = true;
        } else {
            made_stands = true;
            if (g[i].l->shm == NULL && g[i].takeback != NULL)
                sl_limbo_retire(t, g[i].takeback); /* not needed: kept or freed */
        }
        sl_target_unpin(&g[i]);
    }
    if (made_back && !made_stands)
        flags &= ~SLUICE_F_NEW_KEY; /* told only of a key made that stands */
    if (rc >= 0 && res != NULL)
        sl_result_finish(res, rc, flags);
    if (rc >= 0 && charge)
        sl_count_decision(t, g, n, rc == SL_OK);
    return rc < 0 ? rc : rc == SL_OK ? SLUICE_ALLOW : SLUICE_DENY;
}

static int sl_decide_keys(const struct sluice_key *keys, size_t n, uint64_t cost, uint64_t now,
                          bool charge, struct sluice_result *res)
{
    struct sl_target g[SL_MAX_KEYS];
    unsigned orig[SL_MAX_KEYS], shm[SL_MAX_KEYS];
    struct sl_thread *t;
    bool shared = false; /* some key's limiter is shared: enter its file's epoch too */
    uint64_t starved_until = 0; /* sl_shm_starved's deadline */
    size_t m;
    int rc;

    for (size_t i = 0; i < n; i++) {
        rc = sl_key_check(keys[i].limiter, keys[i].key, keys[i].len);
        if (rc < 0)
            return rc;
        shared |= keys[i].limiter->shm != NULL;
    }
    t = sl_thread_get();
    if (t == NULL)
        return -ENOMEM;
    m = sl_unique_keys(keys, n, g, orig);
    /* A peek changes nothing, a key whose policy changed included; the
     * read-only first pass of an acquire_all migrates as its charges would
     * (and a cost-0 acquire, as acquires do) */
    for (size_t i = 0; i < m; i++)
        g[i].peek = !charge;
    for (unsigned round = 0;; round++) {
        sl_epoch_begin(t);
        if (shared)
            sl_shm_enter_targets(g, m, shm);
        rc = sl_decide(t, g, m, cost, now, charge && cost > 0, res);
        if (shared)
            sl_shm_leave_targets(g, m, shm);
        sl_epoch_end(t);
        /* -EAGAIN: a shared limiter had no free entry; what this call's
         * own section held back comes free once it has ended */
        if (rc != -EAGAIN)
            break;
        if (!sl_shm_starved(g, m, round, &starved_until)) {
            rc = -ENOMEM;
            break;
        }
    }
    if (rc >= 0 && res != NULL)
        res->key_index = orig[res->key_index];
    return rc;
}

/*
 * The common case in one pass: an existing key whose entry is under the
 * policy in force.  One hash, one lookup and one epoch section, whatever
 * the number of limits: a single limit is decided by its charge (which
 * writes nothing when it denies); several go through sl_decide_once as the
 * general path would, on the entry this lookup found.  Anything else (a new
 * key, a policy change, a frozen entry, a lost race, cost 0 or above the
 * policy's least capacity) returns -EAGAIN before any charge stands, and
 * the general path decides it the same way.  g is used in place: a copy
 * of its receipts costs more than the rest of a hot decision's bookkeeping.
 * The lean path (acquire.c) takes these steps too, in this order, on locals:
 * a step changed here, in sl_charge_one or in sl_decide_once for one key
 * changes there as well.
 */
int sl_acquire_fast(struct sl_thread *t, struct sl_target *g, uint64_t cost, uint64_t now,
                    struct sluice_result *res)
{
    size_t frozen;
    int rc;

    if (cost == 0 || !sl_target_present(g, cost, now))
        return -EAGAIN;
    rc = g->pol->nlimits == 1 ? sl_charge_one(g, cost, res)
                              : sl_decide_once(g, 1, cost, true, res, &frozen);
    if (rc != SL_OK && rc != SL_NO)
        return -EAGAIN; /* nothing charged stands: decided again */
    if (res != NULL)
        sl_result_finish(res, rc, g->flags);
    sl_stat_add(g->l, t, rc == SL_OK);
    return rc == SL_OK ? SLUICE_ALLOW : SLUICE_DENY;
}

/* A single-key acquire by the general path (internal.h). */
int sl_acquire_general(sluice_t *l, const void *key, size_t len, uint64_t cost, uint64_t now_ns,
                       struct sluice_result *res)
{
    struct sluice_key k = {.limiter = l, .key = key, .len = len};
    struct sl_target g;
    struct sl_thread *t;
    unsigned shm;
    int rc = sl_call_begin(l, key, len, &t);

    if (rc < 0)
        return rc;
    sl_epoch_begin(t);
    sl_target_init(&g, l, key, len);
    if (l->shm == NULL) {
        rc = sl_acquire_fast(t, &g, cost, now_ns, res);
        sl_epoch_end_hot(t); /* it retired nothing */
    } else {
        shm = sl_shm_enter(l); /* may retire a policy replaced meanwhile */
        rc = sl_acquire_fast(t, &g, cost, now_ns, res);
        sl_shm_leave(l, shm);
        sl_epoch_end(t);
    }
    return rc != -EAGAIN ? rc : sl_decide_keys(&k, 1, cost, now_ns, true, res);
}

/* sluice_peek_at by the general path (internal.h). */
int sl_peek_general(sluice_t *l, const void *key, size_t len, uint64_t cost, uint64_t now_ns,
                    struct sluice_result *res)
{
    struct sluice_key k = {.limiter = l, .key = key, .len = len};

    return sl_decide_keys(&k, 1, cost, now_ns, false, res);
}

/* acquire_all by the general path (internal.h). */
int sl_acquire_all_general(const struct sluice_key *keys, size_t n, uint64_t cost, uint64_t now_ns,
                           struct sluice_result *res)
{
    return sl_decide_keys(keys, n, cost, now_ns, true, res);
}
