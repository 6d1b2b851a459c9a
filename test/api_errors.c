/* Every error path of the API returns its errno and charges nothing. */
#include <limits.h>
#include <stdint.h>

#include "helpers.h"

static void test_policy_add(void)
{
    struct sluice_policy p = {0};

    CHECK_EQ(sluice_policy_add(NULL, SLUICE_GCRA, 1, 1), -EINVAL);
    CHECK_EQ(sluice_policy_add(&p, SLUICE_GCRA, 0, NS_PER_S), -EINVAL);
    CHECK_EQ(sluice_policy_add(&p, SLUICE_GCRA, 10, 0), -EINVAL);
    CHECK_EQ(sluice_policy_add(&p, (enum sluice_algo)99, 10, 1), -EINVAL);
    CHECK_EQ(sluice_policy_add(&p, SLUICE_SLIDING_LOG, 65537, NS_PER_S), -EINVAL);
    CHECK_EQ(sluice_policy_add(&p, SLUICE_SLIDING_LOG, 65536, NS_PER_S), 0);
    /* a 1-year GCRA tolerance of 1 per 100 years cannot be represented */
    CHECK_EQ(sluice_policy_add(&p, SLUICE_GCRA, 2, UINT64_MAX), -EINVAL);
    /* sliding window of more than 2^17 sub-buckets: 1 s buckets over 2 days */
    CHECK_EQ(sluice_policy_add(&p, SLUICE_SLIDING_WINDOW, 10, 2 * 86400 * NS_PER_S), -EINVAL);
    CHECK_EQ(sluice_policy_add(&p, SLUICE_APPROX_SLIDING, UINT64_C(1) << 28, NS_PER_S), -EINVAL);
    CHECK_EQ(p.nlimits, 1);
    for (unsigned i = 1; i < SLUICE_MAX_LIMITS; i++)
        CHECK_EQ(sluice_policy_add(&p, SLUICE_FIXED_WINDOW, 10, NS_PER_S), 0);
    CHECK_EQ(sluice_policy_add(&p, SLUICE_FIXED_WINDOW, 10, NS_PER_S), -ENOSPC);
    CHECK_EQ(p.nlimits, SLUICE_MAX_LIMITS);
}

static void test_create(void)
{
    struct sluice_config cfg;
    sluice_t *l = NULL;

    CHECK_EQ(sluice_create(NULL, &l), -EINVAL);
    sluice_config_init(&cfg);
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL); /* empty policy */
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, 10, NS_PER_S), 0);
    CHECK_EQ(sluice_create(&cfg, NULL), -EINVAL);
    cfg.max_keys = 0;
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL);
    cfg.max_keys = 10;
    cfg.clock = SLUICE_CLOCK_CUSTOM;
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL); /* no clock_fn */
    cfg.clock = SLUICE_CLOCK_MONOTONIC;
    cfg.name = "bad\"name";
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL);
    cfg.name = "api";
    cfg.policy.limits[0].count = 0;
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL);
    cfg.policy.limits[0].count = 10;
    cfg.policy.nlimits = SLUICE_MAX_LIMITS + 1;
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL);
    cfg.policy.nlimits = 1;
    cfg.shards = 4097; /* refused, not capped (sluice.h) */
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL);
    cfg.shards = 4096;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    sluice_destroy(l);
    cfg.shards = 3; /* rounded up to 4 */
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    sluice_destroy(l);
    sluice_destroy(NULL);
}

static void test_calls(void)
{
    sluice_t *l = t_limiter1(SLUICE_FIXED_WINDOW, 5, NS_PER_S, 0, 0);
    struct sluice_result r;
    struct sluice_stats st;
    char big[300];
    struct sluice_key k[17];

    memset(big, 'k', sizeof(big));
    CHECK_EQ(sluice_acquire_at(NULL, "a", 1, 1, 0, &r), -EINVAL);
    CHECK_EQ(sluice_acquire_at(l, NULL, 1, 1, 0, &r), -EINVAL);
    CHECK_EQ(sluice_acquire_at(l, big, 257, 1, 0, &r), -ENAMETOOLONG);
    CHECK_EQ(sluice_acquire_at(l, big, 256, 1, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 6, 0, &r), -E2BIG);
    CHECK_EQ(sluice_acquire(l, "a", 1, UINT64_MAX, NULL), -E2BIG);
    CHECK_EQ(sluice_peek_at(l, "a", 1, 6, 0, &r), -E2BIG);
    CHECK_EQ(sluice_acquire(NULL, "a", 1, 1, NULL), -EINVAL);
    /* nothing was charged or created by the errors */
    sluice_stats(l, &st);
    CHECK_EQ(st.keys, 1);
    CHECK_EQ(st.allowed, 1);
    CHECK_EQ(st.denied, 0);
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 5, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 0);
    /* a NULL key of length 0 is the empty key, which is valid */
    CHECK_EQ(sluice_acquire_at(l, NULL, 0, 5, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "", 0, 1, 0, &r), SLUICE_DENY);
    /* cost 0: allowed, charges nothing, reports the state */
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 0, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.retry_after_ns, 0);
    CHECK_EQ(sluice_acquire_at(l, "zero", 4, 0, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 5);
    sluice_stats(l, &st);
    CHECK_EQ(st.keys, 3); /* cost 0 created nothing */
    CHECK_EQ(st.allowed, 3);
    CHECK_EQ(st.denied, 1);

    CHECK_EQ(sluice_acquire_all(NULL, 1, 1, 0, &r), -EINVAL);
    k[0] = (struct sluice_key){l, "a", 1};
    CHECK_EQ(sluice_acquire_all(k, 0, 1, 0, &r), -EINVAL);
    for (int i = 0; i < 17; i++)
        k[i] = (struct sluice_key){l, "b", 1};
    CHECK_EQ(sluice_acquire_all(k, 17, 1, 0, &r), -EINVAL);
    k[1].limiter = NULL;
    CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), -EINVAL);

    CHECK_EQ(sluice_reset(l, "nope", 4), -ENOENT);
    CHECK_EQ(sluice_reset(NULL, "nope", 4), -EINVAL);
    CHECK_EQ(sluice_override_clear(l, "a", 1), -ENOENT);
    CHECK_EQ(sluice_override_set(l, "a", 1, NULL), -EINVAL);
    CHECK_EQ(sluice_set_policy(l, NULL), -EINVAL);
    CHECK_EQ(sluice_set_policy(NULL, NULL), -EINVAL);
    CHECK_EQ(sluice_reap(NULL, 0), 0);
    CHECK_EQ(sluice_now(NULL), 0);
    sluice_stats(NULL, &st);
    CHECK_EQ(st.keys, 0);
    CHECK(sluice_now(l) > 0);
    sluice_destroy(l);
}

static void test_strings(void)
{
    CHECK(strcmp(sluice_strerror(SLUICE_ALLOW), "allowed") == 0);
    CHECK(strstr(sluice_strerror(SLUICE_DENY), "denied") != NULL);
    CHECK(strstr(sluice_strerror(-ENAMETOOLONG), "max_key_len") != NULL);
    CHECK(strstr(sluice_strerror(-E2BIG), "cost") != NULL);
    CHECK(sluice_strerror(-EPERM) != NULL);
    /* no errno is INT_MIN, and its negation is undefined (UBSan) */
    CHECK(strcmp(sluice_strerror(INT_MIN), "unknown result") == 0);
    CHECK(strcmp(sluice_strerror(7), "unknown result") == 0);
    CHECK(sluice_strerror(12345) != NULL);
    CHECK(strcmp(sluice_version(), "2.1.0") == 0);
    CHECK_EQ(SLUICE_VERSION_MAJOR, 2);
}

int main(void)
{
    test_policy_add();
    test_create();
    test_calls();
    test_strings();
    return t_done("api_errors");
}
