/*
 * Throughput and latency of one case: an engine (sluice or a baseline), an
 * algorithm, a key distribution, a key count and a thread count.  Keys are
 * created before timing; time is passed explicitly (each thread's clock
 * advances 100 ns per decision) except for ENG_SLUICE_CLOCK.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define STREAM_LEN (UINT64_C(1) << 20)

const char *algo_name(enum sluice_algo a)
{
    static const char *n[] = {"gcra", "fixed", "sliding", "log", "approx"};
    return n[a];
}

const char *dist_name(enum dist d)
{
    static const char *n[] = {"hot", "uniform", "zipf", "split"};
    return n[d];
}

/* 1e6 units per second for every algorithm, in the shape each needs. */
struct sluice_policy bench_policy(enum sluice_algo a)
{
    struct sluice_policy p = {0};
    uint64_t ms = NS_PER_S / 1000;

    p.nlimits = 1;
    p.limits[0] = (struct sluice_limit){.algo = a, .count = 1000, .period_ns = ms};
    if (a == SLUICE_SLIDING_WINDOW)
        p.limits[0].precision_ns = ms / 10;
    if (a == SLUICE_SLIDING_LOG)
        p.limits[0] = (struct sluice_limit){.algo = a, .count = 16, .period_ns = 16 * 1000};
    return p;
}

struct worker {
    enum engine e;
    sluice_t *l;
    struct baseline *b;
    _Atomic uint64_t *floor;
    uint64_t floor_T, floor_tau;
    const struct keyset *ks;
    uint32_t *idx;
    uint64_t ops, cost, start;
    pthread_barrier_t *bar;
    uint64_t elapsed, allowed;
    uint32_t *samples;
    size_t nsamples;
};

static inline int floor_acquire(struct worker *w, uint32_t k, uint64_t now)
{
    _Atomic uint64_t *word = &w->floor[k];
    uint64_t tat = atomic_load_explicit(word, memory_order_acquire);

    for (;;) {
        uint64_t base = tat > now ? tat : now;
        if (base + w->floor_T - now > w->floor_tau)
            return SLUICE_DENY;
        if (atomic_compare_exchange_weak_explicit(word, &tat, base + w->floor_T,
                                                  memory_order_acq_rel, memory_order_acquire))
            return SLUICE_ALLOW;
    }
}

static inline int decide(struct worker *w, uint32_t k, uint64_t now)
{
    const char *key = w->ks->bytes + (uint64_t)k * KEY_LEN;

    switch (w->e) {
    case ENG_SLUICE:
        return sluice_acquire_at(w->l, key, KEY_LEN, w->cost, now, NULL);
    case ENG_SLUICE_CLOCK:
        return sluice_acquire(w->l, key, KEY_LEN, w->cost, NULL);
    case ENG_MUTEX:
    case ENG_STRIPED:
        return baseline_acquire(w->b, key, KEY_LEN, now);
    case ENG_CAS_FLOOR:
        return floor_acquire(w, k, now);
    }
    return -1;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t now = w->start, allowed = 0, start, t0;

    pthread_barrier_wait(w->bar);
    start = now_ns();
    for (uint64_t i = 0; i < w->ops; i++) {
        uint32_t k = w->idx[i & (STREAM_LEN - 1)];
        now += STEP_NS;
        if ((i & (SAMPLE_EVERY - 1)) == 0) {
            t0 = now_ns();
            allowed += decide(w, k, now) == SLUICE_ALLOW;
            w->samples[w->nsamples++] = (uint32_t)(now_ns() - t0);
        } else {
            allowed += decide(w, k, now) == SLUICE_ALLOW;
        }
    }
    w->elapsed = now_ns() - start;
    w->allowed = allowed;
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static const char *engine_name(enum engine e)
{
    static const char *n[] = {"sluice", "sluice+clock", "mutex", "striped256", "cas-floor"};
    return n[e];
}

/* Keys are created once per fixture and reused by every run on it. */
struct fixture {
    enum engine e;
    enum sluice_algo a;
    struct sluice_policy pol;
    struct keyset ks;
    sluice_t *l;
    struct baseline *b;
    _Atomic uint64_t *floor;
};

struct fixture *fixture_new(enum engine e, enum sluice_algo a, uint64_t nkeys)
{
    struct fixture *f = calloc(1, sizeof(*f));
    const struct sluice_limit *lim;

    f->e = e;
    f->a = a;
    f->pol = bench_policy(a);
    lim = &f->pol.limits[0];
    keyset_make(&f->ks, nkeys);
    if (e == ENG_SLUICE || e == ENG_SLUICE_CLOCK) {
        struct sluice_config cfg;
        sluice_config_init(&cfg);
        cfg.policy = f->pol;
        cfg.max_keys = nkeys + 16;
        if (sluice_create(&cfg, &f->l) != 0)
            abort();
        for (uint64_t i = 0; i < nkeys; i++)
            sluice_acquire_at(f->l, f->ks.bytes + i * KEY_LEN, KEY_LEN, 1, 0, NULL);
    } else if (e == ENG_CAS_FLOOR) {
        f->floor = calloc(nkeys, sizeof(*f->floor));
    } else {
        f->b = baseline_new(e == ENG_MUTEX ? 1 : 256, nkeys, lim->count, lim->period_ns);
        for (uint64_t i = 0; i < nkeys; i++)
            baseline_acquire(f->b, f->ks.bytes + i * KEY_LEN, KEY_LEN, 0);
    }
    return f;
}

void fixture_free(struct fixture *f)
{
    sluice_destroy(f->l);
    if (f->b != NULL)
        baseline_free(f->b);
    free(f->floor);
    keyset_free(&f->ks);
    free(f);
}

/* Each run starts after the last one ended, so state is never in the future. */
static uint64_t time_base = 10 * NS_PER_S;

int run_case(const struct options *o, struct fixture *f, enum dist d, unsigned threads,
             struct result *out)
{
    const struct sluice_limit *lim = &f->pol.limits[0];
    enum engine e = f->e;
    uint64_t nkeys = f->ks.n;
    struct worker w[8];
    pthread_barrier_t bar;
    pthread_t th[8];
    uint64_t wall, total_ops = 0, allowed = 0, ns_sum = 0;
    uint32_t *all;
    size_t nall = 0;

    pthread_barrier_init(&bar, NULL, threads);
    for (unsigned t = 0; t < threads; t++) {
        w[t] = (struct worker){.e = e, .l = f->l, .b = f->b, .floor = f->floor,
                               .floor_T = lim->period_ns / lim->count,
                               .floor_tau = lim->period_ns, .ks = &f->ks, .start = time_base,
                               .idx = index_stream(d, nkeys, STREAM_LEN, 1 + t * 7919, t, threads),
                               .ops = o->ops, .cost = o->cost, .bar = &bar};
        w[t].samples = malloc((o->ops / SAMPLE_EVERY + 1) * sizeof(uint32_t));
    }
    wall = now_ns();
    for (unsigned t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, worker_main, &w[t]);
    for (unsigned t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    wall = now_ns() - wall;
    time_base += (o->ops + 1) * STEP_NS + NS_PER_S;
    all = malloc(threads * (o->ops / SAMPLE_EVERY + 1) * sizeof(uint32_t));
    for (unsigned t = 0; t < threads; t++) {
        total_ops += w[t].ops;
        allowed += w[t].allowed;
        ns_sum += w[t].elapsed;
        memcpy(all + nall, w[t].samples, w[t].nsamples * sizeof(uint32_t));
        nall += w[t].nsamples;
        free(w[t].samples);
        free(w[t].idx);
    }
    qsort(all, nall, sizeof(uint32_t), cmp_u32);
    *out = (struct result){.engine = engine_name(e), .algo = algo_name(f->a), .dist = dist_name(d),
                           .keys = nkeys, .threads = threads,
                           .ns_per_op = (double)ns_sum / (double)total_ops,
                           .mops = (double)total_ops / ((double)wall / 1e3),
                           .p50 = all[nall / 2], .p99 = all[nall * 99 / 100],
                           .p999 = all[nall * 999 / 1000],
                           .allowed_pct = 100.0 * (double)allowed / (double)total_ops};
    free(all);
    pthread_barrier_destroy(&bar);
    return 0;
}
