/* Bytes per key, and reaping a million idle keys under load. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Bytes per key of one algorithm, measured in a child process so that RSS
 * growth is not hidden by memory an earlier measurement freed. */
static void memory_one(enum sluice_algo a, const struct keyset *ks, FILE *out)
{
    struct sluice_config cfg;
    struct sluice_stats st;
    sluice_t *l;
    uint64_t rss0 = rss_bytes();

    sluice_config_init(&cfg);
    cfg.policy = bench_policy(a);
    cfg.max_keys = ks->n;
    if (sluice_create(&cfg, &l) != 0)
        return;
    for (uint64_t i = 0; i < ks->n; i++)
        sluice_acquire_at(l, ks->bytes + i * KEY_LEN, KEY_LEN, 1, 0, NULL);
    sluice_stats(l, &st);
    fprintf(out, "%.1f %.1f\n", (double)st.memory_bytes / (double)ks->n,
            (double)(rss_bytes() - rss0) / (double)ks->n);
    sluice_destroy(l);
}

void bench_memory(const struct options *o, FILE *csv)
{
    uint64_t n = o->quick ? 100000 : 1000000;
    struct keyset ks;

    keyset_make(&ks, n);
    printf("\nMemory per key (%llu keys of %d bytes; 1e6 units/s per key, see README)\n",
           (unsigned long long)n, KEY_LEN);
    printf("%-10s %14s %14s\n", "algorithm", "stats B/key", "RSS B/key");
    fflush(stdout);
    for (int a = 0; a < 5; a++) {
        double stat_b = 0, rss_b = 0;
        FILE *pipe_r;
        int fd[2];
        pid_t pid;

        if (!o->algo_on[a] || pipe(fd) != 0)
            continue;
        progress("memory: %s", algo_name(a));
        pid = fork();
        if (pid == 0) {
            FILE *w = fdopen(fd[1], "w");
            close(fd[0]);
            memory_one(a, &ks, w);
            fclose(w);
            _exit(0);
        }
        close(fd[1]);
        pipe_r = fdopen(fd[0], "r");
        if (pipe_r == NULL || fscanf(pipe_r, "%lf %lf", &stat_b, &rss_b) != 2)
            stat_b = rss_b = -1;
        if (pipe_r)
            fclose(pipe_r);
        waitpid(pid, NULL, 0);
        printf("%-10s %14.1f %14.1f\n", algo_name(a), stat_b, rss_b);
        if (csv)
            fprintf(csv, "memory,%s,%llu,%.1f,%.1f\n", algo_name(a), (unsigned long long)n, stat_b,
                    rss_b);
    }
    keyset_free(&ks);
}

struct prober {
    sluice_t *l;
    _Atomic int *stop;
    uint32_t *samples;
    _Atomic size_t n;
    size_t cap;
};

/* Decisions on 1000 busy keys, timed one by one. */
static void *probe_main(void *arg)
{
    struct prober *p = arg;
    char key[KEY_LEN];
    uint64_t now = 5000 * NS_PER_S;

    for (uint64_t i = 0; !atomic_load_explicit(p->stop, memory_order_relaxed) && p->n < p->cap; i++) {
        snprintf(key, sizeof(key), "busy-%010llu", (unsigned long long)(i % 1000));
        uint64_t t0 = now_ns();
        sluice_acquire_at(p->l, key, KEY_LEN - 1, 1, now, NULL);
        p->samples[p->n++] = (uint32_t)(now_ns() - t0);
        now += 100;
    }
    return NULL;
}

/* CPU time of the calling thread: what a reap costs whatever the machine's
 * load (on a shared machine the wall time also counts time not scheduled). */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double p99_of(uint32_t *s, size_t n)
{
    qsort(s, n, sizeof(*s), cmp_u32);
    return n ? s[n * 99 / 100] : 0;
}

/* Time to reap n idle keys while another thread decides; its p99 vs idle. */
void bench_reap(const struct options *o, FILE *csv)
{
    uint64_t n = o->quick ? 100000 : 1000000;
    struct sluice_config cfg;
    struct keyset ks;
    _Atomic int stop = 0;
    struct prober p = {.stop = &stop, .cap = 4000000};
    pthread_t th;
    sluice_t *l;
    double idle_p99, busy_p99;
    uint64_t t0, cpu0, reap_ns, free_ns;
    size_t reaped;

    progress("reap: creating %llu keys", (unsigned long long)n);
    keyset_make(&ks, n);
    sluice_config_init(&cfg);
    cfg.policy = bench_policy(SLUICE_GCRA);
    cfg.max_keys = n + 1000;
    sluice_create(&cfg, &l);
    for (uint64_t i = 0; i < n; i++)
        sluice_acquire_at(l, ks.bytes + i * KEY_LEN, KEY_LEN, 1, 0, NULL);
    p.l = l;
    p.samples = malloc(p.cap * sizeof(uint32_t));
    /* idle p99: the prober alone for 200k decisions */
    p.cap = 200000;
    probe_main(&p);
    idle_p99 = p99_of(p.samples, p.n);
    p.n = 0;
    p.cap = 4000000;
    pthread_create(&th, NULL, probe_main, &p);
    while (atomic_load(&p.n) < 1000)
        ; /* let it start */
    size_t before = p.n;
    t0 = now_ns();
    cpu0 = thread_cpu_ns();
    reaped = sluice_reap(l, 4000 * NS_PER_S); /* busy keys are at 5000 s: kept */
    reap_ns = now_ns() - t0;
    cpu0 = thread_cpu_ns() - cpu0;
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    busy_p99 = p99_of(p.samples + before, p.n - before);
    printf("\nReaping %zu idle keys: %.1f ms (%.1f ms of CPU); concurrent decisions p99 %.0f ns "
           "(idle p99 %.0f ns, %.2fx)\n",
           reaped, (double)reap_ns / 1e6, (double)cpu0 / 1e6, busy_p99, idle_p99,
           busy_p99 / idle_p99);
    free(p.samples);
    /* The reaped entries are freed once no reader can hold them: here,
     * all at once, as destroy drains what this thread retired. */
    t0 = now_ns();
    cpu0 = thread_cpu_ns();
    sluice_destroy(l);
    free_ns = now_ns() - t0;
    cpu0 = thread_cpu_ns() - cpu0;
    printf("  then freeing them (sluice_destroy drains the retired entries): %.1f ms (%.1f ms "
           "of CPU)\n",
           (double)free_ns / 1e6, (double)cpu0 / 1e6);
    if (csv)
        fprintf(csv, "reap,%zu,%.3f,%.0f,%.0f,%.3f\n", reaped, (double)reap_ns / 1e6, busy_p99,
                idle_p99, (double)free_ns / 1e6);
    keyset_free(&ks);
}
