/*
 * Decision counters are exact under threads: each of the first 64 thread
 * records owns a counter slot (plain stores, no locked instruction), later
 * ones share one by atomic add, and a record recycled by an exiting thread
 * hands its slot to the next.  allowed + denied must equal the decisions
 * made, with 4 threads, with 80 at once, and across 300 short-lived ones.
 */
#include <stdbool.h>

#include "helpers.h"

struct job {
    sluice_t *l;
    unsigned n, id;
    uint64_t allowed;
    pthread_barrier_t *start;
};

static void *decide(void *arg)
{
    struct job *j = arg;
    char key[16];

    if (j->start != NULL)
        pthread_barrier_wait(j->start);
    for (unsigned i = 0; i < j->n; i++) {
        size_t len = (size_t)snprintf(key, sizeof(key), "k%u", (j->id * 7 + i) % 13);
        j->allowed += sluice_acquire_at(j->l, key, len, 1, i / 64, NULL) == SLUICE_ALLOW;
    }
    return NULL;
}

static void run(unsigned threads, unsigned per_thread, bool together)
{
    static struct job jobs[80];
    pthread_barrier_t start;
    sluice_t *l = t_limiter1(SLUICE_GCRA, 1000, NS_PER_S, 0, 0);
    uint64_t allowed = 0;

    pthread_barrier_init(&start, NULL, threads);
    for (unsigned i = 0; i < threads; i++)
        jobs[i] = (struct job){l, per_thread, i, 0, together ? &start : NULL};
    if (together) {
        t_run_threads(threads, decide, jobs, sizeof(jobs[0]));
    } else {
        for (unsigned i = 0; i < threads; i++) /* one at a time: records recycle */
            t_run_threads(1, decide, &jobs[i], sizeof(jobs[0]));
    }
    for (unsigned i = 0; i < threads; i++)
        allowed += jobs[i].allowed;
    struct sluice_stats st;
    sluice_stats(l, &st);
    CHECK_U64(st.allowed, allowed);
    CHECK_U64(st.allowed + st.denied, (uint64_t)threads * per_thread);
    pthread_barrier_destroy(&start);
    sluice_destroy(l);
}

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);
    unsigned n = (unsigned)(200000 * scale) + 100;

    run(4, n, true);
    run(80, n / 20 + 10, true);
    for (int rounds = 0; rounds < 4; rounds++)
        run(75, 200, false);
    return t_done("stats");
}
