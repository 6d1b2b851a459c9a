/*
 * The serial model under the linearizability checker (lincheck.h): the
 * bounds of a history, its operations, the model state, and each limit's
 * rule (fits, charge, merge) over a short array of (time, units) events.
 * GCRA keeps TAT * LC_D, which does not depend on the count, so a policy
 * change keeps it exactly.
 */
#ifndef SLUICE_TEST_LINCHECK_MODEL_H
#define SLUICE_TEST_LINCHECK_MODEL_H

#include <errno.h>
#include <string.h>

#include "model.h"

#define LC_KEYS 3
#define LC_LIMITERS 2
#define LC_POLS 4
#define LC_EV 12
#define LC_MAX_OPS 64
#define LC_D UINT64_C(720720) /* lcm(1..16): GCRA counts divide it, so T * LC_D is whole */

enum lc_kind { LC_ACQ, LC_PEEK, LC_ALL, LC_SETPOL, LC_OVSET, LC_OVCLR, LC_RESET, LC_REAP, LC_PROBE,
               LC_RESOLVE, LC_REAPKEY };

struct lc_op {
    enum lc_kind kind;
    int key, lim, pid;    /* key slot; limiter (SETPOL, REAP); policy id (SETPOL, OVSET) */
    int nk, keys[4];      /* LC_ALL: key slots as passed, duplicates included */
    uint64_t cost, now;
    long long rc;         /* observed: return code, or LC_PROBE's drained counts, 8 bits per key */
    uint64_t inv, resp;   /* tickets */
    int thread;
    int transient_ok;     /* may see another call's reservation that is rolled back */
    int leftover_ok;      /* a rollback of this call may leave charges behind */
    uint64_t need;        /* ops (bits) that must be linearized before this one */
    int split;            /* LC_REAP: its removals are LC_REAPKEY steps; it checks the count */
};

/*
 * sluice_reap removes keys one at a time (shard by shard, each under its
 * shard's lock), not in one atomic step: a call racing a reap can find one
 * key already removed and another not yet.  A reap that removed two keys or
 * more and races other calls gets one optional LC_REAPKEY step per key of
 * its limiter, each linearized anywhere in the reap's interval (branch 1
 * removes the key), and the reap itself, after them all (need), checks
 * that they removed as many keys as it returned.
 */
#define LC_THREADS 4

/*
 * A decision resolves its keys (makes a new key, moves an existing one to
 * the policy in force: "keys migrate lazily on their next request") before
 * the point its result is decided at, and other calls can see that: a
 * set_policy racing it can make it decide again under a newer policy, or
 * fail with -E2BIG after making a key; a reset or reap can find the key it
 * made or moved, before it charges.  The checker gives a decision that
 * races such calls one optional LC_RESOLVE step per key, linearized
 * anywhere in its interval before it (linearize.c: add_resolves).
 */

struct lc_world {
    struct sluice_policy pol[LC_POLS];
    int npol, nkeys, key_lim[LC_KEYS], nlimiters;
};

struct lc_lim {
    m_u128 tat;      /* GCRA: TAT * LC_D; 0 fresh */
    uint64_t latest; /* windows: the latest time charged (the stored window) */
    uint64_t n;
    struct m_event ev[LC_EV];
};

struct lc_key {
    struct lc_lim lim[2];
    int64_t exists; /* 0 absent, 1 present */
    int64_t ovr;    /* override policy id, -1 none */
    int64_t pol;    /* policy id the state is laid out for (-1: fresh, any) */
    int64_t last;   /* the latest admission's time: an earlier call is decided at it */
    int64_t gen;    /* the default's generation pol was in force at; 0: an override's */
};

struct lc_state {
    struct lc_key k[LC_KEYS];
    int64_t def[LC_LIMITERS];
    /* generations of defaults (1, +1 per set_policy), and since which one
     * every default has had each of the current default's limits' kinds */
    int64_t gen[LC_LIMITERS], since[LC_LIMITERS][2];
    int64_t floor[LC_LIMITERS]; /* the latest time keys were reaped at: new keys start there */
    int64_t reaped[LC_THREADS]; /* keys removed so far by the thread's split reap */
};

static inline uint64_t lc_cap(const struct sluice_policy *p)
{
    uint64_t cap = UINT64_MAX;
    for (unsigned i = 0; i < p->nlimits; i++) {
        uint64_t c = p->limits[i].algo == SLUICE_GCRA ? m_burst(&p->limits[i]) : p->limits[i].count;
        cap = c < cap ? c : cap;
    }
    return cap;
}

static inline uint64_t lc_units(const struct lc_lim *s, uint64_t lo, uint64_t hi)
{
    return m_events_units(s->ev, s->n, lo, hi);
}

/* The time a limit decides `now` at: a time before the stored window (or
 * sub-bucket, or newest log stamp) is decided in it; GCRA reads its TAT
 * from any time, an earlier one only admitting less. */
static inline uint64_t lc_eff(const struct sluice_limit *d, const struct lc_lim *s, uint64_t now)
{
    uint64_t P = d->period_ns, w;

    if (s->n == 0 || now >= s->latest || d->algo == SLUICE_GCRA)
        return now;
    switch (d->algo) {
    case SLUICE_FIXED_WINDOW:
        return now / P == s->latest / P ? now : s->latest;
    case SLUICE_APPROX_SLIDING:
        return now / P == s->latest / P ? now : s->latest / P * P;
    case SLUICE_SLIDING_WINDOW:
        w = m_precision(d);
        return now / w == s->latest / w ? now : s->latest;
    default:
        return s->latest;
    }
}

static inline m_u128 lc_T(const struct sluice_limit *d)
{
    return (m_u128)d->period_ns * (LC_D / d->count);
}

static inline int lc_fits(const struct sluice_limit *d, const struct lc_lim *s, uint64_t now,
                          uint64_t cost)
{
    uint64_t c = d->count, P = d->period_ns, t = lc_eff(d, s, now), lo, hi, plo, phi;

    if (d->algo == SLUICE_GCRA) {
        m_u128 nows = (m_u128)t * LC_D, base = s->tat > nows ? s->tat : nows;
        return base + cost * lc_T(d) - nows <= m_burst(d) * lc_T(d);
    }
    m_window_spans(d, t, &lo, &hi, &plo, &phi);
    if (d->algo == SLUICE_APPROX_SLIDING)
        return (m_u128)lc_units(s, plo, phi) * (P - t % P) +
                   (m_u128)(lc_units(s, lo, hi) + cost) * P <=
               (m_u128)c * P;
    return lc_units(s, lo, hi) + cost <= c;
}

static inline void lc_charge(const struct sluice_limit *d, struct lc_lim *s, uint64_t now,
                             uint64_t cost)
{
    uint64_t t = lc_eff(d, s, now);
    unsigned i;

    if (d->algo == SLUICE_GCRA) {
        m_u128 nows = (m_u128)t * LC_D;
        s->tat = (s->tat > nows ? s->tat : nows) + cost * lc_T(d);
        return;
    }
    for (i = 0; i < s->n && s->ev[i].t != t; i++)
        ;
    if (i == s->n) {
        if (s->n == LC_EV)
            abort(); /* histories use a few distinct times */
        s->ev[s->n++] = (struct m_event){t, 0};
    }
    s->ev[i].units += cost;
    s->latest = t > s->latest ? t : s->latest;
}

/* Window algorithms: bucket of time t for limit d (the window, or the
 * sliding window's sub-bucket; 0 for the log, which has none). */
static inline uint64_t lc_bucket_width(const struct sluice_limit *d)
{
    return d->algo == SLUICE_SLIDING_WINDOW ? m_precision(d)
           : d->algo == SLUICE_SLIDING_LOG  ? 0
                                            : d->period_ns;
}

/* Stamps of s's units, newest first, into out (at most cap). */
static inline unsigned lc_stamps(const struct lc_lim *s, uint64_t *out, unsigned cap)
{
    unsigned n = 0;
    uint64_t above = UINT64_MAX;

    for (;;) { /* events by descending time; times are distinct */
        int best = -1;
        for (unsigned i = 0; i < s->n; i++)
            if (s->ev[i].t < above && (best < 0 || s->ev[i].t > s->ev[best].t))
                best = (int)i;
        if (best < 0)
            return n;
        for (uint64_t u = 0; u < s->ev[best].units && n < cap; u++)
            out[n++] = s->ev[best].t;
        above = s->ev[best].t;
    }
}

/* A sliding window's units carried into another precision, as the library
 * moves them (algo_sliding.c, sliding_carry): each old sub-bucket of width
 * wf to the time min(its last ns, max(now, its first ns)), now being the
 * key's latest admission.  Exact times would be finer than the library
 * keeps, and a later merge with a limit that held the same units at their
 * moved time would count them twice (seen as a false VIOLATION). */
static inline void lc_rebucket(struct lc_lim *s, uint64_t wf, uint64_t now)
{
    struct lc_lim out = *s;

    out.n = 0;
    for (unsigned i = 0; i < s->n; i++) {
        uint64_t first = s->ev[i].t / wf * wf, last = first + (wf - 1), t;
        unsigned k;
        t = now > first ? now : first;
        t = t < last ? t : last;
        for (k = 0; k < out.n && out.ev[k].t != t; k++)
            ;
        if (k == out.n)
            out.ev[out.n++] = (struct m_event){t, 0};
        out.ev[k].units += s->ev[i].units;
    }
    *s = out;
}

/* a := the more spent of a and b for limit d, as the library's carry from
 * several old limits into one: the later TAT; per window (or sub-bucket)
 * the side with more units; for the log, newest unit against newest unit,
 * the later stamp. */
static inline void lc_lim_merge(const struct sluice_limit *d, struct lc_lim *a,
                                const struct lc_lim *b)
{
    struct lc_lim out;
    uint64_t w = lc_bucket_width(d);

    if (d->algo == SLUICE_GCRA) {
        a->tat = a->tat > b->tat ? a->tat : b->tat;
        return;
    }
    memset(&out, 0, sizeof(out));
    out.latest = a->latest > b->latest ? a->latest : b->latest;
    if (w == 0) {
        static uint64_t sa[1024], sb[1024];
        unsigned na = lc_stamps(a, sa, 1024), nb = lc_stamps(b, sb, 1024);
        for (unsigned i = 0; i < (na > nb ? na : nb); i++) {
            uint64_t t = i >= na ? sb[i] : i >= nb ? sa[i] : sa[i] > sb[i] ? sa[i] : sb[i];
            if (out.n > 0 && out.ev[out.n - 1].t == t)
                out.ev[out.n - 1].units++;
            else if (out.n < LC_EV)
                out.ev[out.n++] = (struct m_event){t, 1};
            else
                abort(); /* histories use a few distinct times */
        }
    } else {
        const struct lc_lim *side[2] = {a, b};
        for (int si = 0; si < 2; si++)
            for (unsigned i = 0; i < side[si]->n; i++) {
                uint64_t bk = side[si]->ev[i].t / w, ua, ub, last = 0;
                int dup = 0;
                for (unsigned k = 0; k < out.n; k++)
                    dup |= out.ev[k].t / w == bk;
                if (dup)
                    continue;
                ua = lc_units(a, bk * w, bk * w + w - 1);
                ub = lc_units(b, bk * w, bk * w + w - 1);
                /* one event for the bucket, at the chosen side's latest time in it */
                const struct lc_lim *pick = ua >= ub ? a : b;
                for (unsigned k = 0; k < pick->n; k++)
                    if (pick->ev[k].t / w == bk && pick->ev[k].t >= last)
                        last = pick->ev[k].t;
                if (out.n == LC_EV)
                    abort();
                out.ev[out.n++] = (struct m_event){last, ua >= ub ? ua : ub};
            }
    }
    *a = out;
}

#endif
