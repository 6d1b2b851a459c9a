/* Sliding log: exact per-unit timestamps in (now - period, now]. */
#include "helpers.h"

static void test_exact(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 3, 10 * NS_PER_S, 0, 0);
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 1 * NS_PER_S, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 2 * NS_PER_S, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 3 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.reset_after_ns, 10 * NS_PER_S);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 11 * NS_PER_S - 1, &r), SLUICE_DENY);
    CHECK_EQ(r.retry_after_ns, 1);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, 11 * NS_PER_S, &r), SLUICE_DENY);
    CHECK_EQ(r.retry_after_ns, NS_PER_S);
    CHECK_EQ(r.remaining, 1);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 11 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, 13 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 23 * NS_PER_S - 1, &r), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 23 * NS_PER_S, &r), SLUICE_ALLOW);
    sluice_destroy(l);
}

/* No boundary burst: never more than count in any period-long interval. */
static void test_no_burst(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 100, NS_PER_S, 0, 0);
    uint64_t rng = 7, now = 0, times[20000], n = 0, worst = 0;

    for (int i = 0; i < 20000; i++) {
        now += t_rand(&rng) % (NS_PER_S / 50);
        if (sluice_acquire_at(l, "k", 1, 1, now, NULL) == SLUICE_ALLOW)
            times[n++] = now;
    }
    for (uint64_t i = 0, j = 0; i < n; i++) {
        while (times[j] + NS_PER_S <= times[i])
            j++;
        worst = i - j + 1 > worst ? i - j + 1 : worst;
    }
    CHECK_EQ(worst, 100);
    sluice_destroy(l);
}

static void test_big_count(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 65536, NS_PER_S, 0, 0);
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_at(l, "b", 1, 65536, 5, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "b", 1, 1, NS_PER_S + 4, &r), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "b", 1, 65536, NS_PER_S + 5, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "b", 1, 65537, NS_PER_S + 5, &r), -E2BIG);
    sluice_destroy(l);
}

int main(void)
{
    test_exact();
    test_no_burst();
    test_big_count();
    return t_done("sliding_log");
}
