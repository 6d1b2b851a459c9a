/*
 * Fixed window: at most `count` units in each window [k*period, (k+1)*period).
 * State: one word (window index, units admitted in it).  Cheapest and exact
 * to its definition, which admits up to 2*count across a boundary.
 * Range and count limits: algo_window.c.
 */
#include "algo_fixed.h"

static int fixed_compile(struct sl_lim *lim)
{
    lim->width = lim->def.period_ns;
    lim->nwords = 1;
    return sl_window_pack_compile(lim, 1);
}

static int fixed_charge(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                        uint64_t *receipt)
{
    return sl_charge_by_step(sl_fixed_step, lim, w, now, cost, receipt);
}

static bool fixed_undo(const struct sl_lim *lim, sl_aword *w, uint64_t cost,
                       const uint64_t *receipt)
{
    uint64_t c;

    /* Untouched since: the exact word before, even if the charge moved the
     * window (subtracting would lose the older window's units). */
    if (sl_undo_exact(w, receipt))
        return true;
    c = sl_load_acq(w);
    for (;;) {
        uint64_t used = c & lim->cmask;
        if ((c & SL_DEAD) || sl_word_index(lim, c) != (receipt[0] & lim->imask))
            return !(c & SL_DEAD); /* frozen, or the window is over and the charge with it */
        /* Never down to no units: a word with none reads as a fresh key's,
         * but this one may have left an older window whose units only it
         * stands for (A in W-1, then B and C charged W and were both taken
         * back, B first: W's units were all theirs, A's were lost and a
         * call in W-1 was admitted beside A).  One unit kept reads W as
         * full for calls stamped before it: fewer admitted, never more. */
        used -= sl_min64(used, cost);
        used += used == 0;
        if (sl_cas_acqrel(w, &c, sl_word_make(lim, receipt[0], used)))
            return true;
    }
}

static int fixed_report(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                        struct sl_report *out)
{
    uint64_t c = sl_load_acq(w), used, idx;
    sl_u128 end;

    if (c & SL_DEAD)
        return SL_FROZEN;
    idx = sl_fixed_view(lim, c, now, &used);
    if (out == NULL)
        return used + cost <= lim->def.count ? SL_OK : SL_NO;
    end = ((sl_u128)idx + 1) * lim->width;
    /* used may exceed count: state carried from a higher count is kept */
    out->remaining = lim->def.count - sl_min64(used, lim->def.count);
    out->reset_after = used ? sl_wait_until(end, now, 0) : 0;
    /* a charge lands in window idx, which then has units until its end */
    out->reset_charged = used || cost ? sl_wait_until(end, now, 0) : 0;
    if (used + cost <= lim->def.count) {
        out->retry_after = 0;
        return SL_OK;
    }
    /* Behind the stored window (read as full): its real units count from
     * its start on (as sliding_report), so wait only until then if they fit. */
    if (sl_index_diff(lim, sl_udiv_do(now, &lim->by_width), idx) < 0 &&
        (c & lim->cmask) + cost <= lim->def.count)
        end = (sl_u128)idx * lim->width;
    out->retry_after = sl_wait_until(end, now, 1);
    return SL_NO;
}

static bool fixed_is_fresh(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now)
{
    uint64_t used;

    (void)w;
    sl_fixed_view(lim, c, now, &used);
    return used == 0;
}

/* Same period, so the same layout (algo_window.c): the word is the state,
 * window index and units alike, even units above a lowered count. */
static void fixed_carry(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to,
                         sl_aword *tw, uint64_t now)
{
    /* Same layout: the frozen word is the state (acquire: its freeze was
     * acq_rel); tw is private until the entry is published with release. */
    (void)from;
    (void)now;
    SL_ASSERT(from->ishift == to->ishift && from->width == to->width);
    sl_store_rlx(tw, sl_window_later(to, 1, sl_load_rlx(tw), sl_load_acq(fw)));
}

const struct sl_algo sl_algo_fixed = {
    .name = "fixed_window",
    .compile = fixed_compile,
    .charge = fixed_charge,
    .undo = fixed_undo,
    .report = fixed_report,
    .is_fresh = fixed_is_fresh,
    .freeze = sl_window_freeze,
    .carry = fixed_carry,
    .step = sl_fixed_step,
};
