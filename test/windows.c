/* Fixed, sliding and approximate windows: exact semantics with explicit times. */
#include "helpers.h"

static uint64_t fill(sluice_t *l, const char *key, uint64_t now)
{
    uint64_t n = 0;

    while (sluice_acquire_at(l, key, strlen(key), 1, now, NULL) == SLUICE_ALLOW)
        n++;
    return n;
}

/* The documented 2x burst at a fixed-window boundary. */
static void test_fixed_boundary(void)
{
    sluice_t *l = t_limiter1(SLUICE_FIXED_WINDOW, 10, NS_PER_S, 0, 0);
    struct sluice_result r;

    CHECK_EQ(fill(l, "k", 10 * NS_PER_S - 1), 10);
    CHECK_EQ(fill(l, "k", 10 * NS_PER_S), 10); /* 20 units within 1 ns */
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 10 * NS_PER_S + 300, &r), SLUICE_DENY);
    CHECK_EQ(r.retry_after_ns, NS_PER_S - 300);
    CHECK_EQ(r.reset_after_ns, NS_PER_S - 300);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 4, 11 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 6);
    CHECK_EQ(r.reset_after_ns, NS_PER_S);
    sluice_destroy(l);
}

/* Sliding window sums exactly the sub-buckets (t - period, t] by index. */
static void test_sliding_sum(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_WINDOW, 10, 10 * NS_PER_S, 0, NS_PER_S);
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_at(l, "s", 1, 5, NS_PER_S / 2, NULL), SLUICE_ALLOW);        /* bucket 0 */
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 3, 3 * NS_PER_S + 200, NULL), SLUICE_ALLOW);  /* bucket 3 */
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 2, 7 * NS_PER_S, NULL), SLUICE_ALLOW);        /* bucket 7 */
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 1, 10 * NS_PER_S - 1, &r), SLUICE_DENY);      /* 0..9 */
    CHECK_EQ(r.retry_after_ns, 1);      /* bucket 0 leaves at 10 s */
    CHECK_EQ(r.reset_after_ns, 7 * NS_PER_S + 1); /* bucket 7 leaves at 17 s */
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 6, 10 * NS_PER_S, &r), SLUICE_DENY);         /* 5 free */
    CHECK_EQ(r.retry_after_ns, 3 * NS_PER_S);
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 5, 10 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 3, 13 * NS_PER_S, &r), SLUICE_ALLOW);        /* bucket 3 left */
    /* long idle: everything expired */
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 10, 1000 * NS_PER_S, &r), SLUICE_ALLOW);
    sluice_destroy(l);
}

/* Fine precision removes the 2x boundary burst. */
static void test_sliding_no_boundary_burst(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_WINDOW, 10, NS_PER_S, 0, NS_PER_S / 100);

    CHECK_EQ(fill(l, "k", 10 * NS_PER_S - 1), 10);
    CHECK_EQ(fill(l, "k", 10 * NS_PER_S), 0);
    CHECK_EQ(fill(l, "k", 11 * NS_PER_S - NS_PER_S / 100 - 1), 0);
    CHECK_EQ(fill(l, "k", 11 * NS_PER_S - NS_PER_S / 100), 10);
    sluice_destroy(l);
}

/* precision == period behaves exactly as the fixed window. */
static void test_sliding_equals_fixed(void)
{
    sluice_t *f = t_limiter1(SLUICE_FIXED_WINDOW, 7, 3 * NS_PER_S, 0, 0);
    sluice_t *s = t_limiter1(SLUICE_SLIDING_WINDOW, 7, 3 * NS_PER_S, 0, 3 * NS_PER_S);
    uint64_t rng = 42, now = 0;
    int diff = 0;

    for (int i = 0; i < 200000; i++) {
        char key[2] = {(char)('a' + t_rand(&rng) % 4), 0};
        uint64_t cost = 1 + t_rand(&rng) % 3;
        struct sluice_result a, b;
        now += t_rand(&rng) % (NS_PER_S / 2);
        int ra = sluice_acquire_at(f, key, 1, cost, now, &a);
        int rb = sluice_acquire_at(s, key, 1, cost, now, &b);
        diff += ra != rb || a.remaining != b.remaining || a.retry_after_ns != b.retry_after_ns ||
                a.reset_after_ns != b.reset_after_ns;
    }
    CHECK_EQ(diff, 0);
    sluice_destroy(f);
    sluice_destroy(s);
}

/* prev * (period - elapsed) / period + cur + cost <= count, exactly. */
static void test_approx_formula(void)
{
    sluice_t *l = t_limiter1(SLUICE_APPROX_SLIDING, 10, 10 * NS_PER_S, 0, 0);
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_at(l, "a", 1, 10, 5 * NS_PER_S, NULL), SLUICE_ALLOW);
    /* elapsed 2.5 s: 10 * 7.5/10 = 7.5, so 2 more fit, not 3 */
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 3, 12500000000u, &r), SLUICE_DENY);
    CHECK_EQ(r.remaining, 2);
    /* 3 fit once 10*(10-e)/10 <= 7, i.e. e >= 3 s */
    CHECK_EQ(r.retry_after_ns, NS_PER_S / 2);
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 3, 13 * NS_PER_S - 1, NULL), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 3, 13 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.reset_after_ns, 17 * NS_PER_S); /* cur leaves with window 3 */
    /* two windows later everything is gone */
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 10, 30 * NS_PER_S, NULL), SLUICE_ALLOW);
    sluice_destroy(l);
}

/* Steady stream at twice the rate: the estimate admits count per period,
 * and at most 10% more than count in any true sliding period. */
static void test_approx_error_bound(void)
{
    sluice_t *l = t_limiter1(SLUICE_APPROX_SLIDING, 100, NS_PER_S, 0, 0);
    enum { N = 200 * 200 };
    static uint64_t admitted_at[N];
    uint64_t n = 0, worst = 0;

    for (uint64_t i = 0; i < N; i++) {
        uint64_t now = i * (NS_PER_S / 200);
        if (sluice_acquire_at(l, "s", 1, 1, now, NULL) == SLUICE_ALLOW)
            admitted_at[n++] = now;
    }
    for (uint64_t i = 0, j = 0; i < n; i++) {
        while (admitted_at[j] + NS_PER_S <= admitted_at[i])
            j++;
        if (i - j + 1 > worst)
            worst = i - j + 1;
    }
    CHECK(n >= 196 * 100 && n <= 201 * 100); /* within 2% of the ideal */
    CHECK(worst <= 110);
    printf("approx steady stream: %llu admitted over 200 periods, worst period %llu (limit 100)\n",
           (unsigned long long)n, (unsigned long long)worst);
    sluice_destroy(l);
}

/* Windows never advance backwards: an old time is decided in the newest window. */
static void test_windows_time_backwards(void)
{
    enum sluice_algo algos[] = {SLUICE_FIXED_WINDOW, SLUICE_SLIDING_WINDOW, SLUICE_APPROX_SLIDING};

    for (unsigned a = 0; a < 3; a++) {
        sluice_t *l = t_limiter1(algos[a], 5, NS_PER_S, 0, NS_PER_S / 10);
        CHECK_EQ(fill(l, "k", 50 * NS_PER_S), 5);
        CHECK_EQ(fill(l, "k", 49 * NS_PER_S), 0);
        CHECK_EQ(fill(l, "k", 3 * NS_PER_S), 0);
        sluice_destroy(l);
    }
}

/*
 * The sliding window's ring at every magnitude of time.  Indexes are kept
 * modulo 2^ibits and ring slots are index mod nb, with nb (10 or 3 here)
 * not dividing 2^ibits: a key first used where the index is in the upper
 * half of that range must still archive its head (an empty slot reads as
 * index 0), and a policy change or override must put each sub-bucket back
 * in the slot its absolute index names.  Both once let a key admit far
 * past its count; times reach 3.4e18 ns.
 */
static void test_sliding_every_magnitude(void)
{
    const uint64_t precisions[] = {NS_PER_S / 10, NS_PER_S / 3};

    for (unsigned pi = 0; pi < 2; pi++) {
        uint64_t w = precisions[pi];
        for (int k = 20; k < 36; k++) {
            uint64_t t = ((UINT64_C(1) << k) + 5) * w;
            sluice_t *l = t_limiter1(SLUICE_SLIDING_WINDOW, 2, NS_PER_S, 0, w);
            struct sluice_policy p2 = {0}, p3 = {0};
            sluice_policy_add(&p2, SLUICE_SLIDING_WINDOW, 2, NS_PER_S);
            sluice_policy_add(&p3, SLUICE_SLIDING_WINDOW, 3, NS_PER_S);
            p2.limits[0].precision_ns = p3.limits[0].precision_ns = w;
            /* a new key: 1 now, 1 a sub-bucket later, then the window is full */
            CHECK_EQ(fill(l, "a", t), 2);
            CHECK_EQ(sluice_reset(l, "a", 1), 0);
            CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, t + w, NULL), SLUICE_ALLOW);
            CHECK_EQ(fill(l, "a", t + 2 * w), 1);
            /* spent across two sub-buckets, then the policy changes and back */
            CHECK_EQ(sluice_acquire_at(l, "b", 1, 1, t, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_acquire_at(l, "b", 1, 1, t + w, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_set_policy(l, &p3), 0);
            CHECK_EQ(sluice_set_policy(l, &p2), 0);
            CHECK_EQ(fill(l, "b", t + w), 0);
            /* and through an override set and cleared */
            CHECK_EQ(sluice_acquire_at(l, "c", 1, 1, t, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_acquire_at(l, "c", 1, 1, t + w, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_override_set(l, "c", 1, &p3), 0);
            CHECK_EQ(fill(l, "c", t + w), 1);
            CHECK_EQ(sluice_override_clear(l, "c", 1), 0);
            CHECK_EQ(fill(l, "c", t + w), 0);
            sluice_destroy(l);
        }
    }
}

int main(void)
{
    test_fixed_boundary();
    test_sliding_sum();
    test_sliding_no_boundary_burst();
    test_sliding_equals_fixed();
    test_approx_formula();
    test_approx_error_bound();
    test_windows_time_backwards();
    test_sliding_every_magnitude();
    return t_done("windows");
}
