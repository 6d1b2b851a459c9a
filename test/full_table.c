/*
 * A full table (max_keys live) and the reaper: a new key gets the room of
 * an idle key whenever one exists, in any shard, without a reap call; the
 * background reaper never spins, whatever its interval.
 */
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

static sluice_t *make(size_t max_keys, unsigned shards, uint64_t idle_ttl, uint64_t interval,
                      uint64_t (*clock_fn)(void *))
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 10, NS_PER_S);
    cfg.max_keys = max_keys;
    cfg.shards = shards;
    cfg.idle_ttl_ns = idle_ttl;
    cfg.reap_interval_ns = interval;
    if (clock_fn != NULL) {
        cfg.clock = SLUICE_CLOCK_CUSTOM;
        cfg.clock_fn = clock_fn;
    }
    return t_create(&cfg);
}

/* 64 live keys, all idle later: every one of 20 new keys must get a slot
 * (15 of 20 were denied as full when only every 16th tried to reap). */
static void new_keys_take_idle_rooms(unsigned shards)
{
    sluice_t *l = make(64, shards, 0, 0, NULL);
    struct sluice_result r;
    char key[16];
    unsigned admitted = 0;

    for (unsigned i = 0; i < 64; i++) {
        size_t n = (size_t)snprintf(key, sizeof(key), "old%u", i);
        CHECK_EQ(sluice_acquire_at(l, key, n, 1, 0, NULL), SLUICE_ALLOW);
    }
    CHECK_EQ(sluice_acquire_at(l, "early", 5, 1, 0, &r), SLUICE_DENY);
    CHECK(r.flags & SLUICE_F_FULL);
    for (unsigned i = 0; i < 20; i++) {
        size_t n = (size_t)snprintf(key, sizeof(key), "new%u", i);
        int rc = sluice_acquire_at(l, key, n, 1, 10 * NS_PER_S, &r);
        admitted += rc == SLUICE_ALLOW && !(r.flags & SLUICE_F_FULL);
    }
    CHECK_EQ(admitted, 20);
    struct sluice_stats st;
    sluice_stats(l, &st);
    CHECK(st.keys <= 64);
    sluice_destroy(l);
}

/* One idle key in another shard, found whatever the rotation over shards:
 * with 2 shards, the turn that came to the new key's own shard skipped the
 * scan of the only other one (7 of 40 new keys denied as full). */
static void the_other_shard_is_scanned(bool shared)
{
    unsigned admitted = 0;
    char path[128];

    if (shared && access("/dev/shm", W_OK) != 0)
        return;
    for (unsigned i = 0; i < 40; i++) {
        sluice_t *l;
        struct sluice_result r;
        if (shared) {
            struct sluice_config cfg;
            sluice_config_init(&cfg);
            sluice_policy_add(&cfg.policy, SLUICE_GCRA, 10, NS_PER_S);
            cfg.max_keys = 1;
            cfg.shards = 2;
            t_shm_path(path, sizeof(path), "full-other");
            l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
        } else
            l = make(1, 2, 0, 0, NULL);
        char key[16];
        size_t n = (size_t)snprintf(key, sizeof(key), "new%u", i);
        CHECK_EQ(sluice_acquire_at(l, "old", 3, 10, 0, NULL), SLUICE_ALLOW);
        int rc = sluice_acquire_at(l, key, n, 1, 10 * NS_PER_S, &r);
        admitted += rc == SLUICE_ALLOW && !(r.flags & SLUICE_F_FULL);
        sluice_destroy(l);
        if (shared)
            CHECK_EQ(sluice_unlink_shared(path), 0);
    }
    CHECK_EQ(admitted, 40);
}

/* A peek of a new key at max_keys: as if reaping made room, and it says so
 * (it said ALLOW with no flag where the acquire then denied as full). */
static void peek_at_max_keys(void)
{
    sluice_t *l = make(1, 1, 0, 0, NULL);
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_at(l, "old", 3, 10, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_peek_at(l, "old", 3, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.flags & SLUICE_F_AT_MAX_KEYS, 0); /* tracked */
    /* old busy: the acquire will find no room */
    CHECK_EQ(sluice_peek_at(l, "new", 3, 1, 0, &r), SLUICE_ALLOW);
    CHECK(r.flags & SLUICE_F_AT_MAX_KEYS);
    CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, 0, &r), SLUICE_DENY);
    CHECK(r.flags & SLUICE_F_FULL);
    /* old idle: it will */
    CHECK_EQ(sluice_peek_at(l, "new", 3, 1, 10 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK(r.flags & SLUICE_F_AT_MAX_KEYS);
    CHECK_EQ(sluice_acquire_at(l, "new", 3, 1, 10 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(r.flags & (SLUICE_F_FULL | SLUICE_F_AT_MAX_KEYS), 0);
    sluice_destroy(l);
}

/* Keys still busy are never reaped: a new key is full, the old ones keep
 * their exact state. */
static void busy_keys_stay(void)
{
    sluice_t *l = make(8, 2, 0, 0, NULL);
    struct sluice_result r;
    char key[16];

    for (unsigned i = 0; i < 8; i++) {
        size_t n = (size_t)snprintf(key, sizeof(key), "k%u", i);
        for (int c = 0; c < 10; c++)
            CHECK_EQ(sluice_acquire_at(l, key, n, 1, 0, NULL), SLUICE_ALLOW);
    }
    for (unsigned i = 0; i < 100; i++) {
        size_t n = (size_t)snprintf(key, sizeof(key), "x%u", i);
        CHECK_EQ(sluice_acquire_at(l, key, n, 1, 1, &r), SLUICE_DENY);
        CHECK(r.flags & SLUICE_F_FULL);
    }
    for (unsigned i = 0; i < 8; i++) {
        size_t n = (size_t)snprintf(key, sizeof(key), "k%u", i);
        CHECK_EQ(sluice_acquire_at(l, key, n, 1, 1, NULL), SLUICE_DENY);
    }
    sluice_destroy(l);
}

static _Atomic unsigned long clock_reads;

static uint64_t counting_clock(void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&clock_reads, 1);
    return 0;
}

static double cpu_seconds(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* An interval near UINT64_MAX overflowed the reaper's deadline into the
 * past: the thread spun, reaping (and reading the clock) without pause. */
static void huge_reap_interval(void)
{
    uint64_t intervals[] = {UINT64_MAX, UINT64_MAX - 1, UINT64_MAX / 2, UINT64_C(1) << 63};

    for (size_t i = 0; i < sizeof(intervals) / sizeof(intervals[0]); i++) {
        sluice_t *l = make(100, 0, 0, intervals[i], counting_clock);
        struct timespec nap = {0, 200 * 1000 * 1000};
        double cpu0 = cpu_seconds();
        unsigned long reads0 = atomic_load(&clock_reads);
        nanosleep(&nap, NULL);
        unsigned long reads = atomic_load(&clock_reads) - reads0;
        double cpu = cpu_seconds() - cpu0;
        if (reads > 2 || cpu > 0.1)
            fprintf(stderr, "interval %llu: %lu reaps and %.3f s of CPU in 0.2 s asleep\n",
                    (unsigned long long)intervals[i], reads, cpu);
        CHECK(reads <= 2);
        sluice_destroy(l); /* and the reaper stops at once */
    }
}

int main(void)
{
    new_keys_take_idle_rooms(1);
    new_keys_take_idle_rooms(0);
    new_keys_take_idle_rooms(64);
    peek_at_max_keys();
    the_other_shard_is_scanned(false);
    the_other_shard_is_scanned(true);
    busy_keys_stay();
    huge_reap_interval();
    return t_done("full_table");
}
