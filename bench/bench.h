/* Shared declarations of sluice-bench. */
#ifndef SLUICE_BENCH_H
#define SLUICE_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice.h"

#define KEY_LEN 16
#define NS_PER_S UINT64_C(1000000000)
/* Simulated time between one thread's decisions in the throughput cases. */
#define STEP_NS 100
/* One decision in SAMPLE_EVERY is timed alone for the percentiles. */
#define SAMPLE_EVERY 256

/* DIST_SPLIT: uniform over a disjoint share of the keys per thread. */
enum dist { DIST_HOT, DIST_UNIFORM, DIST_ZIPF, DIST_SPLIT, DIST_COUNT };

/* The ways a decision can be made, measured side by side. */
enum engine {
    ENG_SLUICE,        /* sluice_acquire_at */
    ENG_SLUICE_CLOCK,  /* sluice_acquire: the limiter reads the clock */
    ENG_MUTEX,         /* baseline: one mutex around a hash table, same GCRA */
    ENG_STRIPED,       /* baseline: 256 mutexes striped over the table */
    ENG_CAS_FLOOR,     /* floor: one CAS on a preallocated word, no lookup, no clock */
};

/* The parts of a run, selectable with --only. */
enum part { PART_BASELINES, PART_ALGORITHMS, PART_MEMORY, PART_REAP, PART_ACCURACY, PART_RACE,
            PART_TARGETS, PART_COUNT };

struct options {
    const char *out;
    bool part_on[PART_COUNT];
    unsigned threads[4], nthreads;
    uint64_t keys[4];
    unsigned nkeys;
    bool algo_on[5];
    bool dists[DIST_COUNT];
    uint64_t ops;         /* decisions per thread per case */
    uint64_t cost;
    bool plots, quick;
    bool shared;          /* --shared: run sluice-bench-shared instead */
};

struct keyset {
    uint64_t n;
    char *bytes;          /* n keys of KEY_LEN bytes */
};

struct result {
    const char *engine, *algo, *dist;
    uint64_t keys;
    unsigned threads;
    double ns_per_op;     /* per thread: elapsed / ops */
    double mops;          /* all threads: ops / wall second */
    double p50, p99, p999;
    double allowed_pct;
};

/* keys.c */
void keyset_make(struct keyset *k, uint64_t n);
void keyset_free(struct keyset *k);
/* n indexes into [0, nkeys) drawn from dist (Zipf s = 1.1). */
uint32_t *index_stream(enum dist d, uint64_t nkeys, uint64_t n, uint64_t seed, unsigned thread,
                       unsigned threads);
uint64_t now_ns(void);
uint64_t rss_bytes(void);
void progress(const char *fmt, ...);

/* throughput.c */
struct sluice_policy bench_policy(enum sluice_algo a);
const char *algo_name(enum sluice_algo a);
const char *dist_name(enum dist d);
struct fixture;
struct fixture *fixture_new(enum engine e, enum sluice_algo a, uint64_t nkeys);
void fixture_free(struct fixture *f);
int run_case(const struct options *o, struct fixture *f, enum dist d, unsigned threads,
             struct result *out);

/* baselines.c */
struct baseline;
struct baseline *baseline_new(unsigned stripes, uint64_t nkeys, uint64_t count, uint64_t period);
int baseline_acquire(struct baseline *b, const void *key, size_t len, uint64_t now);
void baseline_free(struct baseline *b);

/* memory.c */
void bench_memory(const struct options *o, FILE *csv);
void bench_reap(const struct options *o, FILE *csv);

/* targets.c */
void bench_targets(const struct options *o, FILE *csv);

/* accuracy.c */
void bench_accuracy(const struct options *o);
void bench_race(const struct options *o);

#endif
