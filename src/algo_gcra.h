/*
 * GCRA's step from one control word to the next (algo_gcra.c has the
 * algorithm and its ranges).  Inline: gcra_charge and the hot decision of
 * a single GCRA limit (decide.c) take the same step, so they decide alike.
 */
#ifndef SL_ALGO_GCRA_H
#define SL_ALGO_GCRA_H

#include "internal.h"

/* How far TAT is ahead of now, scaled by q; 0 if TAT <= now. */
static inline sl_u128 gcra_gap(const struct sl_lim *lim, uint64_t c, uint64_t now)
{
    uint64_t a = c >> lim->fbits, f = c & ((UINT64_C(1) << lim->fbits) - 1);
    uint64_t ahead = (a - now) & lim->amask;

    if (c == 0 || (ahead >> (lim->abits - 1)) != 0 || (ahead == 0 && f == 0))
        return 0;
    return (sl_u128)ahead * lim->q + f;
}

static inline uint64_t gcra_word(const struct sl_lim *lim, uint64_t now, sl_u128 gap)
{
    /* gap <= tau < 2^64 here; q == 1 (T a whole number of ns) needs no division */
    uint64_t g = (uint64_t)gap, whole = lim->q == 1 ? g : g / lim->q, f = lim->q == 1 ? 0 : g % lim->q;
    uint64_t a = (now + whole) & lim->amask;
    uint64_t w = (a << lim->fbits) | f;

    return w != 0 ? w : UINT64_C(1) << lim->fbits; /* 1 ns later: stays conservative */
}

/* c (not frozen) charged cost at now: SL_OK with the next word in *nw,
 * or SL_NO (nothing to write). */
static inline int sl_gcra_step(const struct sl_lim *lim, uint64_t c, uint64_t now, uint64_t cost,
                               uint64_t *nw)
{
    sl_u128 gap = gcra_gap(lim, c, now) + (sl_u128)cost * lim->p;

    if (gap > lim->tau)
        return SL_NO;
    *nw = gcra_word(lim, now, gap);
    return SL_OK;
}

#endif
