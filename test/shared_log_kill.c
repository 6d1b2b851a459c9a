/*
 * A shared limiter's sliding log under SIGKILL.  A log writer holds its key
 * (the key's sequence word is odd) while it writes the key's stamps, so a
 * process killed there leaves the key held; whoever waits for the key must
 * find its holder dead and release it, or every process deciding on that
 * key would wait forever.
 *
 * For argv[1] seconds (15 by default) a parent SIGKILLs random workers every
 * 1-8 ms and forks replacements, while the workers:
 *   - admit requests of cost 256 on a hot log key (1024 per second) at
 *     times drawn from a shared counter that advances 1/8 s per request,
 *     so about half are admitted, each writing 256 stamps while it holds
 *     the key: many kills land while the key is held;
 *   - peek at the hot key (readers wait for a held key too);
 *   - admit cost-1 requests on a second log key at one fixed time, until
 *     it denies;
 *   - and worker 0 flips the policy between two that carry the log's state
 *     (each flip freezes every key it migrates: a freezer waits for a held
 *     key too).
 * Checked: every live worker keeps making progress and finishes when asked;
 * the second key never admits more than its count (counted after each call
 * returns: kills only undercount) and afterwards no more than the count in
 * all; the hot key admits no more than its count per second of the times
 * used, plus one count (a killed charge may leave units behind: fewer,
 * never more).
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "helpers.h"

#define WORKERS 5
#define COUNT 1024
#define COST 256
#define PERIOD NS_PER_S
#define STEP (PERIOD / 8) /* per hot request: twice the rate the log admits */
#define DEADLINE_S 10

static const uint64_t T = UINT64_C(1000) * NS_PER_S; /* the counted key's time; the hot key's first */

struct slot {
    _Atomic int pid;
    _Atomic uint64_t beat; /* CLOCK_MONOTONIC ns of the last finished loop */
};

struct page {
    _Atomic uint64_t admitted, hot_units, clock, calls, flips, errors;
    _Atomic int stop;
    struct slot w[WORKERS];
};

/* The log alone, or behind a limit that never binds: keys migrate between
 * them and carry the log's stamps. */
static struct sluice_policy policy(bool stacked)
{
    struct sluice_policy p = {0};

    if (stacked)
        sluice_policy_add(&p, SLUICE_FIXED_WINDOW, UINT64_C(1) << 40, 3600 * NS_PER_S);
    sluice_policy_add(&p, SLUICE_SLIDING_LOG, COUNT, PERIOD);
    return p;
}

static void worker(const char *path, int id, struct page *pg)
{
    struct sluice_result res;
    sluice_t *l = NULL;
    uint64_t n = 0;
    int opened = sluice_open_shared(path, NULL, 0, &l);

    if (opened != 0) {
        fprintf(stderr, "worker %d: sluice_open_shared: %s\n", id, sluice_strerror(opened));
        _exit(2);
    }
    while (!atomic_load(&pg->stop)) {
        uint64_t t = T + atomic_fetch_add(&pg->clock, STEP);
        int rc = sluice_acquire_at(l, "hot", 3, COST, t, &res);
        if (rc == SLUICE_ALLOW)
            atomic_fetch_add(&pg->hot_units, COST);
        else if (rc != SLUICE_DENY)
            atomic_fetch_add(&pg->errors, 1);
        rc = sluice_peek_at(l, "hot", 3, 1, t, &res);
        if (rc < 0)
            atomic_fetch_add(&pg->errors, 1);
        rc = sluice_acquire_at(l, "counted", 7, 1, T, &res);
        if (rc == SLUICE_ALLOW)
            atomic_fetch_add(&pg->admitted, 1);
        else if (rc != SLUICE_DENY)
            atomic_fetch_add(&pg->errors, 1);
        if (id == 0 && ++n % 16 == 0) {
            struct sluice_policy p = policy(n % 32 == 0);
            if (sluice_set_policy(l, &p) != 0)
                atomic_fetch_add(&pg->errors, 1);
            atomic_fetch_add(&pg->flips, 1);
        }
        atomic_fetch_add(&pg->calls, 3);
        atomic_store(&pg->w[id].beat, t_mono());
    }
    sluice_destroy(l);
    _exit(0);
}

static void spawn(const char *path, int id, struct page *pg)
{
    pid_t pid;

    atomic_store(&pg->w[id].beat, t_mono());
    if ((pid = fork()) == 0)
        worker(path, id, pg);
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    atomic_store(&pg->w[id].pid, pid);
}

static uint64_t drain(sluice_t *l, const char *key)
{
    struct sluice_result res;
    uint64_t n = 0;

    while (n <= 2 * COUNT && sluice_acquire_at(l, key, strlen(key), 1, T, &res) == SLUICE_ALLOW)
        n++;
    return n;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 15;
    uint64_t deadline = (uint64_t)DEADLINE_S * NS_PER_S, rng = t_mono(), kills = 0, end;
    struct sluice_config cfg;
    char path[256];
    struct page *pg;
    sluice_t *l;
    bool hung = false;

    t_shm_path(path, sizeof(path), "logkill");
    sluice_config_init(&cfg);
    cfg.policy = policy(true); /* the larger of the two: entries hold either */
    cfg.max_keys = 16;
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    pg = t_shared_page(sizeof(*pg));
    for (int i = 0; i < WORKERS; i++)
        spawn(path, i, pg);
    end = t_mono() + (uint64_t)(seconds * 1e9);
    while (t_mono() < end && !hung) {
        int id = (int)(t_rand(&rng) % WORKERS), status;

        t_kill_after(atomic_load(&pg->w[id].pid), 1000000, 8000000, &rng);
        kills++;
        spawn(path, id, pg);
        for (int i = 0; i < WORKERS; i++) {
            pid_t wp = atomic_load(&pg->w[i].pid);
            uint64_t beat = atomic_load(&pg->w[i].beat); /* before the clock: never ahead */
            if (waitpid(wp, &status, WNOHANG) == wp) {
                fprintf(stderr, "worker %d (pid %d) died by itself: %s %d\n", i, wp,
                        WIFSIGNALED(status) ? "signal" : "exit",
                        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                t_failures++;
                spawn(path, i, pg);
            } else if (t_worker_stalled(i, wp, beat, deadline)) {
                hung = true;
            }
        }
    }
    atomic_store(&pg->stop, 1);
    for (int i = 0; i < WORKERS; i++)
        if (!t_worker_finishes(i, atomic_load(&pg->w[i].pid), deadline))
            hung = true;
    CHECK(!hung);
    if (!hung) {
        uint64_t admitted = atomic_load(&pg->admitted), more = drain(l, "counted");
        uint64_t hot = atomic_load(&pg->hot_units), span = atomic_load(&pg->clock);
        uint64_t hot_bound = COUNT * (span / PERIOD + 2);
        CHECK(admitted <= COUNT);
        CHECK(admitted + more <= COUNT);
        CHECK(hot <= hot_bound);
        printf("%.0f s, %" PRIu64 " kills, %" PRIu64 " calls, %" PRIu64 " policy flips; "
               "counted key: %" PRIu64 " + %" PRIu64 " after, of %d; hot key: %" PRIu64
               " units over %.0f s of request times, of at most %" PRIu64 " (%.1f%%)\n",
               seconds, kills, atomic_load(&pg->calls), atomic_load(&pg->flips), admitted, more,
               COUNT, hot, (double)span / 1e9, hot_bound, 100.0 * (double)hot / (double)hot_bound);
    }
    CHECK_U64(atomic_load(&pg->errors), 0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    return t_done("shared_log_kill");
}
