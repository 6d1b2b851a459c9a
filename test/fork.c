/*
 * fork(2) while other threads are inside calls.  A child inherits every
 * lock as it was at the fork; one held then by another thread of the
 * parent (a caller's, or the library's own reaper) stayed held in the
 * child, whose first call needing it never returned: a shared limiter's
 * policy cache lock (its reaper reaping while another process changed the
 * policy: 2 of 8 children hung), a private limiter's shard and allocator
 * locks; and lock-free state of calls in flight: a sliding log's key a
 * thread was writing (held for a few stores) stayed held in the child,
 * whose calls on it spun, and an acquire_all counted on its keys between
 * its test and its commits stayed counted, so the child's first writer of
 * such a key (a reset) waited for ever (5 of 9 children, a reviewer).  Here the parent forks children again and again while its
 * threads change policies and overrides, insert fresh keys and reap
 * (and the limiter's reaper runs); each child must make keys in every
 * shard, change the policy, reap, destroy its copy (no reaper to join
 * there) and exit within a deadline.
 *   shared   one file, the parent's threads and a second process flipping
 *            its policy, children deciding on the inherited handle;
 *   private  a private limiter, children using their copy, and a sliding
 *            log whose hot key a third thread charges all the while;
 *   pairs    the same with the churning threads running acquire_all of
 *            two keys only, which each child then resets.
 * Then the parent's limiters still decide exactly: nothing was left held.
 *
 * Under AddressSanitizer and ThreadSanitizer the parent's threads pause
 * outside calls at each fork, and no reaper thread runs: the runtimes'
 * allocators (GCC 12's) do not lock everything around fork, so a child
 * whose parent had another thread inside malloc or free at the fork hangs
 * in its own (seen in CI: an ASan child's stack ends in
 * SizeClassAllocator64's region lock, a TSan child's in
 * DenseSlabAlloc<ClockBlock>::Drain's spin lock, under a plain free() in
 * sluice_destroy, once the reaper thread reaped and freed during forks).
 * glibc's malloc locks its own around fork, so the default build keeps
 * every call in flight; the sanitizer builds still check the child's walk
 * and calls for memory errors and races.
 */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "helpers.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FORK_QUIESCE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FORK_QUIESCE 1
#endif
#endif
#ifndef FORK_QUIESCE
#define FORK_QUIESCE 0
#endif

#define NOW (UINT64_C(1000) * NS_PER_S)
#define CHILD_DEADLINE 30 /* s: a hung child is killed by its alarm (a child under
                             ThreadSanitizer on a loaded machine took over 5 s) */

static _Atomic bool stop;
static bool pairs_only; /* the churn threads run acquire_all alone */
static sluice_t *log_limiter; /* private case: a sliding log's hot key */
static _Atomic uint64_t log_now = NOW, pair_now = NOW;
static _Atomic bool hold_calls; /* FORK_QUIESCE: the forking thread waits for */
static _Atomic int in_call;     /* no thread of the test inside a call */
static uint64_t reap_clock = NOW; /* FORK_QUIESCE: the main thread's reaps, across cases */

/* seq_cst both ways: a thread sees hold_calls, or the forker sees in_call. */
static void call_begin(void)
{
    if (!FORK_QUIESCE)
        return;
    for (;;) {
        while (atomic_load(&hold_calls))
            sched_yield();
        atomic_fetch_add(&in_call, 1);
        if (!atomic_load(&hold_calls))
            return;
        atomic_fetch_sub(&in_call, 1);
    }
}

static void call_end(void)
{
    if (FORK_QUIESCE)
        atomic_fetch_sub(&in_call, 1);
}

static pid_t fork_quiet(void)
{
    pid_t pid;

    if (!FORK_QUIESCE)
        return fork();
    atomic_store(&hold_calls, true);
    while (atomic_load(&in_call) != 0)
        sched_yield();
    pid = fork();
    if (pid != 0)
        atomic_store(&hold_calls, false);
    return pid;
}

static struct sluice_policy per_second(uint64_t count)
{
    struct sluice_policy p = {0};

    sluice_policy_add(&p, SLUICE_GCRA, count, NS_PER_S);
    return p;
}

/* Work that takes every kind of lock: policy changes (a shared file's
 * policy cache), overrides, fresh keys (shard locks, the allocator),
 * reaps (every shard). */
static void *churn(void *arg)
{
    sluice_t *l = arg;
    uint64_t rng = (uint64_t)(uintptr_t)&rng, n = 0;

    while (!atomic_load(&stop)) {
        char key[32];
        struct sluice_policy p = per_second(1000 + t_rand(&rng) % 3);
        snprintf(key, sizeof(key), "churn-%" PRIu64, n++ % 4096);
        call_begin();
        switch (pairs_only ? 4 : t_rand(&rng) % 5) {
        case 4: {
            /* a millisecond on per call: admitted (under the pairs run's
             * policy), so each counts itself on the keys before its commits */
            struct sluice_key pair[2] = {{l, "pair-a", 6}, {l, "pair-b", 6}};
            (void)sluice_acquire_all(pair, 2, 1, atomic_fetch_add(&pair_now, 1000000), NULL);
            break;
        }
        case 0:
            (void)sluice_set_policy(l, &p);
            break;
        case 1:
            (void)sluice_override_set(l, key, strlen(key), &p);
            (void)sluice_override_clear(l, key, strlen(key));
            break;
        case 2:
            (void)sluice_reap(l, NOW + 3600 * NS_PER_S);
            break;
        default:
            (void)sluice_acquire_at(l, key, strlen(key), 1, NOW, NULL);
        }
        call_end();
    }
    return NULL;
}

/* The sliding log's hot key, charged at times moving on. */
static void *log_hammer(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        call_begin();
        (void)sluice_acquire_at(log_limiter, "hot", 3, 1, atomic_fetch_add(&log_now, 1000), NULL);
        call_end();
    }
    return NULL;
}

/* In the child: every lock must be free. */
static int child_uses(sluice_t *l, bool shared)
{
    struct sluice_policy p = per_second(7);
    int rc;

    alarm(CHILD_DEADLINE);
    if (!shared && sluice_acquire_at(log_limiter, "hot", 3, 1, atomic_load(&log_now), NULL) < 0)
        return 4;
    for (unsigned k = 0; k < 256; k++) { /* fresh keys: every shard */
        char key[32];
        snprintf(key, sizeof(key), "child-%d-%u", (int)getpid(), k);
        if (sluice_acquire_at(l, key, strlen(key), 1, NOW, NULL) != SLUICE_ALLOW)
            return 2;
    }
    if (sluice_override_set(l, "child", 5, &p) != 0 || sluice_set_policy(l, &p) != 0)
        return 3;
    rc = sluice_reset(l, "pair-a", 6); /* a key an acquire_all was committing */
    if (rc < 0 && rc != -ENOENT)
        return 5;
    (void)sluice_reap(l, NOW + 7200 * NS_PER_S);
    sluice_destroy(l); /* a private copy's reaper is not in the child */
    (void)shared;
    return 0;
}

static unsigned fork_rounds(sluice_t *l, bool shared, unsigned forks)
{
    unsigned hung = 0;

    for (unsigned i = 0; i < forks && hung == 0; i++) { /* one hung: failed, stop waiting */
        int st;
        pid_t pid = fork_quiet();
        if (pid == 0)
            _exit(child_uses(l, shared));
        CHECK(pid > 0);
        CHECK(waitpid(pid, &st, 0) == pid);
        if (FORK_QUIESCE) /* in place of the reaper thread: room for the next child's keys
                             (at a time moving on, as its clock: a key made after a reap
                             is as of that reap's time, so reaped only by a later one) */
            (void)sluice_reap(l, reap_clock += 86400 * NS_PER_S);
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
            hung++;
        else
            CHECK_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0);
    }
    return hung;
}

static uint64_t ahead_clock(void *ctx);

/* The parent's limiter, once the churn is over: one fresh key admits its
 * count exactly (no lock left held, no state torn).  At the limiters' own
 * clock, under a limit that an hour replenishes: the reaper thread, which
 * reaps at that clock every 20 us, reaped the key between two calls at
 * NOW (replenished two hours before its clock), and the key made again
 * after that reap was rightly decided at its time (14 of 10 admitted once
 * in CI, on a loaded machine). */
static void check_after(sluice_t *l, const char *key)
{
    struct sluice_policy p = {0};
    unsigned admitted = 0;
    uint64_t at = ahead_clock(NULL);

    sluice_policy_add(&p, SLUICE_GCRA, 10, 3600 * NS_PER_S);
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    for (int i = 0; i < 20; i++)
        admitted += sluice_acquire_at(l, key, strlen(key), 1, at, NULL) == SLUICE_ALLOW;
    CHECK_EQ(admitted, 10);
}

static void run(const char *name, sluice_t *l, bool shared, unsigned forks, pid_t helper)
{
    pthread_t th[3];
    int nth = shared ? 2 : 3;
    unsigned hung;

    atomic_store(&stop, false);
    for (int i = 0; i < nth; i++)
        CHECK(pthread_create(&th[i], NULL, i < 2 ? churn : log_hammer, l) == 0);
    hung = fork_rounds(l, shared, forks);
    atomic_store(&stop, true);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (helper > 0) {
        int st;
        kill(helper, SIGKILL);
        waitpid(helper, &st, 0);
    }
    CHECK_EQ(hung, 0);
    check_after(l, name); /* a key of its own: the private and pairs cases share l */
    printf("%-8s %u forks beside 2 churning threads%s: %u children hung\n", name, forks,
           FORK_QUIESCE ? " (paused at each fork: a sanitizer)" : " and a reaper", hung);
    fflush(stdout);
}

/*
 * The limiters' clock (the reaper thread's, and administrative calls'):
 * two hours past NOW, moving on from there.  Keys start at the churn's reap
 * time, NOW + 3600 s, so a reaper on CLOCK_MONOTONIC, the machine's uptime,
 * reaped none of them on a machine up for less than 77 minutes: the 65th
 * child found the shared file full (80 x 256 keys > max_keys), and the
 * reaper thread, rescanning keys it could not take every 20 us, slowed the
 * test past its timeout.  Machines up for hours passed (both shown in a time
 * namespace: unshare -T --monotonic).
 */
static uint64_t clock_origin;

static uint64_t ahead_clock(void *ctx)
{
    (void)ctx;
    return NOW + 7200 * NS_PER_S + (t_mono() - clock_origin);
}

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);
    unsigned forks = (unsigned)(60 * scale) + 20;
    struct sluice_config cfg;
    char path[256];
    sluice_t *l;
    pid_t helper;

    sluice_config_init(&cfg);
    cfg.policy = per_second(1000);
    cfg.max_keys = 1 << 14;
    cfg.reap_interval_ns = FORK_QUIESCE ? 0 : 20000; /* the library's own thread, reaping often */
    clock_origin = t_mono();
    cfg.clock = SLUICE_CLOCK_CUSTOM;
    cfg.clock_fn = ahead_clock;

    t_shm_path(path, sizeof(path), "fork");
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    if ((helper = fork()) == 0) { /* another process changing the policy */
        struct sluice_config own = cfg; /* its own clock_fn, no reaper thread */
        sluice_t *h;
        own.reap_interval_ns = 0;
        h = t_open_shared(path, &own, 0);
        alarm(120);
        for (uint64_t n = 0;; n++) {
            struct sluice_policy p = per_second(2000 + n % 5);
            (void)sluice_set_policy(h, &p);
        }
    }
    CHECK(helper > 0);
    run("shared", l, true, forks, helper);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);

    l = t_create(&cfg);
    {
        struct sluice_config lc;
        sluice_config_init(&lc);
        sluice_policy_add(&lc.policy, SLUICE_SLIDING_LOG, 64, UINT64_C(1000000));
        log_limiter = t_create(&lc);
    }
    run("private", l, false, forks, 0);
    pairs_only = true;
    {
        struct sluice_policy every = per_second(1000000); /* admits every pair call */
        CHECK_EQ(sluice_set_policy(l, &every), 0);
    }
    run("pairs", l, false, forks, 0);
    sluice_destroy(log_limiter);
    sluice_destroy(l);
    return t_done("fork");
}
