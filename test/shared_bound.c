/*
 * Shared limiters, exactness across processes: 8 forked processes decide on
 * the same keys of one shared limiter at one fixed time, each until the key
 * denies; the units admitted in all equal the serial bound exactly (never
 * more: no over-admission; never less: nothing lost to races), for every
 * algorithm a shared limiter holds and a stacked policy.  Half the workers
 * use the handle inherited over fork, half open the path themselves.
 * Mixed costs (1 and 3) make the bound depend on the order; it is checked
 * as "admitted <= bound and nothing more admissible afterwards".  A
 * quarter of the workers decide through sluice_acquire_batch.
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "helpers.h"

#define WORKERS 8
#define KEYS 16

struct shared_page {
    _Atomic uint64_t admitted[KEYS];
    _Atomic uint64_t errors;
};

struct cse {
    const char *name;
    struct sluice_policy pol;
    uint64_t bound; /* per key at one instant */
};

static void add(struct sluice_policy *p, enum sluice_algo a, uint64_t count, uint64_t period,
                uint64_t burst, uint64_t precision)
{
    p->limits[p->nlimits++] = (struct sluice_limit){
        .algo = a, .count = count, .period_ns = period, .burst = burst, .precision_ns = precision};
}

static void worker(const char *path, sluice_t *inherited, int id, uint64_t now,
                   struct shared_page *pg)
{
    sluice_t *l = inherited;
    uint64_t rng = (uint64_t)id * 7919 + 1;

    if (id % 2 == 1)
        l = t_open_shared(path, NULL, 0);
    for (unsigned round = 0; round < 3; round++) {
        for (unsigned k = 0; k < KEYS; k++) {
            char key[16];
            int n = snprintf(key, sizeof(key), "key-%u", (k + (unsigned)id) % KEYS);
            for (;;) {
                uint64_t cost = (t_rand(&rng) % 4 == 0) ? 3 : 1;
                int rc;
                if (id % 4 == 2) { /* through the batch call: the same decision */
                    struct sluice_req q[2] = {{key, (size_t)n, cost}, {"", 0, 0}};
                    int rcs[2];
                    if (sluice_acquire_batch(l, q, 2, now, rcs, NULL) != 0 || rcs[1] != 0)
                        atomic_fetch_add(&pg->errors, 1);
                    rc = rcs[0];
                } else {
                    rc = sluice_acquire_at(l, key, (size_t)n, cost, now, NULL);
                }
                if (rc == SLUICE_ALLOW) {
                    atomic_fetch_add(&pg->admitted[(k + (unsigned)id) % KEYS], cost);
                    continue;
                }
                if (rc != SLUICE_DENY)
                    atomic_fetch_add(&pg->errors, 1);
                if (cost == 1)
                    break;
            }
        }
    }
    if (l != inherited)
        sluice_destroy(l);
    _exit(0);
}

static void run_case(const struct cse *c)
{
    char path[256];
    struct sluice_config cfg;
    struct shared_page *pg;
    sluice_t *l;
    uint64_t now = UINT64_C(1000) * NS_PER_S;
    pid_t pids[WORKERS];

    t_shm_path(path, sizeof(path), "bound");
    sluice_config_init(&cfg);
    cfg.policy = c->pol;
    cfg.max_keys = 1024;
    cfg.max_key_len = 32;
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    pg = t_shared_page(sizeof(*pg));
    for (int i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            worker(path, l, i, now, pg);
        CHECK(pids[i] > 0);
    }
    for (int i = 0; i < WORKERS; i++) {
        int st;
        CHECK(waitpid(pids[i], &st, 0) == pids[i]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK_U64(atomic_load(&pg->errors), 0);
    for (unsigned k = 0; k < KEYS; k++) {
        char key[16];
        int n = snprintf(key, sizeof(key), "key-%u", k);
        uint64_t got = atomic_load(&pg->admitted[k]);
        if (got > c->bound)
            fprintf(stderr, "%s: key %u admitted %" PRIu64 " > bound %" PRIu64 "\n", c->name, k,
                    got, c->bound);
        CHECK(got <= c->bound);
        /* every worker stopped only at a denial of one unit: exactly full */
        if (got != c->bound)
            fprintf(stderr, "%s: key %u admitted %" PRIu64 " of %" PRIu64 "\n", c->name, k, got,
                    c->bound);
        CHECK_U64(got, c->bound);
        CHECK_EQ(sluice_acquire_at(l, key, (size_t)n, 1, now, NULL), SLUICE_DENY);
    }
    {
        struct sluice_stats st;
        sluice_stats(l, &st);
        CHECK_U64(st.keys, KEYS);
        CHECK_U64(st.inserted, KEYS);
    }
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    munmap(pg, sizeof(*pg));
    printf("%-28s bound %" PRIu64 " per key held exactly by %d processes\n", c->name, c->bound,
           WORKERS);
}

/* Threads of one process on a shared limiter (what ThreadSanitizer can
 * see: the handle's policy cache, its record, the sections), with one
 * thread reordering the two limits all the while (every key migrates,
 * state carried exactly, so the bound at one instant stays). */
struct tharg {
    sluice_t *l;
    uint64_t now, admitted[KEYS];
    int id;
};


static void *th_decide(void *p)
{
    struct tharg *a = p;

    for (unsigned round = 0; round < 50; round++)
        for (unsigned k = 0; k < KEYS; k++) {
            char key[16];
            int n = snprintf(key, sizeof(key), "key-%u", (k + (unsigned)a->id) % KEYS);
            if (sluice_acquire_at(a->l, key, (size_t)n, 1, a->now, NULL) == SLUICE_ALLOW)
                a->admitted[(k + (unsigned)a->id) % KEYS]++;
        }
    return NULL;
}

static void *th_flip(void *p)
{
    struct tharg *a = p;
    struct sluice_policy pol[2] = {{0}, {0}};

    add(&pol[0], SLUICE_GCRA, 10, NS_PER_S, 0, 0);
    add(&pol[0], SLUICE_FIXED_WINDOW, 100, 60 * NS_PER_S, 0, 0);
    add(&pol[1], SLUICE_FIXED_WINDOW, 100, 60 * NS_PER_S, 0, 0);
    add(&pol[1], SLUICE_GCRA, 10, NS_PER_S, 0, 0);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(sluice_set_policy(a->l, &pol[i % 2]), 0);
    return NULL;
}

static void run_threads(void)
{
    enum { T = 4 };
    char path[256];
    struct sluice_config cfg;
    struct tharg args[T + 1];
    pthread_t th[T + 1];
    sluice_t *l;

    t_shm_path(path, sizeof(path), "bound-threads");
    sluice_config_init(&cfg);
    add(&cfg.policy, SLUICE_GCRA, 10, NS_PER_S, 0, 0);
    add(&cfg.policy, SLUICE_FIXED_WINDOW, 100, 60 * NS_PER_S, 0, 0);
    cfg.max_keys = 1024;
    cfg.max_key_len = 32;
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    memset(args, 0, sizeof(args));
    for (int i = 0; i <= T; i++) {
        args[i] = (struct tharg){.l = l, .now = UINT64_C(2000) * NS_PER_S, .id = i};
        pthread_create(&th[i], NULL, i == T ? th_flip : th_decide, &args[i]);
    }
    for (int i = 0; i <= T; i++)
        pthread_join(th[i], NULL);
    for (unsigned k = 0; k < KEYS; k++) {
        char key[16];
        int n = snprintf(key, sizeof(key), "key-%u", k);
        uint64_t got = 0, more = 0;
        for (int i = 0; i < T; i++)
            got += args[i].admitted[k];
        while (sluice_acquire_at(l, key, (size_t)n, 1, args[0].now, NULL) == SLUICE_ALLOW)
            more++;
        CHECK(got <= 10);
        CHECK_U64(got + more, 10); /* nothing over, nothing lost for good */
    }
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    printf("%-28s bound 10 per key held by %d threads across 40 policy changes\n",
           "threads + set_policy", T);
}

int main(void)
{
    struct cse cases[8];
    unsigned n = 0;
    const uint64_t S = NS_PER_S;

    memset(cases, 0, sizeof(cases));
    cases[n].name = "gcra 10/s burst 40";
    add(&cases[n].pol, SLUICE_GCRA, 10, S, 40, 0);
    cases[n++].bound = 40;
    cases[n].name = "fixed window 50/s";
    add(&cases[n].pol, SLUICE_FIXED_WINDOW, 50, S, 0, 0);
    cases[n++].bound = 50;
    cases[n].name = "sliding window 60/min";
    add(&cases[n].pol, SLUICE_SLIDING_WINDOW, 60, 60 * S, 0, 10 * S);
    cases[n++].bound = 60;
    cases[n].name = "approx sliding 45/s";
    add(&cases[n].pol, SLUICE_APPROX_SLIDING, 45, S, 0, 0);
    cases[n++].bound = 45;
    cases[n].name = "sliding log 35/s";
    add(&cases[n].pol, SLUICE_SLIDING_LOG, 35, S, 0, 0);
    cases[n++].bound = 35;
    cases[n].name = "gcra 10/s + sliding log 30/min";
    add(&cases[n].pol, SLUICE_GCRA, 10, S, 0, 0);
    add(&cases[n].pol, SLUICE_SLIDING_LOG, 30, 60 * S, 0, 0);
    cases[n++].bound = 10;
    cases[n].name = "gcra 10/s + fixed 100/min";
    add(&cases[n].pol, SLUICE_GCRA, 10, S, 0, 0);
    add(&cases[n].pol, SLUICE_FIXED_WINDOW, 100, 60 * S, 0, 0);
    cases[n++].bound = 10;
    cases[n].name = "fixed 100/min + gcra 30/s";
    add(&cases[n].pol, SLUICE_FIXED_WINDOW, 25, 60 * S, 0, 0);
    add(&cases[n].pol, SLUICE_GCRA, 30, S, 0, 0);
    cases[n++].bound = 25;
    for (unsigned i = 0; i < n; i++)
        run_case(&cases[i]);
    run_threads();
    return t_done("shared_bound");
}
