/*
 * What a decision tells its caller (struct sluice_result): result.c, and
 * the two fillers the fast path inlines.  Used by decide.c and charge.c.
 */
#ifndef SL_RESULT_H
#define SL_RESULT_H

#include "internal.h"

/*
 * A key decided later than the caller's time (at its latest admission, or
 * at the latest reap for a new key: sl_target.behind): its waits, counted
 * from the decision's time, are told from the caller's, so that a call
 * at the caller's time plus retry_after is admitted.  A wait of 0 stays 0:
 * every call up to the decision's time is decided at it.
 */
static inline uint64_t sl_wait_behind(uint64_t wait, uint64_t behind)
{
    return wait == 0 ? 0 : sl_sat_add(wait, behind);
}

static inline void sl_report_behind(struct sl_report *r, uint64_t behind)
{
    if (behind == 0)
        return;
    r->retry_after = sl_wait_behind(r->retry_after, behind);
    r->reset_after = sl_wait_behind(r->reset_after, behind);
    r->reset_charged = sl_wait_behind(r->reset_charged, behind);
}

/* (result.c) The waits of a key pinned before the clock's wrap. */
void sl_report_past_wrap(struct sl_report *r, const struct sl_target *g, uint64_t cost);

/* A limit's report, read at g->at for cost, told from the caller's time:
 * every wait the result gives passes through here. */
static inline void sl_report_for_caller(struct sl_report *r, const struct sl_target *g,
                                        uint64_t cost)
{
    uint64_t room = UINT64_MAX - g->now; /* a wait this long or more ends past 2^64 - 1 */

    sl_report_behind(r, g->behind);
    /* past the wrap, or decided as at a time before the caller's (pinned) */
    if (g->pol->absolute && ((int64_t)(g->at - g->now) < 0 || r->retry_after >= room ||
                             r->reset_after >= room || r->reset_charged >= room))
        sl_report_past_wrap(r, g, cost);
}

static inline void sl_result_fill(struct sluice_result *res, const struct sl_target *g, unsigned key,
                           unsigned limit, const struct sl_report *r)
{
    const struct sl_lim *lim = &g->pol->lim[limit];

    res->limit = lim->def.count;
    res->remaining = r->remaining;
    res->retry_after_ns = r->retry_after;
    res->reset_after_ns = r->reset_after;
    res->period_ns = lim->def.period_ns;
    res->limit_index = limit;
    res->key_index = key;
}

/* The decision's flags, and a retry_after that agrees with it: 0 when
 * allowed; at least 1 ns when denied (a report read after another thread
 * freed capacity may say 0: try again at once). */
static inline void sl_result_finish(struct sluice_result *res, int rc, unsigned flags)
{
    res->flags = flags;
    memset(res->reserved, 0, sizeof(res->reserved));
    if (rc == SL_OK)
        res->retry_after_ns = 0;
    else if (res->retry_after_ns == 0)
        res->retry_after_ns = 1;
}

/* g made to tell the numbers of a key in a cell from a copy of its state
 * word (w), decided at `at` for a caller at now: what the report's tellers
 * read of a target (a cell is never pinned before the wrap: GCRA alone). */
static inline void sl_target_of_word(struct sl_target *g, struct sluice *l,
                                     const struct sl_policy *pol, sl_aword *w, uint64_t at,
                                     uint64_t now, unsigned flags)
{
    g->l = l;
    g->e = NULL;
    g->pol = (struct sl_policy *)pol; /* read only by the report */
    g->w = w;
    g->now = now;
    g->at = at;
    g->flags = flags;
    g->behind = (int64_t)(at - now) > 0 ? at - now : 0; /* as sl_target_use_at's */
}

/* A request on several keys refused with wait *w: raised to cover keys
 * pinned before the clock's wrap that refuse it there. */
void sl_wait_pinned_keys(const struct sl_target *g, size_t n, uint64_t cost, uint64_t *w);
/* The verdict of every limit of every key but the first of key skip (n:
 * none), read-only: SL_OK, SL_NO or SL_FROZEN (*frozen: the key replaced). */
int sl_verdict_but(struct sl_target *g, size_t n, uint64_t cost, size_t skip, size_t *frozen);
/* Report every limit of every key (read-only): SL_OK, SL_NO (res: the
 * limit with the longest wait) or SL_FROZEN (*frozen: the key replaced). */
int sl_report_all(struct sl_target *g, size_t n, uint64_t cost, struct sluice_result *res,
                  size_t *frozen);
/* After an admission: the numbers of the state just after the charge. */
void sl_report_charged(struct sl_target *g, size_t n, struct sluice_result *res);
/* A key of a limiter that fails closed found no room: the result. */
void sl_result_full(struct sl_target *g, size_t i, uint64_t cost, struct sluice_result *res);
/* A key in a cell (one limit, one word) decided at `at` for a caller at
 * now: the result from its state word as this decision left it (nw after
 * an admission) or found it (a denial), as sl_charge_one tells one limit. */
void sl_result_one_word(struct sluice *l, const struct sl_policy *pol, uint64_t word, uint64_t at,
                        uint64_t now, uint64_t cost, int verdict, unsigned flags,
                        struct sluice_result *res);

#endif
