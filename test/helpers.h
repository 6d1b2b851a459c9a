/*
 * Shared helpers of the test programs.  Each program tests one feature,
 * exits 0 on success, 1 on failure, 77 to skip (meson reads it).
 */
#ifndef SLUICE_TEST_HELPERS_H
#define SLUICE_TEST_HELPERS_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"

#define T_SKIP 77

/* Built with a sanitizer: resident memory then says little (shadow
 * memory, quarantined frees), so tests of it only report. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define T_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define T_SANITIZED 1
#endif
#endif

/* The process's resident memory (0 if /proc is not there). */
static inline uint64_t t_rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}
#define NS_PER_S UINT64_C(1000000000)

static int t_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            t_failures++;                                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                                    \
        if (t_a_ != t_b_) {                                                                        \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a,     \
                    t_a_, #b, t_b_);                                                               \
            t_failures++;                                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_U64(a, b)                                                                            \
    do {                                                                                           \
        uint64_t t_a_ = (uint64_t)(a), t_b_ = (uint64_t)(b);                                       \
        if (t_a_ != t_b_) {                                                                        \
            fprintf(stderr, "%s:%d: %s == %" PRIu64 ", expected %" PRIu64 "\n", __FILE__,           \
                    __LINE__, #a, t_a_, t_b_);                                                     \
            t_failures++;                                                                          \
        }                                                                                          \
    } while (0)

static inline int t_done(const char *name)
{
    if (t_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, t_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

/* sluice_create(cfg), or exit the test: setup is not what is tested. */
static inline sluice_t *t_create(const struct sluice_config *cfg)
{
    sluice_t *l = NULL;
    int rc = sluice_create(cfg, &l);

    if (rc != 0) {
        fprintf(stderr, "sluice_create: %s\n", sluice_strerror(rc));
        exit(1);
    }
    return l;
}

/* One limit, every field given. */
static inline struct sluice_limit t_limit(enum sluice_algo algo, uint64_t count, uint64_t period,
                                          uint64_t burst, uint64_t precision)
{
    struct sluice_limit d = {
        .algo = algo, .count = count, .period_ns = period, .burst = burst, .precision_ns = precision};
    return d;
}

/* A limiter with one limit (burst/precision as given) and a clock-free config. */
static inline sluice_t *t_limiter1(enum sluice_algo algo, uint64_t count, uint64_t period,
                                   uint64_t burst, uint64_t precision)
{
    struct sluice_config cfg;
    sluice_t *l = NULL;

    sluice_config_init(&cfg);
    cfg.policy.nlimits = 1;
    cfg.policy.limits[0] = t_limit(algo, count, period, burst, precision);
    if (sluice_create(&cfg, &l) != 0) {
        fprintf(stderr, "t_limiter1: sluice_create failed\n");
        exit(1);
    }
    return l;
}

/* Work scale: argv[1] if given, smaller under sanitizers or valgrind. */
static inline double t_scale(int argc, char **argv)
{
    double s = argc > 1 ? atof(argv[1]) : 1.0;
    const char *env = getenv("SLUICE_TEST_SCALE");

    if (env != NULL)
        s *= atof(env);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    s *= 0.1;
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
    s *= 0.1;
#endif
#endif
    return s > 0 ? s : 1.0;
}

static inline uint64_t t_rand(uint64_t *state)
{
    uint64_t x = *state += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* Start n threads on fn(arg_i) and wait for all. */
static inline void t_run_threads(unsigned n, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t th[256];

    if (n > sizeof(th) / sizeof(th[0])) {
        fprintf(stderr, "t_run_threads: at most %zu threads\n", sizeof(th) / sizeof(th[0]));
        exit(1);
    }
    for (unsigned i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, fn, (char *)args + i * arg_size) != 0) {
            perror("pthread_create");
            exit(1);
        }
    for (unsigned i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* A fresh path under /dev/shm for a shared limiter, or exit 77 (skip)
 * where there is no writable /dev/shm. */
static inline void t_shm_path(char *buf, size_t cap, const char *name)
{
    if (access("/dev/shm", W_OK) != 0) {
        printf("%s: no writable /dev/shm, skipped\n", name);
        exit(T_SKIP);
    }
    snprintf(buf, cap, "/dev/shm/sluice-test-%s-%ld", name, (long)getpid());
    (void)sluice_unlink_shared(buf);
}

/* sluice_open_shared(), or exit the test. */
static inline sluice_t *t_open_shared(const char *path, const struct sluice_config *cfg,
                                      unsigned flags)
{
    sluice_t *l = NULL;
    int rc = sluice_open_shared(path, cfg, flags, &l);

    if (rc != 0) {
        fprintf(stderr, "sluice_open_shared(%s): %s\n", path, sluice_strerror(rc));
        exit(1);
    }
    return l;
}

/* A wait told at t holds to the nanosecond: a cost-1 request on key is
 * admitted at t + wait and refused at t + wait - 1 (peeks: nothing is
 * charged).  The header's promise for retry_after_ns. */
static inline bool t_wait_holds(sluice_t *l, const char *key, uint64_t t, uint64_t wait)
{
    size_t len = strlen(key);

    return sluice_peek_at(l, key, len, 1, t + wait - 1, NULL) == SLUICE_DENY &&
           sluice_peek_at(l, key, len, 1, t + wait, NULL) == SLUICE_ALLOW;
}

/* CLOCK_MONOTONIC, in ns. */
static inline uint64_t t_mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* A worker process asked to stop must exit within deadline_ns; false (it
 * is then SIGKILLed and waited for) if it does not. */
static inline bool t_worker_finishes(int id, pid_t pid, uint64_t deadline_ns)
{
    uint64_t until = t_mono() + deadline_ns;
    int status;

    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (t_mono() > until) {
            fprintf(stderr, "worker %d (pid %d) did not finish\n", id, pid);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return false;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return true;
}

/* size zeroed bytes shared with forked children, or exit the test. */
static inline void *t_shared_page(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p; /* anonymous mappings start zeroed */
}

/* After a random pause in [lo_ns, hi_ns), SIGKILL pid and reap it. */
static inline void t_kill_after(pid_t pid, uint64_t lo_ns, uint64_t hi_ns, uint64_t *rng)
{
    uint64_t ns = lo_ns + t_rand(rng) % (hi_ns - lo_ns);
    struct timespec nap = {(time_t)(ns / NS_PER_S), (long)(ns % NS_PER_S)};
    int status;

    nanosleep(&nap, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

/* A live worker whose last heartbeat (t_mono() ns, read before this
 * call's clock) is older than deadline_ns: says so, returns true. */
static inline bool t_worker_stalled(int id, pid_t pid, uint64_t beat, uint64_t deadline_ns)
{
    if (t_mono() - beat <= deadline_ns)
        return false;
    fprintf(stderr, "worker %d (pid %d) made no progress for %.0f s\n", id, pid,
            (double)deadline_ns / 1e9);
    return true;
}

#endif
