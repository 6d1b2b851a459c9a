/*
 * sluice-icount: the hot decisions of doc/DESIGN.md's instruction table,
 * one workload per run, for valgrind's callgrind to count (icount.sh runs
 * each workload at two call counts and prints the difference per call, so
 * setup, the thread's first call and the exit cancel out).  Times are
 * passed in, keys are present before the counted calls, and nothing here
 * reads a clock: the counts are the same on every run of one build.
 *
 * Usage: sluice-icount WORKLOAD CALLS [res]
 *   WORKLOAD  one of the names in `workloads` below (no argument: the list)
 *   CALLS     decisions to make after the setup
 *   res       pass a struct sluice_result (else NULL: the verdict alone)
 * Exit 0, or 2 on a usage error, 1 if the library refuses the setup.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice.h>

#define NS_PER_S UINT64_C(1000000000)
#define DAY_NS (86400 * NS_PER_S)

enum shape { ONE_KEY, TWO_KEYS };

struct workload {
    const char *name;
    const char *what;
    struct sluice_limit lim[2];
    unsigned nlimits;
    enum shape shape;
    uint64_t step_ns; /* time between calls */
};

/* 10^6/s, burst 1000: a call every 1000 ns is always admitted, every
 * 100 ns one in ten once the burst is spent */
#define GCRA_1M {.algo = SLUICE_GCRA, .count = 1000000, .period_ns = NS_PER_S, .burst = 1000}
#define DAILY {.algo = SLUICE_FIXED_WINDOW, .count = UINT64_C(1) << 35, .period_ns = DAY_NS}
#define SLIDING_1G                                                                                 \
    {.algo = SLUICE_SLIDING_WINDOW, .count = NS_PER_S, .period_ns = NS_PER_S,                      \
     .precision_ns = NS_PER_S / 10}

static const struct workload workloads[] = {
    {"gcra-admit", "GCRA 10^6/s, one key, every call admitted", {GCRA_1M}, 1, ONE_KEY, 1000},
    {"gcra-deny90", "GCRA 10^6/s, one key, 90% denied", {GCRA_1M}, 1, ONE_KEY, 100},
    {"stacked-admit", "GCRA 10^6/s + daily fixed window, one key, every call admitted",
     {GCRA_1M, DAILY}, 2, ONE_KEY, 1000},
    {"stacked-deny90", "GCRA 10^6/s + daily fixed window, one key, 90% denied",
     {GCRA_1M, DAILY}, 2, ONE_KEY, 100},
    {"all2-admit", "acquire_all of 2 keys (GCRA 10^6/s), every call admitted", {GCRA_1M}, 1,
     TWO_KEYS, 1000},
    {"all2-deny90", "acquire_all of 2 keys (GCRA 10^6/s), 90% denied", {GCRA_1M}, 1, TWO_KEYS,
     100},
    {"sliding-admit", "sliding window 10^9/s (10 sub-buckets), every call admitted",
     {SLIDING_1G}, 1, ONE_KEY, 1000},
};
#define NWORKLOADS (sizeof(workloads) / sizeof(workloads[0]))

static int usage(void)
{
    fprintf(stderr, "usage: sluice-icount WORKLOAD CALLS [res]\nworkloads:\n");
    for (size_t i = 0; i < NWORKLOADS; i++)
        fprintf(stderr, "  %-15s %s\n", workloads[i].name, workloads[i].what);
    return 2;
}

int main(int argc, char **argv)
{
    static const unsigned char key_a[16] = "client-10.0.0.1", key_b[16] = "user-0123456789";
    const struct workload *w = NULL;
    struct sluice_config cfg;
    struct sluice_result r, *res;
    struct sluice_key keys[2];
    uint64_t now = 1000 * NS_PER_S;
    unsigned long calls, admitted = 0;
    char *end;
    sluice_t *l;
    int rc;

    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "res") != 0))
        return usage();
    for (size_t i = 0; i < NWORKLOADS; i++)
        if (strcmp(argv[1], workloads[i].name) == 0)
            w = &workloads[i];
    calls = strtoul(argv[2], &end, 10);
    if (w == NULL || *end != '\0' || end == argv[2])
        return usage();
    res = argc == 4 ? &r : NULL;

    sluice_config_init(&cfg);
    cfg.policy.nlimits = w->nlimits;
    memcpy(cfg.policy.limits, w->lim, sizeof(w->lim));
    if ((rc = sluice_create(&cfg, &l)) != 0) {
        fprintf(stderr, "sluice_create: %s\n", sluice_strerror(rc));
        return 1;
    }
    keys[0] = (struct sluice_key){l, key_a, sizeof(key_a)};
    keys[1] = (struct sluice_key){l, key_b, sizeof(key_b)};
    /* present before the counted calls, burst spent for the 90% rows;
     * one key made as its own calls make it (a short key under one GCRA
     * limit: in a cell, doc/DESIGN.md), two as acquire_all makes them */
    for (int i = 0; i < 2000; i++)
        (void)(w->shape == TWO_KEYS ? sluice_acquire_all(keys, 2, 1, now, NULL)
                                    : sluice_acquire_at(l, key_a, sizeof(key_a), 1, now, NULL));
    for (unsigned long i = 0; i < calls; i++) {
        now += w->step_ns;
        rc = w->shape == TWO_KEYS ? sluice_acquire_all(keys, 2, 1, now, res)
                                  : sluice_acquire_at(l, key_a, sizeof(key_a), 1, now, res);
        if (rc < 0) {
            fprintf(stderr, "call %lu: %s\n", i, sluice_strerror(rc));
            return 1;
        }
        admitted += rc == SLUICE_ALLOW;
    }
    printf("%s: %lu calls, %lu admitted\n", w->name, calls, admitted);
    sluice_destroy(l);
    return 0;
}
