/*
 * A denial's numbers while its key is moved.  Key "k" has a spent fixed
 * window of 1 per hour (limit 0) and, in the stacked mode, a GCRA limit
 * that admits.  One thread denies on "k" with a result; another flips an
 * override on "k" with the same policy, so the entry is frozen and
 * replaced (its state carried) over and over.  A denial whose charge saw
 * the entry live and whose report then found it frozen had its result
 * filled from a report never written: remaining and reset_after were
 * whatever the stack held (a reviewer: 0xFEFE... under
 * -ftrivial-auto-var-init=pattern, stale numbers otherwise).  So the
 * stack is filled with that pattern before each call, and every denial
 * must name limit 0 with numbers that fit it.
 * Modes: stacked sluice_acquire_at, sluice_acquire_all of two keys (one
 * limit each), single-limit sluice_acquire_at.
 * Usage: result_race [scale]
 */
#include <pthread.h>
#include <stdatomic.h>

#include "helpers.h"

#define HOUR (3600 * NS_PER_S)
#define PATTERN 0xFE

static sluice_t *lim;
static struct sluice_policy pol;
static atomic_bool stop;

static void *flipper(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        (void)sluice_override_set(lim, "k", 1, &pol);
        (void)sluice_override_clear(lim, "k", 1);
    }
    return NULL;
}

/* Leaves the pattern where the next call's frames will be. */
static __attribute__((noinline)) void dirty_stack(void)
{
    volatile unsigned char buf[8192];

    memset((void *)buf, PATTERN, sizeof(buf));
}

static bool result_fits(const struct sluice_result *r)
{
    return r->limit == 1 && r->remaining == 0 && r->limit_index == 0 && r->period_ns == HOUR &&
           r->reset_after_ns <= HOUR && r->retry_after_ns >= 1 && r->retry_after_ns <= HOUR &&
           r->key_index == 0;
}

static void run_mode(int mode, uint64_t calls)
{
    struct sluice_config cfg;
    struct sluice_key keys[2];
    uint64_t t = 5000 * NS_PER_S, bad = 0, denied = 0;
    pthread_t th;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 1, HOUR);
    if (mode == 0)
        sluice_policy_add(&cfg.policy, SLUICE_GCRA, 1000, NS_PER_S);
    pol = cfg.policy;
    lim = t_create(&cfg);
    keys[0] = (struct sluice_key){lim, "k", 1};
    keys[1] = (struct sluice_key){lim, "other", 5};
    CHECK_EQ(sluice_acquire_at(lim, "k", 1, 1, t, NULL), SLUICE_ALLOW);
    atomic_store(&stop, false);
    if (pthread_create(&th, NULL, flipper, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(1);
    }
    for (uint64_t i = 0; i < calls; i++) {
        struct sluice_result r;
        int rc;
        dirty_stack();
        memset(&r, PATTERN, sizeof(r));
        rc = mode == 1 ? sluice_acquire_all(keys, 2, 1, t, &r)
                       : sluice_acquire_at(lim, "k", 1, 1, t, &r);
        CHECK_EQ(rc, SLUICE_DENY);
        denied += rc == SLUICE_DENY;
        if (rc == SLUICE_DENY && !result_fits(&r) && bad++ < 3)
            fprintf(stderr,
                    "mode %d call %llu: limit %llu remaining %llu retry_after %llu "
                    "reset_after %llu period %llu limit_index %u key_index %u\n",
                    mode, (unsigned long long)i, (unsigned long long)r.limit,
                    (unsigned long long)r.remaining, (unsigned long long)r.retry_after_ns,
                    (unsigned long long)r.reset_after_ns, (unsigned long long)r.period_ns,
                    r.limit_index, r.key_index);
    }
    atomic_store(&stop, true);
    pthread_join(th, NULL);
    printf("mode %d: %llu denials, %llu with numbers that do not fit\n", mode,
           (unsigned long long)denied, (unsigned long long)bad);
    CHECK_U64(bad, 0);
    sluice_destroy(lim);
}

int main(int argc, char **argv)
{
    uint64_t calls = (uint64_t)(5000000 * t_scale(argc, argv));

    for (int mode = 0; mode < 3; mode++)
        run_mode(mode, calls);
    return t_done("result_race");
}
