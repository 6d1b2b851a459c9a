/*
 * A reap racing a call on several keys held between its commits (a
 * review's programs, 2026-12-04).  K0 and K1 are admitted at t0; an
 * acquire_all(K0, K1) at t0 + 9.5 s charges both, commits K0's time and is
 * held before K1's; sluice_reap(t0 + 10 s) with a 10 s idle_ttl then found
 * K1 idle (its latest time still t0) and fresh, and removed it; the call
 * went on and admitted, and K1, made again at the reap's time, admitted a
 * full burst at t0 + 9.5 s that every serial order of the same calls
 * denies (the reap after the call: K1 not idle; before it: the call's unit
 * stands in the new K1).  A reap now waits for no call but leaves a key
 * that one is committing on, and tests idleness on the time it sealed.
 * Private (a thread held by the test hook) and shared (a process stopped
 * there by SIGSTOP); GCRA and a fixed window.  And a process killed there:
 * its count must not keep the keys from being reaped for ever.  Needs the debug hook
 * (debug and sanitizer builds): exit 77 without it.
 */
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "helpers.h"

#ifdef SL_DEBUG_CHECKS
#define S NS_PER_S
static const uint64_t T0 = UINT64_C(1000) * S, AT = UINT64_C(1000) * S + S * 95 / 10;
/* longer than a cell's 16 bytes: in entries, whose commits follow their
 * charges (two short GCRA keys are decided on cells, by one CAS each) */
#define K0 "reap-window-key-0-long"
#define K1 "reap-window-key-1-long"
#define KLEN (sizeof(K0) - 1)

extern _Atomic(void (*)(void)) sl_test_between_commits;

static sem_t in_window, go;
static sluice_t *L;
static int rc_all;

static void hold(void)
{
    sem_post(&in_window);
    sem_wait(&go);
}

static void kill_self(void)
{
    raise(SIGKILL);
}

static void stop_once(void)
{
    static int done;
    if (!done) {
        done = 1;
        raise(SIGSTOP);
    }
}

static void *caller(void *arg)
{
    struct sluice_key k[2] = {{L, K0, KLEN}, {L, K1, KLEN}};

    (void)arg;
    rc_all = sluice_acquire_all(k, 2, 1, AT, NULL);
    return NULL;
}

static struct sluice_config config(enum sluice_algo algo)
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, algo, 10, S);
    cfg.max_keys = 64;
    cfg.shards = 1;
    cfg.idle_ttl_ns = 10 * S;
    return cfg;
}

static void admit_both(sluice_t *l)
{
    CHECK_EQ(sluice_acquire_at(l, K0, KLEN, 1, T0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, K1, KLEN, 1, T0, NULL), SLUICE_ALLOW);
}

/* After the held call: it admitted, so K1 holds 2 units by t0 + 9.5 s
 * (or, reaped before it, 1 made at the reap's time): 10 more deny. */
static void check_after(sluice_t *l, const char *what)
{
    int rc = sluice_acquire_at(l, K1, KLEN, 10, AT, NULL);
    if (rc != SLUICE_DENY)
        fprintf(stderr, "%s: K1 admitted a burst of 10 beside the held call's unit\n", what);
    CHECK_EQ(rc, SLUICE_DENY);
}

static void private_case(enum sluice_algo algo, const char *what)
{
    struct sluice_config cfg = config(algo);
    pthread_t th;

    L = t_create(&cfg);
    admit_both(L);
    sem_init(&in_window, 0, 0);
    sem_init(&go, 0, 0);
    atomic_store(&sl_test_between_commits, hold);
    alarm(30); /* the call never reaching the hook hangs here */
    pthread_create(&th, NULL, caller, NULL);
    sem_wait(&in_window);
    atomic_store(&sl_test_between_commits, NULL);
    (void)sluice_reap(L, T0 + 10 * S); /* K0 was just committed: not idle either way */
    sem_post(&go);
    pthread_join(th, NULL);
    CHECK_EQ(rc_all, SLUICE_ALLOW);
    check_after(L, what);
    alarm(0);
    sem_destroy(&in_window);
    sem_destroy(&go);
    sluice_destroy(L);
}

/* A fresh shared limiter in path (L), both keys admitted, and a child
 * making the call with `hook` between its commits (exit 0: admitted). */
static pid_t shared_start(enum sluice_algo algo, char *path, size_t cap, void (*hook)(void))
{
    struct sluice_config cfg = config(algo);
    pid_t pid;

    t_shm_path(path, cap, "reap_window");
    (void)sluice_unlink_shared(path);
    L = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    admit_both(L);
    if ((pid = fork()) == 0) {
        atomic_store(&sl_test_between_commits, hook);
        alarm(30);
        caller(NULL);
        _exit(rc_all == SLUICE_ALLOW ? 0 : 1);
    }
    return pid;
}

static void shared_case(enum sluice_algo algo, const char *what)
{
    char path[128];
    int status;
    pid_t pid = shared_start(algo, path, sizeof(path), stop_once);

    CHECK_EQ(waitpid(pid, &status, WUNTRACED), pid);
    CHECK(WIFSTOPPED(status));
    alarm(30);
    (void)sluice_reap(L, T0 + 10 * S);
    CHECK_EQ(kill(pid, SIGCONT), 0);
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    check_after(L, what);
    alarm(0);
    sluice_destroy(L);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/* The same call killed there (SIGKILL): its count stays on both keys.  A
 * reap that finds no live process in a window clears it and removes the
 * keys once idle; one that only waited for counts to fall left them for
 * good (the first version of the fix above). */
static void shared_killed(void)
{
    char path[128];
    int status;
    pid_t pid = shared_start(SLUICE_GCRA, path, sizeof(path), kill_self);

    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    alarm(30);
    CHECK_U64(sluice_reap(L, T0 + 30 * S), 2);
    alarm(0);
    sluice_destroy(L);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}
#endif

int main(void)
{
#ifdef SL_DEBUG_CHECKS
    private_case(SLUICE_GCRA, "private, GCRA");
    private_case(SLUICE_FIXED_WINDOW, "private, fixed window");
    shared_case(SLUICE_GCRA, "shared, GCRA");
    shared_case(SLUICE_FIXED_WINDOW, "shared, fixed window");
    shared_killed();
    return t_done("reap_window");
#else
    fprintf(stderr, "reap_window: needs the debug hook (debug or sanitizer build)\n");
    return 77;
#endif
}
