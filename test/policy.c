/* Run-time policy changes, per-key overrides and resets. */
#include "helpers.h"

static struct sluice_policy one(enum sluice_algo a, uint64_t count, uint64_t period)
{
    struct sluice_policy p = {0};
    sluice_policy_add(&p, a, count, period);
    return p;
}

/* Raising 10/s to 20/s keeps the TAT; changing the algorithm starts fresh. */
static void test_set_policy(void)
{
    sluice_t *l = t_limiter1(SLUICE_GCRA, 10, NS_PER_S, 0, 0);
    struct sluice_policy p = one(SLUICE_GCRA, 20, NS_PER_S);
    struct sluice_result r;
    int n = 0;

    for (int i = 0; i < 10; i++)
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    /* TAT = 1 s kept; burst 20 at T = 50 ms: 20 - 1 s / 50 ms = 0 left now */
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.limit, 20);
    CHECK_EQ(r.retry_after_ns, NS_PER_S / 20);
    while (sluice_acquire_at(l, "k", 1, 1, NS_PER_S / 2, NULL) == SLUICE_ALLOW)
        n++;
    CHECK_EQ(n, 10);
    /* a new key gets the new policy at once */
    n = 0;
    while (sluice_acquire_at(l, "new", 3, 1, 0, NULL) == SLUICE_ALLOW)
        n++;
    CHECK_EQ(n, 20);
    /* another algorithm: fresh state */
    p = one(SLUICE_FIXED_WINDOW, 5, NS_PER_S);
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 5, NS_PER_S / 2, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 6, NS_PER_S / 2, &r), -E2BIG);
    /* invalid policies are refused and change nothing */
    p = one(SLUICE_FIXED_WINDOW, 5, NS_PER_S);
    p.limits[0].count = 0;
    CHECK_EQ(sluice_set_policy(l, &p), -EINVAL);
    p.nlimits = 0;
    CHECK_EQ(sluice_set_policy(l, &p), -EINVAL);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, NS_PER_S / 2, &r), SLUICE_DENY);
    CHECK_EQ(r.limit, 5);
    sluice_destroy(l);
}

/* A big customer gets 100/s while everyone else keeps 2/s. */
static void test_override(void)
{
    sluice_t *l = t_limiter1(SLUICE_GCRA, 2, NS_PER_S, 0, 0);
    struct sluice_policy big = one(SLUICE_GCRA, 100, NS_PER_S);
    struct sluice_result r;
    struct sluice_stats st;
    int n = 0;

    CHECK_EQ(sluice_acquire_at(l, "acme", 4, 2, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_override_set(l, "acme", 4, &big), 0);
    while (sluice_acquire_at(l, "acme", 4, 1, 0, &r) == SLUICE_ALLOW)
        n++;
    /* TAT kept: 2 units at 2/s put it 1 s ahead, a full 100/s burst */
    CHECK_EQ(n, 0);
    while (sluice_acquire_at(l, "acme", 4, 1, NS_PER_S / 2, &r) == SLUICE_ALLOW)
        n++;
    CHECK_EQ(n, 50);
    CHECK(r.flags & SLUICE_F_OVERRIDE);
    CHECK_EQ(r.limit, 100);
    CHECK_EQ(sluice_acquire_at(l, "other", 5, 3, 0, &r), -E2BIG);
    CHECK_EQ(sluice_acquire_at(l, "other", 5, 1, 0, &r), SLUICE_ALLOW);
    CHECK(!(r.flags & SLUICE_F_OVERRIDE));
    /* set_policy does not touch overridden keys */
    struct sluice_policy p = one(SLUICE_GCRA, 1, NS_PER_S);
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    CHECK_EQ(sluice_acquire_at(l, "acme", 4, 50, 10 * NS_PER_S, &r), SLUICE_ALLOW);
    /* override on a key that does not exist yet creates it; never reaped */
    CHECK_EQ(sluice_override_set(l, "vip", 3, &big), 0);
    CHECK_EQ(sluice_reap(l, 1000 * NS_PER_S), 1); /* "other" only */
    sluice_stats(l, &st);
    CHECK_EQ(st.keys, 2);
    CHECK_EQ(sluice_acquire_at(l, "vip", 3, 100, 1000 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK(r.flags & SLUICE_F_OVERRIDE);
    /* clearing returns to the default (1/s) */
    CHECK_EQ(sluice_override_clear(l, "vip", 3), 0);
    CHECK_EQ(sluice_override_clear(l, "vip", 3), -ENOENT);
    CHECK_EQ(sluice_acquire_at(l, "vip", 3, 2, 2000 * NS_PER_S, &r), -E2BIG);
    CHECK_EQ(sluice_acquire_at(l, "vip", 3, 1, 2000 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK(!(r.flags & SLUICE_F_OVERRIDE));
    CHECK_EQ(sluice_reap(l, 3000 * NS_PER_S), 1); /* vip reapable again, acme not */
    /* a bad override policy is refused */
    big.limits[0].period_ns = 0;
    CHECK_EQ(sluice_override_set(l, "acme", 4, &big), -EINVAL);
    sluice_destroy(l);
}

/* override_set past max_keys when nothing is idle: -ENOSPC. */
static void test_override_full(void)
{
    struct sluice_config cfg;
    struct sluice_policy p = one(SLUICE_FIXED_WINDOW, 9, NS_PER_S);
    sluice_t *l;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 3, NS_PER_S);
    cfg.max_keys = 2;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, sluice_now(l), NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "b", 1, 1, sluice_now(l), NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_override_set(l, "c", 1, &p), -ENOSPC);
    CHECK_EQ(sluice_override_set(l, "a", 1, &p), 0); /* existing key: fine */
    sluice_destroy(l);
}

/*
 * The same where the decisions pass their own clock, far behind the
 * limiter's: the override's room was made by reaping at the limiter's
 * clock, which took a key spent at the caller's time for idle; made again,
 * it admitted its 8 a second time in one window (16 of 8).
 */
static void test_override_full_caller_clock(void)
{
    struct sluice_config cfg;
    struct sluice_policy p = one(SLUICE_FIXED_WINDOW, 9, NS_PER_S);
    uint64_t t = 5 * NS_PER_S;
    unsigned admitted = 0;
    sluice_t *l;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 8, NS_PER_S);
    cfg.max_keys = 2;
    cfg.shards = 1;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    for (int i = 0; i < 10; i++)
        admitted += sluice_acquire_at(l, "k0", 2, 1, t, NULL) == SLUICE_ALLOW;
    CHECK_EQ(sluice_acquire_at(l, "k1", 2, 1, t, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_override_set(l, "k2", 2, &p), -ENOSPC);
    for (int i = 0; i < 10; i++)
        admitted += sluice_acquire_at(l, "k0", 2, 1, t, NULL) == SLUICE_ALLOW;
    CHECK_EQ(admitted, 8);
    /* reaped by the decisions' clock, room is made */
    CHECK_EQ(sluice_reap(l, t + 2 * NS_PER_S), 2);
    CHECK_EQ(sluice_override_set(l, "k2", 2, &p), 0);
    sluice_destroy(l);
}

static void test_reset(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 3, NS_PER_S, 0, 0);
    struct sluice_policy big = one(SLUICE_SLIDING_LOG, 5, NS_PER_S);

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 0, NULL), SLUICE_DENY);
    CHECK_EQ(sluice_reset(l, "k", 1), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_reset(l, "missing", 7), -ENOENT);
    /* a reset keeps the override */
    CHECK_EQ(sluice_override_set(l, "k", 1, &big), 0);
    CHECK_EQ(sluice_reset(l, "k", 1), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 5, 0, NULL), SLUICE_ALLOW);
    sluice_destroy(l);
}

/* Cost 0 asks for nothing: ALLOW, even on a key more spent than a lowered
 * count, for acquire, peek and acquire_all alike, with retry_after 0. */
static void test_cost_zero(void)
{
    for (int a = SLUICE_GCRA; a <= SLUICE_APPROX_SLIDING; a++) {
        sluice_t *l = t_limiter1((enum sluice_algo)a, 5, NS_PER_S, 0, 0);
        struct sluice_policy low = one((enum sluice_algo)a, 2, NS_PER_S);
        struct sluice_key k = {.limiter = l, .key = "k", .len = 1};
        struct sluice_result r;

        CHECK_EQ(sluice_acquire_at(l, "k", 1, 5, 10, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_set_policy(l, &low), 0);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 11, NULL), SLUICE_DENY);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 0, 11, &r), SLUICE_ALLOW);
        CHECK_U64(r.retry_after_ns, 0);
        CHECK_U64(r.remaining, 0);
        CHECK_EQ(sluice_peek_at(l, "k", 1, 0, 11, &r), SLUICE_ALLOW);
        CHECK_U64(r.retry_after_ns, 0);
        CHECK_EQ(sluice_acquire_all(&k, 1, 0, 11, &r), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 11, NULL), SLUICE_DENY); /* nothing changed */
        sluice_destroy(l);
    }
}

/*
 * A key keeps a limit's state only while every default in between had
 * that limit's algorithm and period: A, then B without it, then A again
 * starts it fresh, whether or not any call met the key under B (a peek
 * there, an acquire of another key), as stepping through each policy
 * would.  Through A, A' (same kind, other count), A it is kept.
 */
static void test_lineage(void)
{
    for (int a = SLUICE_GCRA; a <= SLUICE_APPROX_SLIDING; a++) {
        enum sluice_algo other = a == SLUICE_GCRA ? SLUICE_FIXED_WINDOW : SLUICE_GCRA;
        for (int touch = 0; touch < 2; touch++) {
            sluice_t *l = t_limiter1((enum sluice_algo)a, 5, NS_PER_S, 0, 0);
            struct sluice_policy pa = one((enum sluice_algo)a, 5, NS_PER_S);
            struct sluice_policy pb = one(other, 5, NS_PER_S);
            struct sluice_policy pa2 = one((enum sluice_algo)a, 7, NS_PER_S);
            struct sluice_policy both = pb;

            sluice_policy_add(&both, (enum sluice_algo)a, 5, NS_PER_S);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 5, 10, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_set_policy(l, &pb), 0);
            if (touch)
                CHECK_EQ(sluice_peek_at(l, "k", 1, 1, 20, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_set_policy(l, &pa), 0);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 5, 30, NULL), SLUICE_ALLOW);
            /* kept through a default of the same kind, met or not */
            CHECK_EQ(sluice_set_policy(l, &pa2), 0);
            if (touch)
                CHECK(sluice_peek_at(l, "k", 1, 2, 40, NULL) >= 0);
            CHECK_EQ(sluice_set_policy(l, &pa), 0);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 50, NULL), SLUICE_DENY);
            /* and through a stacked default that keeps it beside another */
            CHECK_EQ(sluice_set_policy(l, &both), 0);
            CHECK_EQ(sluice_set_policy(l, &pa), 0);
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 60, NULL), SLUICE_DENY);
            /* into an override: as if through the default in force first,
             * so A, B, A then an override of A's kind starts it fresh */
            CHECK_EQ(sluice_acquire_at(l, "o", 1, 5, 70, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_set_policy(l, &pb), 0);
            if (touch)
                CHECK(sluice_peek_at(l, "o", 1, 1, 75, NULL) >= 0);
            CHECK_EQ(sluice_set_policy(l, &pa), 0);
            CHECK_EQ(sluice_override_set(l, "o", 1, &pa), 0);
            CHECK_EQ(sluice_acquire_at(l, "o", 1, 5, 80, NULL), SLUICE_ALLOW);
            /* while one of the same kind all along keeps it */
            CHECK_EQ(sluice_acquire_at(l, "p", 1, 5, 80, NULL), SLUICE_ALLOW);
            CHECK_EQ(sluice_set_policy(l, &pa2), 0);
            CHECK_EQ(sluice_set_policy(l, &pa), 0);
            CHECK_EQ(sluice_override_set(l, "p", 1, &pa2), 0);
            CHECK_EQ(sluice_acquire_at(l, "p", 1, 3, 90, NULL), SLUICE_DENY);
            sluice_destroy(l);
        }
    }
}

int main(void)
{
    test_set_policy();
    test_override();
    test_override_full();
    test_override_full_caller_clock();
    test_reset();
    test_cost_zero();
    test_lineage();
    return t_done("policy");
}
