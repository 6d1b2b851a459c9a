/*
 * A stacked pair of one-word limits (a peak and a quota) is charged by
 * the lean path in one CAS of its two words (lean.h, sl_lean_charge_pair)
 * and by the general path one CAS per word (charge.c).  Both must keep
 * every unit of the other: a pair CAS that compared one word and stored
 * both would overwrite a general charge that landed on the other word
 * between its read and its CAS, and admit past that limit.
 *
 * Per round, a fresh key and a fresh day: limit b (the binding one) admits
 * N units in the round, the other far more.  Threads charge the key at the
 * round's one instant, 1 or 2 units a call, each call taking the lean path
 * (no result) or the general path (a result asked for) at random, until
 * all of them have seen the key refuse.  In half the rounds a thread sets
 * the same policy again and again meanwhile, so that the key is frozen
 * and moved to each new default (its state carried) under the charges.
 * No serial order admits more than N units; one thread alone admits
 * exactly N, by either path, and is then refused.  The binding limit is
 * limit 0 in half the rounds and limit 1 in the other half, of each
 * one-word algorithm, so a lost update on either word shows.
 * Usage: pair_race [scale] [threads]
 */
#include <sched.h>
#include <stdatomic.h>

#include "helpers.h"
#include "internal.h"

#define DAY (UINT64_C(86400) * NS_PER_S)
#define T0 (UINT64_C(1000) * DAY)
#define N 300u

struct worker {
    sluice_t *l;
    const char *key;
    uint64_t at, rng, admitted; /* admitted: units */
    atomic_int *go;
};

/* Sets the policy in force again (the same limits) until told to stop:
 * each time, the key's next call moves it to the new default (a freeze,
 * its state carried word for word), so pair CASes meet freezes. */
struct flipper {
    sluice_t *l;
    struct sluice_policy pol;
    atomic_int stop;
};

/* The policy of round r: limit `bind` (r's bit 0) admits N in the round's
 * instant, the other 100 * N; each of the one-word algorithms (GCRA, the
 * fixed window, the approximate sliding window), r / 2 choosing the pair. */
static void round_policy(uint64_t r, struct sluice_policy *p)
{
    static const enum sluice_algo one_word[3] = {SLUICE_GCRA, SLUICE_FIXED_WINDOW,
                                                 SLUICE_APPROX_SLIDING};
    unsigned bind = (unsigned)(r & 1);

    memset(p, 0, sizeof(*p));
    p->nlimits = 2;
    for (unsigned j = 0; j < 2; j++) {
        enum sluice_algo algo = one_word[(r / 2 / (j == 0 ? 1 : 3)) % 3];
        uint64_t count = j == bind ? N : 100 * N;
        p->limits[j] = t_limit(algo, count, DAY, 0, 0);
    }
}

/* A cost of 1 or 2, by the lean path (no result) or the general one. */
static int decide(struct worker *w, uint64_t *cost)
{
    struct sluice_result res;
    uint64_t r = t_rand(&w->rng);

    *cost = 1 + ((r >> 1) & 1);
    return sluice_acquire_at(w->l, w->key, strlen(w->key), *cost, w->at, r & 1 ? &res : NULL);
}

static void *flip(void *arg)
{
    struct flipper *f = arg;

    while (atomic_load(&f->stop) == 0) {
        int rc = sluice_set_policy(f->l, &f->pol);
        if (rc != 0) {
            fprintf(stderr, "pair_race: set_policy: %s\n", sluice_strerror(rc));
            exit(1);
        }
        for (volatile int i = 0; i < 2000; i = i + 1)
            ;
    }
    return NULL;
}

/* Charges until refused 64 times running: the key is spent, as no charge
 * in flight can be taken back (the other limit never refuses). */
static void *charger(void *arg)
{
    struct worker *w = arg;
    unsigned refused = 0;

    while (atomic_load(w->go) == 0)
        sched_yield();
    while (refused < 64) {
        uint64_t cost;
        int rc = decide(w, &cost);
        if (rc < 0) {
            fprintf(stderr, "pair_race: acquire: %s\n", sluice_strerror(rc));
            exit(1);
        }
        if (rc == SLUICE_ALLOW) {
            w->admitted += cost;
            refused = 0;
        } else {
            refused++;
        }
    }
    return NULL;
}

/* Units admitted on key at `at` by `threads` chargers, with a flipper
 * beside them if flips (its policy: pol). */
static uint64_t race(sluice_t *l, const char *key, uint64_t at, unsigned threads, uint64_t seed,
                     const struct sluice_policy *pol, bool flips)
{
    struct worker w[16];
    struct flipper f = {.l = l, .pol = *pol};
    atomic_int go = 0;
    pthread_t th[16], ft;
    uint64_t total = 0;

    if (flips && pthread_create(&ft, NULL, flip, &f) != 0) {
        perror("pthread_create");
        exit(1);
    }

    for (unsigned i = 0; i < threads; i++) {
        w[i] = (struct worker){.l = l, .key = key, .at = at, .rng = seed * 31 + i, .go = &go};
        if (pthread_create(&th[i], NULL, charger, &w[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    atomic_store(&go, 1);
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        total += w[i].admitted;
    }
    if (flips) {
        atomic_store(&f.stop, 1);
        pthread_join(ft, NULL);
    }
    return total;
}

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);
    unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 4;
    uint64_t rounds = (uint64_t)(2000 * scale) + 8, over = 0, serial_bad = 0;
    struct sluice_config cfg;
    sluice_t *l;
    char key[32];

    if (threads < 2 || threads > 16)
        threads = 4;
    /* where the CPU cannot, the lean path charges a CAS per word: the
     * same test of that path */
    printf("pair_race: the lean path's pair CAS is %s\n",
           sl_cas_pair_usable() ? "in use" : "not available here");
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t at = T0 + r * DAY, got;
        sluice_config_init(&cfg);
        round_policy(r, &cfg.policy);
        l = t_create(&cfg);
        /* one thread first: exactly N, by both paths at random */
        snprintf(key, sizeof(key), "serial%" PRIu64, r);
        got = race(l, key, at, 1, r, &cfg.policy, false);
        if (got != N && serial_bad++ < 4)
            fprintf(stderr, "pair_race: round %" PRIu64 ": one thread admitted %" PRIu64
                            " of %u\n", r, got, N);
        snprintf(key, sizeof(key), "k%" PRIu64, r);
        got = race(l, key, at, threads, r + 1, &cfg.policy, (r & 8) != 0);
        if (got > N && over++ < 4)
            fprintf(stderr, "pair_race: round %" PRIu64 " (limit %u binds): %" PRIu64
                            " admitted of %u\n", r, (unsigned)(r & 1), got, N);
        sluice_destroy(l);
    }
    CHECK_EQ(serial_bad, 0);
    CHECK_EQ(over, 0);
    printf("pair_race: %" PRIu64 " rounds of %u threads, %" PRIu64 " over-admitted\n", rounds,
           threads, over);
    return t_done("pair_race");
}
