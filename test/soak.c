/*
 * Soak: a mixed workload for a while (default 600 s) with invariants checked
 * as it runs.  Not in the default suite: meson test -C build --suite soak
 * Usage: soak [seconds]
 *
 * One limiter takes chaos (acquire, peek, acquire_all, reset, set_policy
 * flips, overrides, reaping, short-lived threads); its counters must stay
 * consistent and bounded.  An audit limiter (sliding log, 50 per 100 ms)
 * sees only decisions and reaping, and no 100 ms interval may ever hold
 * more than 50 admissions of one key.
 */
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define AUDIT_KEYS 8
#define AUDIT_COUNT 50
#define AUDIT_PERIOD (NS_PER_S / 10)
#define MAX_KEYS 5000
#define KEY_NAMES 200000 /* most idle at any time: reaped, and made again */

static sluice_t *chaos, *audit;
static _Atomic int stop;
static _Atomic uint64_t clock_ns = 1000 * NS_PER_S, ops, errors;

static uint64_t tick(void)
{
    return atomic_fetch_add(&clock_ns, 997) + 997;
}

/* The chaos limiter's own clock, which its background reaper reaps at: the
 * test's.  At CLOCK_MONOTONIC, hours past the test's times on a machine up
 * that long, one reap made every new key start at its time (the reap
 * floor), a minute-long window then kept them all busy, and the soak ran
 * 56% of its decisions on a full table with 60,000 keys made in 10 min.
 * With windows of 2 s of the test's time (about a second here) and many
 * more names than places, keys go idle and are made again: about 1,900 a
 * second in a 20 s run, where 20,000 names and minute windows made none. */
static uint64_t test_clock(void *ctx)
{
    (void)ctx;
    return atomic_load(&clock_ns);
}

/* Admissions of the audit keys: [own time, clock at return] (see concurrency.c). */
struct audit_log {
    pthread_mutex_t lock;
    uint64_t (*at)[2];
    size_t n, cap;
} logs[AUDIT_KEYS];

static void *decider(void *arg)
{
    uint64_t rng = (uintptr_t)arg;
    char key[24];

    while (!atomic_load(&stop)) {
        uint64_t now = tick(), r = t_rand(&rng);
        int n = snprintf(key, sizeof(key), "k%llu", (unsigned long long)(r % KEY_NAMES));
        int rc = (r >> 32) % 4 ? sluice_acquire_at(chaos, key, (size_t)n, 1 + (r >> 40) % 3, now, NULL)
                               : sluice_peek_at(chaos, key, (size_t)n, 1, now, NULL);
        if (rc < 0 && rc != -E2BIG)
            atomic_fetch_add(&errors, 1);
        unsigned a = (unsigned)(r % AUDIT_KEYS);
        char ak[8] = {'a', (char)('0' + a), 0};
        if (sluice_acquire_at(audit, ak, 2, 1, now, NULL) == SLUICE_ALLOW) {
            uint64_t hi = atomic_load(&clock_ns);
            pthread_mutex_lock(&logs[a].lock);
            if (logs[a].n == logs[a].cap) {
                logs[a].cap = logs[a].cap ? logs[a].cap * 2 : 4096;
                logs[a].at = realloc(logs[a].at, logs[a].cap * sizeof(*logs[a].at));
            }
            logs[a].at[logs[a].n][0] = now;
            logs[a].at[logs[a].n++][1] = hi;
            pthread_mutex_unlock(&logs[a].lock);
        }
        atomic_fetch_add(&ops, 1);
    }
    return NULL;
}

static void *admin(void *arg)
{
    struct sluice_policy p[2] = {{0}, {0}}, vip = {0};
    uint64_t rng = (uintptr_t)arg;
    char key[24];

    sluice_policy_add(&p[0], SLUICE_GCRA, 10, NS_PER_S);
    sluice_policy_add(&p[0], SLUICE_FIXED_WINDOW, 30, 2 * NS_PER_S);
    sluice_policy_add(&p[1], SLUICE_GCRA, 20, NS_PER_S);
    sluice_policy_add(&p[1], SLUICE_SLIDING_WINDOW, 60, 2 * NS_PER_S);
    sluice_policy_add(&vip, SLUICE_SLIDING_LOG, 64, NS_PER_S);
    for (unsigned i = 0; !atomic_load(&stop); i++) {
        uint64_t r = t_rand(&rng);
        int n = snprintf(key, sizeof(key), "k%llu", (unsigned long long)(r % KEY_NAMES)), rc;
        switch (i % 5) {
        case 0:
            rc = sluice_set_policy(chaos, &p[(i / 5) & 1]);
            break;
        case 1:
            rc = sluice_override_set(chaos, key, (size_t)n, &vip);
            rc = rc == -ENOSPC ? 0 : rc;
            break;
        case 2:
            rc = sluice_override_clear(chaos, key, (size_t)n);
            rc = rc == -ENOENT ? 0 : rc;
            break;
        case 3:
            rc = sluice_reset(chaos, key, (size_t)n);
            rc = rc == -ENOENT ? 0 : rc;
            break;
        default: {
            pthread_t th;
            rc = 0;
            (void)sluice_reap(chaos, atomic_load(&clock_ns));
            (void)sluice_reap(audit, atomic_load(&clock_ns));
            if (pthread_create(&th, NULL, decider, (void *)(uintptr_t)r) == 0) {
                usleep(200); /* a short-lived thread */
                pthread_join(th, NULL);
            }
        }
        }
        if (rc != 0)
            atomic_fetch_add(&errors, 1);
        usleep(100);
    }
    return NULL;
}

static int cmp_pair(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* No interval [lo_i, lo_i + period) surely holds more than count. */
static uint64_t audit_worst(struct audit_log *lg)
{
    uint64_t worst = 0;

    pthread_mutex_lock(&lg->lock);
    qsort(lg->at, lg->n, sizeof(*lg->at), cmp_pair);
    for (size_t i = 0; i < lg->n; i++) {
        uint64_t n = 0;
        for (size_t j = i; j < lg->n && lg->at[j][0] < lg->at[i][0] + AUDIT_PERIOD; j++)
            n += lg->at[j][1] < lg->at[i][0] + AUDIT_PERIOD;
        worst = n > worst ? n : worst;
    }
    lg->n = 0; /* checked: start a new stretch */
    pthread_mutex_unlock(&lg->lock);
    return worst;
}

int main(int argc, char **argv)
{
    unsigned seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 600;
    struct sluice_config cfg;
    pthread_t th[4];
    time_t end = time(NULL) + seconds;
    uint64_t worst = 0, max_mem = 0;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 10, NS_PER_S);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 30, 2 * NS_PER_S);
    cfg.max_keys = MAX_KEYS;
    cfg.when_full = SLUICE_FULL_ALLOW;
    cfg.reap_interval_ns = NS_PER_S / 20;
    cfg.clock = SLUICE_CLOCK_CUSTOM;
    cfg.clock_fn = test_clock;
    CHECK_EQ(sluice_create(&cfg, &chaos), 0);
    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_SLIDING_LOG, AUDIT_COUNT, AUDIT_PERIOD);
    CHECK_EQ(sluice_create(&cfg, &audit), 0);
    for (int i = 0; i < AUDIT_KEYS; i++)
        pthread_mutex_init(&logs[i].lock, NULL);
    pthread_create(&th[0], NULL, decider, (void *)1);
    pthread_create(&th[1], NULL, decider, (void *)2);
    pthread_create(&th[2], NULL, decider, (void *)3);
    pthread_create(&th[3], NULL, admin, (void *)4);
    while (time(NULL) < end && t_failures == 0) {
        struct sluice_stats st;
        sleep(1);
        sluice_stats(chaos, &st);
        CHECK(st.keys <= MAX_KEYS);
        max_mem = st.memory_bytes > max_mem ? st.memory_bytes : max_mem;
        for (int i = 0; i < AUDIT_KEYS; i++) {
            uint64_t w = audit_worst(&logs[i]);
            worst = w > worst ? w : worst;
        }
        CHECK(worst <= AUDIT_COUNT);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    struct sluice_stats st;
    sluice_stats(chaos, &st);
    CHECK_EQ(st.keys + st.reaped, st.inserted);
    CHECK_EQ(atomic_load(&errors), 0);
    printf("soak: %u s, %llu decisions, %llu keys inserted, %llu reaped, %llu full; audit worst "
           "%llu of %d per period; peak memory %.1f MiB\n",
           seconds, (unsigned long long)atomic_load(&ops), (unsigned long long)st.inserted,
           (unsigned long long)st.reaped, (unsigned long long)st.full, (unsigned long long)worst,
           AUDIT_COUNT, (double)max_mem / 1048576);
    sluice_destroy(chaos);
    sluice_destroy(audit);
    for (int i = 0; i < AUDIT_KEYS; i++)
        free(logs[i].at);
    return t_done("soak");
}
