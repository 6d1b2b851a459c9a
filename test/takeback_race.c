/*
 * A call that fails takes back the keys it made, and nothing else.
 *
 * An acquire_all that inserts a key and then fails on a later key (here a
 * racing set_policy lowers that key's capacity below the cost: -E2BIG)
 * removes the key it made, since an error must have no effect.  Another
 * call may have charged that key in between.  Before the fix the take-back
 * removed the key whenever its state read as fresh at the failing call's
 * time: a charge at an earlier time (times passed in, or clocks read in
 * another order) is over by then, so the key went with that charge in it,
 * and a later call at the charge's time found a new key and was admitted
 * beside it.  It also made a sluice_reset answer -ENOENT for a key a call
 * had charged (found by linearize_random, seed 1795550334).
 *
 * Per round, a fresh key f on L1 (fixed window, 2 per P) and the key p on
 * L2, whose policy a flipper moves between 4 and 1 per P:
 *   A: acquire_all({f, 14 present keys, p}, cost 2) at tA, three windows
 *      after tB;
 *   B: once f exists, acquire(f, cost 2) at tB;
 *   C: after both, acquire(f, cost 1) at tB.
 * Whatever A did, C comes after B in window W of f, which B filled, or
 * after a call that moved f's time past tB: C must be denied whenever B was
 * admitted.  The take-back may only remove a key no call has charged.
 *
 * Then the same with L1's own default flipping between a fixed and an
 * approximate sliding window (2 per P each): a move between two kinds
 * starts f fresh, so C may be admitted, but f must stay once B was
 * admitted (L1 counts one key more than before the round).  Before the fix A, having made f and
 * then moved it to the new default itself, passed its pin to the new
 * entry though B had charged the old one; the new entry read untouched,
 * and A's failure on p took back a key B had charged (found by
 * linearize_random, seed 1796377463: a reset answered -ENOENT).
 * Usage: takeback_race [scale]
 */
#include <sched.h>
#include <stdatomic.h>

#include "helpers.h"
#include "internal.h"
#include "shm.h"

#define P UINT64_C(1000000)
#define T0 (UINT64_C(1000) * NS_PER_S)
#define NKEYS 16

static sluice_t *L1, *L2;
static atomic_int quit, b_go, b_done, flip_l1;
static atomic_uint_fast64_t round_no, keys_before;
static uint64_t base = T0;
static int over, lost, a_failed, b_admitted;

static uint64_t t_b(uint64_t r) { return base + r * 8 * P + P / 2; }
static uint64_t t_a(uint64_t r) { return t_b(r) + 3 * P; }

static void key_name(char *buf, size_t cap, uint64_t r)
{
    snprintf(buf, cap, "f%" PRIu64, r);
}

static uint64_t live_keys(sluice_t *l)
{
    return l->shm != NULL ? sl_load_rlx(&l->shm->hdr->nkeys) : sl_load_rlx(&l->nkeys);
}

/* B: waits until A has made f (or is done), then charges f at tB. */
static void *charger(void *arg)
{
    uint64_t seen = 0, rng = (uint64_t)(uintptr_t)arg;

    while (!atomic_load(&quit)) {
        uint64_t r = atomic_load(&round_no);
        char f[24];
        if (r == seen) {
            sched_yield();
            continue;
        }
        seen = r;
        key_name(f, sizeof(f), r);
        /* mostly as soon as f shows up, sometimes blindly a little later */
        if (t_rand(&rng) % 4 != 0)
            while (live_keys(L1) == atomic_load(&keys_before) && atomic_load(&b_go))
                ;
        int b = sluice_acquire_at(L1, f, strlen(f), 2, t_b(r), NULL);
        CHECK(b >= 0);
        b_admitted += b == SLUICE_ALLOW;
        atomic_store(&b_done, b == SLUICE_ALLOW ? 2 : 1);
    }
    return NULL;
}

static struct sluice_policy pol_wide, pol_narrow, pol_fixed, pol_approx;

/* The flipper: p's capacity moves between 4 and 1, so A's cost check
 * passes and its resolve of p fails in some rounds; with flip_l1, f's
 * default moves between two kinds, so A moves the f it made. */
static void *flipper(void *arg)
{
    (void)arg;
    while (!atomic_load(&quit)) {
        CHECK_EQ(sluice_set_policy(L2, &pol_narrow), 0);
        if (atomic_load(&flip_l1))
            CHECK_EQ(sluice_set_policy(L1, &pol_approx), 0);
        CHECK_EQ(sluice_set_policy(L2, &pol_wide), 0);
        if (atomic_load(&flip_l1))
            CHECK_EQ(sluice_set_policy(L1, &pol_fixed), 0);
    }
    return NULL;
}

static void run(const char *name, uint64_t rounds, int moving)
{
    pthread_t tb, tf;
    char names[NKEYS][8];

    for (int i = 0; i < NKEYS; i++)
        snprintf(names[i], sizeof(names[i]), "q%d", i);

    over = lost = a_failed = b_admitted = 0;
    atomic_store(&flip_l1, moving);
    atomic_store(&quit, 0);
    atomic_store(&round_no, 0);
    CHECK_EQ(pthread_create(&tb, NULL, charger, (void *)(uintptr_t)rounds), 0);
    CHECK_EQ(pthread_create(&tf, NULL, flipper, NULL), 0);
    for (uint64_t r = 1; r <= rounds; r++) {
        char f[24];
        key_name(f, sizeof(f), r);
        /* f, then present keys that lengthen the time between f's insert
         * and the failure on p, the last */
        struct sluice_key keys[NKEYS] = {{.limiter = L1, .key = f, .len = strlen(f)}};
        for (int i = 1; i < NKEYS - 1; i++)
            keys[i] = (struct sluice_key){.limiter = L1, .key = names[i], .len = strlen(names[i])};
        keys[NKEYS - 1] = (struct sluice_key){.limiter = L2, .key = "p", .len = 1};
        atomic_store(&b_done, 0);
        atomic_store(&keys_before, live_keys(L1));
        atomic_store(&b_go, 1);
        atomic_store(&round_no, r);
        int a = sluice_acquire_all(keys, NKEYS, 2, t_a(r), NULL);
        CHECK(a >= 0 || a == -E2BIG);
        a_failed += a == -E2BIG;
        atomic_store(&b_go, 0);
        while (atomic_load(&b_done) == 0)
            sched_yield();
        /* nothing reaps: a key B charged is there */
        int gone = live_keys(L1) == atomic_load(&keys_before);
        if (atomic_load(&b_done) == 2 && gone && lost++ < 3)
            fprintf(stderr, "takeback_race %s: round %" PRIu64 ": f gone after B was "
                            "admitted on it (A returned %d)\n", name, r, a);
        int c = sluice_acquire_at(L1, f, strlen(f), 1, t_b(r), NULL);
        CHECK(c >= 0);
        if (!moving && atomic_load(&b_done) == 2 && c == SLUICE_ALLOW && over++ < 3)
            fprintf(stderr, "takeback_race %s: round %" PRIu64 ": C admitted beside B in a "
                            "window of 2 (A returned %d)\n", name, r, a);
        /* keep the table small: f is done with */
        (void)sluice_reset(L1, f, strlen(f));
    }
    atomic_store(&quit, 1);
    pthread_join(tb, NULL);
    pthread_join(tf, NULL);
    base = t_a(rounds + 1);
    printf("takeback_race %s: %" PRIu64 " rounds, A failed %d, B admitted %d, C beside B %d, "
           "f gone after B %d (both must be 0)\n", name, rounds, a_failed, b_admitted, over, lost);
    CHECK_EQ(over, 0);
    CHECK_EQ(lost, 0);
    CHECK(a_failed > 0); /* the race was run */
}

static void policy1(struct sluice_policy *pol, uint64_t count)
{
    memset(pol, 0, sizeof(*pol));
    pol->nlimits = 1;
    pol->limits[0] = (struct sluice_limit){.algo = SLUICE_GCRA, .count = count, .period_ns = P};
}

static void open_pair(const char *path1, const char *path2)
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    cfg.policy = pol_fixed;
    L1 = path1 != NULL ? t_open_shared(path1, &cfg, SLUICE_SHARED_CREATE) : t_create(&cfg);
    cfg.policy = pol_wide;
    L2 = path2 != NULL ? t_open_shared(path2, &cfg, SLUICE_SHARED_CREATE) : t_create(&cfg);
}

static void close_pair(const char *path1, const char *path2)
{
    sluice_destroy(L1);
    sluice_destroy(L2);
    if (path1 != NULL) {
        CHECK_EQ(sluice_unlink_shared(path1), 0);
        CHECK_EQ(sluice_unlink_shared(path2), 0);
    }
}

int main(int argc, char **argv)
{
    uint64_t rounds = (uint64_t)(40000 * t_scale(argc, argv));
    char path1[128], path2[128];

    if (rounds < 2000)
        rounds = 2000;
    policy1(&pol_wide, 4);
    policy1(&pol_narrow, 1);
    memset(&pol_fixed, 0, sizeof(pol_fixed));
    pol_fixed.nlimits = 1;
    pol_fixed.limits[0] =
        (struct sluice_limit){.algo = SLUICE_FIXED_WINDOW, .count = 2, .period_ns = P};
    pol_approx = pol_fixed;
    pol_approx.limits[0].algo = SLUICE_APPROX_SLIDING;
    t_shm_path(path1, sizeof(path1), "takeback_race1");
    t_shm_path(path2, sizeof(path2), "takeback_race2");
    for (int moving = 0; moving <= 1; moving++) {
        open_pair(NULL, NULL);
        /* moving: twice the rounds, the race it looks for being rarer */
        run(moving ? "private, f's policy moving" : "private", rounds << moving, moving);
        close_pair(NULL, NULL);
        open_pair(path1, path2);
        run(moving ? "shared, f's policy moving" : "shared", rounds / 2, moving);
        close_pair(path1, path2);
    }
    return t_done("takeback_race");
}
