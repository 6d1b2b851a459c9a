/*
 * Word packing shared by the windowed algorithms (fixed, sliding, approximate).
 *
 * A word is  [63: SL_DEAD] [index mod 2^ibits] [nfields counters of cbits].
 *
 * Range.  Indexes are kept modulo 2^ibits and compared by signed distance,
 * so a stored index is read correctly from any time whose window is less
 * than 2^(ibits-1) windows away from it, in either direction.  compile()
 * gives the index enough bits that this covers SL_WINDOW_RANGE_NS (2^55 ns,
 * about 417 days) both ways: a clock up to that far behind the key's latest
 * time is decided as at that time, and a key idle that long reads as fresh.
 *
 * Layout.  ibits depends only on the window width, and the counters get all
 * the other bits, so every limit of one algorithm and period (and, for the
 * sliding window, precision) has the same layout: a policy change copies
 * the words as they are, keeping all spent capacity even above a lowered
 * count.  A count that does not fit the counter field is refused.
 */
#include "internal.h"

int sl_window_pack_compile(struct sl_lim *lim, unsigned nfields)
{
    uint64_t w = lim->width;
    /* windows in the range, plus one for a time inside a window */
    uint64_t span = SL_WINDOW_RANGE_NS / w + (SL_WINDOW_RANGE_NS % w != 0) + 1;
    unsigned ib = 1 + sl_bits(span); /* 2^(ib-1) > span */

    lim->cbits = (63 - ib) / nfields;
    lim->cmask = (UINT64_C(1) << lim->cbits) - 1;
    if (lim->def.count > lim->cmask)
        return -EINVAL;
    lim->ishift = nfields * lim->cbits;
    lim->ibits = 63 - lim->ishift;
    lim->imask = (UINT64_C(1) << lim->ibits) - 1;
    lim->cap = lim->def.count;
    /* Over (sl_idle_beyond) two periods after a charge (the approximate
     * window's previous one; a sliding window's ring holds at most a period
     * and a sub-bucket), made at most 2 * SL_TIME_SLACK after last_ns; read
     * right up to the range, less the slack a charge may precede it by. */
    lim->idle_over_ns = sl_sat_add(sl_sat_add(lim->def.period_ns, lim->def.period_ns),
                                   2 * SL_TIME_SLACK + 1);
    lim->idle_read_ns = SL_WINDOW_RANGE_NS - SL_TIME_SLACK;
    lim->by_width = sl_udiv_make(w);
    lim->by_nb = sl_udiv_make(lim->nb ? lim->nb : 1);
    return 0;
}

bool sl_window_freeze(const struct sl_lim *lim, sl_aword *w)
{
    (void)lim;
    /* acq_rel: the captured value is final and every charge before it visible. */
    (void)sl_fetch_or_acqrel(&w[0], SL_DEAD);
    return true;
}

/* Same layout (same algorithm, width and word count): the frozen words are
 * the state; copy them as they are, whatever `now` the caller reads at. */
void sl_window_copy(sl_aword *fw, sl_aword *tw, uint32_t nwords)
{
    /* relaxed: fw is frozen (its freeze was acq_rel), tw is private until
     * the entry is published with release */
    for (uint32_t i = 0; i < nwords; i++)
        sl_store_rlx(&tw[i], sl_load_acq(&fw[i]) & (i == 0 ? ~SL_DEAD : UINT64_MAX));
}

/*
 * The more spent of two words of one layout, for carrying several old
 * limits into one (fixed: nfields 1; approximate: 2, prev above cur).  Per
 * window the larger count; a newer window replaces an older one, except that
 * the approximate estimate still counts the window just before the newer
 * one (as its prev).  A word with no units is a fresh key's.
 */
uint64_t sl_window_later(const struct sl_lim *lim, unsigned nfields, uint64_t x, uint64_t y)
{
    uint64_t counts = (UINT64_C(1) << lim->ishift) - 1, out;
    int64_t d;

    x &= ~SL_DEAD;
    y &= ~SL_DEAD;
    if ((x & counts) == 0)
        return y;
    if ((y & counts) == 0)
        return x;
    d = sl_index_diff(lim, sl_word_index(lim, x), sl_word_index(lim, y));
    if (d < 0) {
        uint64_t t = x;
        x = y;
        y = t;
        d = -d;
    }
    if (d == 1 && nfields == 2) {
        uint64_t prev = (x >> lim->cbits) & lim->cmask, ycur = y & lim->cmask;
        return (x & ~(lim->cmask << lim->cbits)) | (sl_max64(prev, ycur) << lim->cbits);
    }
    if (d != 0)
        return x;
    out = x & ~counts;
    for (unsigned i = 0; i < nfields; i++) {
        unsigned sh = i * lim->cbits;
        out |= sl_max64((x >> sh) & lim->cmask, (y >> sh) & lim->cmask) << sh;
    }
    return out;
}
