/*
 * An acquire that fails charges nothing and takes back the key it made.
 *
 * A single-key acquire of a new key, at a cost the policy in force allows,
 * races a set_policy that lowers the capacity below that cost: the call
 * may then return -E2BIG.  An error charges nothing, and a key made for it
 * would hold a place under max_keys for nothing, so the key must be gone
 * again.  Before the fix some 5-8% of the -E2BIG answers that raced left
 * their key behind, three ways:
 *   - a key made in a cell, then undecided there (the default replaced),
 *     was moved to an entry by the general path, which takes back only
 *     keys it made itself;
 *   - an entry the general path made, moved by its own next round to the
 *     new default, lost its pin (the take-back looked for the old entry);
 *   - the call's own charge, taken back when the policy changed under it,
 *     left GCRA's word at the charge's time rather than at 0 ("never
 *     charged"), so the key no longer read as untouched.
 *
 * Per round, a fresh key, acquired once at cost 2 while a flipper moves
 * the default between GCRA 4 and 1 per P.  One thread makes keys, times
 * are passed in and never advance, the table never fills: nothing is
 * reaped, so after an -E2BIG the limiter's key count must be what it was
 * before the call, and at the end the keys are exactly the admitted ones.
 * Then, under the wide policy, every key that failed must still have its
 * whole burst (peeked at cost 4): nothing charged.  Short keys (cells,
 * where the build has them) and long ones (entries), with and without a
 * result.  On a shared limiter a set_policy moves every key of the file
 * itself, a move by another call, after which the key may stay (sluice.h,
 * the return convention): there only "charges nothing" is asserted.
 * Usage: e2big_takeback [scale]
 */
#include <stdatomic.h>

#include "helpers.h"

#define P UINT64_C(1000000)
#define T0 (UINT64_C(1000) * NS_PER_S)

static sluice_t *L;
static atomic_int quit;
static struct sluice_policy pol_wide, pol_narrow;

static void *flipper(void *arg)
{
    (void)arg;
    while (!atomic_load(&quit)) {
        CHECK_EQ(sluice_set_policy(L, &pol_narrow), 0);
        CHECK_EQ(sluice_set_policy(L, &pol_wide), 0);
    }
    return NULL;
}

static uint64_t live_keys(void)
{
    struct sluice_stats st;

    sluice_stats(L, &st);
    return st.keys;
}

static int key_of(char *buf, size_t cap, uint64_t r)
{
    static const char *pad[2] = {"", "-a-key-too-long-for-a-cell"};

    return snprintf(buf, cap, "k%" PRIu64 "%s", r, pad[r & 1]);
}

static void run(const char *name, uint64_t rounds, bool shared)
{
    uint64_t *failed_at = calloc(rounds, sizeof(*failed_at));
    int failed = 0, left = 0, admitted = 0, spent = 0, left_by[4] = {0};
    struct sluice_result res;
    pthread_t tf;
    char key[64];

    CHECK(failed_at != NULL);
    atomic_store(&quit, 0);
    CHECK_EQ(pthread_create(&tf, NULL, flipper, NULL), 0);
    for (uint64_t r = 1; r <= rounds; r++) {
        int n = key_of(key, sizeof(key), r);
        uint64_t before = live_keys();
        int rc = sluice_acquire_at(L, key, (size_t)n, 2, T0, (r & 2) ? &res : NULL);
        CHECK(rc == SLUICE_ALLOW || rc == -E2BIG);
        if (rc == SLUICE_ALLOW) {
            admitted++;
            continue;
        }
        failed_at[failed++] = r;
        uint64_t after = live_keys();
        left_by[r & 3] += after > before;
        if (after > before && !shared && left++ < 3)
            fprintf(stderr, "e2big_takeback %s: round %" PRIu64 " (%s key%s): -E2BIG left "
                            "%" PRIu64 " keys where there were %" PRIu64 "\n",
                    name, r, (r & 1) ? "long" : "short", (r & 2) ? ", a result" : "",
                    after, before);
    }
    atomic_store(&quit, 1);
    pthread_join(tf, NULL);
    left = left_by[0] + left_by[1] + left_by[2] + left_by[3];
    CHECK_EQ(sluice_set_policy(L, &pol_wide), 0);
    for (int i = 0; i < failed; i++) {
        int n = key_of(key, sizeof(key), failed_at[i]);
        if (sluice_peek_at(L, key, (size_t)n, 4, T0, NULL) != SLUICE_ALLOW && spent++ < 3)
            fprintf(stderr, "e2big_takeback %s: %s failed with -E2BIG and is charged\n", name,
                    key);
    }
    printf("e2big_takeback %s: %" PRIu64 " rounds, admitted %d, -E2BIG %d, keys left by one "
           "%d (short %d, long %d, short with a result %d, long with one %d), charged %d\n",
           name, rounds, admitted, failed, left, left_by[0], left_by[1], left_by[2],
           left_by[3], spent);
    CHECK_EQ(spent, 0);
    if (!shared) {
        CHECK_EQ(left, 0);
        CHECK_EQ(live_keys(), (uint64_t)admitted); /* the admitted keys, not one more */
    }
    CHECK(failed > 0); /* the race was run */
    CHECK(admitted > 0);
    free(failed_at);
}

static void policy1(struct sluice_policy *pol, uint64_t count)
{
    memset(pol, 0, sizeof(*pol));
    pol->nlimits = 1;
    pol->limits[0] = (struct sluice_limit){.algo = SLUICE_GCRA, .count = count, .period_ns = P};
}

int main(int argc, char **argv)
{
    uint64_t rounds = (uint64_t)(400000 * t_scale(argc, argv));
    struct sluice_config cfg;
    char path[128];

    if (rounds < 20000)
        rounds = 20000;
    policy1(&pol_wide, 4);
    policy1(&pol_narrow, 1);
    sluice_config_init(&cfg);
    cfg.policy = pol_wide;
    cfg.max_keys = rounds + 64; /* never full: nothing is reaped */
    cfg.max_key_len = 64;
    L = t_create(&cfg);
    run("private", rounds, false);
    sluice_destroy(L);

    if (access("/dev/shm", W_OK) == 0) {
        t_shm_path(path, sizeof(path), "e2big_takeback");
        L = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
        run("shared", rounds / 4, true);
        sluice_destroy(L);
        CHECK_EQ(sluice_unlink_shared(path), 0);
    }
    return t_done("e2big_takeback");
}
