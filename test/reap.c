/*
 * Idle keys: reaping semantics, bounded keys, when_full, the background
 * reaper, and reaping concurrently with charging (no lost update).
 * Usage: reap [scale]
 */
#include <stdatomic.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h"

static double scale = 1.0;

/* clock_fn NULL: CLOCK_MONOTONIC. */
static sluice_t *make_clocked(enum sluice_algo algo, size_t max_keys, uint64_t ttl,
                              enum sluice_when_full full, uint64_t interval,
                              uint64_t (*clock_fn)(void *))
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, algo, 5, NS_PER_S);
    cfg.max_keys = max_keys;
    cfg.idle_ttl_ns = ttl;
    cfg.when_full = full;
    cfg.reap_interval_ns = interval;
    if (clock_fn != NULL) {
        cfg.clock = SLUICE_CLOCK_CUSTOM;
        cfg.clock_fn = clock_fn;
    }
    return t_create(&cfg);
}

static sluice_t *make(enum sluice_algo algo, size_t max_keys, uint64_t ttl,
                      enum sluice_when_full full, uint64_t interval)
{
    return make_clocked(algo, max_keys, ttl, full, interval, NULL);
}

/* Only keys whose state is fresh (and idle long enough) go; decisions stay. */
static void test_semantics(void)
{
    enum sluice_algo algos[] = {SLUICE_GCRA, SLUICE_FIXED_WINDOW, SLUICE_SLIDING_WINDOW,
                                SLUICE_SLIDING_LOG, SLUICE_APPROX_SLIDING};
    for (unsigned a = 0; a < 5; a++) {
        sluice_t *l = make(algos[a], 100, 0, SLUICE_FULL_DENY, 0);
        struct sluice_stats st;
        struct sluice_result r;

        CHECK_EQ(sluice_acquire_at(l, "a", 1, 5, 10 * NS_PER_S, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_at(l, "b", 1, 1, 10 * NS_PER_S, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_reap(l, 10 * NS_PER_S), 0); /* both still charged */
        /* two periods later every algorithm is back to fresh */
        CHECK_EQ(sluice_reap(l, 13 * NS_PER_S), 2);
        sluice_stats(l, &st);
        CHECK_EQ(st.keys, 0);
        CHECK_EQ(st.reaped, 2);
        CHECK_EQ(sluice_acquire_at(l, "a", 1, 5, 13 * NS_PER_S, &r), SLUICE_ALLOW);
        CHECK(r.flags & SLUICE_F_NEW_KEY);
        sluice_destroy(l);
    }
    /* idle_ttl: fresh is not enough, the key must also be idle that long */
    sluice_t *l = make(SLUICE_GCRA, 100, 60 * NS_PER_S, SLUICE_FULL_DENY, 0);
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, 10 * NS_PER_S, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_reap(l, 69 * NS_PER_S), 0);
    CHECK_EQ(sluice_reap(l, 70 * NS_PER_S), 1);
    sluice_destroy(l);
}

/* max_keys bounds live keys; when_full decides, after trying to reap. */
static void test_full(void)
{
    struct sluice_result r;
    struct sluice_stats st;
    char key[16];

    for (int mode = 0; mode < 2; mode++) {
        sluice_t *l = make(SLUICE_GCRA, 10, 0, mode ? SLUICE_FULL_ALLOW : SLUICE_FULL_DENY, 0);
        for (int i = 0; i < 10; i++) {
            int n = snprintf(key, sizeof(key), "k%d", i);
            CHECK_EQ(sluice_acquire_at(l, key, (size_t)n, 1, NS_PER_S, NULL), SLUICE_ALLOW);
        }
        CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, NS_PER_S, &r), mode ? SLUICE_ALLOW : SLUICE_DENY);
        CHECK(r.flags & SLUICE_F_FULL);
        CHECK(!(r.flags & SLUICE_F_NEW_KEY));
        /* existing keys keep exact decisions */
        CHECK_EQ(sluice_acquire_at(l, "k0", 2, 4, NS_PER_S, &r), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_at(l, "k0", 2, 1, NS_PER_S, &r), SLUICE_DENY);
        CHECK(!(r.flags & SLUICE_F_FULL));
        sluice_stats(l, &st);
        CHECK_EQ(st.keys, 10);
        CHECK(st.full >= 1);
        /* once idle keys can go, a flood of new keys makes room by reaping */
        int admitted = 0;
        for (int i = 0; i < 64; i++) {
            int n = snprintf(key, sizeof(key), "later%d", i);
            admitted += sluice_acquire_at(l, key, (size_t)n, 1, 100 * NS_PER_S, &r) == SLUICE_ALLOW &&
                        !(r.flags & SLUICE_F_FULL);
        }
        CHECK(admitted >= 1);
        sluice_stats(l, &st);
        CHECK(st.keys <= 10);
        sluice_destroy(l);
    }
}

/* Reaping while other threads charge: a key charged at `now` is never
 * reaped at `now`, and a freshly inserted key reaped under a charger's feet
 * is recreated, so every key admits exactly its capacity. */
struct worker {
    sluice_t *l;
    unsigned id, nkeys;
    uint64_t iters;
    _Atomic uint64_t *per_key;
    _Atomic int *stop;
};

static void *charger(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = w->id + 11;
    char key[16];

    for (uint64_t i = 0; i < w->iters; i++) {
        unsigned k = (unsigned)(t_rand(&rng) % w->nkeys);
        int n = snprintf(key, sizeof(key), "k%u", k);
        if (sluice_acquire_at(w->l, key, (size_t)n, 1, 7 * NS_PER_S, NULL) == SLUICE_ALLOW)
            atomic_fetch_add(&w->per_key[k], 1);
    }
    return NULL;
}

static void *reaper(void *arg)
{
    struct worker *w = arg;

    while (!atomic_load(w->stop))
        (void)sluice_reap(w->l, 7 * NS_PER_S);
    return NULL;
}

static void test_concurrent_reap(void)
{
    enum { NKEYS = 2000 };
    static _Atomic uint64_t per_key[NKEYS];
    _Atomic int stop = 0;
    sluice_t *l = make(SLUICE_FIXED_WINDOW, NKEYS, 0, SLUICE_FULL_DENY, 0);
    struct worker w[4];
    pthread_t rt;
    int wrong = 0;

    for (unsigned i = 0; i < 4; i++)
        w[i] = (struct worker){l, i, NKEYS, (uint64_t)(400000 * scale), per_key, &stop};
    pthread_create(&rt, NULL, reaper, &w[0]);
    t_run_threads(3, charger, w, sizeof(w[0]));
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    for (unsigned k = 0; k < NKEYS; k++)
        wrong += per_key[k] > 5 || (scale >= 1 && per_key[k] != 5);
    CHECK_EQ(wrong, 0);
    sluice_destroy(l);
}

/* Churn of keys through reaping with concurrent chargers on advancing time:
 * memory returns, nothing is used after free (run under ASan/valgrind). */
static void *churner(void *arg)
{
    struct worker *w = arg;
    char key[24];

    for (uint64_t i = 0; i < w->iters; i++) {
        uint64_t now = i * (NS_PER_S / 1000);
        int n = snprintf(key, sizeof(key), "c%u-%llu", w->id, (unsigned long long)(i % 5000));
        (void)sluice_acquire_at(w->l, key, (size_t)n, 1, now, NULL);
        if (w->id == 0 && i % 1000 == 0)
            (void)sluice_reap(w->l, now);
    }
    return NULL;
}

/* The background thread's clock: a day past the machine's uptime, so the
 * churners' times (up to 2 minutes) are old on a machine just booted too
 * (on one up for a minute, CLOCK_MONOTONIC itself left 2,398 keys).  Keys
 * made after one of its passes start at that pass's time, and are old a
 * period later: the test moves the clock on by an hour once the churners
 * are done rather than wait for the machine's time to get there.  Only the
 * background thread reads it here, once before each pass. */
static _Atomic uint64_t clock_ahead = 86400 * NS_PER_S;
static atomic_uint_fast64_t clock_reads;

static uint64_t day_ahead_clock(void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&clock_reads, 1);
    return t_mono() + atomic_load(&clock_ahead);
}

static void test_background_reaper(void)
{
    sluice_t *l = make_clocked(SLUICE_GCRA, 1 << 16, 1, SLUICE_FULL_ALLOW, NS_PER_S / 100,
                               day_ahead_clock);
    struct worker w[2];
    struct sluice_stats st;
    uint64_t reads, give_up;

    for (unsigned i = 0; i < 2; i++)
        w[i] = (struct worker){l, i, 0, (uint64_t)(100000 * scale) + 20000, NULL, NULL};
    t_run_threads(2, churner, w, sizeof(w[0]));
    sluice_stats(l, &st);
    CHECK(st.reaped > 0);
    CHECK_EQ(st.keys + st.reaped, st.inserted);
    /* the background thread reaps by the limiter clock, where all is old:
     * the pass that read it first after this has finished once it is read
     * again.  Counted in passes, not in a wall-clock time a loaded machine
     * may not give that thread; the give-up is for a thread that does not
     * run at all (every 10 ms, here). */
    atomic_fetch_add(&clock_ahead, 3600 * NS_PER_S);
    reads = atomic_load(&clock_reads);
    give_up = t_mono() + 30 * NS_PER_S;
    while (atomic_load(&clock_reads) < reads + 2 && t_mono() < give_up)
        usleep(1000);
    CHECK(atomic_load(&clock_reads) >= reads + 2);
    sluice_stats(l, &st);
    CHECK_EQ(st.keys, 0);
    sluice_destroy(l);
}

/*
 * A reap at a time before a key's latest admission leaves the key: a
 * request stamped between the two must still be decided as at that
 * admission.  The key's fixed 6/s window is spent in the second after the
 * reap's; an override there and back leaves its state fresh (a sliding
 * window carries nothing into a fixed one) with the admission's time kept.
 * Reaped and made again, the key decided six stale requests in the
 * earlier second and admitted a seventh in the spent one.
 */
static void test_reap_before_admission(void)
{
    const uint64_t t = 1000 * NS_PER_S + NS_PER_S / 2, ms = NS_PER_S / 1000;
    struct sluice_policy other = {.nlimits = 1,
                                  .limits = {{.algo = SLUICE_SLIDING_WINDOW, .count = 4,
                                              .period_ns = NS_PER_S}}};
    struct sluice_config cfg;
    sluice_t *l;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 6, NS_PER_S);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t + 975 * ms, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_override_set(l, "k", 1, &other), 0);
    CHECK_EQ(sluice_override_clear(l, "k", 1), 0);
    CHECK_EQ(sluice_reap(l, t), 0);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t + 250 * ms, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t + 975 * ms, NULL), SLUICE_DENY);
    sluice_destroy(l);
}

/*
 * A key made after a reap is decided from the reap's time (a request
 * stamped before it, as at it): a peek of the absent key must say what
 * that acquire will, and both count their waits from the request's own
 * time.  The peek answered at the request's time (reset_after 0.3 s
 * shorter), and the acquire's retry_after counted from the reap's.
 */
static void peek_below_reap_floor(sluice_t *l)
{
    const uint64_t t = 1000 * NS_PER_S, ms = NS_PER_S / 1000, asked = t + 2800 * ms;
    struct sluice_result pk, r;

    CHECK_EQ(sluice_acquire_at(l, "old", 3, 1, t, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_reap(l, t + 3200 * ms), 1);
    /* stamped 0.4 s before the reap, in the window before the reap's */
    CHECK_EQ(sluice_peek_at(l, "new", 3, 1, asked, &pk), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, asked, &r), SLUICE_ALLOW);
    CHECK_U64(pk.remaining, r.remaining);
    CHECK_U64(pk.reset_after_ns, r.reset_after_ns);
    CHECK_U64(r.reset_after_ns, 1200 * ms); /* the reap's window ends at t + 4 s */
    CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, asked, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, asked, &r), SLUICE_DENY);
    CHECK_U64(r.retry_after_ns, 1200 * ms);
    CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, asked + 1200 * ms - 1, &r), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, asked + 1200 * ms, &r), SLUICE_ALLOW);
}

static void test_peek_below_reap_floor(void)
{
    struct sluice_config cfg;
    char path[256];
    sluice_t *l;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 2, NS_PER_S);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    peek_below_reap_floor(l);
    sluice_destroy(l);
    t_shm_path(path, sizeof(path), "reap-floor");
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    peek_below_reap_floor(l);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * An admission racing a reset of its key: the reset freezes the entry,
 * copies its latest admission time to the replacement and publishes it; an
 * admission that charged the entry before the freeze but raised its time
 * after the copy must still leave that time on the key, or a reap at an
 * earlier time takes a key admitted after it (a reap never does).  Each
 * round: one thread admits at t, another resets the key, then (serially)
 * a reap at t - 1 ns must remove nothing.
 */
struct race_arg {
    sluice_t *l;
    pthread_barrier_t *bar;
    int id, rounds;
    _Atomic uint64_t *t;
};

static void *race_main(void *p)
{
    struct race_arg *a = p;

    for (int r = 0; r < a->rounds; r++) {
        pthread_barrier_wait(a->bar);
        if (a->id == 0) {
            if (sluice_acquire_at(a->l, "k", 1, 1, atomic_load(a->t), NULL) != SLUICE_ALLOW)
                t_failures++;
        } else {
            for (int spin = r % 64; spin > 0; spin--)
                sl_cpu_relax();
            (void)sluice_reset(a->l, "k", 1);
        }
        pthread_barrier_wait(a->bar);
        if (a->id == 0) {
            size_t gone = sluice_reap(a->l, atomic_load(a->t) - 1);
            if (gone != 0) {
                fprintf(stderr, "round %d: a reap at t - 1 removed a key admitted at t\n", r);
                t_failures++;
            }
            atomic_fetch_add(a->t, NS_PER_S);
        }
    }
    return NULL;
}

static void test_reset_racing_admission(void)
{
    struct race_arg args[2];
    pthread_barrier_t bar;
    _Atomic uint64_t t = 1000 * NS_PER_S;
    struct sluice_config cfg;
    sluice_t *l;
    int rounds = (int)(200000 * scale);

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 1000, NS_PER_S);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    pthread_barrier_init(&bar, NULL, 2);
    for (int i = 0; i < 2; i++)
        args[i] = (struct race_arg){l, &bar, i, rounds, &t};
    t_run_threads(2, race_main, args, sizeof(args[0]));
    pthread_barrier_destroy(&bar);
    sluice_destroy(l);
}

/*
 * One reap retires thousands of entries, freed a chunk at a time (one arena
 * lock per chunk, one subtraction per run of entries sharing a policy):
 * here keys of two policies interleave in the table, and every third key is
 * long enough to live outside the slabs.  Afterwards the entries' policy
 * references are all gone (the current policy is held by the limiter
 * alone), and the freed blocks serve new keys that decide as fresh ones.
 */
static void test_batch_free(void)
{
    struct sluice_config cfg;
    struct sluice_result r;
    struct sluice_stats st;
    const unsigned n = 3000;
    char key[320];
    uint64_t mem;
    sluice_t *l;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 5, NS_PER_S);
    cfg.max_keys = 2 * n;
    cfg.max_key_len = sizeof(key);
    l = t_create(&cfg);
    memset(key, 'k', sizeof(key));
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, 16, "key-%08u", i);
        CHECK_EQ(sluice_acquire_at(l, key, i % 3 ? 16 : sizeof(key), 1, 10 * NS_PER_S, NULL),
                 SLUICE_ALLOW);
    }
    {
        struct sluice_policy p = {0};
        sluice_policy_add(&p, SLUICE_GCRA, 7, NS_PER_S);
        CHECK_EQ(sluice_set_policy(l, &p), 0);
    }
    for (unsigned i = 1; i < n; i += 2) { /* half the keys migrate to the new policy */
        snprintf(key, 16, "key-%08u", i);
        CHECK_EQ(sluice_acquire_at(l, key, i % 3 ? 16 : sizeof(key), 1, 11 * NS_PER_S, NULL),
                 SLUICE_ALLOW);
    }
    sluice_stats(l, &st);
    mem = st.memory_bytes;
    CHECK_EQ(sluice_reap(l, 100 * NS_PER_S), n);
    sl_epoch_drain(sl_thread_get()); /* run every pending free now */
    CHECK_EQ(atomic_load(&atomic_load(&l->policy)->refs), 1);
    sluice_stats(l, &st);
    CHECK_EQ(st.keys, 0);
    /* each long key's block (384 B from aligned_alloc) is no longer counted */
    CHECK(st.memory_bytes + (n / 3) * 384 <= mem);
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, 16, "key-%08u", i);
        CHECK_EQ(sluice_acquire_at(l, key, i % 3 ? 16 : sizeof(key), 7, 100 * NS_PER_S, &r),
                 SLUICE_ALLOW);
        CHECK((r.flags & SLUICE_F_NEW_KEY) && r.remaining == 0 && r.limit == 7);
    }
    sluice_destroy(l);
}

int main(int argc, char **argv)
{
    scale = t_scale(argc, argv);
    test_semantics();
    test_full();
    test_batch_free();
    test_concurrent_reap();
    test_background_reaper();
    test_reap_before_admission();
    test_peek_below_reap_floor();
    test_reset_racing_admission();
    return t_done("reap");
}
