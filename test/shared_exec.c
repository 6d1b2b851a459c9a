/*
 * A process that calls exec(2) while another of its threads is inside a
 * call on a shared limiter: exec ends that thread without the library
 * running, and keeps the pid and its start time, the two things the other
 * processes told a live process by.  Its shard lock, section counts and
 * window marks then looked held for as long as the new program ran, and
 * other processes' new keys, set_policy, overrides, resets and reaps
 * waited for it (an outside tester: 7 of 10 trials hung with one shard).
 * A record now also names where its process maps the file, and a process
 * that no longer maps it there is gone.  Per trial: a child attaches,
 * loops new keys and reaps in a thread and execs /bin/sleep from its main
 * thread; then another process's writers must finish within a bound, and
 * the file must still serve after the sleeper is killed.
 * Usage: shared_exec [scale]   (exit 77 without /dev/shm or /bin/sleep)
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "helpers.h"

#define NS NS_PER_S

static char path[128];
static sluice_t *shared;
static atomic_int started;

static void *churn(void *arg)
{
    char k[32];

    (void)arg;
    for (uint64_t i = 0;; i++) {
        int n = snprintf(k, sizeof(k), "k-%d-%llu", (int)getpid(), (unsigned long long)(i % 3000));
        (void)sluice_acquire_at(shared, k, (size_t)n, 1, 5 * NS + i, NULL);
        (void)sluice_reap(shared, 5 * NS + i);
        if (i == 10)
            atomic_store(&started, 1);
    }
    return NULL;
}

/* Every writer another process may need a shard lock or a grace period
 * for: in a child of its own, which must be done within `bound` ns. */
static bool writers_finish(uint64_t bound)
{
    uint64_t t0 = t_mono();
    pid_t c = fork();
    int st;

    if (c == 0) {
        struct sluice_policy p = {0};
        sluice_t *l = NULL;
        char k[32];
        int rc = sluice_open_shared(path, NULL, 0, &l);

        sluice_policy_add(&p, SLUICE_FIXED_WINDOW, 60, NS);
        for (int i = 0; i < 100 && rc >= 0; i++) { /* keys in every shard */
            int n = snprintf(k, sizeof(k), "w-%d", i);
            rc = sluice_acquire_at(l, k, (size_t)n, 1, 5 * NS, NULL);
        }
        if (rc >= 0)
            rc = sluice_set_policy(l, &p);
        if (rc >= 0)
            rc = sluice_override_set(l, "w-1", 3, &p);
        if (rc >= 0)
            rc = sluice_reset(l, "w-2", 3);
        if (rc >= 0)
            (void)sluice_reap(l, 6 * NS);
        _exit(rc < 0 ? 1 : 0);
    }
    while (waitpid(c, &st, WNOHANG) == 0) {
        if (t_mono() - t0 > bound) {
            kill(c, SIGKILL);
            waitpid(c, &st, 0);
            return false;
        }
        usleep(2000);
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return true;
}

int main(int argc, char **argv)
{
    int trials = (int)(8 * t_scale(argc, argv)) + 2, hung = 0;
    uint64_t bound = 20 * NS; /* hung, not slow: writers take milliseconds */

    if (access("/bin/sleep", X_OK) != 0) {
        printf("shared_exec: no /bin/sleep, skipped\n");
        return T_SKIP;
    }
    t_shm_path(path, sizeof(path), "exec");
    srand((unsigned)getpid());
    for (int t = 0; t < trials; t++) {
        struct sluice_config cfg;
        pid_t sleeper;

        sluice_config_init(&cfg);
        sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 100, NS);
        cfg.max_keys = 4096;
        cfg.shards = 1; /* every writer meets the one shard lock */
        (void)sluice_unlink_shared(path);
        sluice_destroy(t_open_shared(path, &cfg, SLUICE_SHARED_CREATE));
        fflush(stdout);
        fflush(stderr);
        if ((sleeper = fork()) == 0) {
            pthread_t th;
            if (sluice_open_shared(path, NULL, 0, &shared) != 0)
                _exit(2);
            pthread_create(&th, NULL, churn, NULL);
            while (!atomic_load(&started))
                sched_yield();
            usleep((useconds_t)(rand() % 20000));
            execl("/bin/sleep", "sleep", "60", (char *)NULL);
            _exit(3);
        }
        usleep(200000); /* the exec is done */
        if (!writers_finish(bound)) {
            hung++;
            fprintf(stderr, "trial %d: writers held up by the exec'd process %d\n", t,
                    (int)sleeper);
        }
        kill(sleeper, SIGKILL);
        waitpid(sleeper, NULL, 0);
        CHECK(writers_finish(bound)); /* and after it is gone for good */
    }
    (void)sluice_unlink_shared(path);
    CHECK_EQ(hung, 0);
    printf("shared_exec: %d trials, %d held up\n", trials, hung);
    return t_done("shared_exec");
}
