/*
 * Word packing shared by the windowed algorithms (fixed, sliding, approximate).
 *
 * A word is  [63: SL_DEAD] [index mod 2^ibits] [nfields counters of cbits].
 * Indexes are kept modulo 2^ibits and compared by signed distance, so any
 * time, up to UINT64_MAX, works without overflow.  An index can only be
 * misread after a key sat idle for a multiple of 2^ibits windows (at least
 * 2^16 windows), and then as a still-current window: toward denial.
 */
#include "internal.h"

int sl_window_pack_compile(struct sl_lim *lim, unsigned nfields)
{
    unsigned min_ibits = nfields == 1 ? 16 : 9;

    lim->cbits = sl_bits(lim->def.count);
    if (nfields * lim->cbits + min_ibits > 63)
        return -EINVAL;
    lim->cmask = (UINT64_C(1) << lim->cbits) - 1;
    lim->ishift = nfields * lim->cbits;
    lim->ibits = 63 - lim->ishift;
    lim->imask = (UINT64_C(1) << lim->ibits) - 1;
    lim->cap = lim->def.count;
    return 0;
}

uint64_t sl_word_index(const struct sl_lim *lim, uint64_t word)
{
    return (word >> lim->ishift) & lim->imask;
}

uint64_t sl_word_make(const struct sl_lim *lim, uint64_t index, uint64_t counts)
{
    return ((index & lim->imask) << lim->ishift) | counts;
}

int64_t sl_index_diff(const struct sl_lim *lim, uint64_t a, uint64_t b)
{
    uint64_t d = (a - b) & lim->imask;

    if (d >> (lim->ibits - 1))
        return (int64_t)d - (int64_t)(UINT64_C(1) << (lim->ibits - 1)) -
               (int64_t)(UINT64_C(1) << (lim->ibits - 1));
    return (int64_t)d;
}

uint64_t sl_window_freeze(sl_aword *w)
{
    /* acq_rel: the captured value is final and every charge before it visible. */
    return sl_fetch_or_acqrel(&w[0], SL_DEAD);
}
