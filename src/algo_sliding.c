/*
 * Sliding window of sub-buckets: the window at `now` is the nb =
 * ceil(period/precision) sub-buckets ending with the one holding `now`;
 * admitted units in them plus the cost must stay <= count.
 *
 * State: w[0] is the head (the newest sub-bucket: index and units) and
 * w[1..nb] a ring of older sub-buckets, slot = index mod nb.  Every charge is
 * a CAS on the head, so a decision is linearizable: the ring holds only
 * sub-buckets older than the head, which no longer change.  Moving the head
 * to a newer sub-bucket first archives the old head into its ring slot; a
 * slot is only ever raised (to a newer index or a larger count of the same
 * index), so a slow archiver can never overwrite a newer value.
 * Range and count limits (per sub-bucket width): algo_window.c.
 */
#include "internal.h"

#define SL_MAX_SUBBUCKETS (UINT64_C(1) << 17)

static int sliding_compile(struct sl_lim *lim)
{
    if (lim->def.precision_ns == 0)
        lim->def.precision_ns = 1000000000u;
    if (lim->def.precision_ns > lim->def.period_ns)
        lim->def.precision_ns = lim->def.period_ns;
    lim->width = lim->def.precision_ns;
    lim->nb = lim->def.period_ns / lim->width + (lim->def.period_ns % lim->width != 0);
    if (lim->nb > SL_MAX_SUBBUCKETS)
        return -EINVAL;
    lim->nwords = (uint32_t)(1 + lim->nb);
    return sl_window_pack_compile(lim, 1);
}

/* The head as seen from now: absolute index decided in, and its units;
 * *behind: now is older than the stored head (decided at the head). */
static uint64_t sliding_head(const struct sl_lim *lim, uint64_t h, uint64_t now, uint64_t *hidx,
                             uint64_t *hcnt, bool *behind)
{
    uint64_t idx = sl_udiv_do(now, &lim->by_width);
    int64_t d = sl_index_diff(lim, idx, sl_word_index(lim, h));

    *hidx = idx - (uint64_t)d; /* absolute index of the stored head */
    *hcnt = h & lim->cmask;
    if (h == 0)
        *hidx = idx;
    *behind = h != 0 && d < 0;
    return *behind ? *hidx : idx; /* older times are decided at the head */
}

/* The ring slot of absolute sub-bucket index j: j mod nb, by multiply. */
static uint64_t sliding_slot(const struct sl_lim *lim, uint64_t j)
{
    return j - sl_udiv_do(j, &lim->by_nb) * lim->nb;
}

/* Units of the sub-bucket at absolute index j (ring slot `slot`), if the
 * ring or head has it. */
static uint64_t sliding_units(const struct sl_lim *lim, sl_aword *w, uint64_t j, uint64_t slot,
                              uint64_t hidx, uint64_t hcnt)
{
    uint64_t v;

    if (j == hidx)
        return hcnt;
    if (j > hidx)
        return 0;
    v = sl_load_acq(&w[1 + slot]);
    return sl_word_index(lim, v) == (j & lim->imask) ? v & lim->cmask : 0;
}

/* Units in the window ending at sub-bucket eff.  The slot steps along with
 * j, so the window costs one reduction mod nb, not one per sub-bucket.
 * Every walk up to eff stops at eff itself: eff is 2^64 - 1 at the top of
 * time with 1 ns sub-buckets, where `j <= eff` never ends (the fuzzer's
 * hang).  first <= eff: each walk visits eff. */
static uint64_t sliding_sum(const struct sl_lim *lim, sl_aword *w, uint64_t eff, uint64_t hidx,
                            uint64_t hcnt)
{
    uint64_t sum = 0, first = eff >= lim->nb - 1 ? eff - (lim->nb - 1) : 0;
    uint64_t slot = sliding_slot(lim, first);

    for (uint64_t j = first; j < eff; j++) {
        sum += sliding_units(lim, w, j, slot, hidx, hcnt);
        slot = slot + 1 == lim->nb ? 0 : slot + 1;
    }
    return sum + sliding_units(lim, w, eff, slot, hidx, hcnt);
}

/* The same, as full when now is behind the stored head: a head ahead of
 * the key's latest admission was moved by a charge still in flight,
 * perhaps about to be taken back, and the window ending there may have
 * dropped units the window ending at now still holds (see sl_fixed_view). */
static uint64_t sliding_sum_at(const struct sl_lim *lim, sl_aword *w, bool behind, uint64_t eff,
                               uint64_t hidx, uint64_t hcnt)
{
    uint64_t sum = sliding_sum(lim, w, eff, hidx, hcnt);

    return behind ? sl_max64(sum, lim->def.count) : sum;
}

/*
 * Raise ring slot of absolute index j to hold at least `units`.  A slot
 * with no units is empty whatever index it names: a never-written slot
 * reads as index 0, which is newer than j by signed distance whenever j
 * mod 2^ibits is in the upper half of the range, and would keep j out for
 * good.  Overwriting an empty slot loses nothing; an index newer than j in
 * it is at least nb sub-buckets newer, so j is outside every window that
 * could still read that slot as j.
 *
 * false: the slot reads newer than j, so j was not stored.  A slot is only
 * ever raised (never lowered: a lowered slot could come back to a value a
 * slow archiver read, whose CAS would then lower a newer one), yet it can
 * read newer than it is, and newer than the head: written only when its
 * sub-bucket had units, a slot on a key busy for more than half the index
 * range (417 days, or at once with times passed in) can be that old (and
 * when undos still put the head back to an older sub-bucket, such a slot
 * held the units of charges taken back: sliding_undo).  The caller then
 * keeps j's units in the new head instead
 * (sliding_charge): counted later than they were, never lost (an outside
 * tester: 3 admitted of 2 when they were lost; a reviewer: 3 of 2 again
 * when such slots were overwritten instead).
 */
static bool sliding_archive(const struct sl_lim *lim, sl_aword *w, uint64_t j, uint64_t units)
{
    sl_aword *slot = &w[1 + sliding_slot(lim, j)];
    uint64_t v = sl_load_acq(slot), want = sl_word_make(lim, j, units);

    for (;;) {
        int64_t d = sl_index_diff(lim, j, sl_word_index(lim, v));
        if ((v & lim->cmask) != 0 && d < 0)
            return false;
        if ((v & lim->cmask) != 0 && d == 0 && (v & lim->cmask) >= units)
            return true; /* j, with as many units or more */
        if (sl_cas_acqrel(slot, &v, want))
            return true;
    }
}

static int sliding_charge(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                          uint64_t *receipt)
{
    uint64_t h = sl_load_acq(&w[0]);

    for (;;) {
        uint64_t hidx, hcnt, eff, cur;
        bool behind;
        if (h & SL_DEAD)
            return SL_FROZEN;
        eff = sliding_head(lim, h, now, &hidx, &hcnt, &behind);
        if (sliding_sum_at(lim, w, behind, eff, hidx, hcnt) + cost > lim->def.count)
            return SL_NO;
        cur = eff == hidx ? hcnt : 0;
        /* a head the ring refuses stays in the new head while its window
         * counts it (then sum + cost <= count bounds cur + cost) */
        if (eff != hidx && hcnt != 0 && !sliding_archive(lim, w, hidx, hcnt) &&
            eff - hidx < lim->nb)
            cur = hcnt;
        uint64_t before = h, after = sl_word_make(lim, eff, cur + cost);
        if (sl_cas_acqrel(&w[0], &h, after)) {
            receipt[0] = eff;
            receipt[1] = before;
            receipt[2] = after;
            return SL_OK;
        }
    }
}

static bool sliding_undo(const struct sl_lim *lim, sl_aword *w, uint64_t cost,
                         const uint64_t *receipt)
{
    /* Head untouched since and in the same sub-bucket: its exact word
     * before.  Never back to an older sub-bucket: later charges, taken back
     * since, may have archived over ring slots that sub-bucket's window
     * still reads (a reviewer: B to 12 and C to 13 taken back, C first,
     * put the head back at 11 with 10's slot holding 12, and 3 of 2 were
     * admitted in {10, 11}).  The head stays in the newer sub-bucket, less
     * the cost; a call stamped before it then reads it as full (see
     * sliding_sum_at) until its time comes: fewer admitted, never more.
     * The head keeps at least one unit: a head with none is lost where
     * that protection is needed (a third review: the word of sub-bucket
     * 0 mod 2^ibits with no units is 0, read as no head at all, 4 of 2;
     * a policy carry copies no empty head, 3 of 2), so a key's head has
     * units whenever it exists, as before undos could move it. */
    if ((receipt[1] == 0 || sl_word_index(lim, receipt[1]) == sl_word_index(lim, receipt[2])) &&
        sl_undo_exact(&w[0], receipt)) /* from no head (a fresh key) too: nothing to lose */
        return true;
    for (unsigned i = 0; i < 2; i++) {
        /* first the head, then the ring slot the head was archived to */
        sl_aword *word = i == 0 ? &w[0] : &w[1 + sliding_slot(lim, receipt[0])];
        uint64_t v = sl_load_acq(word);
        while (!(v & SL_DEAD) && sl_word_index(lim, v) == (receipt[0] & lim->imask)) {
            uint64_t units = v & lim->cmask, left = units - sl_min64(units, cost);
            if (i == 0 && left == 0)
                left = 1; /* see above: one unit too many, never a lost head */
            if (sl_cas_acqrel(word, &v, sl_word_make(lim, receipt[0], left)))
                return true;
        }
        if (v & SL_DEAD)
            return false;
    }
    return true;
}

static int sliding_report(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                          struct sl_report *out)
{
    uint64_t h = sl_load_acq(&w[0]), hidx, hcnt, eff, sum, real, first, freed = 0, newest = 0;
    bool fits, behind;

    if (h & SL_DEAD)
        return SL_FROZEN;
    eff = sliding_head(lim, h, now, &hidx, &hcnt, &behind);
    real = sliding_sum(lim, w, eff, hidx, hcnt);
    sum = behind ? sl_max64(real, lim->def.count) : real; /* sliding_sum_at */
    fits = sum + cost <= lim->def.count;
    if (out == NULL)
        return fits ? SL_OK : SL_NO;
    first = eff >= lim->nb - 1 ? eff - (lim->nb - 1) : 0;
    out->remaining = sum >= lim->def.count ? 0 : lim->def.count - sum;
    out->retry_after = 0;
    /* Sub-bucket j leaves the window when the head reaches j + nb.  Behind
     * the head (left ahead by a charge taken back, or one in flight) the
     * window reads full until the head's sub-bucket begins, and its real
     * units count from then on (a denial there said retry 0). */
    uint64_t j = first;
    do {
        uint64_t units = sliding_units(lim, w, j, sliding_slot(lim, j), hidx, hcnt);
        if (units == 0)
            continue;
        newest = j;
        freed += units;
        if (real + cost > lim->def.count && out->retry_after == 0 &&
            real - freed + cost <= lim->def.count) {
            out->retry_after = sl_wait_until(((sl_u128)j + lim->nb) * lim->width, now, 1);
        }
    } while (j++ != eff);
    if (behind && !fits) {
        out->retry_after = sl_max64(out->retry_after,
                                    sl_wait_until((sl_u128)hidx * lim->width, now, 1));
    }
    out->reset_after = 0;
    if (sum != 0)
        out->reset_after = sl_wait_until(((sl_u128)newest + lim->nb) * lim->width, now, 0);
    /* a charge lands in sub-bucket eff, then the newest with units */
    out->reset_charged = out->reset_after;
    if (cost != 0)
        out->reset_charged = sl_wait_until(((sl_u128)eff + lim->nb) * lim->width, now, 0);
    return fits ? SL_OK : SL_NO;
}

static bool sliding_is_fresh(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now)
{
    uint64_t hidx, hcnt, eff;
    bool behind;

    eff = sliding_head(lim, c, now, &hidx, &hcnt, &behind);
    return sliding_sum_at(lim, w, behind, eff, hidx, hcnt) == 0;
}

/*
 * Same period.  Same precision: the same layout (algo_window.c), so the
 * words are copied as they are, every sub-bucket keeping its index and
 * units, even units above a lowered count.  Other precision: the window's
 * units go into the new sub-bucket holding the end of the newest old one,
 * which over-counts for at most one period instead of forgetting any; a
 * sum beyond the new counter field saturates it (still at least the count:
 * fully spent).  The window is the one ending at the stored head, or at now
 * if later, so a `now` read behind the head loses nothing.
 */
/* Raise the private words w so sub-bucket j (absolute) holds at least
 * `units`: as the head if it is the newest (the old head archived, at its
 * absolute index: the ring slot is index mod nb, and nb need not divide
 * 2^ibits), else in its ring slot. */
static void sliding_raise(const struct sl_lim *lim, sl_aword *w, uint64_t j, uint64_t units)
{
    uint64_t h = sl_load_rlx(&w[0]);
    int64_t d = sl_index_diff(lim, j, sl_word_index(lim, h));
    uint64_t hj = j - (uint64_t)d;

    if (units == 0)
        return;
    if ((h & lim->cmask) == 0 || d > 0) {
        uint64_t kept = 0; /* the old head, where the ring refuses it */
        if ((h & lim->cmask) != 0 && !sliding_archive(lim, w, hj, h & lim->cmask) &&
            (uint64_t)d < lim->nb)
            kept = h & lim->cmask;
        sl_store_rlx(&w[0], sl_word_make(lim, j, sl_min64(units + kept, lim->cmask)));
    } else if (d == 0) {
        sl_store_rlx(&w[0], sl_word_make(lim, j, sl_max64(units, h & lim->cmask)));
    } else {
        sliding_archive(lim, w, j, units);
    }
}

static void sliding_carry(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to,
                          sl_aword *tw, uint64_t now)
{
    uint64_t h = sl_load_acq(&fw[0]) & ~SL_DEAD, hidx, hcnt, eff, j, latest, sum = 0, at = 0;
    bool behind; /* carried as it is: the old entry's state, not a decision */

    if (from->width == to->width) {
        /* same layout: every sub-bucket as it is (kept where tw has more),
         * at its absolute index, read from the key's latest admission */
        uint64_t ref = now / to->width;
        SL_ASSERT(from->nb == to->nb && from->ishift == to->ishift);
        for (uint64_t i = 0; i <= to->nb; i++) {
            uint64_t v = i == 0 ? h : sl_load_acq(&fw[i]);
            uint64_t j = ref - (uint64_t)sl_index_diff(to, ref, sl_word_index(to, v));
            sliding_raise(to, tw, j, v & to->cmask);
        }
        return;
    }
    /* Another precision: each old sub-bucket's units go to the new
     * sub-bucket holding its last ns, or `now` (the key's latest admission)
     * if that is earlier: never before the units' own times, so never less
     * spent, and never ahead of the time decisions resume at (a head ahead
     * of it would move the window past units still in it).  Summed where
     * several land in one.  Units a coarse window no longer counts stay in
     * the ring: a finer window after a later change can still reach them. */
    eff = sliding_head(from, h, now, &hidx, &hcnt, &behind);
    /* `now` comes from the key's last_ns, whose three latest times all read
     * back as UINT64_MAX - 2: units admitted at UINT64_MAX placed there
     * landed a sub-bucket early and left a window of one (an outside
     * tester: 5 + 5 of 5 after a precision change at 2^64 - 1).  Never
     * before their own times wins: there, decisions resuming at
     * UINT64_MAX - 2 read the head as ahead, so full. */
    latest = sl_last_upper(now);
    j = eff >= from->nb ? eff - from->nb : 0;
    do {
        uint64_t to_j, units = sliding_units(from, fw, j, sliding_slot(from, j), hidx, hcnt);
        if (units == 0)
            continue;
        to_j = sl_u128_sat(((sl_u128)j + 1) * from->width - 1);
        to_j = sl_min64(to_j, sl_max64(latest, to_j - (from->width - 1))) / to->width;
        if (sum != 0 && to_j != at) {
            sliding_raise(to, tw, at, sl_min64(sum, to->cmask));
            sum = 0;
        }
        at = to_j;
        sum += units;
    } while (j++ != eff);
    if (sum != 0)
        sliding_raise(to, tw, at, sl_min64(sum, to->cmask));
}

const struct sl_algo sl_algo_sliding = {
    .name = "sliding_window",
    .compile = sliding_compile,
    .charge = sliding_charge,
    .undo = sliding_undo,
    .report = sliding_report,
    .is_fresh = sliding_is_fresh,
    .freeze = sl_window_freeze,
    .carry = sliding_carry,
};
