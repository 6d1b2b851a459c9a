/*
 * Approximate sliding window (the two-counter estimate of HAProxy's freq_ctr
 * and large CDNs): admit iff
 *     prev * (period - elapsed) / period + cur + cost <= count
 * with elapsed = now mod period.  State: one word (window index, prev, cur).
 * Compared exactly in 128-bit integers, no rounding.  Two counters share
 * the word, so each gets half the bits the index leaves (algo_window.c):
 * count < 2^floor((63 - ibits) / 2), e.g. 2^18 at a 1 s period.
 */
#include "internal.h"

static int approx_compile(struct sl_lim *lim)
{
    lim->width = lim->def.period_ns;
    lim->nwords = 1;
    return sl_window_pack_compile(lim, 2);
}

struct approx_view {
    uint64_t idx;               /* absolute window index decided in */
    uint64_t elapsed;           /* ns into that window */
    uint64_t prev, cur;
    uint64_t real_cur;          /* cur as stored (before a behind view raised it) */
    bool behind;                /* now is older than the stored window */
};

/* As sl_fixed_view(); a time older than the stored window is decided at the
 * stored window's start, where the estimate is largest. */
static void approx_view(const struct sl_lim *lim, uint64_t c, uint64_t now, struct approx_view *v)
{
    uint64_t idx = sl_udiv_do(now, &lim->by_width), prev = (c >> lim->cbits) & lim->cmask, cur = c & lim->cmask;
    int64_t d = sl_index_diff(lim, idx, sl_word_index(lim, c));

    v->idx = idx;
    v->elapsed = now - idx * lim->width;
    v->prev = v->cur = v->real_cur = 0;
    v->behind = false;
    if (prev == 0 && cur == 0)
        return;
    if (d < 0) { /* decided in the stored window, as full: see sl_fixed_view */
        v->idx = idx - (uint64_t)d;
        v->elapsed = 0;
        v->behind = true;
        v->real_cur = cur;
        cur = sl_max64(cur, lim->def.count);
    }
    if (d <= 0) {
        v->prev = prev;
        v->cur = cur;
    } else if (d == 1) {
        v->prev = cur;
    }
}

/* count*W - prev*(W - elapsed) - cur*W: the room left, scaled by W (may be < 0). */
static sl_i128 approx_room(const struct sl_lim *lim, const struct approx_view *v)
{
    sl_u128 wd = lim->width;

    return (sl_i128)((sl_u128)lim->def.count * wd) -
           (sl_i128)((sl_u128)v->prev * (wd - v->elapsed)) - (sl_i128)((sl_u128)v->cur * wd);
}

static int approx_step(const struct sl_lim *lim, uint64_t c, uint64_t now, uint64_t cost,
                       uint64_t *next, uint64_t *receipt)
{
    struct approx_view v;

    if (c & SL_DEAD)
        return SL_FROZEN;
    approx_view(lim, c, now, &v);
    if (approx_room(lim, &v) < (sl_i128)((sl_u128)cost * lim->width))
        return SL_NO;
    *next = sl_word_make(lim, v.idx, (v.prev << lim->cbits) | (v.cur + cost));
    return sl_window_stepped(receipt, v.idx, c, *next);
}

static int approx_charge(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                         uint64_t *receipt)
{
    return sl_charge_by_step(approx_step, lim, w, now, cost, receipt);
}

static bool approx_undo(const struct sl_lim *lim, sl_aword *w, uint64_t cost,
                        const uint64_t *receipt)
{
    uint64_t c;

    if (sl_undo_exact(w, receipt)) /* untouched since: the exact word before */
        return true;
    c = sl_load_acq(w);

    for (;;) {
        uint64_t prev = (c >> lim->cbits) & lim->cmask, cur = c & lim->cmask;
        uint64_t idx = sl_word_index(lim, c);
        if (c & SL_DEAD)
            return false;
        if (idx == (receipt[0] & lim->imask))
            cur -= sl_min64(cur, cost);
        else if (idx == ((receipt[0] + 1) & lim->imask))
            prev -= sl_min64(prev, cost);
        else
            return true;
        /* never down to no units (as fixed_undo): the word may have left
         * older windows whose units only it stands for */
        if (prev == 0 && cur == 0)
            *(idx == (receipt[0] & lim->imask) ? &cur : &prev) = 1;
        if (sl_cas_acqrel(w, &c, sl_word_make(lim, idx, (prev << lim->cbits) | cur)))
            return true;
    }
}

/* Earliest elapsed e' in a window where prev*(W - e') <= avail*W. */
static uint64_t approx_first_fit(uint64_t width, uint64_t prev, uint64_t avail)
{
    sl_u128 k;

    if (prev == 0)
        return 0;
    k = ((sl_u128)avail * width) / prev;
    return k >= width ? 0 : width - (uint64_t)k;
}

static int approx_report(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                         struct sl_report *out)
{
    uint64_t c = sl_load_acq(w), count = lim->def.count;
    struct approx_view v;
    sl_u128 start, at;
    sl_i128 room;

    if (c & SL_DEAD)
        return SL_FROZEN;
    approx_view(lim, c, now, &v);
    room = approx_room(lim, &v);
    if (out == NULL)
        return room >= (sl_i128)((sl_u128)cost * lim->width) ? SL_OK : SL_NO;
    start = (sl_u128)v.idx * lim->width;
    out->remaining = room > 0 ? (uint64_t)(room / lim->width) : 0;
    out->reset_after = 0;
    if (v.cur != 0 || v.prev != 0) {
        at = start + (sl_u128)lim->width * (v.cur ? 2 : 1);
        out->reset_after = sl_wait_until(at, now, 0);
    }
    /* a charge lands in window idx's count, which then weighs on the next */
    out->reset_charged = out->reset_after;
    if (cost != 0) {
        at = start + (sl_u128)lim->width * 2;
        out->reset_charged = sl_wait_until(at, now, 0);
    }
    if (room >= (sl_i128)((sl_u128)cost * lim->width)) {
        out->retry_after = 0;
        return SL_OK;
    }
    if (v.behind) {
        /* Read as full only until the stored window begins; from then on
         * its real units count (as sliding_report): the wait is the later
         * of the two, not the full reading's. */
        v.cur = v.real_cur;
        if (approx_room(lim, &v) >= (sl_i128)((sl_u128)cost * lim->width)) {
            out->retry_after = sl_wait_until(start, now, 1);
            return SL_NO;
        }
    }
    if (v.cur + cost <= count) /* later in this window */
        at = start + approx_first_fit(lim->width, v.prev, count - v.cur - cost);
    else                       /* in the next one, cur having become prev */
        at = start + lim->width + approx_first_fit(lim->width, v.cur, count - cost);
    out->retry_after = sl_wait_until(at, now, 1);
    return SL_NO;
}

static bool approx_is_fresh(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now)
{
    struct approx_view v;

    (void)w;
    approx_view(lim, c, now, &v);
    return v.prev == 0 && v.cur == 0;
}

/* Same period, so the same layout (algo_window.c): copy the word, both
 * counters kept even above a lowered count. */
static void approx_carry(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to,
                          sl_aword *tw, uint64_t now)
{
    /* Same layout: the frozen word is the state (acquire: its freeze was
     * acq_rel); tw is private until the entry is published with release. */
    (void)from;
    (void)now;
    SL_ASSERT(from->ishift == to->ishift && from->width == to->width);
    sl_store_rlx(tw, sl_window_later(to, 2, sl_load_rlx(tw), sl_load_acq(fw)));
}

const struct sl_algo sl_algo_approx = {
    .name = "approx_sliding",
    .compile = approx_compile,
    .charge = approx_charge,
    .undo = approx_undo,
    .report = approx_report,
    .is_fresh = approx_is_fresh,
    .freeze = sl_window_freeze,
    .carry = approx_carry,
    .step = approx_step,
};
