/*
 * Memory stays bounded under calls that retire memory without ever
 * inserting a key: set_policy loops (private and shared), override
 * set/clear loops on a shared limiter (each compiles a policy its process
 * caches, the old one retired).  Only inserts used to reclaim, so such a
 * loop held every old policy: a private set_policy loop grew by about 250
 * MB a second, a shared override loop by 240 MB.  Here each loop runs
 * from two threads and the process's resident memory may grow by at most
 * 96 MB (sanitizers keep freed memory in quarantine: the figure is only
 * printed there).  What a correct loop holds is not zero: a compiled
 * policy per override slot, and what one thread retires while the other,
 * preempted inside a section, holds the grace period open (on a loaded CI
 * machine once 53 MB, when a compiled policy took 2.8 KB; about 0.8 KB
 * now, policy.h): 11 MB here, 34 MB beside eight CPU hogs.  Without the
 * poll as a section ends, the override loop holds about 260 MB.
 */
#include <stdatomic.h>

#include "helpers.h"

#define NOW (UINT64_C(1000) * NS_PER_S)
#define GROWTH_MAX (96u << 20)


struct churn {
    sluice_t *l;
    bool overrides;
    uint64_t calls, seed;
};

static void *churn_main(void *arg)
{
    struct churn *c = arg;
    uint64_t rng = c->seed;

    for (uint64_t i = 0; i < c->calls; i++) {
        struct sluice_policy p = {0};
        char key[16];
        sluice_policy_add(&p, SLUICE_GCRA, 100 + t_rand(&rng) % 7, NS_PER_S);
        if (!c->overrides) {
            CHECK_EQ(sluice_set_policy(c->l, &p), 0);
            continue;
        }
        snprintf(key, sizeof(key), "k%" PRIu64 "-%" PRIu64, c->seed, t_rand(&rng) % 64);
        CHECK_EQ(sluice_override_set(c->l, key, strlen(key), &p), 0);
        CHECK_EQ(sluice_override_clear(c->l, key, strlen(key)), 0);
    }
    return NULL;
}

static void run(const char *name, sluice_t *l, bool overrides, uint64_t calls)
{
    struct churn c[2] = {{l, overrides, calls, 1}, {l, overrides, calls, 2}};
    uint64_t before, after, grown;
    unsigned admitted = 0;

    CHECK_EQ(sluice_acquire_at(l, "warm", 4, 1, NOW, NULL), SLUICE_ALLOW);
    before = t_rss_bytes();
    t_run_threads(2, churn_main, c, sizeof(c[0]));
    after = t_rss_bytes();
    grown = after > before ? after - before : 0;
    printf("%-28s 2 x %" PRIu64 " calls: resident memory grew %" PRIu64 " KiB\n", name, calls,
           grown >> 10);
#ifndef T_SANITIZED
    CHECK(grown <= GROWTH_MAX);
#endif
    /* and the limiter still decides under the policy last set */
    {
        struct sluice_policy p = {0};
        sluice_policy_add(&p, SLUICE_FIXED_WINDOW, 10, NS_PER_S);
        CHECK_EQ(sluice_set_policy(l, &p), 0);
        for (int i = 0; i < 20; i++)
            admitted += sluice_acquire_at(l, name, strlen(name), 1, NOW, NULL) == SLUICE_ALLOW;
        CHECK_EQ(admitted, 10);
    }
}

int main(int argc, char **argv)
{
    uint64_t calls = (uint64_t)(300000 * t_scale(argc, argv)) + 1000;
    struct sluice_config cfg;
    char path[256];
    sluice_t *l;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 100, NS_PER_S);
    cfg.max_keys = 4096;

    /* shared first: memory freed by a run is reused by the next, so only
     * a run's growth beyond the earlier runs' peak shows */
    t_shm_path(path, sizeof(path), "policy-churn");
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    run("shared override set/clear", l, true, calls / 2);
    run("shared set_policy", l, false, calls / 4);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);

    l = t_create(&cfg);
    run("private set_policy", l, false, calls);
    sluice_destroy(l);
    return t_done("policy_churn");
}
