/* Multi-limit policies and multi-key requests: all or nothing, weights. */
#include "helpers.h"

/* 10/s peak plus 25/day: the daily quota denies without using up the peak. */
static void test_denied_by_daily(void)
{
    struct sluice_config cfg;
    struct sluice_result r;
    sluice_t *l;
    uint64_t day = 86400 * NS_PER_S, now = 3 * day, admitted = 0;

    sluice_config_init(&cfg);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, 10, NS_PER_S), 0);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 25, day), 0);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    for (int s = 0; s < 10; s++)
        for (int i = 0; i < 20; i++)
            admitted += sluice_acquire_at(l, "u", 1, 1, now + (uint64_t)s * NS_PER_S, &r) == 0;
    CHECK_EQ(admitted, 25);
    CHECK_EQ(r.limit_index, 1); /* the daily limit binds */
    CHECK_EQ(r.limit, 25);
    CHECK_EQ(r.period_ns, day);
    CHECK_EQ(r.retry_after_ns, day - 9 * NS_PER_S);
    /* the per-second limit was not charged by the daily denials: a fresh day
     * admits a full burst of 10 at once */
    for (int i = 0; i < 10; i++)
        CHECK_EQ(sluice_acquire_at(l, "u", 1, 1, 4 * day, &r), SLUICE_ALLOW);
    CHECK_EQ(r.limit_index, 0);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(sluice_acquire_at(l, "u", 1, 1, 4 * day, &r), SLUICE_DENY);
    CHECK_EQ(r.limit_index, 0);
    sluice_destroy(l);
}

/* 10/s and 120/min and 240/h, weights; the binding limit has the fewest remaining. */
static void test_stacked_weights(void)
{
    struct sluice_config cfg;
    struct sluice_result r;
    sluice_t *l;
    uint64_t now = 0, admitted = 0;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 10, NS_PER_S);
    sluice_policy_add(&cfg.policy, SLUICE_SLIDING_WINDOW, 120, 60 * NS_PER_S);
    sluice_policy_add(&cfg.policy, SLUICE_APPROX_SLIDING, 240, 3600 * NS_PER_S);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    CHECK_EQ(sluice_acquire_at(l, "w", 1, 4, now, &r), SLUICE_ALLOW);
    CHECK_EQ(r.limit_index, 0);
    CHECK_EQ(r.remaining, 6);
    CHECK_EQ(sluice_acquire_at(l, "w", 1, 7, now, &r), SLUICE_DENY);
    CHECK_EQ(r.limit_index, 0);
    CHECK_EQ(sluice_acquire_at(l, "w", 1, 11, now, &r), -E2BIG);
    for (now = 0; now < 3600 * NS_PER_S; now += NS_PER_S)
        while (sluice_acquire_at(l, "w", 1, 3, now, &r) == SLUICE_ALLOW)
            admitted += 3;
    CHECK_EQ(admitted + 4, 238); /* 240/h in steps of 3 after the first 4 */
    sluice_destroy(l);
}

/* Client IP in one limiter, user in another: both must allow. */
static void test_acquire_all(void)
{
    sluice_t *ip = t_limiter1(SLUICE_GCRA, 5, NS_PER_S, 0, 0);
    sluice_t *user = t_limiter1(SLUICE_FIXED_WINDOW, 3, NS_PER_S, 0, 0);
    struct sluice_key k[2] = {{ip, "10.0.0.1", 8}, {user, "alice", 5}};
    struct sluice_result r;

    for (int i = 0; i < 3; i++)
        CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.key_index, 1);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.key_index, 1);
    CHECK_EQ(r.limit, 3);
    /* the IP was not charged by the denial: 2 units left there */
    CHECK_EQ(sluice_acquire_at(ip, "10.0.0.1", 8, 2, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(ip, "10.0.0.1", 8, 1, 0, &r), SLUICE_DENY);
    /* another user on the exhausted IP: denied by the IP */
    k[1].key = "bob";
    k[1].len = 3;
    CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.key_index, 0);
    CHECK_EQ(sluice_acquire_at(user, "bob", 3, 3, 0, &r), SLUICE_ALLOW); /* bob untouched */
    /* cost above a key's capacity: -E2BIG, nothing charged */
    k[1].key = "carol";
    k[1].len = 5;
    CHECK_EQ(sluice_acquire_all(k, 2, 4, NS_PER_S * 10, &r), -E2BIG);
    CHECK_EQ(sluice_acquire_at(user, "carol", 5, 3, NS_PER_S * 10, &r), SLUICE_ALLOW);
    sluice_destroy(ip);
    sluice_destroy(user);
}

int main(void)
{
    test_denied_by_daily();
    test_stacked_weights();
    test_acquire_all();
    return t_done("multi");
}
