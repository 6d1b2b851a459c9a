/*
 * The fixed window's view of its word and its step (algo_fixed.c has the
 * algorithm and its ranges).  Inline: the algorithm's op and the lean
 * paths' check of a stacked limit (lean.h) take the same step, so they
 * decide alike.
 */
#ifndef SL_ALGO_FIXED_H
#define SL_ALGO_FIXED_H

#include "internal.h"

/*
 * The window the request is decided in (absolute index) and the units
 * already in it; a word with no units is a fresh key's.  A time older than
 * the stored window is decided in the stored one, as full: every decision
 * runs at or after its key's latest admission (sl_entry_time), so a word
 * ahead of it was moved by a charge still in flight, perhaps one about to
 * be taken back (a stacked limit or another key refusing).  Counting that
 * charge's window instead of the older one it left would admit what no
 * serial order does; refusing is at worst an under-admission in a race.
 */
static inline uint64_t sl_fixed_view(const struct sl_lim *lim, uint64_t c, uint64_t now,
                                     uint64_t *used)
{
    uint64_t idx = sl_udiv_do(now, &lim->by_width);
    int64_t d = sl_index_diff(lim, idx, sl_word_index(lim, c));

    *used = 0;
    if ((c & lim->cmask) == 0 || d > 0)
        return idx;
    *used = c & lim->cmask;
    if (d < 0 && *used < lim->def.count)
        *used = lim->def.count;
    return idx - (uint64_t)d; /* d <= 0: the stored window */
}

static inline int sl_fixed_step(const struct sl_lim *lim, uint64_t c, uint64_t now, uint64_t cost,
                                uint64_t *next, uint64_t *receipt)
{
    uint64_t used, idx;

    if (c & SL_DEAD)
        return SL_FROZEN;
    idx = sl_fixed_view(lim, c, now, &used);
    if (used + cost > lim->def.count)
        return SL_NO;
    *next = sl_word_make(lim, idx, used + cost);
    return sl_window_stepped(receipt, idx, c, *next);
}

#endif
