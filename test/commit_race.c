/*
 * An admission's time must stand or fall with its charge.  A key's latest
 * admission time clamps later calls at earlier times (a stepped clock, or
 * threads whose clocks were read in another order), so a call made at an
 * earlier time never reads a newer window as fresh.  A writer that replaces
 * the key's entry (a reset, a policy change) copies that time to the new
 * entry.  Before the fix, an admission raised the time only after its
 * charge had landed, and a writer that copied it in between left the new
 * entry without it; the admission then followed the key and raised the new
 * entry too, but a call at an earlier time could be decided there first.
 *
 * Per round, on one fixed window of count 1 (windows of P ns):
 *   A: acquire_all of k0 and 15 other keys at tA (in window W+1), which
 *      lengthens the time between its charge on k0 and its return;
 *   R: after a random spin, resets k0 (or sets the policy in force, and
 *      the next call moves k0), then B: acquire k0 at tB (window W),
 *      then, once A has returned, C: acquire k0 at tB.
 * In every serial order C is denied: it comes after A and B, its time is
 * clamped to the latest admission's (tA if A's time is kept, tB if the
 * reset forgot it, which sluice.h allows), and that window already holds
 * A's or B's unit.  Before the fix C was admitted in 4% of rounds
 * (private limiter, reset) on a 2-CPU machine; private and shared limiters.
 *
 * And the same with the call taken back: B on k0 at tB before the call,
 * the racer resets the call's last key and takes that key's unit at tA, so
 * the call is decided again and denied; C on k0 at tB after it.  A call
 * that committed k0's time before the reset sealed its last key, and was
 * then taken back, left k0 at tA with no admission there: C was decided in
 * an empty W+1 and admitted beside B (16% of rounds before the fix: the
 * writer now waits for calls between their test and their commits).
 * The private runs again with 4 keys and no result: the lean path of
 * sluice_acquire_all, which takes the same steps on locals.  Debug and
 * sanitizer builds widen the window between a call's commits (widen()):
 * the lean path's is a few instructions, which the racer rarely hits.
 * Usage: commit_race [scale]
 */
#include <stdatomic.h>

#include "helpers.h"

#ifdef SL_DEBUG_CHECKS
/* src/internal.h: called between a multi-key call's first commit and the
 * others'.  A spin there makes the window the call's count on each key
 * guards as wide as the racer's delay, so a writer that did not wait for
 * the count would seal a later key inside it in most rounds. */
extern _Atomic(void (*)(void)) sl_test_between_commits;
static void widen(void)
{
    for (volatile unsigned i = 0; i < 3000; i++)
        ;
}
#endif

#define P UINT64_C(1000000)
#define T0 (UINT64_C(1000) * NS_PER_S)
#define NKEYS 16

/* The call's keys, and whether it asks for a result: 16 with one (the
 * general path, its window between charge and commit widest), or 4
 * without (the lean path of sluice_acquire_all, acquire_all.c). */
static int nkeys = NKEYS;
static bool with_result = true;

/* BY_RESET_LAST: the racer resets the acquire_all's last key instead and
 * takes that key's fresh unit at tA, so the call, decided again, is
 * denied; B comes before the call and C after it, both on k0 (below). */
enum racer_mode { BY_RESET, BY_SET_POLICY, BY_RESET_LAST };

static sluice_t *L;
static struct sluice_policy pol;
static atomic_int go, a_done, r_done, quit;
static atomic_uint_fast64_t round_no;
static enum racer_mode mode;
static int c_admitted, a_admitted, b_admitted;

static uint64_t base = T0; /* each run starts after the last one's times */
static uint64_t t_a(uint64_t r) { return base + r * 4 * P + P + P / 2; }
static uint64_t t_b(uint64_t r) { return base + r * 4 * P + P / 2; }

static void spin(unsigned n)
{
    for (volatile unsigned i = 0; i < n; i++)
        ;
}

static void *racer(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg, seen = 0;

    while (!atomic_load(&quit)) {
        uint64_t r = atomic_load(&round_no);
        if (r == seen || !atomic_load(&go)) {
            sched_yield();
            continue;
        }
        seen = r;
        spin((unsigned)(t_rand(&rng) % 3000));
        if (mode == BY_RESET_LAST) {
            char last[8];
            int n = snprintf(last, sizeof(last), "k%d", nkeys - 1), rc;
            rc = sluice_reset(L, last, (size_t)n);
            CHECK(rc == 0 || rc == -ENOENT);
            CHECK(sluice_acquire_at(L, last, (size_t)n, 1, t_a(r), NULL) >= 0);
            atomic_store(&r_done, 1);
            continue;
        }
        if (mode == BY_RESET) {
            int rc = sluice_reset(L, "k0", 2);
            CHECK(rc == 0 || rc == -ENOENT);
        } else {
            CHECK_EQ(sluice_set_policy(L, &pol), 0);
        }
        int b = sluice_acquire_at(L, "k0", 2, 1, t_b(r), NULL);
        CHECK(b >= 0);
        while (!atomic_load(&a_done))
            sched_yield();
        int c = sluice_acquire_at(L, "k0", 2, 1, t_b(r), NULL);
        CHECK(c >= 0);
        if (c == SLUICE_ALLOW && c_admitted++ < 3)
            fprintf(stderr, "commit_race: round %" PRIu64 ": C admitted at an earlier time "
                            "after A and B (B %s)\n", r, b == SLUICE_ALLOW ? "admitted" : "denied");
        b_admitted += b == SLUICE_ALLOW;
        atomic_store(&r_done, 1);
    }
    return NULL;
}

static void run(const char *name, uint64_t rounds)
{
    char names[NKEYS][8];
    struct sluice_key keys[NKEYS];
    struct sluice_result res;
    pthread_t th;

    for (int i = 0; i < NKEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        keys[i] = (struct sluice_key){.limiter = L, .key = names[i], .len = strlen(names[i])};
    }
    c_admitted = a_admitted = b_admitted = 0;
    atomic_store(&quit, 0);
    atomic_store(&round_no, 0);
    CHECK_EQ(pthread_create(&th, NULL, racer, (void *)(uintptr_t)rounds), 0);
    for (uint64_t r = 1; r <= rounds; r++) {
        int b = -1;
        atomic_store(&a_done, 0);
        atomic_store(&r_done, 0);
        atomic_store(&go, 1);
        if (mode == BY_RESET_LAST)
            b = sluice_acquire_at(L, "k0", 2, 1, t_b(r), NULL);
        atomic_store(&round_no, r);
        int a = sluice_acquire_all(keys, (size_t)nkeys, 1, t_a(r), with_result ? &res : NULL);
        CHECK(a >= 0);
        a_admitted += a == SLUICE_ALLOW;
        atomic_store(&a_done, 1);
        while (!atomic_load(&r_done))
            sched_yield();
        if (mode == BY_RESET_LAST) {
            /* C at tB after the call: decided at tA only if an admission at
             * tA came first, and then W+1 holds its unit */
            int c = sluice_acquire_at(L, "k0", 2, 1, t_b(r), NULL);
            CHECK(b >= 0 && c >= 0);
            b_admitted += b == SLUICE_ALLOW;
            if (b == SLUICE_ALLOW && c == SLUICE_ALLOW && c_admitted++ < 3)
                fprintf(stderr, "commit_race: round %" PRIu64 ": B and C admitted in one "
                                "window of count 1 (the call %s)\n", r,
                        a == SLUICE_ALLOW ? "admitted" : "denied");
        }
    }
    atomic_store(&quit, 1);
    pthread_join(th, NULL);
    base = t_a(rounds + 1);
    printf("commit_race %s: %" PRIu64 " rounds, A admitted %d, B %d, C %d (must be 0)\n", name,
           rounds, a_admitted, b_admitted, c_admitted);
    CHECK_EQ(c_admitted, 0);
    /* the race was run: A was admitted in most rounds (with the last key
     * reset and taken, in some) */
    CHECK(mode == BY_RESET_LAST ? a_admitted > 0 : (uint64_t)a_admitted * 2 > rounds);
}

/* Each racer's rounds on L as it is now. */
static void run_modes(const char *what, uint64_t rounds)
{
    static const char *const how[] = {"reset", "set_policy", "reset of the last key"};
    static const enum racer_mode modes[] = {BY_RESET, BY_SET_POLICY, BY_RESET_LAST};
    char name[96];

    for (int m = 0; m < 3; m++) {
        snprintf(name, sizeof(name), "%s, %s", what, how[m]);
        mode = modes[m];
        run(name, rounds);
    }
}

int main(int argc, char **argv)
{
    uint64_t rounds = (uint64_t)(20000 * t_scale(argc, argv));
    struct sluice_config cfg;
    char path[128];

    if (rounds < 1000)
        rounds = 1000;
    sluice_config_init(&cfg);
    cfg.policy.nlimits = 1;
    cfg.policy.limits[0] =
        (struct sluice_limit){.algo = SLUICE_FIXED_WINDOW, .count = 1, .period_ns = P};
    pol = cfg.policy;

    L = t_create(&cfg);
#ifdef SL_DEBUG_CHECKS
    atomic_store(&sl_test_between_commits, widen);
#endif
    run_modes("private", rounds);
    nkeys = 4;
    with_result = false;
    run_modes("private, 4 keys, no result", rounds / 2);
    nkeys = NKEYS;
    with_result = true;
    sluice_destroy(L);

    t_shm_path(path, sizeof(path), "commit_race");
    L = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    run_modes("shared", rounds / 2);
    sluice_destroy(L);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    return t_done("commit_race");
}
