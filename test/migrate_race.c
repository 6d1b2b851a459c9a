/*
 * A charge taken back while a racing call moves its key to a new entry:
 * nothing may stay spent that no admission spent.  One thread makes one
 * acquire_all per round, of a fresh key of L1 and 15 keys of L2 (so the
 * charge on L1 waits a little before its policy is checked again); the
 * other only sets L1's policy to the one in force and peeks the key, which
 * moves it.  Afterwards the key has exactly the call's cost spent if it
 * was admitted, none otherwise.  Before the fix, the undo met the frozen
 * entry, left the charge in the state the move carried, and the decision
 * made again charged once more: 5 to 20 units spent by one cost-5 call in
 * about 8% of rounds.  Every algorithm whose words a move keeps as they
 * are, on private and shared limiters, and set_policy between two counts
 * of one window (the same words).  And the rollback reaches only the entry
 * its charge went to (below).
 * Usage: migrate_race [scale]
 */
#include <stdatomic.h>

#include "helpers.h"

#define COST 5
#define N 50
#define T0 (1000 * NS_PER_S)

static sluice_t *L1;
static struct sluice_policy pa, pb;
static bool toggle;
static char key[2][32];
static atomic_int run, paused, quit, cur;

static void *racer(void *arg)
{
    unsigned i = 0;

    (void)arg;
    while (!atomic_load(&quit)) {
        if (!atomic_load(&run)) {
            atomic_store(&paused, 1);
            sched_yield();
            continue;
        }
        atomic_store(&paused, 0);
        const char *k = key[atomic_load(&cur)];
        CHECK_EQ(sluice_set_policy(L1, toggle && (i++ & 1) ? &pb : &pa), 0);
        (void)sluice_peek_at(L1, k, strlen(k), 1, T0, NULL);
    }
    return NULL;
}

static void pause_racer(void)
{
    atomic_store(&paused, 0);
    atomic_store(&run, 0);
    while (!atomic_load(&paused))
        sched_yield();
}

/* spent units of k at T0, read by a peek (the racer paused) */
static uint64_t spent(const char *k)
{
    struct sluice_result r;
    int rc = sluice_peek_at(L1, k, strlen(k), 1, T0, &r);

    return rc < 0 ? UINT64_MAX : N - r.remaining - (rc == SLUICE_ALLOW);
}

static void one_case(enum sluice_algo algo, bool shared, bool tog, int rounds)
{
    struct sluice_config cfg;
    struct sluice_key keys[16];
    char path[128], bkey[15][8];
    sluice_t *l2 = t_limiter1(SLUICE_GCRA, 1000000000, NS_PER_S, 0, 0);
    pthread_t t;
    int wrong = 0;

    memset(&pa, 0, sizeof(pa));
    memset(&pb, 0, sizeof(pb));
    sluice_policy_add(&pa, algo, N, 10 * NS_PER_S);
    /* the other count: a window's words stay as they are */
    sluice_policy_add(&pb, algo, 40, 10 * NS_PER_S);
    sluice_config_init(&cfg);
    cfg.policy = pa;
    if (shared) {
        t_shm_path(path, sizeof(path), "migrate-race");
        L1 = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
        CHECK_EQ(sluice_unlink_shared(path), 0);
    } else
        L1 = t_create(&cfg);
    toggle = tog;
    for (int i = 0; i < 15; i++) {
        snprintf(bkey[i], sizeof(bkey[i]), "b%d", i);
        keys[i + 1] = (struct sluice_key){l2, bkey[i], strlen(bkey[i])};
    }
    atomic_store(&quit, 0);
    atomic_store(&run, 0);
    snprintf(key[0], sizeof(key[0]), "init");
    pthread_create(&t, NULL, racer, NULL);
    for (int r = 0; r < rounds; r++) {
        int slot = (r + 1) & 1, rc;
        pause_racer();
        CHECK_EQ(sluice_set_policy(L1, &pa), 0);
        snprintf(key[slot], sizeof(key[slot]), "a%d", r);
        atomic_store(&cur, slot);
        keys[0] = (struct sluice_key){L1, key[slot], strlen(key[slot])};
        atomic_store(&run, 1);
        rc = sluice_acquire_all(keys, 16, COST, T0, NULL);
        pause_racer();
        CHECK_EQ(sluice_set_policy(L1, &pa), 0);
        uint64_t s = spent(key[slot]);
        if ((rc == SLUICE_ALLOW && s != COST) || (rc != SLUICE_ALLOW && s != 0)) {
            if (wrong++ < 3)
                fprintf(stderr, "algo %d%s%s round %d: returned %d, %llu units spent\n", algo,
                        shared ? " shared" : "", tog ? " toggling" : "", r, rc,
                        (unsigned long long)s);
        }
    }
    atomic_store(&quit, 1);
    atomic_store(&run, 1);
    pthread_join(t, NULL);
    CHECK_EQ(wrong, 0);
    sluice_destroy(L1);
    sluice_destroy(l2);
}

/*
 * The charge's own successor, not the key's current entry: a rollback
 * followed the key to an entry made fresh after the move (idle beyond its
 * range) and took back another call's charge there, whose word equalled
 * its receipt (window index modulo 2^27): 10 admitted in a count-5 window.
 * A is held between its charge on K and its last check by 15 keys of
 * 131,072 sub-buckets each on L2.
 */
static sluice_t *ga_l1, *ga_l2;
static struct sluice_key ga_keys[16];
static uint64_t ga_ta;
static int ga_rc;

static void *ga_thread(void *arg)
{
    (void)arg;
    ga_rc = sluice_acquire_all(ga_keys, 16, 5, ga_ta, NULL);
    return NULL;
}

static void undo_never_reaches_a_later_state(int rounds)
{
    const uint64_t tb_off = (UINT64_C(1) << 27) * NS_PER_S; /* same index mod 2^27 */
    char names[16][8];
    int bad = 0;

    ga_ta = 1000 * NS_PER_S + 5;
    for (int r = 0; r < rounds; r++) {
        struct sluice_config c1, c2;
        struct sluice_policy p1 = {0}, p2 = {0}, p2b = {0};
        pthread_t th;
        int seen = 0, rd = -99, rc;
        sluice_config_init(&c1);
        sluice_config_init(&c2);
        sluice_policy_add(&p1, SLUICE_FIXED_WINDOW, 5, NS_PER_S);
        sluice_policy_add(&p2, SLUICE_SLIDING_WINDOW, 100, 131072 * UINT64_C(1000));
        p2.limits[0].precision_ns = 1000;
        p2b = p2;
        p2b.limits[0].count = 4; /* cost 5: -E2BIG */
        c1.policy = p1;
        c2.policy = p2;
        c1.shards = c2.shards = 1;
        ga_l1 = t_create(&c1);
        ga_l2 = t_create(&c2);
        ga_keys[0] = (struct sluice_key){ga_l1, "K", 1};
        for (int i = 1; i < 16; i++) {
            snprintf(names[i], sizeof(names[i]), "k%d", i);
            ga_keys[i] = (struct sluice_key){ga_l2, names[i], strlen(names[i])};
        }
        pthread_create(&th, NULL, ga_thread, NULL);
        for (long spins = 0; spins < 20000000 && !seen; spins++) /* A's charge on K */
            seen = sluice_peek_at(ga_l1, "K", 1, 5, ga_ta, NULL) == SLUICE_DENY;
        if (seen) {
            CHECK_EQ(sluice_set_policy(ga_l1, &p1), 0);        /* a new generation */
            (void)sluice_peek_at(ga_l1, "K", 1, 1, ga_ta, NULL); /* K moves, A's charge in it */
            rd = sluice_acquire_at(ga_l1, "K", 1, 5, ga_ta + tb_off, NULL); /* made fresh */
            CHECK_EQ(sluice_set_policy(ga_l2, &p2b), 0); /* A decides again: -E2BIG */
        }
        pthread_join(th, NULL);
        rc = sluice_acquire_at(ga_l1, "K", 1, 5, ga_ta + tb_off, NULL);
        if (seen && ga_rc != SLUICE_ALLOW && rd == SLUICE_ALLOW && rc == SLUICE_ALLOW && bad++ < 3)
            fprintf(stderr, "round %d: 10 admitted in a count-5 window (A returned %d)\n", r,
                    ga_rc);
        sluice_destroy(ga_l1);
        sluice_destroy(ga_l2);
    }
    CHECK_EQ(bad, 0);
}

int main(int argc, char **argv)
{
    int rounds = (int)(1000 * t_scale(argc, argv));
    static const enum sluice_algo algos[] = {SLUICE_GCRA, SLUICE_FIXED_WINDOW,
                                             SLUICE_SLIDING_WINDOW, SLUICE_APPROX_SLIDING};
    bool can_share = access("/dev/shm", W_OK) == 0;

    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        one_case(algos[a], false, false, rounds);
        if (algos[a] != SLUICE_GCRA) /* a GCRA key's spent units change with T */
            one_case(algos[a], false, true, rounds / 2);
        if (can_share)
            one_case(algos[a], true, false, rounds / 2);
    }
    undo_never_reaches_a_later_state(rounds / 50 + 5);
    return t_done("migrate_race");
}
