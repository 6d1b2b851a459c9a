/*
 * Shared limiters under SIGKILL: for argv[1] seconds (20 by default, 60 in
 * the soak suite), a parent kills random workers at random instants and
 * forks replacements, while the rest decide on a few hot keys (a stacked
 * policy, by acquire and by acquire_all with a private limiter) and churn
 * through many cold keys at max_keys (inserts, reaping for room, explicit
 * reaps), and now and then change the policy (the same limits, reordered:
 * every key migrates, state carried).  Checked:
 *   - no survivor hangs: every live worker makes progress within a deadline
 *     and finishes within one when asked to stop;
 *   - the hot keys never admit more than the serial bound over the run
 *     (counted after the call returns, so kills only undercount);
 *   - the live key count stays within max_keys;
 *   - afterwards the limiter is whole: every key reaped at a later time,
 *     max_keys fresh keys all fit (no entry or key count leaked by the
 *     dead), and each admits exactly its burst.
 * Prints how many kills landed inside a decision.
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "helpers.h"

#define WORKERS 6
#define HOT 4
#define COLD 4096
#define MAX_KEYS 512
#define RATE 2000  /* GCRA per second */
#define BURST 50
#define DEADLINE_S 20

struct slot {
    _Atomic int pid;
    _Atomic int in_decision;
    _Atomic uint64_t beat; /* CLOCK_MONOTONIC ns of the last finished call */
};

struct page {
    _Atomic uint64_t admitted[HOT];
    _Atomic uint64_t decisions, errors, policy_changes;
    _Atomic int stop;
    struct slot w[WORKERS];
};

static struct sluice_policy policy(bool flipped)
{
    struct sluice_policy p = {0};
    struct sluice_limit g = {.algo = SLUICE_GCRA, .count = RATE, .period_ns = NS_PER_S,
                             .burst = BURST};
    struct sluice_limit f = {.algo = SLUICE_FIXED_WINDOW, .count = 60 * RATE,
                             .period_ns = 60 * NS_PER_S};
    p.nlimits = 2;
    p.limits[0] = flipped ? f : g;
    p.limits[1] = flipped ? g : f;
    return p;
}

static void worker(const char *path, sluice_t *inherited, int id, struct page *pg)
{
    struct slot *me = &pg->w[id];
    uint64_t rng = t_mono() ^ ((uint64_t)getpid() << 20);
    sluice_t *l = inherited, *priv;
    struct sluice_config pc;

    if (t_rand(&rng) % 2)
        l = t_open_shared(path, NULL, 0);
    sluice_config_init(&pc);
    sluice_policy_add(&pc.policy, SLUICE_GCRA, 1000000, NS_PER_S);
    priv = t_create(&pc);
    while (!atomic_load(&pg->stop)) {
        uint64_t r = t_rand(&rng), cost = 1 + r % 3;
        unsigned hot = (unsigned)(r >> 8) % HOT;
        char key[32];
        int n, rc = SLUICE_DENY;

        atomic_store(&me->in_decision, 1);
        switch ((r >> 16) % 16) {
        case 0: case 1: case 2: case 3: case 4: case 5: /* a hot key */
            n = snprintf(key, sizeof(key), "hot-%u", hot);
            rc = sluice_acquire(l, key, (size_t)n, cost, NULL);
            break;
        case 6: case 7: { /* a hot key and a private one, all or nothing */
            struct sluice_key k[2];
            n = snprintf(key, sizeof(key), "hot-%u", hot);
            k[0] = (struct sluice_key){l, key, (size_t)n};
            k[1] = (struct sluice_key){priv, "p", 1};
            rc = sluice_acquire_all(k, 2, cost, sluice_now(l), NULL);
            break;
        }
        case 15:
            if ((r >> 24) % 4096 == 0) {
                struct sluice_policy p = policy((r >> 32) & 1);
                if (sluice_set_policy(l, &p) == 0)
                    atomic_fetch_add(&pg->policy_changes, 1);
            } else if ((r >> 24) % 4096 < 4) {
                (void)sluice_reap(l, sluice_now(l));
            }
            cost = 0;
            break;
        default: /* a cold key: inserts, reaping for room at max_keys */
            n = snprintf(key, sizeof(key), "cold-%u", (unsigned)((r >> 32) % COLD));
            rc = sluice_acquire(l, key, (size_t)n, 1, NULL);
            cost = 0;
            break;
        }
        atomic_store(&me->in_decision, 0);
        if (rc < 0 && atomic_fetch_add(&pg->errors, 1) < 5)
            fprintf(stderr, "worker %d: op %u: %s\n", id, (unsigned)((r >> 16) % 16),
                    sluice_strerror(rc));
        if (rc == SLUICE_ALLOW && cost > 0)
            atomic_fetch_add(&pg->admitted[hot], cost);
        atomic_fetch_add_explicit(&pg->decisions, 1, memory_order_relaxed);
        atomic_store(&me->beat, t_mono());
    }
    sluice_destroy(priv);
    if (l != inherited)
        sluice_destroy(l);
    _exit(0);
}

static void spawn(const char *path, sluice_t *l, int id, struct page *pg)
{
    pid_t pid;

    atomic_store(&pg->w[id].beat, t_mono());
    atomic_store(&pg->w[id].in_decision, 0);
    if ((pid = fork()) == 0)
        worker(path, l, id, pg);
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    atomic_store(&pg->w[id].pid, pid);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 20;
    uint64_t deadline = (uint64_t)DEADLINE_S * NS_PER_S, rng = t_mono();
    struct sluice_config cfg;
    struct sluice_stats st;
    char path[256];
    struct page *pg;
    sluice_t *l;
    uint64_t t0, t1, end, kills = 0, inside = 0, max_live = 0;
    bool hung = false;

    t_shm_path(path, sizeof(path), "chaos");
    sluice_config_init(&cfg);
    cfg.policy = policy(false);
    cfg.max_keys = MAX_KEYS;
    cfg.max_key_len = 32;
    cfg.idle_ttl_ns = NS_PER_S / 1000;
    cfg.shards = 8;
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    pg = t_shared_page(sizeof(*pg));
    t0 = sluice_now(l);
    for (int i = 0; i < WORKERS; i++)
        spawn(path, l, i, pg);
    end = t_mono() + (uint64_t)(seconds * 1e9);
    while (t_mono() < end && !hung) {
        int id = (int)(t_rand(&rng) % WORKERS), status;

        t_kill_after(atomic_load(&pg->w[id].pid), 2000000, 27000000, &rng);
        kills++;
        inside += atomic_load(&pg->w[id].in_decision) != 0;
        spawn(path, l, id, pg);
        sluice_stats(l, &st);
        max_live = st.keys > max_live ? st.keys : max_live;
        CHECK(st.keys <= MAX_KEYS);
        for (int i = 0; i < WORKERS; i++) {
            /* a worker that died on its own (a crash) is a failure */
            pid_t wp = atomic_load(&pg->w[i].pid);
            if (waitpid(wp, &status, WNOHANG) == wp) {
                fprintf(stderr, "worker %d (pid %d) died by itself: %s %d\n", i, wp,
                        WIFSIGNALED(status) ? "signal" : "exit",
                        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                t_failures++;
                spawn(path, l, i, pg);
            }
        }
        for (int i = 0; i < WORKERS; i++) {
            uint64_t beat = atomic_load(&pg->w[i].beat); /* before the clock: never ahead of it */
            if (t_worker_stalled(i, atomic_load(&pg->w[i].pid), beat, deadline))
                hung = true;
        }
    }
    atomic_store(&pg->stop, 1);
    for (int i = 0; i < WORKERS; i++)
        if (!t_worker_finishes(i, atomic_load(&pg->w[i].pid), deadline))
            hung = true;
    CHECK(!hung);
    t1 = sluice_now(l);
    for (unsigned k = 0; k < HOT; k++) {
        uint64_t bound = BURST + (t1 - t0) / (NS_PER_S / RATE) + 1;
        uint64_t got = atomic_load(&pg->admitted[k]);
        if (got > bound)
            fprintf(stderr, "hot-%u admitted %" PRIu64 " > bound %" PRIu64 "\n", k, got, bound);
        CHECK(got <= bound);
        if (k == 0)
            printf("hot keys: admitted %" PRIu64 " of at most %" PRIu64 " (%.1f%%)\n", got, bound,
                   100.0 * (double)got / (double)bound);
    }
    CHECK_U64(atomic_load(&pg->errors), 0);
    sluice_stats(l, &st);
    CHECK(st.keys <= MAX_KEYS);
    printf("%.0f s: %" PRIu64 " decisions, %" PRIu64 " policy changes, %" PRIu64
           " kills, %" PRIu64 " inside a decision; live keys at most %" PRIu64 " of %d\n",
           seconds, atomic_load(&pg->decisions), atomic_load(&pg->policy_changes), kills, inside,
           max_live, MAX_KEYS);

    /* whole again: reap everything at a later time, then max_keys new keys */
    {
        uint64_t later = t1 + 3600 * NS_PER_S;
        (void)sluice_reap(l, later);
        sluice_stats(l, &st);
        CHECK_U64(st.keys, 0);
        for (unsigned i = 0; i < MAX_KEYS; i++) {
            char key[32];
            struct sluice_result res;
            int n = snprintf(key, sizeof(key), "after-%u", i);
            int rc = sluice_acquire_at(l, key, (size_t)n, BURST, later, &res);
            CHECK_EQ(rc, SLUICE_ALLOW);
            CHECK(!(res.flags & SLUICE_F_FULL));
            CHECK_EQ(sluice_acquire_at(l, key, (size_t)n, 1, later, NULL), SLUICE_DENY);
        }
        sluice_stats(l, &st);
        CHECK_U64(st.keys, MAX_KEYS);
    }
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    return t_done("shared_chaos");
}
