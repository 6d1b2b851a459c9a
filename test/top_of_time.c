/*
 * The top of the clock, 2^64 - 3 to 2^64 - 1 ns, where a caller's own times
 * may go (no clock sluice reads comes near): walks that end there, and a
 * key's latest time, which is kept as 1 + the time, so that the three
 * latest times read back as 2^64 - 3 (src/entry.h, sl_last_encode).  Each
 * case was an outside program's or the fuzzer's, and hung or admitted more
 * than the count before its fix.
 */
#include <signal.h>
#include <unistd.h>

#include "helpers.h"

/*
 * The finest sub-bucket at the top of time (the fuzzer's find, a hang
 * seen once in CI): with 1 ns sub-buckets a call stamped 2^64 - 1 is in
 * sub-bucket 2^64 - 1, and the sliding window's walks up to it
 * (`j <= eff`) never ended, in a decision, its report and a policy carry.
 * Every algorithm at its finest width: each call returns (SIGALRM says
 * which did not), and no instant admits more than the limit's count.
 */
static const char *volatile top_now = "";

static void top_hung(int sig)
{
    (void)sig;
    fprintf(stderr, "hung: %s\n", top_now);
    _exit(1);
}

static void finest_case(const char *what, struct sluice_limit d, struct sluice_limit after)
{
    const uint64_t m = UINT64_MAX;
    sluice_t *l = t_limiter1(d.algo, d.count, d.period_ns, d.burst, d.precision_ns);
    struct sluice_policy p = {.nlimits = 1, .limits = {after}};
    struct sluice_result r;
    unsigned admitted = 0;
    /* what one instant admits at most: GCRA's burst, else the count */
    uint64_t cap = d.algo == SLUICE_GCRA && d.burst ? d.burst : d.count;
    uint64_t cap_after = after.algo == SLUICE_GCRA && after.burst ? after.burst : after.count;

    top_now = what;
    alarm(20);
    for (uint64_t k = 0; k < cap + 2; k++)
        admitted += sluice_acquire_at(l, "k", 1, 1, m, &r) == SLUICE_ALLOW;
    CHECK(admitted <= cap);
    CHECK(admitted >= 1); /* a fresh key admits at any time */
    CHECK_EQ(sluice_peek_at(l, "k", 1, 1, m, &r), SLUICE_DENY);
    CHECK_EQ(sluice_peek_at(l, "fresh", 5, 1, m, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k2", 2, 1, m - 1, &r), SLUICE_ALLOW);
    (void)sluice_acquire_at(l, "k2", 2, 1, m, &r);
    /* carried to a policy of another width, then decided there */
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    admitted = 0;
    for (uint64_t k = 0; k < cap_after + 2; k++)
        admitted += sluice_acquire_at(l, "k", 1, 1, m, &r) == SLUICE_ALLOW;
    CHECK(admitted <= cap_after);
    (void)sluice_acquire_at(l, "k2", 2, 1, m, &r);
    alarm(0);
    sluice_destroy(l);
}

static void test_finest_width_at_the_top(void)
{
    signal(SIGALRM, top_hung);
    finest_case("sliding, period 1 ns", t_limit(SLUICE_SLIDING_WINDOW, 3, 1, 0, 0),
                t_limit(SLUICE_SLIDING_WINDOW, 4, 10, 0, 1));
    finest_case("sliding, 1 ns precision", t_limit(SLUICE_SLIDING_WINDOW, 3, 10, 0, 1),
                t_limit(SLUICE_SLIDING_WINDOW, 3, 10, 0, 2));
    finest_case("sliding, 2^17 sub-buckets of 1 ns",
                t_limit(SLUICE_SLIDING_WINDOW, 3, UINT64_C(1) << 17, 0, 1),
                t_limit(SLUICE_SLIDING_WINDOW, 5, 1, 0, 0));
    finest_case("fixed, period 1 ns", t_limit(SLUICE_FIXED_WINDOW, 3, 1, 0, 0),
                t_limit(SLUICE_FIXED_WINDOW, 2, 3, 0, 0));
    finest_case("approximate, period 1 ns", t_limit(SLUICE_APPROX_SLIDING, 3, 1, 0, 0),
                t_limit(SLUICE_APPROX_SLIDING, 2, 2, 0, 0));
    finest_case("log, period 1 ns", t_limit(SLUICE_SLIDING_LOG, 3, 1, 0, 0),
                t_limit(SLUICE_SLIDING_LOG, 2, 5, 0, 0));
    finest_case("gcra, 1 per ns", t_limit(SLUICE_GCRA, 1, 1, 3, 0),
                t_limit(SLUICE_GCRA, 2, 1, 0, 0));
    signal(SIGALRM, SIG_DFL);
}

/*
 * A sliding window's precision changed at the top of time (an outside
 * tester: 5 + 5 admitted of 5 at 2^64 - 1).  A key's latest admission is
 * kept as 1 + its time, and the three latest times all read back as
 * 2^64 - 3 (sl_last_encode); the carry to a coarser width placed units
 * no later than that, so units admitted at 2^64 - 1 landed a sub-bucket
 * early and left a window of one sub-bucket.  By set_policy and by an
 * override, at each of the three latest times.
 */
static void precision_case(uint64_t period, uint64_t prec, uint64_t prec_to, uint64_t t,
                           bool override)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_WINDOW, 5, period, 0, prec);
    struct sluice_policy p = {.nlimits = 1,
                              .limits = {t_limit(SLUICE_SLIDING_WINDOW, 5, period, 0, prec_to)}};
    unsigned before = 0, after = 0;

    for (int k = 0; k < 8; k++)
        before += sluice_acquire_at(l, "k", 1, 1, t, NULL) == SLUICE_ALLOW;
    CHECK_EQ(override ? sluice_override_set(l, "k", 1, &p) : sluice_set_policy(l, &p), 0);
    for (int k = 0; k < 8; k++)
        after += sluice_acquire_at(l, "k", 1, 1, t, NULL) == SLUICE_ALLOW;
    CHECK_U64(before, 5);
    CHECK_U64(after, 0);
    if (after != 0)
        fprintf(stderr, "precision %llu -> %llu of %llu ns at 2^64 - %llu%s: %u + %u of 5\n",
                (unsigned long long)prec, (unsigned long long)prec_to,
                (unsigned long long)period, (unsigned long long)(UINT64_MAX - t + 1),
                override ? " (override)" : "", before, after);
    sluice_destroy(l);
}

static void test_precision_at_the_top(void)
{
    static const uint64_t c[][3] = {{7, 3, 7}, {3, 2, 3}, {5, 2, 5}, {5, 4, 5}, {17, 16, 17},
                                    {17, 2, 17}, {7, 1, 7}, {7, 7, 3}};

    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
        for (uint64_t back = 0; back < 3; back++)
            for (int ov = 0; ov < 2; ov++)
                precision_case(c[i][0], c[i][1], c[i][2], UINT64_MAX - back, ov);
}

/*
 * A reap at the last 2 ns (a reviewer): the floor it leaves, under which
 * new keys are decided no earlier, read back as 2^64 - 3, so a key reaped
 * at 2^64 - 1 and made again by a call at 2^64 - 3 was decided there, in
 * the window it had already spent, and the call at 2^64 - 1 then found
 * its own window fresh: 3 admitted where 2 may.  Private and shared.
 */
static void test_reap_at_the_top(void)
{
    static const struct sluice_limit c[] = {
        {.algo = SLUICE_FIXED_WINDOW, .count = 1, .period_ns = 2},
        {.algo = SLUICE_SLIDING_LOG, .count = 1, .period_ns = 2},
        {.algo = SLUICE_SLIDING_WINDOW, .count = 1, .period_ns = 2, .precision_ns = 1},
        {.algo = SLUICE_GCRA, .count = 1, .period_ns = 2},
    };
    const uint64_t m = UINT64_MAX;
    bool can_share = access("/dev/shm", W_OK) == 0;
    char path[128];

    for (int shared = 0; shared < 1 + can_share; shared++)
        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
            for (uint64_t reap_back = 0; reap_back < 2; reap_back++) {
                struct sluice_config cfg;
                sluice_t *l;
                unsigned admitted = 0;

                sluice_config_init(&cfg);
                cfg.policy.nlimits = 1;
                cfg.policy.limits[0] = c[i];
                if (shared) {
                    t_shm_path(path, sizeof(path), "top-reap");
                    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
                } else
                    l = t_create(&cfg);
                admitted += sluice_acquire_at(l, "k", 1, 1, m - 2, NULL) == SLUICE_ALLOW;
                (void)sluice_reap(l, m - reap_back);
                admitted += sluice_acquire_at(l, "k", 1, 1, m - 2, NULL) == SLUICE_ALLOW;
                admitted += sluice_acquire_at(l, "k", 1, 1, m, NULL) == SLUICE_ALLOW;
                CHECK(admitted <= 2);
                if (admitted > 2)
                    fprintf(stderr, "%s algo %d, reaped at 2^64 - %llu: %u admitted of 2\n",
                            shared ? "shared" : "private", (int)c[i].algo,
                            (unsigned long long)reap_back + 1, admitted);
                sluice_destroy(l);
                if (shared)
                    CHECK_EQ(sluice_unlink_shared(path), 0);
            }
}

/*
 * Waits across the clock's wrap (an outside tester's find).  A policy with
 * a windowed limit keeps a key from before the wrap pinned at its latest
 * admission until the key is idle beyond its range.  A GCRA wait beside a
 * window that ended past 2^64 - 1 was told as GCRA's own 1 s, and the call
 * at its end was refused, as were those days after; a window's key called
 * after the wrap was told a reset it never had.  A wait told must hold:
 * the request stamped at its end is admitted, one stamped a nanosecond
 * earlier is not.
 */
static void wait_holds(const char *what, sluice_t *l, const char *key, uint64_t t, uint64_t wait)
{
    CHECK(wait != 0 && wait != UINT64_MAX);
    if (wait != 0 && wait != UINT64_MAX && !t_wait_holds(l, key, t, wait)) {
        fprintf(stderr, "%s: a wait of %llu not honoured to the nanosecond\n", what,
                (unsigned long long)wait);
        t_failures++;
    }
}

static sluice_t *limiter2(struct sluice_limit a, struct sluice_limit b)
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    cfg.policy.nlimits = 2;
    cfg.policy.limits[0] = a;
    cfg.policy.limits[1] = b;
    return t_create(&cfg);
}

static void test_waits_across_the_wrap(void)
{
    const uint64_t t0 = UINT64_MAX - NS_PER_S / 2, after = 5 * NS_PER_S;
    struct sluice_result r;
    uint64_t reset;
    sluice_t *l;

    /* a GCRA wait of 1 s across the wrap, beside a window */
    l = limiter2(t_limit(SLUICE_GCRA, 1, NS_PER_S, 0, 0), t_limit(SLUICE_FIXED_WINDOW, 10, 1000, 0, 0));
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0 + 1, &r), SLUICE_DENY);
    CHECK(r.retry_after_ns > UINT64_MAX - (t0 + 1)); /* it ends past the wrap */
    wait_holds("gcra beside a window, across the wrap", l, "k", t0 + 1, r.retry_after_ns);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0 + 1 + r.retry_after_ns, NULL), SLUICE_ALLOW);
    sluice_destroy(l);

    /* a window's key full before the wrap, called after it */
    l = t_limiter1(SLUICE_FIXED_WINDOW, 10, 3 * NS_PER_S, 0, 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, after, &r), SLUICE_DENY);
    CHECK_EQ(r.remaining, 0);
    wait_holds("a full window after the wrap", l, "k", after, r.retry_after_ns);
    reset = r.reset_after_ns;
    CHECK(reset != 0 && reset != UINT64_MAX);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 1, after + reset - 1, &r), SLUICE_DENY);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 1, after + reset, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 9); /* all 10 back, less this request's 1 */
    sluice_destroy(l);

    /* beside a sliding log, which never reads a key as idle: never */
    l = limiter2(t_limit(SLUICE_GCRA, 1, NS_PER_S, 0, 0), t_limit(SLUICE_SLIDING_LOG, 10, 1000, 0, 0));
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0 + 1, &r), SLUICE_DENY);
    CHECK_U64(r.retry_after_ns, UINT64_MAX);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 1, after, &r), SLUICE_DENY);
    CHECK_U64(r.retry_after_ns, UINT64_MAX);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 1, UINT64_C(1) << 62, NULL), SLUICE_DENY);
    sluice_destroy(l);

    /* a reviewer's: a stale call just before the wrap on a key already
     * past it waits as told, no longer (the key is not pinned) */
    l = t_limiter1(SLUICE_FIXED_WINDOW, 1, 1000, 0, 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 5, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, UINT64_MAX - 9, &r), SLUICE_DENY);
    CHECK_U64(r.retry_after_ns, 1010);
    wait_holds("a stale call before the wrap", l, "k", UINT64_MAX - 9, r.retry_after_ns);
    sluice_destroy(l);

    /* and a key made at a reap's floor before the wrap, called when that
     * floor is beyond the key's range: the next call finds it fresh */
    l = t_limiter1(SLUICE_FIXED_WINDOW, 1, 1000, 0, 0);
    CHECK_EQ(sluice_acquire_at(l, "x", 1, 1, UINT64_MAX - 5099, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_reap(l, UINT64_MAX - 99), 1);
    /* the floor's idle range (2 periods + 2^41 + 1), and 10 ns */
    CHECK_EQ(sluice_acquire_at(l, "n", 1, 1, UINT64_MAX - 99 + 2011 + (UINT64_C(1) << 41), &r),
             SLUICE_ALLOW);
    CHECK_U64(r.reset_after_ns, 0);
    /* while the floor is in range, the key stays pinned there until then */
    CHECK_EQ(sluice_acquire_at(l, "m", 1, 1, after, &r), SLUICE_ALLOW);
    wait_holds("a key made at a floor before the wrap", l, "m", after, r.reset_after_ns);
    sluice_destroy(l);
}

/* A peek says what the acquire will: the reset after an admission whose
 * window ends past the wrap counts from the admission's own time, which
 * a peek has not committed (a reset 57 ns apart, the tester's fuzzer). */
static void test_peek_across_the_wrap(void)
{
    const uint64_t t0 = UINT64_MAX - NS_PER_S / 2, t1 = t0 + 1000; /* the last window */
    sluice_t *l = t_limiter1(SLUICE_FIXED_WINDOW, 10, 3 * NS_PER_S, 0, 0);
    struct sluice_result p, a, q;

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 1, t1, &p), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t1, &a), SLUICE_ALLOW);
    CHECK_U64(p.reset_after_ns, a.reset_after_ns);
    CHECK_EQ(p.remaining, a.remaining);
    CHECK(a.reset_after_ns > UINT64_MAX - t1); /* past the wrap */
    CHECK_EQ(sluice_peek_at(l, "k", 1, 0, t1 + a.reset_after_ns - 1, &q), SLUICE_ALLOW);
    CHECK(q.remaining < 10);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 0, t1 + a.reset_after_ns, &q), SLUICE_ALLOW);
    CHECK_EQ(q.remaining, 10);
    sluice_destroy(l);
}

/* acquire_all: one key admits now, in a new window, but is kept from
 * before the wrap, where its window is spent; the other's wait crosses
 * the wrap.  The wait told covers the first key's pinned time (a
 * reviewer: refused at the end of the wait told). */
static void test_acquire_all_across_the_wrap(void)
{
    const uint64_t m = UINT64_MAX, big = UINT64_C(1) << 41;
    struct sluice_limit wins[2] = {t_limit(SLUICE_FIXED_WINDOW, 1, 1000, 0, 0),
                                   t_limit(SLUICE_GCRA, 1, NS_PER_S, 0, 0)};
    const uint64_t now[2] = {m - 500, m - NS_PER_S / 2};

    for (int c = 0; c < 2; c++) {
        sluice_t *a = t_limiter1(SLUICE_FIXED_WINDOW, 1, big, 0, 0);
        sluice_t *b = t_limiter1(wins[c].algo, wins[c].count, wins[c].period_ns, 0, 0);
        struct sluice_key k[2] = {{a, "a", 1}, {b, "b", 1}};
        struct sluice_result r;
        uint64_t w;

        CHECK_EQ(sluice_acquire_at(a, "a", 1, 1, m - big - 10, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_at(b, "b", 1, 1, now[c] - 100, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_all(k, 2, 1, now[c], &r), SLUICE_DENY);
        w = r.retry_after_ns;
        CHECK(w > 1 && w != UINT64_MAX);
        if (w > 1 && w != UINT64_MAX) {
            CHECK_EQ(sluice_peek_at(a, "a", 1, 1, now[c] + w - 1, NULL) == SLUICE_DENY ||
                         sluice_peek_at(b, "b", 1, 1, now[c] + w - 1, NULL) == SLUICE_DENY,
                     1);
            CHECK_EQ(sluice_acquire_all(k, 2, 1, now[c] + w, NULL), SLUICE_ALLOW);
        }
        sluice_destroy(a);
        sluice_destroy(b);
    }
}

int main(void)
{
    test_finest_width_at_the_top();
    test_precision_at_the_top();
    test_reap_at_the_top();
    test_waits_across_the_wrap();
    test_acquire_all_across_the_wrap();
    test_peek_across_the_wrap();
    return t_done("top_of_time");
}
