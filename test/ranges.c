/*
 * Ranges: every configuration sluice accepts decides correctly over the
 * range it documents (enum sluice_algo in sluice.h, the algo_*.c files); one
 * whose range would be too small is refused with -EINVAL instead of
 * wrapping.  A key is filled, then asked from times behind its latest
 * admission (up to the documented range: decided as at that latest time,
 * never admitting more) and from times ahead (hours to years: an idle key
 * reads as fresh), each compared with the serial model (test/model.h).
 * The reported cases: GCRA at 1,000,000,007/s; approximate sliding at 2^26
 * and 2^27-1 (idle 300-500 s); fixed and sliding windows at 2^46.
 */
#include <unistd.h>

#include "helpers.h"
#include "internal.h"
#include "model.h"

#define HOUR (3600 * NS_PER_S)
#define DAY (24 * HOUR)
#define YEAR (365 * DAY)

/* The documented ranges (sluice.h): windows both ways, GCRA behind. */
#define WIN_RANGE (UINT64_C(1) << 55)
#define GCRA_RANGE (UINT64_C(1) << 50)
#define GCRA_TAU_MAX ((UINT64_C(1) << 52) - GCRA_RANGE - 1)

static int accepts(struct sluice_limit d)
{
    struct sluice_policy p = {.nlimits = 1, .limits = {d}};
    struct sluice_config cfg;
    sluice_t *l = NULL;
    int rc;

    sluice_config_init(&cfg);
    cfg.policy = p;
    rc = sluice_create(&cfg, &l);
    sluice_destroy(l);
    return rc;
}

struct run {
    const char *what;
    struct sluice_limit d;  /* as configured */
    struct sluice_limit md; /* what the model decides (GCRA's rounded T) */
    sluice_t *l;
    struct m_key *k;
    uint64_t last; /* latest admission */
};

/* The time sluice decides a request at t (behind `last`) as: GCRA at t itself
 * (its TAT is exact in time: more conservative than at last), the windows at
 * the latest admission's window (approximate: its start). */
static uint64_t decided_at(const struct run *r, uint64_t t)
{
    uint64_t P = r->d.period_ns;

    if (r->d.algo == SLUICE_GCRA || t >= r->last)
        return t;
    if (r->d.algo == SLUICE_APPROX_SLIDING)
        return t / P == r->last / P ? t : r->last / P * P;
    return r->last;
}

static uint64_t cap_of(const struct sluice_limit *d)
{
    return d->algo == SLUICE_GCRA ? m_burst(d) : d->count;
}

/* A peek at t must decide as the model at decided_at(t): cost 1, exactly
 * the model's remaining, and one more. */
static void check_at(struct run *r, uint64_t t, const char *when, uint64_t off)
{
    uint64_t te = decided_at(r, t), rem = 0, costs[3];
    int fits0 = m_fits(&r->md, &r->k->lim[0], te, 0, &rem);

    (void)fits0;
    costs[0] = 1;
    costs[1] = rem;
    costs[2] = rem + 1;
    for (unsigned i = 0; i < 3; i++) {
        uint64_t c = costs[i], mrem;
        struct sluice_result res;
        if (c == 0 || c > cap_of(&r->d))
            continue;
        int want = m_fits(&r->md, &r->k->lim[0], te, c, &mrem) ? SLUICE_ALLOW : SLUICE_DENY;
        int got = sluice_peek_at(r->l, "k", 1, c, t, &res);
        if (got != want) {
            fprintf(stderr, "%s: %s by %llu ns (t %llu, last %llu): cost %llu got %d, model %d\n",
                    r->what, when, (unsigned long long)off, (unsigned long long)t,
                    (unsigned long long)r->last, (unsigned long long)c, got, want);
            t_failures++;
        }
    }
}

static void acquire(struct run *r, uint64_t t, uint64_t cost)
{
    struct sluice_policy mp = {.nlimits = 1, .limits = {r->md}};
    uint64_t rem;
    unsigned mb;
    int want = m_acquire(&mp, r->k, t, cost, &mb, &rem);
    int got = sluice_acquire_at(r->l, "k", 1, cost, t, NULL);

    if (got != want) {
        fprintf(stderr, "%s: acquire %llu at %llu (last %llu): got %d, model %d\n", r->what,
                (unsigned long long)cost, (unsigned long long)t, (unsigned long long)r->last, got,
                want);
        t_failures++;
    }
    if (got == SLUICE_ALLOW)
        r->last = t;
}

/*
 * Fill the key at t0, look from every `behind` offset (those within the
 * documented range), then jump ahead by each `ahead` offset in turn,
 * filling again and looking behind again from there.
 */
static void run_range(const char *what, struct sluice_limit d, struct sluice_limit md, uint64_t t0,
                      const uint64_t *behind, size_t nb, const uint64_t *ahead, size_t na)
{
    static struct m_key k;
    struct sluice_config cfg;
    struct run r = {what, d, md, NULL, &k, 0};
    int rc;

    memset(&k, 0, sizeof(k));
    sluice_config_init(&cfg);
    cfg.policy.nlimits = 1;
    cfg.policy.limits[0] = d;
    rc = sluice_create(&cfg, &r.l);
    if (rc != 0) {
        fprintf(stderr, "%s: refused (%d), expected to be accepted\n", what, rc);
        t_failures++;
        return;
    }
    for (size_t a = 0; a <= na; a++) {
        uint64_t t = a == 0 ? t0 : r.last + ahead[a - 1];
        if (a > 0)
            check_at(&r, t, "ahead", ahead[a - 1]);
        acquire(&r, t, cap_of(&d));
        for (size_t b = 0; b < nb; b++)
            if (behind[b] <= r.last)
                check_at(&r, r.last - behind[b], "behind", behind[b]);
        /* and half spent: the remaining is what must match */
        check_at(&r, r.last, "at", 0);
    }
    sluice_destroy(r.l);
}

/* ---- GCRA ----------------------------------------------------------------- */

static void test_gcra(void)
{
    const uint64_t behind[] = {1, 7 * NS_PER_S / 2, HOUR, DAY, 12 * DAY, GCRA_RANGE};
    const uint64_t ahead[] = {1, HOUR, DAY, 30 * DAY, YEAR, 10 * YEAR, 100 * YEAR};
    const uint64_t ahead_q[] = {1, HOUR, DAY, 30 * DAY, UINT64_C(1) << 52};
    uint64_t t0 = 1000000 * NS_PER_S;

    /* The reported case: 1,000,000,007 per second admitted a whole extra
     * burst 3.5 s behind the latest admission.  T cannot be kept exactly in
     * a word that reads 13 days back: it is rounded up to
     * ceil(1e9 * 1024 / 1000000007) / 1024 = 1 ns (documented), which the
     * model decides as 1 per ns with the same burst. */
    run_range("gcra 1000000007/s", t_limit(SLUICE_GCRA, 1000000007, NS_PER_S, 0, 0),
              t_limit(SLUICE_GCRA, 1, 1, 1000000007, 0), t0, behind, 6, ahead, 7);
    /* the same with a small burst: half a second of tolerance */
    run_range("gcra 1000000007/s burst 5e8",
              t_limit(SLUICE_GCRA, 1000000007, NS_PER_S, 500000000, 0),
              t_limit(SLUICE_GCRA, 1, 1, 500000000, 0), t0, behind, 6, ahead, 7);

    /* Exact T with the most fraction bits (q = 1024) and the largest
     * tolerance: the word's range is smallest here. */
    uint64_t bmax = (uint64_t)(((m_u128)GCRA_TAU_MAX * 1024) / 1023);
    CHECK_EQ(accepts(t_limit(SLUICE_GCRA, 1024, 1023, bmax, 0)), 0);
    CHECK_EQ(accepts(t_limit(SLUICE_GCRA, 1024, 1023, bmax + 1, 0)), -EINVAL);
    run_range("gcra q=1024 largest burst", t_limit(SLUICE_GCRA, 1024, 1023, bmax, 0),
              t_limit(SLUICE_GCRA, 1024, 1023, bmax, 0), UINT64_C(1) << 53, behind, 6, ahead_q, 5);
    run_range("gcra q=1024 burst 1000", t_limit(SLUICE_GCRA, 1024, 1023, 1000, 0),
              t_limit(SLUICE_GCRA, 1024, 1023, 1000, 0), t0, behind, 6, ahead_q, 5);
    /* q = 1025 is rounded to 1/1024 ns: 1 per ns * 1025 / 1024 */
    run_range("gcra 1025 per ns", t_limit(SLUICE_GCRA, 1025, 1, 0, 0),
              t_limit(SLUICE_GCRA, 1024, 1, 1025, 0), t0, behind, 6, ahead_q, 5);

    /* The largest tolerance with T whole: accepted and right; one more ns refused. */
    CHECK_EQ(accepts(t_limit(SLUICE_GCRA, 1, GCRA_TAU_MAX, 0, 0)), 0);
    CHECK_EQ(accepts(t_limit(SLUICE_GCRA, 1, GCRA_TAU_MAX + 1, 0, 0)), -EINVAL);
    CHECK_EQ(accepts(t_limit(SLUICE_GCRA, 10, NS_PER_S, GCRA_TAU_MAX / (NS_PER_S / 10), 0)), 0);
    CHECK_EQ(accepts(t_limit(SLUICE_GCRA, 10, NS_PER_S, GCRA_TAU_MAX / (NS_PER_S / 10) + 1, 0)),
             -EINVAL);
    run_range("gcra 1 per 39 days", t_limit(SLUICE_GCRA, 1, GCRA_TAU_MAX, 0, 0),
              t_limit(SLUICE_GCRA, 1, GCRA_TAU_MAX, 0, 0), UINT64_C(1) << 56, behind, 6, ahead, 7);
    /* a monthly quota with its whole month as burst still fits */
    CHECK_EQ(accepts(t_limit(SLUICE_GCRA, 1000, 30 * DAY, 0, 0)), 0);
}

/* ---- windows ---------------------------------------------------------------- */

static const uint64_t wbehind[] = {1, NS_PER_S, 300 * NS_PER_S, HOUR, DAY, 300 * DAY, WIN_RANGE};
static const uint64_t wahead[] = {300 * NS_PER_S, 400 * NS_PER_S, 500 * NS_PER_S, HOUR, DAY,
                                  300 * DAY,      YEAR,           WIN_RANGE};
#define NWB (sizeof(wbehind) / sizeof(wbehind[0]))
#define NWA (sizeof(wahead) / sizeof(wahead[0]))

static void window_case(const char *what, struct sluice_limit d)
{
    run_range(what, d, d, 1000000 * NS_PER_S + 123456789, wbehind, NWB, wahead, NWA);
}

/* A reported configuration: refused, or (were it accepted) right. */
static void refused_or_right(const char *what, struct sluice_limit d)
{
    int rc = accepts(d);

    CHECK_EQ(rc, -EINVAL);
    if (rc == 0)
        window_case(what, d);
}

static void test_approx(void)
{
    /* reported: 2^26 admitted a fresh window a few hundred windows back;
     * 2^27-1 denied a key idle 300-500 s.  Too many counter bits for the
     * index a 1 s window needs: refused. */
    refused_or_right("approx 2^26 per s",
                     t_limit(SLUICE_APPROX_SLIDING, UINT64_C(1) << 26, NS_PER_S, 0, 0));
    refused_or_right("approx 2^27-1 per s",
                     t_limit(SLUICE_APPROX_SLIDING, (UINT64_C(1) << 27) - 1, NS_PER_S, 0, 0));
    /* boundary at 1 s: 2^18 - 1 (documented) */
    CHECK_EQ(accepts(t_limit(SLUICE_APPROX_SLIDING, (UINT64_C(1) << 18) - 1, NS_PER_S, 0, 0)), 0);
    CHECK_EQ(accepts(t_limit(SLUICE_APPROX_SLIDING, UINT64_C(1) << 18, NS_PER_S, 0, 0)), -EINVAL);
    window_case("approx 2^18-1 per s",
                t_limit(SLUICE_APPROX_SLIDING, (UINT64_C(1) << 18) - 1, NS_PER_S, 0, 0));
    window_case("approx 100 per s", t_limit(SLUICE_APPROX_SLIDING, 100, NS_PER_S, 0, 0));
    /* 2^27-1 fits a 2-day window */
    window_case("approx 2^27-1 per 2 days",
                t_limit(SLUICE_APPROX_SLIDING, (UINT64_C(1) << 27) - 1, 2 * DAY, 0, 0));
    /* 1 ns windows: the index takes nearly the whole word */
    CHECK_EQ(accepts(t_limit(SLUICE_APPROX_SLIDING, 7, 1, 0, 0)), 0);
    CHECK_EQ(accepts(t_limit(SLUICE_APPROX_SLIDING, 8, 1, 0, 0)), -EINVAL);
    window_case("approx 7 per ns", t_limit(SLUICE_APPROX_SLIDING, 7, 1, 0, 0));
}

static void test_fixed_sliding(void)
{
    /* reported: 2^46 and up admitted a full fresh window a few hundred
     * windows back.  At 1 s the index needs 27 bits: counts below 2^36. */
    refused_or_right("fixed 2^46 per s",
                     t_limit(SLUICE_FIXED_WINDOW, UINT64_C(1) << 46, NS_PER_S, 0, 0));
    refused_or_right("sliding 2^46 per s",
                     t_limit(SLUICE_SLIDING_WINDOW, UINT64_C(1) << 46, NS_PER_S, 0, 0));
    CHECK_EQ(accepts(t_limit(SLUICE_FIXED_WINDOW, (UINT64_C(1) << 36) - 1, NS_PER_S, 0, 0)), 0);
    CHECK_EQ(accepts(t_limit(SLUICE_FIXED_WINDOW, UINT64_C(1) << 36, NS_PER_S, 0, 0)), -EINVAL);
    CHECK_EQ(accepts(t_limit(SLUICE_SLIDING_WINDOW, (UINT64_C(1) << 36) - 1, 10 * NS_PER_S, 0,
                             NS_PER_S)),
             0);
    CHECK_EQ(accepts(t_limit(SLUICE_SLIDING_WINDOW, UINT64_C(1) << 36, 10 * NS_PER_S, 0, NS_PER_S)),
             -EINVAL);
    window_case("fixed 2^36-1 per s",
                t_limit(SLUICE_FIXED_WINDOW, (UINT64_C(1) << 36) - 1, NS_PER_S, 0, 0));
    window_case("sliding 2^36-1 per 10 s", t_limit(SLUICE_SLIDING_WINDOW, (UINT64_C(1) << 36) - 1,
                                                   10 * NS_PER_S, 0, NS_PER_S));
    /* 2^46 fits windows of 2^41 ns (37 min), not of 2^40 */
    CHECK_EQ(accepts(t_limit(SLUICE_FIXED_WINDOW, UINT64_C(1) << 46, UINT64_C(1) << 40, 0, 0)),
             -EINVAL);
    window_case("fixed 2^46 per 2^41 ns",
                t_limit(SLUICE_FIXED_WINDOW, UINT64_C(1) << 46, UINT64_C(1) << 41, 0, 0));
    window_case("sliding 2^46 per 2^44 ns", t_limit(SLUICE_SLIDING_WINDOW, UINT64_C(1) << 46,
                                                    UINT64_C(1) << 44, 0, UINT64_C(1) << 41));
    CHECK_EQ(accepts(t_limit(SLUICE_FIXED_WINDOW, 63, 1, 0, 0)), 0);
    CHECK_EQ(accepts(t_limit(SLUICE_FIXED_WINDOW, 64, 1, 0, 0)), -EINVAL);
    window_case("fixed 63 per ns", t_limit(SLUICE_FIXED_WINDOW, 63, 1, 0, 0));
    window_case("sliding 20 per s at 1 ms",
                t_limit(SLUICE_SLIDING_WINDOW, 20, NS_PER_S, 0, NS_PER_S / 1000));
    window_case("log 100 per s", t_limit(SLUICE_SLIDING_LOG, 100, NS_PER_S, 0, 0));
}

/* The sliding log at the top of time: stamp + period saturated, so every
 * stamp looked expired at UINT64_MAX and the log admitted without limit. */
static void test_log_top_of_time(void)
{
    struct sluice_config cfg;
    sluice_t *l = NULL;
    unsigned admitted = 0;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_SLIDING_LOG, 4, 10 * NS_PER_S);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    for (int i = 0; i < 100; i++)
        admitted += sluice_acquire_at(l, "k", 1, 1, UINT64_MAX, NULL) == SLUICE_ALLOW;
    CHECK_EQ(admitted, 4);
    /* and later calls (stamped earlier) are decided as at that latest time */
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 12345 * NS_PER_S, NULL), SLUICE_DENY);
    sluice_destroy(l);
}

/*
 * Waits that end past 2^64 - 1 ns, a time no call can be stamped with (an
 * outside tester's find): a windowed limit spent near the top of the
 * clock told a finite retry_after (and reset_after) at which the call was
 * still denied; the window's end was saturated, or wrapped in 64 bits,
 * before the wait was taken from it.  sluice.h: "UINT64_MAX if it never
 * can".  Each wait told is either UINT64_MAX or honoured, to the
 * nanosecond.
 */
static void top_case(const char *what, enum sluice_algo a, uint64_t count, uint64_t period,
                     uint64_t precision, uint64_t t_admit, uint64_t t_ask)
{
    sluice_t *l = t_limiter1(a, count, period, 0, precision);
    struct sluice_result r, q;
    bool retry_ok, reset_ok;
    uint64_t reset;

    CHECK_EQ(sluice_acquire_at(l, "k", 1, count, t_admit, &r), SLUICE_ALLOW);
    reset = r.reset_after_ns;

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t_ask, &r), SLUICE_DENY);
    /* Past the wrap only GCRA reads on (modulo 2^64); the windows keep
     * the key as it was until it is idle beyond its range, and a wait
     * that ends past 2^64 - 1 ends then (top_of_time has the rule). */
    retry_ok = r.retry_after_ns == UINT64_MAX || t_wait_holds(l, "k", t_ask, r.retry_after_ns);
    reset_ok = reset == UINT64_MAX ||
               (sluice_peek_at(l, "k", 1, 0, t_admit + reset, &q) == SLUICE_ALLOW &&
                q.remaining == count);
    CHECK(retry_ok);
    CHECK(reset_ok);
    if (!retry_ok || !reset_ok)
        fprintf(stderr, "%s: retry_after %llu, reset_after %llu: not honoured\n", what,
                (unsigned long long)r.retry_after_ns, (unsigned long long)reset);
    sluice_destroy(l);
}

static void test_waits_past_the_top(void)
{
    const uint64_t m = UINT64_MAX, half = UINT64_C(1) << 63;

    top_case("fixed, last window", SLUICE_FIXED_WINDOW, 1, 1000, 0, m - 3, m - 2);
    top_case("fixed, period 2^63 + 1", SLUICE_FIXED_WINDOW, 1, half + 1, 0, half + 5, half + 6);
    top_case("fixed, period 1 ns", SLUICE_FIXED_WINDOW, 1, 1, 0, m, m);
    top_case("sliding, 1 ns precision", SLUICE_SLIDING_WINDOW, 1, 10, 1, m - 3, m - 2);
    top_case("sliding log", SLUICE_SLIDING_LOG, 1, 10, 0, m - 3, m - 2);
    top_case("approximate", SLUICE_APPROX_SLIDING, 1, 1000, 0, m / 1000 * 1000 - 990,
             m / 1000 * 1000 - 980);
    top_case("gcra (reads across the wrap)", SLUICE_GCRA, 1, 1000, 0, m - 3, m - 2);
}

/*
 * The clock's wrap at 2^64 ns (an outside tester's find): the windowed
 * algorithms number windows from 0, so a key spent just before the wrap
 * read, 2 ns later, as fresh or as full by the accident of the index
 * distance (20 units in 2 ns under 10/s with a 200 ms precision; about 40%
 * of random configurations).  sluice.h says such a key reads as full
 * (fail closed) until idle beyond its range, reaped or reset; GCRA reads
 * across the wrap.  Every
 * windowed algorithm with periods and precisions that do and do not divide
 * 2^64, private and shared limiters' code alike (private here).
 */
static void test_clock_wrap(void)
{
    static const struct {
        enum sluice_algo a;
        uint64_t period, precision;
    } c[] = {
        {SLUICE_FIXED_WINDOW, NS_PER_S, 0},       {SLUICE_FIXED_WINDOW, 1000, 0},
        {SLUICE_FIXED_WINDOW, 7 * NS_PER_S, 0},   {SLUICE_APPROX_SLIDING, NS_PER_S, 0},
        {SLUICE_APPROX_SLIDING, 3 * NS_PER_S, 0}, {SLUICE_SLIDING_WINDOW, NS_PER_S, NS_PER_S / 5},
        {SLUICE_SLIDING_WINDOW, NS_PER_S, 0},     {SLUICE_SLIDING_WINDOW, 60 * NS_PER_S, 7 * NS_PER_S},
        {SLUICE_SLIDING_LOG, NS_PER_S, 0},
    };

    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct sluice_config cfg;
        sluice_t *l = NULL;
        unsigned admitted = 0;

        sluice_config_init(&cfg);
        cfg.policy.nlimits = 1;
        cfg.policy.limits[0] = t_limit(c[i].a, 10, c[i].period, 0, c[i].precision);
        CHECK_EQ(sluice_create(&cfg, &l), 0);
        for (int k = 0; k < 10; k++)
            admitted += sluice_acquire_at(l, "k", 1, 1, UINT64_MAX, NULL) == SLUICE_ALLOW;
        CHECK_EQ(admitted, 10);
        /* 2 ns, a period and ten periods after the wrap: full, not fresh */
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 1, NULL), SLUICE_DENY);
        CHECK_EQ(sluice_peek_at(l, "k", 1, 1, c[i].period, NULL), SLUICE_DENY);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 10 * c[i].period, NULL), SLUICE_DENY);
        /* until idle beyond its range (surely over: it starts again; the
         * log never restarts a key), or reset */
        if (c[i].a == SLUICE_SLIDING_LOG) {
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 2 * DAY, NULL), SLUICE_DENY);
        } else {
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 2 * DAY, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 9, 2 * DAY, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 2 * DAY, NULL), SLUICE_DENY);
        }
        CHECK_EQ(sluice_reset(l, "k", 1), 0);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 2 * DAY, NULL), SLUICE_ALLOW);
        sluice_destroy(l);
    }
}

/*
 * Keys idle beyond the range their words are read over: a spent key read
 * as spent again (the stored time, taken modulo the range, looked recent)
 * and denied until the range came round, reset no sooner by reap, which
 * misread it the same way.  Such a key is fresh: every limit's state is
 * over long before.  Peeks see it fresh, an acquire starts it again, a reap
 * takes it; each against the serial model, then from times behind.
 */
static void test_idle_beyond_range(void)
{
    const uint64_t behind[] = {1, HOUR, DAY};
    const uint64_t gq[] = {(UINT64_C(1) << 52) + 1, (UINT64_C(1) << 52) + DAY, UINT64_C(1) << 53,
                           (UINT64_C(1) << 55) + 3, UINT64_C(1) << 60};
    const uint64_t g1[] = {(UINT64_C(1) << 62) + 5, (UINT64_C(1) << 62) + (UINT64_C(1) << 61)};
    const uint64_t wa[] = {WIN_RANGE + 1, WIN_RANGE + DAY, UINT64_C(1) << 56,
                           (UINT64_C(1) << 58) + 7, UINT64_C(1) << 61};
    uint64_t t0 = 1000000 * NS_PER_S;

    run_range("idle gcra q=1024", t_limit(SLUICE_GCRA, 1024, 1023, 1000, 0),
              t_limit(SLUICE_GCRA, 1024, 1023, 1000, 0), t0, behind, 3, gq, 5);
    run_range("idle gcra 1 per 39 days", t_limit(SLUICE_GCRA, 1, GCRA_TAU_MAX, 0, 0),
              t_limit(SLUICE_GCRA, 1, GCRA_TAU_MAX, 0, 0), t0, behind, 3, g1, 2);
    run_range("idle gcra 10/s", t_limit(SLUICE_GCRA, 10, NS_PER_S, 0, 0),
              t_limit(SLUICE_GCRA, 10, NS_PER_S, 0, 0), t0, behind, 3, g1, 2);
    run_range("idle fixed 10/s", t_limit(SLUICE_FIXED_WINDOW, 10, NS_PER_S, 0, 0),
              t_limit(SLUICE_FIXED_WINDOW, 10, NS_PER_S, 0, 0), t0, behind, 3, wa, 5);
    run_range("idle fixed 5 per 30 days", t_limit(SLUICE_FIXED_WINDOW, 5, 30 * DAY, 0, 0),
              t_limit(SLUICE_FIXED_WINDOW, 5, 30 * DAY, 0, 0), t0, behind, 3, wa, 5);
    run_range("idle approx 10/s", t_limit(SLUICE_APPROX_SLIDING, 10, NS_PER_S, 0, 0),
              t_limit(SLUICE_APPROX_SLIDING, 10, NS_PER_S, 0, 0), t0, behind, 3, wa, 5);
    run_range("idle sliding 10 per min", t_limit(SLUICE_SLIDING_WINDOW, 10, 60 * NS_PER_S, 0, 0),
              t_limit(SLUICE_SLIDING_WINDOW, 10, 60 * NS_PER_S, 0, 0), t0, behind, 3, wa, 5);

    /* A long window beside GCRA: GCRA's state is over long before the
     * window's, and the key restarted at GCRA's bound, admitting a second
     * unit in a window of count 1. */
    {
        struct sluice_config cfg;
        sluice_t *l = NULL;
        uint64_t w0 = UINT64_C(1) << 53, w1 = w0 + (UINT64_C(1) << 52);
        sluice_config_init(&cfg);
        cfg.policy.nlimits = 2;
        cfg.policy.limits[0] = t_limit(SLUICE_FIXED_WINDOW, 1, UINT64_C(1) << 53, 0, 0);
        cfg.policy.limits[1] = t_limit(SLUICE_GCRA, 1, NS_PER_S, 0, 0);
        CHECK_EQ(sluice_create(&cfg, &l), 0);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, w0, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_peek_at(l, "k", 1, 1, w1, NULL), SLUICE_DENY);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, w1, NULL), SLUICE_DENY);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, w1 + 2 * NS_PER_S, NULL), SLUICE_DENY);
        sluice_destroy(l);
    }

    /* stacked (every limit beyond its range) and reaped; private and shared */
    const uint64_t idle[] = {UINT64_C(1) << 53, (UINT64_C(1) << 56) + 11};
    bool can_share = access("/dev/shm", W_OK) == 0;
    char path[128];
    for (int shared = 0; shared < 1 + can_share; shared++)
    for (int reap = 0; reap < 2; reap++)
        for (size_t i = 0; i < 2; i++) {
            struct sluice_config cfg;
            sluice_t *l = NULL;
            struct sluice_result res;
            sluice_config_init(&cfg);
            cfg.policy.nlimits = 2;
            cfg.policy.limits[0] = t_limit(SLUICE_GCRA, 1024, 1023, 4, 0);
            cfg.policy.limits[1] = t_limit(SLUICE_FIXED_WINDOW, 6, DAY, 0, 0);
            if (shared) {
                t_shm_path(path, sizeof(path), "idle");
                CHECK_EQ(sluice_open_shared(path, &cfg, SLUICE_SHARED_CREATE, &l), 0);
            } else
                CHECK_EQ(sluice_create(&cfg, &l), 0);
            if (l == NULL)
                return;
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 4, t0, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0, NULL), SLUICE_DENY);
            if (reap) {
                CHECK_EQ(sluice_reap(l, t0 + idle[i]), 1);
                CHECK_EQ(sluice_reap(l, t0 + idle[i]), 0);
            }
            CHECK_EQ(sluice_peek_at(l, "k", 1, 1, t0 + idle[i], &res), SLUICE_ALLOW);
            CHECK_EQ(res.remaining, 3); /* after the cost asked about */
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 4, t0 + idle[i], &res), SLUICE_ALLOW);
            CHECK_EQ(res.remaining, 0);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0 + idle[i], NULL), SLUICE_DENY);
            /* times behind that admission are decided at it */
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0 + idle[i] / 2, NULL), SLUICE_DENY);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0 + 1, NULL), SLUICE_DENY);
            sluice_destroy(l);
            if (shared)
                CHECK_EQ(sluice_unlink_shared(path), 0);
        }
}

/*
 * A short window read far beyond its range beside a long one that keeps
 * the key from restarting (an outside tester): its stored window index,
 * kept modulo its range, read as ahead of the call, which is refused as
 * if that window were full (fail closed, as the header allows).  The wait
 * told was to that window's end; from its start its real units count,
 * and there the request fits: admitted 1,500 ns before the wait told.
 * The wait is now to the start when the real units fit.
 */
static void behind_case(const char *what, struct sluice_limit shortw)
{
    struct sluice_config cfg;
    struct sluice_result r;
    const uint64_t t0 = (UINT64_C(1) << 54) - 1, t1 = t0 + UINT64_C(110384246925235093);
    sluice_t *l;

    sluice_config_init(&cfg);
    cfg.policy.nlimits = 2;
    cfg.policy.limits[0] = shortw;
    cfg.policy.limits[1] =
        t_limit(SLUICE_SLIDING_WINDOW, 15, UINT64_C(1) << 54, 0, UINT64_C(1) << 54);
    l = t_create(&cfg);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t1, &r), SLUICE_DENY);
    CHECK(r.retry_after_ns > 1 && r.retry_after_ns != UINT64_MAX);
    if (!t_wait_holds(l, "k", t1, r.retry_after_ns)) {
        fprintf(stderr, "%s: retry_after %llu not honoured to the nanosecond\n", what,
                (unsigned long long)r.retry_after_ns);
        t_failures++;
    }
    sluice_destroy(l);
}

static void test_wait_behind_stored_window(void)
{
    behind_case("approximate 2 per us", t_limit(SLUICE_APPROX_SLIDING, 2, 1000, 0, 0));
    behind_case("fixed 2 per us", t_limit(SLUICE_FIXED_WINDOW, 2, 1000, 0, 0));
}

/*
 * A sliding window's ring slot is written only when its sub-bucket had
 * units.  A key busy for more than half the index range (2^(ibits-1)
 * sub-buckets: 417 days of steady traffic, or one call with times passed
 * in) can leave a slot that old, which then reads as newer than the
 * sub-bucket archived into it by signed distance: the archive was skipped
 * and its units left the window (3 admitted where the limit is 2, an
 * outside tester).  Two sub-buckets: one unit in the even one, then odd
 * ones only, past half the range, then an even one and the next.
 */
static void test_busy_beyond_ring(bool shared)
{
    const uint64_t width = UINT64_C(1) << 40;
    uint64_t span = WIN_RANGE / width + 1, half = 1, j, e;
    struct sluice_config cfg;
    char path[256];
    unsigned admitted = 0;
    sluice_t *l;

    while (half <= span) /* algo_window.c: 2^(ibits-1) > the windows in range */
        half <<= 1;
    sluice_config_init(&cfg);
    cfg.policy.nlimits = 1;
    cfg.policy.limits[0] = t_limit(SLUICE_SLIDING_WINDOW, 2, 2 * width, 0, width);
    if (shared) {
        t_shm_path(path, sizeof(path), "ranges-ring");
        l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    } else
        l = t_create(&cfg);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 2 * width, NULL), SLUICE_ALLOW);
    for (j = 3; j < half + 4; j += 2) /* the even slot keeps sub-bucket 2 */
        if (sluice_acquire_at(l, "k", 1, 1, j * width, NULL) != SLUICE_ALLOW) {
            CHECK(!"an odd sub-bucket alone in its window denied");
            break;
        }
    e = j + 1; /* its window: e - 1 (empty) and e */
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, e * width, NULL), SLUICE_ALLOW);
    for (int i = 0; i < 3; i++) /* the window e, e + 1 holds e's unit: one more */
        admitted += sluice_acquire_at(l, "k", 1, 1, (e + 1) * width, NULL) == SLUICE_ALLOW;
    CHECK_EQ(admitted, 1);
    sluice_destroy(l);
    if (shared)
        CHECK_EQ(sluice_unlink_shared(path), 0);
}

int main(void)
{
    test_gcra();
    test_approx();
    test_fixed_sliding();
    test_log_top_of_time();
    test_waits_past_the_top();
    test_clock_wrap();
    test_idle_beyond_range();
    test_wait_behind_stored_window();
    test_busy_beyond_ring(false);
    test_busy_beyond_ring(true);
    return t_done("ranges");
}
