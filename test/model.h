/*
 * A serial, obviously correct reference model of the contract's semantics,
 * written from the contract in include/sluice.h alone: every admitted
 * charge is kept as an event and each decision recounts them.  Slow on purpose; for tests and fuzzers.
 */
#ifndef SLUICE_TEST_MODEL_H
#define SLUICE_TEST_MODEL_H

#include <stdint.h>
#include <stdlib.h>

#include "sluice.h"

__extension__ typedef unsigned __int128 m_u128;

#define M_MAX_EVENTS 4096

struct m_event {
    uint64_t t, units;
};

struct m_limit_state {
    m_u128 tat_scaled;          /* GCRA: TAT * count */
    unsigned n;
    struct m_event ev[M_MAX_EVENTS];
};

struct m_key {
    struct m_limit_state lim[SLUICE_MAX_LIMITS];
};

static inline uint64_t m_burst(const struct sluice_limit *d)
{
    return d->burst ? d->burst : d->count;
}

static inline uint64_t m_precision(const struct sluice_limit *d)
{
    uint64_t p = d->precision_ns ? d->precision_ns : UINT64_C(1000000000);
    return p > d->period_ns ? d->period_ns : p;
}

/* Units of the n events ev[] with t in [lo, hi]. */
static inline uint64_t m_events_units(const struct m_event *ev, uint64_t n, uint64_t lo,
                                      uint64_t hi)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++)
        if (ev[i].t >= lo && ev[i].t <= hi)
            sum += ev[i].units;
    return sum;
}

static inline uint64_t m_units(const struct m_limit_state *s, uint64_t lo, uint64_t hi)
{
    return m_events_units(s->ev, s->n, lo, hi);
}

/*
 * The times whose admitted units count against a window limit at t: one
 * span [lo, hi] for fixed, sliding window and log, and for the approximate
 * window the current window (lo, hi) and the previous one (plo, phi; empty,
 * plo > phi, in window 0).  Shared with the linearizability model.
 */
static inline void m_window_spans(const struct sluice_limit *d, uint64_t t, uint64_t *lo,
                                  uint64_t *hi, uint64_t *plo, uint64_t *phi)
{
    uint64_t P = d->period_ns;

    *plo = 1;
    *phi = 0;
    switch (d->algo) {
    case SLUICE_SLIDING_WINDOW: {
        uint64_t w = m_precision(d), nb = (P + w - 1) / w, cur = t / w;
        *lo = (cur >= nb - 1 ? cur - (nb - 1) : 0) * w;
        *hi = (cur + 1) * w - 1;
        return;
    }
    case SLUICE_SLIDING_LOG:
        *lo = t >= P ? t - P + 1 : 0;
        *hi = t;
        return;
    default: /* fixed and approximate: the current window */
        *lo = t / P * P;
        *hi = *lo + P - 1;
        if (d->algo == SLUICE_APPROX_SLIDING && t / P != 0) {
            *plo = *lo - P;
            *phi = *lo - 1;
        }
    }
}

/* Would cost fit at now?  *remaining: units left after the charge (if it fits). */
static inline int m_fits(const struct sluice_limit *d, const struct m_limit_state *s, uint64_t now,
                         uint64_t cost, uint64_t *remaining)
{
    uint64_t c = d->count, P = d->period_ns, used, lo, hi, plo, phi;

    switch (d->algo) {
    case SLUICE_GCRA: {
        m_u128 nows = (m_u128)now * c, base = s->tat_scaled > nows ? s->tat_scaled : nows;
        m_u128 tau = (m_u128)m_burst(d) * P, need = base + (m_u128)cost * P - nows;
        if (need > tau)
            return 0;
        *remaining = (uint64_t)((tau - need) / P);
        return 1;
    }
    case SLUICE_FIXED_WINDOW:
    case SLUICE_SLIDING_WINDOW:
    case SLUICE_SLIDING_LOG:
        m_window_spans(d, now, &lo, &hi, &plo, &phi);
        used = m_units(s, lo, hi);
        break;
    case SLUICE_APPROX_SLIDING: {
        uint64_t e = now % P, cur, prev;
        m_window_spans(d, now, &lo, &hi, &plo, &phi);
        cur = m_units(s, lo, hi);
        prev = m_units(s, plo, phi);
        m_u128 room = (m_u128)c * P, take = (m_u128)prev * (P - e) + (m_u128)(cur + cost) * P;
        if (take > room)
            return 0;
        *remaining = (uint64_t)((room - take) / P);
        return 1;
    }
    default:
        abort();
    }
    if (used + cost > c)
        return 0;
    *remaining = c - used - cost;
    return 1;
}

static inline void m_charge(const struct sluice_limit *d, struct m_limit_state *s, uint64_t now,
                            uint64_t cost)
{
    if (d->algo == SLUICE_GCRA) {
        m_u128 nows = (m_u128)now * d->count;
        s->tat_scaled = (s->tat_scaled > nows ? s->tat_scaled : nows) + (m_u128)cost * d->period_ns;
        return;
    }
    if (s->n == M_MAX_EVENTS) { /* drop the oldest: callers keep times within a few periods */
        for (unsigned i = 1; i < s->n; i++)
            s->ev[i - 1] = s->ev[i];
        s->n--;
    }
    s->ev[s->n++] = (struct m_event){now, cost};
}

/* The least wait after which `cost` fits limit d absent other traffic
 * (usage only falls as time passes, so a binary search finds it);
 * UINT64_MAX if it never fits within 2^63 ns. */
static inline uint64_t m_wait(const struct sluice_limit *d, const struct m_limit_state *s,
                              uint64_t now, uint64_t cost)
{
    uint64_t lo = 0, hi = 1, rem;

    while (!m_fits(d, s, now + hi, cost, &rem)) {
        if (hi >> 63 || now + hi * 2 < now)
            return UINT64_MAX;
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) { /* fits at hi, not at lo */
        uint64_t mid = lo + (hi - lo) / 2;
        if (m_fits(d, s, now + mid, cost, &rem))
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

/* The contract's decision for one key: all limits or none.  Fills the index
 * of the denying limit with the longest wait (so retry_after covers every
 * limit), or of the allowed binding one (fewest remaining). */
static inline int m_acquire(const struct sluice_policy *p, struct m_key *k, uint64_t now,
                            uint64_t cost, unsigned *binding, uint64_t *remaining)
{
    uint64_t best = UINT64_MAX, longest = 0;
    int denied = 0;

    for (unsigned i = 0; i < p->nlimits; i++) {
        uint64_t rem;
        if (!m_fits(&p->limits[i], &k->lim[i], now, cost, &rem)) {
            uint64_t w = m_wait(&p->limits[i], &k->lim[i], now, cost);
            if (!denied || w > longest) {
                longest = w;
                *binding = i;
            }
            denied = 1;
            continue;
        }
        if (denied)
            continue;
        if (rem < best) {
            best = rem;
            *binding = i;
        }
    }
    if (denied)
        return SLUICE_DENY;
    *remaining = best;
    if (cost > 0)
        for (unsigned i = 0; i < p->nlimits; i++)
            m_charge(&p->limits[i], &k->lim[i], now, cost);
    return SLUICE_ALLOW;
}

#endif
