/*
 * One attempt at a decision on resolved keys (charge.c): every limit of
 * every key checked, then charged, all or nothing, each admission's time
 * committed as its last step, and a lost race's charges taken back where
 * the state went.  The few steps a single limit's hot decision takes are
 * inline here.  Used by decide.c only.
 */
#ifndef SL_CHARGE_H
#define SL_CHARGE_H

#include "internal.h"

/* A charge lost a race (after the read-only check passed, or to a far
 * newer admission): decide again. */
#define SL_RACED 3

/* Take back limit j's charge of g (by its receipt), following the state
 * to where a writer moved it if the entry was frozen since. */
void sl_undo_limit(struct sl_target *g, unsigned j, uint64_t cost);
/* One attempt at deciding g[0..n), all resolved (charge: an acquire, else a
 * peek): SL_OK or SL_NO, res filled but not finished; SL_RACED or SL_FROZEN
 * (*frozen: the key whose writer to wait for) with nothing charged left
 * standing, to be decided again. */
int sl_decide_once(struct sl_target *g, size_t n, uint64_t cost, bool charge,
                   struct sluice_result *res, size_t *frozen);

/*
 * Far-behind times and racing admissions.  A state word holds times modulo
 * a range, so a time far behind an admission (a stepped clock) could read
 * it as fresh; sl_entry_time clamps to the key's latest admission, but a
 * racing admission's time may not be in last_ns yet when we read it.  So an
 * admission at a time more than SL_TIME_SLACK past the key's last_ns (or
 * the first one) first raises last_ns to its time less SL_TIME_SLACK
 * (sl_floor_ahead: at most one write per SL_TIME_SLACK per key, and only
 * when a read-only check says the charge will pass; less the slack, so
 * that even a charge that then loses a race only clamps times far behind),
 * and a charge re-reads last_ns after its CAS, which saw every charge
 * before it and so every such raise (sl_floor_holds): a time more than
 * SL_TIME_SLACK behind that was decided against a state it may misread, so
 * the charge is taken back and decided again.  Twice SL_TIME_SLACK (2^40
 * ns, 18 min; defined in internal.h) stays far inside every algorithm's
 * range.  Then the charge commits its own time (sl_commit), which also
 * publishes the floor of a charge that ran far ahead with no floor raised
 * (its read-only check failed, and a racing charge was taken back before
 * its CAS).
 */
void sl_floor_raise(struct sl_target *g, uint64_t cost);

/* A charge at `at` of an entry whose last_ns reads lastw needs no floor
 * raised first: it has an admission, and at is not far past it. */
static inline bool sl_floor_near_word(uint64_t lastw, uint64_t at)
{
    return lastw != 0 && lastw != SL_LAST_SEALED &&
           (int64_t)(at - (lastw - 1)) <= 2 * (int64_t)SL_TIME_SLACK;
}

static inline bool sl_floor_near(struct sl_entry *e, uint64_t at)
{
    return sl_floor_near_word(sl_load_rlx(&e->last_ns), at);
}

/* Inline: a hot key passes the first test on every call. */
static inline void sl_floor_ahead(struct sl_target *g, uint64_t cost)
{
    if (g->e == NULL || sl_floor_near(g->e, g->at))
        return;
    sl_floor_raise(g, cost);
}

/* After a charge of e at `at`, one read of last_ns: false if it was
 * decided far behind a racing admission, and must be taken back and
 * decided again. */
static inline bool sl_floor_kept(struct sl_entry *e, uint64_t at)
{
    uint64_t last;

    return !sl_entry_last(e, &last) || (int64_t)(at - last) >= -(int64_t)SL_TIME_SLACK;
}

static inline bool sl_floor_holds(struct sl_target *g)
{
    return g->e == NULL || sl_floor_kept(g->e, g->at);
}

/*
 * The last step of an admission's charge: its time into last_ns, the
 * reaper's idle test, the time a replacement reads the state at, and the
 * floor of later decisions' times.  False if a writer that froze the entry
 * after the charge landed took last_ns first (sl_last_commit): the charge
 * is taken back and decided again, never left standing without its time.
 */
static inline bool sl_commit(struct sl_target *g)
{
    return g->e == NULL || sl_last_commit(&g->e->last_ns, g->at);
}

#endif
