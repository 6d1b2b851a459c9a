/*
 * Concurrency invariants with real threads: admitted units never exceed the
 * serial bound, and at a fixed time equal it exactly.
 * Usage: concurrency [scale]   (threads 2, 4 and 8 on any core count)
 */
#include <stdatomic.h>

#include "helpers.h"

static double scale = 1.0;

struct hammer {
    sluice_t *l;
    unsigned nkeys, id;
    uint64_t now, tries;
    _Atomic uint64_t *per_key; /* units admitted per key */
};

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;
    char key[32];

    for (uint64_t i = 0; i < h->tries; i++) {
        unsigned k = (unsigned)((i + h->id * 7) % h->nkeys);
        int n = snprintf(key, sizeof(key), "key-%u", k);
        if (sluice_acquire_at(h->l, key, (size_t)n, 1, h->now, NULL) == SLUICE_ALLOW)
            atomic_fetch_add(&h->per_key[k], 1);
    }
    return NULL;
}

/* At one instant every key admits exactly its capacity, whatever the threads. */
static void fixed_now(const struct sluice_policy *p, uint64_t cap, unsigned threads,
                      unsigned nkeys, const char *what)
{
    struct sluice_config cfg;
    struct hammer h[8];
    _Atomic uint64_t *per_key = calloc(nkeys, sizeof(*per_key));
    sluice_t *l;
    int wrong = 0;

    sluice_config_init(&cfg);
    cfg.policy = *p;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    for (unsigned i = 0; i < threads; i++)
        h[i] = (struct hammer){l, nkeys, i, 5 * NS_PER_S,
                               (uint64_t)(cap * nkeys * 4 * scale) + cap * nkeys * 2, per_key};
    t_run_threads(threads, hammer_main, h, sizeof(h[0]));
    for (unsigned k = 0; k < nkeys; k++)
        wrong += per_key[k] != cap;
    if (wrong)
        fprintf(stderr, "%s, %u threads, %u keys: %d keys off (key 0: %llu of %llu)\n", what,
                threads, nkeys, wrong, (unsigned long long)per_key[0], (unsigned long long)cap);
    CHECK_EQ(wrong, 0);
    sluice_destroy(l);
    free(per_key);
}

static void test_fixed_now(void)
{
    static const struct {
        enum sluice_algo algo;
        const char *name;
    } algos[] = {{SLUICE_GCRA, "gcra"},
                 {SLUICE_FIXED_WINDOW, "fixed"},
                 {SLUICE_SLIDING_WINDOW, "sliding"},
                 {SLUICE_SLIDING_LOG, "log"},
                 {SLUICE_APPROX_SLIDING, "approx"}};

    for (unsigned a = 0; a < 5; a++) {
        struct sluice_policy p = {0};
        sluice_policy_add(&p, algos[a].algo, 50, NS_PER_S);
        for (unsigned th = 2; th <= 8; th *= 2) {
            fixed_now(&p, 50, th, 1, algos[a].name);
            fixed_now(&p, 50, th, 64, algos[a].name);
        }
    }
    /* multi-limit: the tightest limit is the bound, none over-admits */
    struct sluice_policy m = {0};
    sluice_policy_add(&m, SLUICE_GCRA, 40, NS_PER_S);
    sluice_policy_add(&m, SLUICE_SLIDING_LOG, 30, 60 * NS_PER_S);
    sluice_policy_add(&m, SLUICE_FIXED_WINDOW, 35, 3600 * NS_PER_S);
    for (unsigned th = 2; th <= 8; th *= 2) {
        fixed_now(&m, 30, th, 1, "multi");
        fixed_now(&m, 30, th, 16, "multi");
    }
}

/* Advancing, slightly stale times: no period-long interval holds more than count. */
struct advance {
    sluice_t *l;
    _Atomic uint64_t *clock;
    uint64_t iters, n;
    uint64_t (*admitted)[2];
};

/*
 * A call may be decided at the latest time any thread has shown the key
 * (contract: stale times are decided as at the latest observed time), so
 * each admission is recorded as the interval [its own time, the clock when
 * it returned]: its effective time lies in there.
 */
static void *advance_main(void *arg)
{
    struct advance *a = arg;

    for (uint64_t i = 0; i < a->iters; i++) {
        uint64_t now = atomic_fetch_add(a->clock, 997) + 997; /* ~1 us per call */
        if (sluice_acquire_at(a->l, "hot", 3, 1, now, NULL) == SLUICE_ALLOW) {
            a->admitted[a->n][0] = now;
            a->admitted[a->n++][1] = atomic_load(a->clock);
        }
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Most admissions surely inside one period [lo_i, lo_i + period). */
static uint64_t worst_window(uint64_t (*all)[2], uint64_t total, uint64_t period)
{
    uint64_t worst = 0;

    for (uint64_t i = 0; i < total; i++) {
        uint64_t n = 0;
        for (uint64_t j = i; j < total && all[j][0] < all[i][0] + period; j++)
            n += all[j][1] < all[i][0] + period;
        worst = n > worst ? n : worst;
    }
    return worst;
}

static void test_advancing(enum sluice_algo algo, uint64_t bound_in_period, unsigned threads)
{
    const uint64_t period = NS_PER_S / 100; /* 10 ms: ~10k calls per period */
    struct advance a[8];
    _Atomic uint64_t clock = 1000 * NS_PER_S;
    uint64_t iters = (uint64_t)(200000 * scale) / threads, total = 0, worst;
    uint64_t(*all)[2] = malloc(sizeof(*all) * iters * threads);
    sluice_t *l = t_limiter1(algo, 20, period, 0, period / 10);

    for (unsigned i = 0; i < threads; i++)
        a[i] = (struct advance){l, &clock, iters, 0, malloc(sizeof(*all) * iters)};
    t_run_threads(threads, advance_main, a, sizeof(a[0]));
    for (unsigned i = 0; i < threads; i++) {
        memcpy(all + total, a[i].admitted, a[i].n * sizeof(*all));
        total += a[i].n;
        free(a[i].admitted);
    }
    qsort(all, total, sizeof(*all), cmp_u64); /* by own time */
    worst = worst_window(all, total, period);
    if (algo == SLUICE_GCRA) {
        /* GCRA decides at the caller's time, stale or not: the exact serial
         * bound holds on those times.  Unit i+burst+m comes at least
         * (m+1)*T after unit i. */
        uint64_t T = period / 20, bad = 0;
        for (uint64_t i = 0; i + 20 < total; i++)
            for (uint64_t m = 0; m < 64 && i + 20 + m < total; m++)
                bad += all[i + 20 + m][0] - all[i][0] < (m + 1) * T;
        CHECK_EQ(bad, 0);
    }
    if (worst > bound_in_period)
        fprintf(stderr, "algo %d, %u threads: %llu admitted within one period, bound %llu\n", algo,
                threads, (unsigned long long)worst, (unsigned long long)bound_in_period);
    CHECK(worst <= bound_in_period);
    CHECK(total > 0);
    free(all);
    sluice_destroy(l);
}

/* Changing the policy under load: never more than the larger policy admits. */
struct flipper {
    sluice_t *l;
    _Atomic int *stop;
};

static void *flip_main(void *arg)
{
    struct flipper *f = arg;
    struct sluice_policy p[2] = {{0}, {0}};

    sluice_policy_add(&p[0], SLUICE_GCRA, 10, NS_PER_S);
    sluice_policy_add(&p[1], SLUICE_GCRA, 20, NS_PER_S);
    for (unsigned i = 0; !atomic_load(f->stop); i++)
        if (sluice_set_policy(f->l, &p[i & 1]) != 0)
            abort();
    return NULL;
}

static void test_policy_under_load(unsigned threads)
{
    sluice_t *l = t_limiter1(SLUICE_GCRA, 10, NS_PER_S, 0, 0);
    _Atomic int stop = 0;
    struct flipper f = {l, &stop};
    struct hammer h[8];
    _Atomic uint64_t per_key[8] = {0};
    pthread_t ft;

    pthread_create(&ft, NULL, flip_main, &f);
    for (unsigned i = 0; i < threads; i++)
        h[i] = (struct hammer){l, 8, i, 5 * NS_PER_S, (uint64_t)(20000 * scale), per_key};
    t_run_threads(threads, hammer_main, h, sizeof(h[0]));
    atomic_store(&stop, 1);
    pthread_join(ft, NULL);
    for (unsigned k = 0; k < 8; k++)
        CHECK(per_key[k] >= 10 && per_key[k] <= 20); /* tau is 1 s under both */
    sluice_destroy(l);
}

int main(int argc, char **argv)
{
    scale = t_scale(argc, argv);
    test_fixed_now();
    for (unsigned th = 2; th <= 8; th *= 2) {
        test_advancing(SLUICE_SLIDING_LOG, 20, th);
        /* GCRA admits at most burst + floor(L / T) in any interval of length L */
        test_advancing(SLUICE_GCRA, 20 + 19, th);
        /* the sub-bucket window may cover a true period plus one sub-bucket */
        test_advancing(SLUICE_SLIDING_WINDOW, 2 * 20, th);
        test_policy_under_load(th);
    }
    return t_done("concurrency");
}
