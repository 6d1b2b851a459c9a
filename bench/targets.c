/*
 * The targets of issue 12 ("Decisions at the floor") as ratios measured
 * side by side in one run: each pair of cases runs interleaved, A then B,
 * REPS times over the same key stream; a row gives the median ns of each
 * side, the median of the per-round ratios and their spread (min..max), so
 * a noisy machine shows as a wide spread rather than a wrong number.
 *
 * The floor is the issue's: hash the key (with sluice's own keyed hash),
 * probe an open-addressing array of 32-bit tags, one load or CAS on a dense
 * array of GCRA words (24 B per key at half load, keys not stored: a tag
 * match is taken as the key).  It is the least a keyed limiter can do, not
 * a usable one.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "internal.h"

#define REPS 5
#define STREAM (UINT64_C(1) << 20)
#define BATCH 16
#define SCALE_RUN_NS 4e8 /* ns: see compare_scaling */

/* ---- the floor ------------------------------------------------------ */

struct hfloor {
    uint64_t mask, T, tau;
    uint32_t *tag;
    _Atomic uint64_t *state;
};

/* sluice's own keyed hash (src/hash.c; linked from the static library):
 * the floor hashes as sluice does, so a ratio measures all but the hash. */
static struct sl_hkey floor_key;

static uint64_t floor_hash(const void *key)
{
    return sl_hash(&floor_key, key, KEY_LEN);
}

static uint64_t floor_slot(struct hfloor *f, const void *key, bool insert)
{
    uint64_t h = floor_hash(key), i = h & f->mask;
    uint32_t t = (uint32_t)(h >> 32) | 1;

    while (f->tag[i] != t) {
        if (f->tag[i] == 0 && insert) {
            f->tag[i] = t;
            break;
        }
        i = (i + 1) & f->mask;
    }
    return i;
}

static struct hfloor *hfloor_new(const struct keyset *ks)
{
    struct hfloor *f = calloc(1, sizeof(*f));
    uint64_t cap = 64;

    sl_hkey_set(&floor_key, UINT64_C(0x243f6a8885a308d3), UINT64_C(0x13198a2e03707344));
    while (cap < 2 * ks->n)
        cap <<= 1;
    f->mask = cap - 1;
    f->tag = calloc(cap, sizeof(*f->tag));
    f->state = calloc(cap, sizeof(*f->state));
    f->T = NS_PER_S / 1000000; /* 10^6/s, burst 1000: bench_policy's GCRA */
    f->tau = 1000 * f->T;
    for (uint64_t i = 0; i < ks->n; i++)
        (void)floor_slot(f, ks->bytes + i * KEY_LEN, true);
    return f;
}

static int hfloor_acquire(struct hfloor *f, const void *key, uint64_t now)
{
    _Atomic uint64_t *w = &f->state[floor_slot(f, key, false)];
    uint64_t tat = atomic_load_explicit(w, memory_order_acquire);

    for (;;) {
        uint64_t base = tat > now ? tat : now;
        if (base + f->T - now > f->tau)
            return SLUICE_DENY;
        if (atomic_compare_exchange_weak_explicit(w, &tat, base + f->T, memory_order_acq_rel,
                                                  memory_order_acquire))
            return SLUICE_ALLOW;
    }
}

static void hfloor_free(struct hfloor *f)
{
    free(f->tag);
    free(f->state);
    free(f);
}

/* ---- cases ---------------------------------------------------------- */

enum how {
    H_AT,       /* sluice_acquire_at */
    H_CLOCK,    /* sluice_acquire (the limiter's own clock) */
    H_ALL2,     /* sluice_acquire_all of this key and the next one drawn */
    H_BATCH,    /* sluice_acquire_batch of BATCH requests */
    H_FLOOR,
    H_TABLE,    /* a mutex table of baselines.c */
};

struct side {
    const char *name;
    enum how how;
    sluice_t *l;
    struct hfloor *f;
    struct baseline *b;
    const struct keyset *ks;
};

/* Simulated time, shared by every case (sides share limiters) and moved on
 * past each measurement, so no state is ever ahead of a decision's time. */
static uint64_t sim_now = 10 * NS_PER_S;

struct runner {
    struct side *s;
    const uint32_t *idx;
    uint64_t ops, start, elapsed;
    pthread_barrier_t *bar;
};

static void *runner_main(void *arg)
{
    struct runner *r = arg;
    struct side *s = r->s;
    const char *kb = s->ks->bytes;
    uint64_t now = r->start, t0;
    struct sluice_req reqs[BATCH];
    int rcs[BATCH];
    volatile int sink = 0;

    pthread_barrier_wait(r->bar);
    t0 = now_ns();
    for (uint64_t i = 0; i < r->ops;) {
        const char *key = kb + (uint64_t)r->idx[i & (STREAM - 1)] * KEY_LEN;
        now += STEP_NS;
        switch (s->how) {
        case H_AT:
            sink += sluice_acquire_at(s->l, key, KEY_LEN, 1, now, NULL);
            break;
        case H_CLOCK:
            sink += sluice_acquire(s->l, key, KEY_LEN, 1, NULL);
            break;
        case H_ALL2: {
            /* a second key drawn from the stream, never the first (the hot
             * case: key 1 with key 0) */
            uint64_t k1 = r->idx[i & (STREAM - 1)], k2 = r->idx[(i + STREAM / 2) & (STREAM - 1)];
            struct sluice_key keys[2] = {
                {s->l, key, KEY_LEN},
                {s->l, kb + (k2 != k1 ? k2 : (k1 + 1) % s->ks->n) * KEY_LEN, KEY_LEN}};
            sink += sluice_acquire_all(keys, 2, 1, now, NULL);
            break;
        }
        case H_BATCH:
            for (unsigned j = 0; j < BATCH; j++)
                reqs[j] = (struct sluice_req){kb + (uint64_t)r->idx[(i + j) & (STREAM - 1)] *
                                                       KEY_LEN, KEY_LEN, 1};
            sluice_acquire_batch(s->l, reqs, BATCH, now, rcs, NULL);
            sink += rcs[0];
            now += (BATCH - 1) * STEP_NS;
            i += BATCH;
            continue;
        case H_FLOOR:
            sink += hfloor_acquire(s->f, key, now);
            break;
        case H_TABLE:
            sink += baseline_acquire(s->b, key, KEY_LEN, now);
            break;
        }
        i++;
    }
    r->elapsed = now_ns() - t0;
    (void)sink;
    return NULL;
}

/* ns per decision per thread, each thread on its own uniform stream. */
static double measure(struct side *s, uint32_t **idx, unsigned threads, uint64_t ops)
{
    struct runner r[2];
    pthread_t th[2];
    pthread_barrier_t bar;
    double ns = 0;

    pthread_barrier_init(&bar, NULL, threads);
    for (unsigned t = 0; t < threads; t++) {
        r[t] = (struct runner){.s = s, .idx = idx[t], .ops = ops, .start = sim_now, .bar = &bar};
        pthread_create(&th[t], NULL, runner_main, &r[t]);
    }
    for (unsigned t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        ns += (double)r[t].elapsed / (double)ops / threads;
    }
    sim_now += (ops + BATCH) * STEP_NS + NS_PER_S;
    pthread_barrier_destroy(&bar);
    return ns;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    return v[n / 2];
}

/* A row: a and b measured in turn; ratio a/b, or b/a for "b is this much slower". */
struct row {
    const char *what, *target;
    double a, b, ratio, lo, hi, goal;
    bool at_most;           /* met when ratio <= goal, else when >= goal */
    bool done;
};

/* Medians of the rounds; q sorted by median, so its ends are the spread. */
static void row_finish(struct row *w, double *ta, double *tb, double *q)
{
    w->a = median(ta, REPS);
    w->b = median(tb, REPS);
    w->ratio = median(q, REPS);
    w->lo = q[0];
    w->hi = q[REPS - 1];
    w->done = true;
}

static void compare(struct row *w, struct side *a, struct side *b, uint32_t **idx,
                    unsigned threads, uint64_t ops, bool invert)
{
    double ta[REPS], tb[REPS], q[REPS];

    progress("targets: %s", w->what);
    for (int r = 0; r < REPS; r++) {
        ta[r] = measure(a, idx, threads, ops);
        tb[r] = measure(b, idx, threads, ops);
        q[r] = invert ? tb[r] / ta[r] : ta[r] / tb[r];
    }
    row_finish(w, ta, tb, q);
}

/*
 * Scaling on distinct keys: one limiter, each thread uniform over its own
 * share of ks (DIST_SPLIT), throughput of 2 threads over that of 1 (2x is
 * linear on this machine's 2 cores).  a: ns per decision on 1 thread, b:
 * per thread on 2.
 */
static void compare_scaling(struct row *w, struct side *s, uint64_t ops)
{
    double ta[REPS], tb[REPS], q[REPS], ns;
    uint32_t *one[1], *two[2];

    one[0] = index_stream(DIST_SPLIT, s->ks->n, STREAM, 23, 0, 1);
    for (unsigned t = 0; t < 2; t++)
        two[t] = index_stream(DIST_SPLIT, s->ks->n, STREAM, 29 + t * 7919, t, 2);
    progress("targets: %s", w->what);
    /* Each run at least SCALE_RUN_NS long: at 10^3 keys --ops decisions
     * are over in tens of ms, a span in which this 2-vCPU guest's second
     * CPU came and went (the row's rounds ranged from 0.9x to 2.3x, while
     * the same runs 20 times longer scaled 1.8-2.4x every time). */
    ns = measure(s, one, 1, ops);
    if (ns > 0 && (double)ops * ns < SCALE_RUN_NS)
        ops = (uint64_t)(SCALE_RUN_NS / ns);
    for (int r = 0; r < REPS; r++) {
        ta[r] = measure(s, one, 1, ops);
        tb[r] = measure(s, two, 2, ops);
        q[r] = 2 * ta[r] / tb[r];
    }
    row_finish(w, ta, tb, q);
    free(one[0]);
    free(two[0]);
    free(two[1]);
}

/*
 * This machine's own scaling of locked instructions: each thread a CAS
 * loop on lines of its own page, throughput of 2 threads over 1.  Every
 * call of the 10^3 split row admits from cache (two CAS: the charge and
 * the commit), so where the machine's CAS did not scale that row could
 * not either; printed under the table as the row's yardstick (1.87x to
 * 2.09x on the AMD EPYC guest of 2026-12-01: not the cause there).
 */
#define CAS_OPS 20000000

static void *cas_main(void *arg)
{
    _Atomic uint64_t *w = arg;
    uint64_t t0;

    t0 = now_ns();
    for (uint64_t i = 0; i < CAS_OPS; i++) {
        _Atomic uint64_t *x = &w[(i & 63) * 8]; /* 64 lines, one page */
        uint64_t e = atomic_load_explicit(x, memory_order_relaxed);
        atomic_compare_exchange_strong_explicit(x, &e, e + 1, memory_order_acq_rel,
                                                memory_order_relaxed);
    }
    w[0] = now_ns() - t0; /* ns for CAS_OPS, after the loop */
    return NULL;
}

static double cas_run(_Atomic uint64_t **page, unsigned threads)
{
    pthread_t th[2];
    double ns = 0;

    for (unsigned t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, cas_main, page[t]);
    for (unsigned t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        ns += (double)atomic_load(&page[t][0]) / threads;
    }
    return ns;
}

static void cas_scaling(struct row *w)
{
    double ta[REPS], tb[REPS], q[REPS];
    _Atomic uint64_t *page[2];

    progress("targets: %s", w->what);
    for (unsigned t = 0; t < 2; t++)
        page[t] = aligned_alloc(4096, 4096);
    for (int r = 0; r < REPS; r++) {
        ta[r] = cas_run(page, 1) / CAS_OPS;
        tb[r] = cas_run(page, 2) / CAS_OPS;
        q[r] = 2 * ta[r] / tb[r];
    }
    row_finish(w, ta, tb, q);
    free(page[0]);
    free(page[1]);
}

struct maker {
    sluice_t *l;
    const struct keyset *ks;
    unsigned t, makers;
};

static void *maker_main(void *arg)
{
    const struct maker *m = arg;

    for (uint64_t i = m->t; i < m->ks->n; i += m->makers)
        sluice_acquire_at(m->l, m->ks->bytes + i * KEY_LEN, KEY_LEN, 1, 0, NULL);
    return NULL;
}

/*
 * A limiter holding every key of ks, made by `makers` threads at once
 * (1 or 2), key i by thread i % makers: the share DIST_SPLIT deals thread
 * i % 2, so that in the split rows each thread decides the keys it made,
 * as a server's thread does for the clients of its connections.
 */
static sluice_t *limiter_made(const struct keyset *ks, bool stacked, enum sluice_clock clock,
                              unsigned makers)
{
    struct sluice_config cfg;
    struct maker m[2];
    pthread_t th[2];
    sluice_t *l;

    sluice_config_init(&cfg);
    cfg.policy = bench_policy(SLUICE_GCRA);
    if (stacked && /* plus a daily window that never binds here */
        sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, UINT64_C(1) << 40,
                          86400 * NS_PER_S) != 0) {
        fprintf(stderr, "targets: the daily window was refused\n");
        exit(1);
    }
    cfg.max_keys = ks->n + 16;
    cfg.clock = clock;
    if (sluice_create(&cfg, &l) != 0) {
        fprintf(stderr, "targets: sluice_create failed\n");
        exit(1);
    }
    for (unsigned t = 0; t < makers; t++) {
        m[t] = (struct maker){l, ks, t, makers};
        pthread_create(&th[t], NULL, maker_main, &m[t]);
    }
    for (unsigned t = 0; t < makers; t++)
        pthread_join(th[t], NULL);
    return l;
}

static sluice_t *limiter(const struct keyset *ks, bool stacked, enum sluice_clock clock)
{
    return limiter_made(ks, stacked, clock, 1);
}

/* The Go peer (x/time/rate limiters in a sync.Map, time.Now per call):
 * ns per decision, or a negative value when it is not built or fails. */
static double go_peer(uint64_t keys, uint64_t ops)
{
#ifdef GO_PEER
    char cmd[1024];
    double ns = -1;
    FILE *p;

    if (access(GO_PEER, X_OK) != 0)
        return -1;
    snprintf(cmd, sizeof(cmd), "'%s' %llu %llu", GO_PEER, (unsigned long long)keys,
             (unsigned long long)ops);
    p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    if (fscanf(p, "%lf", &ns) != 1)
        ns = -1;
    return pclose(p) == 0 ? ns : -1;
#else
    (void)keys;
    (void)ops;
    return -1;
#endif
}

static void compare_go(struct row *w, struct side *a, uint32_t **idx, uint64_t keys, uint64_t ops)
{
    double ta[REPS], tb[REPS], q[REPS];

    progress("targets: %s", w->what);
    for (int r = 0; r < REPS; r++) {
        ta[r] = measure(a, idx, 1, ops);
        tb[r] = go_peer(keys, ops);
        if (tb[r] < 0)
            return; /* no peer: the row says so */
        q[r] = tb[r] / ta[r];
    }
    row_finish(w, ta, tb, q);
}

static double bytes_per_key(const struct keyset *ks)
{
    struct sluice_stats st;
    sluice_t *l = limiter(ks, false, SLUICE_CLOCK_MONOTONIC);

    sluice_stats(l, &st);
    sluice_destroy(l);
    return (double)st.memory_bytes / (double)ks->n;
}

void bench_targets(const struct options *o, FILE *csv)
{
    /* --quick: a smoke run on 2^16 keys, not the targets' size */
    const uint64_t BIG = o->quick ? UINT64_C(1) << 16 : UINT64_C(1) << 20;
    uint64_t ops = o->ops;
    struct keyset hot, big, few;
    uint32_t *hot_idx[2], *big_idx[2];
    struct row rows[20];
    int n = 0;
    double bpk;

    progress("targets: creating keys");
    keyset_make(&hot, 2);
    keyset_make(&big, BIG);
    keyset_make(&few, 1000);
    for (unsigned t = 0; t < 2; t++) {
        hot_idx[t] = calloc(STREAM, sizeof(uint32_t)); /* key 0 (and key 1 for all2) */
        big_idx[t] = index_stream(DIST_UNIFORM, BIG, STREAM, 11 + t * 7919, t, 1);
    }

    struct side s_hot = {"sluice 1 limit", H_AT, limiter(&hot, false, SLUICE_CLOCK_MONOTONIC), .ks = &hot};
    struct side s_hot2 = {"sluice 2 limits", H_AT, limiter(&hot, true, SLUICE_CLOCK_MONOTONIC), .ks = &hot};
    struct side s_hotall = {"acquire_all 2 keys", H_ALL2, s_hot.l, .ks = &hot};
    struct side f_hot = {"floor", H_FLOOR, .f = hfloor_new(&hot), .ks = &hot};
    struct side s_few = {"sluice 1 limit", H_AT,
                         limiter_made(&few, false, SLUICE_CLOCK_MONOTONIC, 2), .ks = &few};
    struct side s_few1 = {"sluice 1 limit", H_AT, limiter(&few, false, SLUICE_CLOCK_MONOTONIC),
                          .ks = &few};
    struct side s_hottsc = {"sluice_acquire TSC", H_CLOCK, limiter(&hot, false, SLUICE_CLOCK_TSC),
                            .ks = &hot};
    progress("targets: %llu keys in each table", (unsigned long long)BIG);
    struct side s_big = {"sluice 1 limit", H_AT, limiter(&big, false, SLUICE_CLOCK_MONOTONIC), .ks = &big};
    struct side s_bigsplit = {"sluice 1 limit", H_AT,
                              limiter_made(&big, false, SLUICE_CLOCK_MONOTONIC, 2), .ks = &big};
    struct side s_big2 = {"sluice 2 limits", H_AT, limiter(&big, true, SLUICE_CLOCK_MONOTONIC), .ks = &big};
    struct side s_bigall = {"acquire_all 2 keys", H_ALL2, s_big.l, .ks = &big};
    struct side s_batch = {"acquire_batch 16", H_BATCH, s_big.l, .ks = &big};
    struct side f_big = {"floor", H_FLOOR, .f = hfloor_new(&big), .ks = &big};
    struct side m_big = {"global mutex", H_TABLE, .b = baseline_new(1, BIG, 1000, NS_PER_S / 1000),
                         .ks = &big};
    struct side x_big = {"striped mutex", H_TABLE,
                         .b = baseline_new(256, BIG, 1000, NS_PER_S / 1000), .ks = &big};
    struct side s_bigtsc = {"sluice_acquire TSC", H_CLOCK, limiter(&big, false, SLUICE_CLOCK_TSC),
                            .ks = &big};
    for (uint64_t i = 0; i < BIG; i++) {
        baseline_acquire(m_big.b, big.bytes + i * KEY_LEN, KEY_LEN, 0);
        baseline_acquire(x_big.b, big.bytes + i * KEY_LEN, KEY_LEN, 0);
    }

#define ROW(what_, target_, goal_, at_most_)                                                    \
    (rows[n] = (struct row){.what = what_, .target = target_, .goal = goal_, .at_most = at_most_}, \
     &rows[n++])
    compare(ROW("hot key, 1 limit: sluice / floor", "<= 1.5x", 1.5, true), &s_hot, &f_hot,
            hot_idx, 1, ops, false);
    compare(ROW("2^20 uniform, 1 thr: sluice / floor", "<= 1.3x", 1.3, true), &s_big, &f_big,
            big_idx, 1, ops, false);
    compare(ROW("2^20 uniform, 1 thr: global mutex / sluice", ">= 1.5x", 1.5, false), &s_big,
            &m_big, big_idx, 1, ops, true);
    compare(ROW("2^20 uniform, 1 thr: striped mutex / sluice", ">= 1.5x", 1.5, false), &s_big,
            &x_big, big_idx, 1, ops, true);
    compare(ROW("2^20 uniform, 2 thr: global mutex / sluice", ">= 3x", 3, false), &s_big, &m_big,
            big_idx, 2, ops, true);
    compare(ROW("2^20 uniform, 2 thr: striped mutex / sluice", ">= 3x", 3, false), &s_big,
            &x_big, big_idx, 2, ops, true);
    compare(ROW("hot: GCRA/s + daily window / 1 limit", "<= 1.3x", 1.3, true), &s_hot2, &s_hot,
            hot_idx, 1, ops, false);
    compare(ROW("2^20: GCRA/s + daily window / 1 limit", "<= 1.3x", 1.3, true), &s_big2, &s_big,
            big_idx, 1, ops, false);
    compare(ROW("hot: acquire_all 2 keys / 1 key", "<= 1.6x", 1.6, true), &s_hotall, &s_hot,
            hot_idx, 1, ops, false);
    compare(ROW("2^20: acquire_all 2 keys / 1 key", "<= 1.6x", 1.6, true), &s_bigall, &s_big,
            big_idx, 1, ops, false);
    compare(ROW("2^20: single calls / acquire_batch of 16", ">= 2x", 2, false), &s_batch, &s_big,
            big_idx, 1, ops, true);
    compare_scaling(ROW("2^20 split: 2 thr / 1 thr throughput", ">= 1.8x", 1.8, false),
                    &s_bigsplit, ops);
    /* the target: distinct keys scale at 10^3 keys as at 2^20 */
    compare_scaling(ROW("10^3 split: 2 thr / 1 thr throughput", "as 2^20", rows[n - 1].ratio * 0.9,
                        false),
                    &s_few, ops);
    /* the same keys made by one thread and dealt to two alternately: the
     * entries of the two threads' keys then share pairs of lines */
    struct row dealt = {.what = "10^3 split, keys made by one thread"};
    compare_scaling(&dealt, &s_few1, ops);
    struct row cas = {.what = "CAS on private lines, 2 thr / 1 thr"};
    cas_scaling(&cas);
    compare_go(ROW("1 key: Go x/time/rate / sluice_acquire TSC", ">= 5x", 5, false), &s_hottsc,
               hot_idx, 1, ops);
    compare_go(ROW("2^20: Go x/time/rate / sluice_acquire TSC", ">= 5x", 5, false), &s_bigtsc,
               big_idx, BIG, ops);
#undef ROW
    bpk = bytes_per_key(&big);

    printf("\nIssue 12 targets: each pair run interleaved %d times, %llu decisions per side per\n"
           "round; a, b: median ns per decision (per thread); ratio: median of the rounds'\n"
           "ratios [lowest..highest]; the split rows run at least %.1f s a side per round\n",
           REPS, (unsigned long long)ops, SCALE_RUN_NS / 1e9);
    if (o->quick)
        printf("(--quick: %llu keys where the rows say 2^20; not the targets' size)\n",
               (unsigned long long)BIG);
    printf("%-45s %8s %8s %7s %17s %9s %s\n", "case", "a ns", "b ns", "ratio", "[spread]",
           "target", "met");
    for (int i = 0; i < n; i++) {
        struct row *w = &rows[i];
        if (!w->done) {
            printf("%-45s %8s %8s %7s %17s %9s %s\n", w->what, "-", "-", "-", "", w->target,
                   "(Go peer not built: needs go and golang.org/x/time)");
            continue;
        }
        bool met = w->at_most ? w->ratio <= w->goal : w->ratio >= w->goal;
        char spread[40];
        snprintf(spread, sizeof(spread), "[%.2f..%.2f]", w->lo, w->hi);
        printf("%-45s %8.1f %8.1f %6.2fx %17s %9s %s\n", w->what, w->a, w->b, w->ratio, spread,
               w->target, met ? "yes" : "no");
        if (csv)
            fprintf(csv, "target,%s,%.2f,%.2f,%.3f,%.3f,%.3f,%s\n", w->what, w->a, w->b, w->ratio,
                    w->lo, w->hi, met ? "met" : "missed");
    }
    printf("  (yardstick of the 10^3 split row, this machine's locked instructions: %s\n"
           "   %.1f ns a CAS on 1 thread, %.1f on 2, %.2fx [%.2f..%.2f])\n",
           cas.what, cas.a, cas.b, cas.ratio, cas.lo, cas.hi);
    if (csv)
        fprintf(csv, "target,%s,%.2f,%.2f,%.3f,%.3f,%.3f,reference\n", cas.what, cas.a, cas.b,
                cas.ratio, cas.lo, cas.hi);
    printf("  (the 10^3 split row's keys were made by the threads that decide them; %s\n"
           "   and dealt alternately to two: %.1f ns a decision on 1 thread, %.1f on 2, %.2fx "
           "[%.2f..%.2f])\n",
           dealt.what, dealt.a, dealt.b, dealt.ratio, dealt.lo, dealt.hi);
    if (csv)
        fprintf(csv, "target,%s,%.2f,%.2f,%.3f,%.3f,%.3f,reference\n", dealt.what, dealt.a,
                dealt.b, dealt.ratio, dealt.lo, dealt.hi);
    printf("%-45s %8.1f %8s %7s %17s %9s %s\n", "bytes per key at 2^20 GCRA keys of 16 B", bpk, "",
           "", "", "<= 48", bpk <= 48 ? "yes" : "no");
    printf("  (floor: %.0f B per key: 4 B tag + 8 B word per slot at half load)\n",
           (double)(12 * (f_big.f->mask + 1)) / (double)BIG);
    {
        struct sluice_stats st;
        sluice_stats(s_bigtsc.l, &st);
        if (st.clock != SLUICE_CLOCK_TSC)
            printf("  (no invariant TSC here: the TSC rows ran on CLOCK_MONOTONIC)\n");
    }
    if (csv)
        fprintf(csv, "target,bytes per key,%.1f,,,,,%s\n", bpk, bpk <= 48 ? "met" : "missed");

    sluice_destroy(s_hot.l);
    sluice_destroy(s_hot2.l);
    sluice_destroy(s_few.l);
    sluice_destroy(s_few1.l);
    sluice_destroy(s_bigsplit.l);
    sluice_destroy(s_hottsc.l);
    sluice_destroy(s_big.l);
    sluice_destroy(s_big2.l);
    sluice_destroy(s_bigtsc.l);
    hfloor_free(f_hot.f);
    hfloor_free(f_big.f);
    baseline_free(m_big.b);
    baseline_free(x_big.b);
    for (unsigned t = 0; t < 2; t++) {
        free(hot_idx[t]);
        free(big_idx[t]);
    }
    keyset_free(&hot);
    keyset_free(&big);
    keyset_free(&few);
}
