/*
 * Allocation failure at every point: each call either works or returns
 * -ENOMEM having charged nothing; nothing leaks (run under ASan/valgrind);
 * once memory is back, every decision is exact again.
 */
#include <stdbool.h>

#include "helpers.h"

void sl_test_fail_alloc(unsigned long nth, bool every); /* internal hook */

static int ok_or_nomem(int rc) { return rc == 0 || rc == 1 || rc == -ENOMEM; }

/*
 * Units key0 admitted since it was last fresh.  Reaping at 5 s removes a
 * key that is fresh then, and the test decides at 0 s: a key made anew
 * (SLUICE_F_NEW_KEY) starts over, like a reset.  Whether key0 is reaped
 * depends on the random hash seed (which batch an allocation failure hits),
 * which made this test fail about 1 run in 100 when it assumed it never was.
 */
static int acquire_key0(sluice_t *l, const char *key, size_t n, uint64_t *admitted)
{
    struct sluice_result r;
    int rc = sluice_acquire_at(l, key, n, 1, 0, &r);

    if (rc >= 0 && (r.flags & SLUICE_F_NEW_KEY))
        *admitted = 0;
    if (rc == SLUICE_ALLOW)
        (*admitted)++;
    return rc;
}

static void scenario(unsigned long nth, bool every)
{
    struct sluice_config cfg;
    struct sluice_policy big = {0};
    sluice_t *l = NULL;
    uint64_t admitted = 0;
    char key[16];
    int rc;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 3, NS_PER_S);
    sluice_policy_add(&cfg.policy, SLUICE_SLIDING_LOG, 4, NS_PER_S);
    sluice_policy_add(&big, SLUICE_SLIDING_WINDOW, 9, NS_PER_S);
    cfg.max_keys = 64;
    sl_test_fail_alloc(nth, every);
    rc = sluice_create(&cfg, &l);
    CHECK(rc == 0 || rc == -ENOMEM);
    if (rc != 0) {
        sl_test_fail_alloc(0, false);
        return;
    }
    for (int i = 0; i < 40; i++) {
        int n = snprintf(key, sizeof(key), "key%d", i % 8);
        if (i % 8 == 0)
            rc = acquire_key0(l, key, (size_t)n, &admitted);
        else
            rc = sluice_acquire_at(l, key, (size_t)n, 1, 0, NULL);
        CHECK(ok_or_nomem(rc));
        CHECK(ok_or_nomem(sluice_override_set(l, "vip", 3, &big)));
        rc = sluice_reset(l, key, (size_t)n);
        CHECK(rc == 0 || rc == -ENOENT || rc == -ENOMEM);
        if (rc == 0 && i % 8 == 0)
            admitted = 0;
        if (i == 20)
            CHECK(ok_or_nomem(sluice_set_policy(l, &cfg.policy)));
        (void)sluice_reap(l, 5 * NS_PER_S);
    }
    sl_test_fail_alloc(0, false);
    /* key0 is consistent: it admits exactly its remaining capacity */
    while (acquire_key0(l, "key0", 4, &admitted) == SLUICE_ALLOW)
        ;
    CHECK(admitted <= 3);
    CHECK_EQ(sluice_acquire_at(l, "fresh", 5, 3, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "fresh", 5, 1, 0, NULL), SLUICE_DENY);
    sluice_destroy(l);
}

/*
 * An acquire_all whose second key (on a limiter with no memory of its own
 * yet) cannot be allocated makes nothing: the first key, made just before,
 * is taken back without needing memory (its retirement was allocated
 * before it), and whatever allocation fails, the limiters hold what they
 * held.  Before, a take-back that found no memory left the key: the failed
 * call kept a max_keys place, and a reset found the key.
 */
static void failed_call_makes_nothing(unsigned long nth, bool every)
{
    struct sluice_config cfg;
    struct sluice_stats st;
    sluice_t *l1, *l2;
    int rc;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 5, NS_PER_S);
    cfg.max_keys = 2;
    cfg.when_full = SLUICE_FULL_DENY;
    l1 = t_create(&cfg);
    l2 = t_create(&cfg);
    CHECK_EQ(sluice_acquire_at(l1, "warm", 4, 1, 0, NULL), SLUICE_ALLOW); /* l1's memory made */
    sl_test_fail_alloc(nth, every);
    struct sluice_key k[2] = {{l1, "n1", 2}, {l2, "n2", 2}};
    rc = sluice_acquire_all(k, 2, 1, 0, NULL);
    sl_test_fail_alloc(0, false);
    CHECK(rc == SLUICE_ALLOW || rc == -ENOMEM);
    if (rc == -ENOMEM) {
        sluice_stats(l1, &st);
        CHECK_U64(st.keys, 1);
        sluice_stats(l2, &st);
        CHECK_U64(st.keys, 0);
        CHECK_EQ(sluice_reset(l1, "n1", 2), -ENOENT);
        /* the place is free: a new key fits beside "warm" */
        CHECK_EQ(sluice_acquire_at(l1, "x", 1, 1, 0, NULL), SLUICE_ALLOW);
    }
    sluice_destroy(l1);
    sluice_destroy(l2);
}

int main(void)
{
    for (unsigned long nth = 1; nth < 40; nth++)
        failed_call_makes_nothing(nth, false);
    failed_call_makes_nothing(1, true);
    for (unsigned long nth = 1; nth < 200; nth++)
        scenario(nth, false);
    /* every nth allocation failing, over a whole run */
    for (unsigned long nth = 2; nth < 12; nth++)
        scenario(nth, true);
    return t_done("alloc_fail");
}
