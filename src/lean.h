/*
 * The lean paths' shared steps (acquire.c: one key; acquire_all.c: a few
 * keys): a private limiter's present keys decided with no result, the
 * general path's steps (decide.c, charge.c) in the same order, on locals.
 * See doc/DESIGN.md, "The lean path".
 */
#ifndef SL_LEAN_H
#define SL_LEAN_H

#include "algo_fixed.h"
#include "algo_gcra.h"
#include "charge.h"
#include "cells.h"
#include "hash.h"
#include "table.h"

/* Charges of a lean path that must not stand, limits 0..n-1 of e: taken
 * back, the last first, by the general path's own undo (sl_undo_limit,
 * which follows a moved state), from a target made for them (acquire.c).
 * Out of line: a lost race's. */
void sl_lean_take_back(struct sluice *l, const void *key, size_t len, struct sl_entry *e,
                       uint64_t now, uint64_t at, uint64_t cost,
                       uint64_t (*receipt)[SL_RECEIPT_WORDS], unsigned n);

/*
 * A key's cell decided from the words read of it (seen: state, time) for
 * a charge of cost at now under pol, its single GCRA limit: SL_OK with the
 * state that charge writes in *nw, SL_NO (it denies: nothing to write), or
 * -EAGAIN for the general path (frozen, cost 0 or above the capacity, pol
 * not in force, idle beyond its range).  *at: the time it is decided at.
 * The acquire, the peek and acquire_all's cells all step so.
 */
static inline __attribute__((always_inline)) int
sl_cell_decide(struct sluice *l, const struct sl_policy *pol, const uint64_t seen[2], uint64_t cost,
               uint64_t now, uint64_t *at, uint64_t *nw)
{
    uint64_t since = now - (seen[1] - 1);

    /* sl_present_decidable but its test of pol in force: every caller
     * found pol the default it read in this section, and tests it again
     * (sl_policy_stale_private) after deciding and before any write or
     * denial, which is the test that counts.  A cell's time is never
     * sealed (sl_last_encode stops below it; a cell freezes by SL_DEAD). */
    (void)l;
    SL_ASSERT(seen[1] != SL_LAST_SEALED);
    if ((seen[0] & SL_DEAD) || cost - 1 >= pol->min_cap ||
        !(seen[1] == 0 || (int64_t)since <= 0 || since <= pol->idle_fresh_ns))
        return -EAGAIN;
    *at = sl_decide_time_predicted(seen[1], pol, now);
    return sl_gcra_next(&pol->lim[0], seen[0], *at, cost, nw);
}

/* sl_policy_stale_private for a cell's policy: a default, never an
 * override (cells hold keys under the default only). */
static inline bool sl_cell_policy_stale(struct sluice *l, const struct sl_policy *pol)
{
    SL_ASSERT(!pol->is_override && l->shm_gen == NULL);
    /* acquire: pairs with the release that publishes a new policy */
    return pol != atomic_load_explicit(&l->policy, memory_order_acquire);
}

/* A one-word limit's step from c (sl_algo.step), GCRA's and the fixed
 * window's inline (a per-second limit and a daily quota: the commonest
 * stack). */
static inline __attribute__((always_inline)) int
sl_lean_step(const struct sl_lim *lim, uint64_t c, uint64_t at, uint64_t cost, uint64_t *next,
             uint64_t *receipt)
{
    if (lim->ops == &sl_algo_gcra)
        return sl_gcra_step(lim, c, at, cost, next, receipt);
    return lim->ops == &sl_algo_fixed ? sl_fixed_step(lim, c, at, cost, next, receipt)
                                      : lim->ops->step(lim, c, at, cost, next, receipt);
}

/*
 * Limit lim (words w) checked read-only for a charge of cost at `at`, a
 * limit that its own charge does not decide: a one-word limit is stepped
 * from the word it reads (*seen; the step's word in *next, the receipt as
 * its charge would leave it), GCRA's and the fixed window's steps inline
 * (a per-second limit and a daily quota: the commonest stack); another is
 * reported.
 * SL_OK, SL_NO or SL_FROZEN, as report says.
 */
static inline __attribute__((always_inline)) int
sl_lean_check(const struct sl_lim *lim, sl_aword *w, uint64_t at, uint64_t cost, uint64_t *seen,
              uint64_t *next, uint64_t *receipt)
{
    if (lim->ops->step == NULL) {
        *seen = *next = 0; /* never read (no step to charge by): said for the compiler */
        return lim->ops->report(lim, w, at, cost, NULL);
    }
    /* acquire, as the charge's own load: the CAS below may store *next */
    *seen = sl_load_acq(w);
    return sl_lean_step(lim, *seen, at, cost, next, receipt);
}

/* Its charge once every check passed: the CAS of the checked step's word
 * (a charge that read *seen just then: the step is a function of the word
 * alone), or the whole charge if another charge came between. */
static inline int sl_lean_charge_checked(const struct sl_lim *lim, sl_aword *w, uint64_t at,
                                         uint64_t cost, uint64_t seen, uint64_t next,
                                         uint64_t *receipt)
{
    if (lim->ops->step != NULL && sl_cas_acqrel(w, &seen, next))
        return SL_OK; /* the receipt is the step's */
    return lim->ops->charge(lim, w, at, cost, receipt);
}

/*
 * Both limits of a pair_cas policy (sl_policy.pair_cas) charged at `at`
 * by one CAS of their two words (w, 16-byte aligned): each stepped from
 * the pair as read, the pair stored if it still holds both words.  So an
 * admission is decided on both limits at one instant, by one locked
 * instruction where one CAS per limit took two and a check between.  A
 * denial writes nothing, each limit's read as it stood at its own load
 * (the pair may be read torn), as the check of sl_lean_charge_n reads
 * its later limits.  SL_OK (both receipts the steps'), SL_NO, or
 * SL_FROZEN: nothing charged.  A failed CAS means another charge, undo
 * or freeze landed: stepped again from the words it found.
 */
static inline int sl_lean_charge_pair(const struct sl_lim *lim, sl_aword *w, uint64_t at,
                                      uint64_t cost, uint64_t (*receipt)[SL_RECEIPT_WORDS])
{
    /* acquire, as each charge's own load (the CAS may fail) */
    uint64_t seen[2] = {sl_load_acq(&w[0]), sl_load_acq(&w[1])}, next[2];
    int rc;

    SL_ASSERT(((uintptr_t)w & 15) == 0 && lim[1].off == lim[0].off + 1);
    do {
        if ((rc = sl_lean_step(&lim[1], seen[1], at, cost, &next[1], receipt[1])) != SL_OK ||
            (rc = sl_lean_step(&lim[0], seen[0], at, cost, &next[0], receipt[0])) != SL_OK)
            return rc;
    } while (!sl_cas_pair_acqrel(w, seen, next));
    return SL_OK;
}

/* The charge that decides its limit, unchecked (a denial writes nothing). */
static inline int sl_lean_charge_first(const struct sl_lim *lim, sl_aword *w, uint64_t at,
                                       uint64_t cost, uint64_t *receipt)
{
    return lim->ops == &sl_algo_gcra ? sl_gcra_charge(lim, w, at, cost, receipt)
                                     : lim->ops->charge(lim, w, at, cost, receipt);
}

#endif
