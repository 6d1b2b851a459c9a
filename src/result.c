/*
 * What a decision tells its caller (struct sluice_result): the binding
 * limit over every limit of every key, read after the charge.  Below the
 * decision (decide.c, charge.c), above the algorithms; slow paths only:
 * the fast path fills its one limit with sl_result_fill (result.h).
 */
#include "result.h"

/* The time until g's key goes idle beyond its range, from the caller's
 * time (0: already; UINT64_MAX: never), last being its latest admission. */
static uint64_t sl_until_fresh(const struct sl_target *g, uint64_t last)
{
    if (g->pol->idle_fresh_ns >= (uint64_t)INT64_MAX)
        return UINT64_MAX;
    return sl_idle_beyond(g->now, last, g->pol->idle_fresh_ns)
               ? 0
               : last + g->pol->idle_fresh_ns + 1 - g->now; /* modular */
}

/*
 * A policy with a windowed limit keeps a key from before the clock's wrap
 * at 2^64 ns pinned at its latest admission before it (sl_decide_time):
 * read as it was then, until it is idle beyond its range (made fresh once
 * now - last > idle_fresh_ns, under 2^63: sl_idle_beyond; never if that
 * cannot be).  So a wait whose end is stamped after the wrap but before
 * the key's latest time, numerically (it crossed the wrap, or the call
 * itself was decided at such a pinned time), ends only then: told as the
 * time until then, or UINT64_MAX.  (An outside tester: a GCRA wait of 1 s
 * across the wrap, beside a window, was refused at its end and ever
 * after; a window's key called after the wrap told a reset it never had.)
 * A wait that crosses the wrap to a key already past it is as told (a
 * reviewer: a stale call at 2^64 - 10 on a key admitted at 5).
 */
static void sl_wait_pinned(uint64_t *w, const struct sl_target *g, uint64_t last)
{
    if (*w != 0 && (*w == UINT64_MAX || g->now + *w < last))
        *w = sl_until_fresh(g, last);
}

void sl_report_past_wrap(struct sl_report *r, const struct sl_target *g, uint64_t cost)
{
    /* the decision's time as last_ns keeps it (the three latest read back
     * as the first of them: sl_last_encode) */
    uint64_t at = g->at < SL_LAST_EXACT ? g->at : SL_LAST_EXACT, last;

    /* the key's latest admission; a key not (yet) kept would be made at
     * the decision's time */
    if (g->e == NULL || !sl_entry_last(g->e, &last))
        last = at;
    sl_wait_pinned(&r->retry_after, g, last);
    sl_wait_pinned(&r->reset_after, g, last);
    /* what a charge of cost at g->at leaves (a peek's too, so that it says
     * what the acquire's numbers, read after its commit, will) */
    sl_wait_pinned(&r->reset_charged, g, cost != 0 && (int64_t)(at - last) > 0 ? at : last);
}

/*
 * A request on several keys refused with a wait *w that ends past the
 * wrap: every key kept from before the wrap under a windowed limit is
 * pinned there at its latest admission until idle beyond its range, and
 * one that refuses the request as it was then refuses it at the wait's
 * end too, however freely it reads now (a reviewer: acquire_all of a key
 * admitting now, in a new window, and one spent to past the wrap was
 * told a wait at which the first refused).  So the wait is at least the
 * time until each such key goes idle.
 */
void sl_wait_pinned_keys(const struct sl_target *g, size_t n, uint64_t cost, uint64_t *w)
{
    for (bool raised = true; raised && *w != 0 && *w != UINT64_MAX;) {
        raised = false;
        for (size_t i = 0; i < n; i++) {
            uint64_t last, until;
            bool refuses = false;
            if (!g[i].pol->absolute || g[i].e == NULL || !sl_entry_last(g[i].e, &last) ||
                g[i].now + *w >= last) /* not pinned at the wait's end */
                continue;
            for (unsigned j = 0; j < g[i].pol->nlimits && !refuses; j++) {
                const struct sl_lim *lim = &g[i].pol->lim[j];
                refuses = lim->ops->report(lim, g[i].w + lim->off, last, cost, NULL) != SL_OK;
            }
            until = sl_until_fresh(&g[i], last);
            if (refuses && until > *w) {
                *w = until;
                raised = true;
            }
        }
    }
}

/* The verdict alone (no numbers wanted): no division.  Every limit is
 * read but the first limit of key skip (n: none), which its caller decides
 * by charging it first; so a frozen entry is reported as the full report
 * would (a key being reset or migrated makes the call decide again, not
 * deny on an earlier key's word meanwhile), or met by that charge. */
int sl_verdict_but(struct sl_target *g, size_t n, uint64_t cost, size_t skip, size_t *frozen)
{
    int verdict = SL_OK;

    for (size_t i = 0; i < n; i++) {
        for (unsigned j = i == skip ? 1 : 0; j < g[i].pol->nlimits; j++) {
            const struct sl_lim *lim = &g[i].pol->lim[j];
            int rc = lim->ops->report(lim, g[i].w + lim->off, g[i].at, cost, NULL);
            if (rc == SL_FROZEN) {
                *frozen = i;
                return SL_FROZEN;
            }
            if (rc == SL_NO)
                verdict = SL_NO;
        }
    }
    return verdict;
}

/*
 * Report every limit of every key (read-only).  cost is what the caller
 * wants to know about (0 after a charge).  SL_NO: some limit denies, and res
 * gets the one with the longest wait, so its retry_after is when the request
 * fits every limit (absent other traffic).  SL_OK: res gets the binding
 * limit, the one with the least remaining after cost.  SL_FROZEN: *frozen
 * names the key whose entry is being replaced.
 */
int sl_report_all(struct sl_target *g, size_t n, uint64_t cost, struct sluice_result *res,
                  size_t *frozen)
{
    struct sl_report best = {.remaining = UINT64_MAX}, worst = {0, 0, 0, 0}, r;
    unsigned best_key = 0, best_lim = 0, worst_key = 0, worst_lim = 0;
    bool denied = false;

    if (res == NULL)
        return sl_verdict_but(g, n, cost, n, frozen);
    for (size_t i = 0; i < n; i++) {
        for (unsigned j = 0; j < g[i].pol->nlimits; j++) {
            const struct sl_lim *lim = &g[i].pol->lim[j];
            int rc = lim->ops->report(lim, g[i].w + lim->off, g[i].at, cost, &r);
            if (rc == SL_FROZEN) {
                *frozen = i;
                return SL_FROZEN;
            }
            sl_report_for_caller(&r, &g[i], cost);
            if (rc == SL_NO) {
                if (!denied || r.retry_after > worst.retry_after) {
                    worst = r;
                    worst_key = (unsigned)i;
                    worst_lim = j;
                }
                denied = true;
                continue;
            }
            /* what the charge would leave: a peek answers as the
             * admission would (sl_report_charged reads it after the charge) */
            r.remaining -= sl_min64(r.remaining, cost);
            r.reset_after = r.reset_charged;
            if (r.remaining < best.remaining) {
                best = r;
                best_key = (unsigned)i;
                best_lim = j;
            }
        }
    }
    if (denied && n > 1)
        sl_wait_pinned_keys(g, n, cost, &worst.retry_after);
    if (res != NULL && denied)
        sl_result_fill(res, &g[worst_key], worst_key, worst_lim, &worst);
    else if (res != NULL)
        sl_result_fill(res, &g[best_key], best_key, best_lim, &best);
    return denied ? SL_NO : SL_OK;
}

/* After an admission: the numbers of the state just after this charge.
 * A writer may have frozen an entry since (its charge was carried over);
 * then the numbers are unknown, so say the least. */
void sl_report_charged(struct sl_target *g, size_t n, struct sluice_result *res)
{
    size_t frozen;

    if (res != NULL && sl_report_all(g, n, 0, res, &frozen) == SL_FROZEN) {
        struct sl_report none = {0, 0, 0, 0};
        sl_result_fill(res, &g[0], 0, 0, &none);
    }
}

/* A new key the table had no room for denies: the numbers of the key's
 * limits, nothing remaining, and a retry when some key may be reaped. */
void sl_result_full(struct sl_target *g, size_t i, uint64_t cost, struct sluice_result *res)
{
    size_t frozen;

    if (res == NULL)
        return;
    (void)sl_report_all(&g[i], 1, cost, res, &frozen);
    res->key_index = (unsigned)i;
    res->remaining = 0;
    /* a slot frees when some key has been idle long enough */
    res->retry_after_ns = g[i].l->idle_ttl_ns ? g[i].l->idle_ttl_ns : res->period_ns;
}

void sl_result_one_word(struct sluice *l, const struct sl_policy *pol, uint64_t word, uint64_t at,
                        uint64_t now, uint64_t cost, int verdict, unsigned flags,
                        struct sluice_result *res)
{
    const struct sl_lim *lim = &pol->lim[0];
    sl_aword w = word; /* a copy: the cell may have moved on since */
    uint64_t asked = verdict == SL_OK ? 0 : cost; /* admitted: the state after it */
    struct sl_report r;
    struct sl_target g; /* what the report's tellers read (not the receipts) */

    sl_target_of_word(&g, l, pol, &w, at, now, flags);
    if (lim->ops->report(lim, &w, at, asked, &r) == SL_FROZEN)
        r = (struct sl_report){0, 0, 0, 0};
    sl_report_for_caller(&r, &g, asked);
    sl_result_fill(res, &g, 0, 0, &r);
    sl_result_finish(res, verdict, flags);
}
