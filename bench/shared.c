/*
 * sluice-bench-shared: the cost of a decision on a shared limiter
 * (sluice_open_shared) next to the same decision on an in-process one, in
 * one run: a hot key and N random keys (default 2^20), from 1 and 2
 * processes (shared) next to 1 and 2 threads (in-process).  A GCRA limit
 * that always admits, so every decision is a charge (one CAS).
 *   sluice-bench-shared [KEYS] [OPS]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"

static uint64_t keys_n = 1u << 20, ops = 2000000;

static uint64_t mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

struct run {
    sluice_t *l;
    uint64_t nkeys, seed;
};

/* ns per decision of ops decisions */
static void *decide(void *arg)
{
    struct run *r = arg;
    uint64_t s = r->seed, t0 = mono(), now = 1000000000000u;
    char key[24];

    for (uint64_t i = 0; i < ops; i++) {
        uint64_t k = r->nkeys == 1 ? 0 : rnd(&s) % r->nkeys;
        int n = snprintf(key, sizeof(key), "k%" PRIu64, k);
        if (sluice_acquire_at(r->l, key, (size_t)n, 1, now + i, NULL) < 0)
            abort();
    }
    r->seed = mono() - t0;
    return NULL;
}

static void fill(sluice_t *l, uint64_t nkeys)
{
    struct run r = {l, nkeys, 1};
    uint64_t saved = ops;

    ops = nkeys * 2; /* touch every key first: lookups, not inserts, are measured */
    decide(&r);
    ops = saved;
}

static double threads(sluice_t *l, uint64_t nkeys, int n)
{
    pthread_t th[2];
    struct run r[2];
    double ns = 0;

    for (int i = 0; i < n; i++) {
        r[i] = (struct run){l, nkeys, (uint64_t)i + 7};
        pthread_create(&th[i], NULL, decide, &r[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        ns += (double)r[i].seed / (double)ops;
    }
    return ns / n;
}

static double procs(sluice_t *l, uint64_t nkeys, int n)
{
    int fd[2][2];
    double ns = 0;

    for (int i = 0; i < n; i++) {
        if (pipe(fd[i]) != 0)
            abort();
        if (fork() == 0) {
            struct run r = {l, nkeys, (uint64_t)i + 7};
            decide(&r);
            if (write(fd[i][1], &r.seed, sizeof(r.seed)) != sizeof(r.seed))
                _exit(1);
            _exit(0);
        }
    }
    for (int i = 0; i < n; i++) {
        uint64_t t;
        if (read(fd[i][0], &t, sizeof(t)) != sizeof(t))
            abort();
        ns += (double)t / (double)ops;
        wait(NULL);
        close(fd[i][0]);
        close(fd[i][1]);
    }
    return ns / n;
}

int main(int argc, char **argv)
{
    struct sluice_config cfg;
    char path[64];
    sluice_t *priv, *shared;

    if (argc > 1)
        keys_n = strtoull(argv[1], NULL, 0);
    if (argc > 2)
        ops = strtoull(argv[2], NULL, 0);
    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 1000000000, 1000000000);
    cfg.policy.limits[0].burst = 1000000000;
    cfg.max_keys = keys_n + 16;
    cfg.max_key_len = 24;
    snprintf(path, sizeof(path), "/dev/shm/sluice-bench-%ld", (long)getpid());
    if (sluice_create(&cfg, &priv) != 0 ||
        sluice_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL, &shared) != 0) {
        fprintf(stderr, "sluice-bench-shared: cannot make the limiters (%s)\n", path);
        return 1;
    }
    sluice_unlink_shared(path); /* the handle keeps it */
    fill(priv, keys_n);
    fill(shared, keys_n);
    printf("ns per decision (GCRA, always admitted), %" PRIu64 " decisions per worker\n", ops);
    printf("%-10s %-8s %12s %12s %7s\n", "keys", "workers", "in-process", "shared", "ratio");
    for (int pass = 0; pass < 2; pass++) {
        uint64_t nk = pass == 0 ? 1 : keys_n;
        for (int w = 1; w <= 2; w++) {
            double a = threads(priv, nk, w), b = procs(shared, nk, w);
            printf("%-10" PRIu64 " %-8d %12.1f %12.1f %7.2f\n", nk, w, a, b, b / a);
        }
    }
    sluice_destroy(shared);
    sluice_destroy(priv);
    return 0;
}
