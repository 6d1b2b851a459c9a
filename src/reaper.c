/*
 * Reaping idle keys: sluice_reap, and the background thread a limiter
 * with reap_interval_ns runs it from.  Above the table and the epoch, beside
 * the limiter's life cycle (limiter.c starts and stops the thread); nothing
 * below calls up into it.
 */
#include <time.h>

#include "internal.h"
#include "table_cells.h"

/* Longer intervals wait this long and look again: a deadline past time_t's
 * range would wrap into the past and the reaper would spin. */
#define SL_REAP_WAIT_MAX (UINT64_C(86400) * 1000000000u)

static void sl_deadline_after(struct timespec *ts, uint64_t ns)
{
    ns = sl_min64(ns, SL_REAP_WAIT_MAX);
    clock_gettime(CLOCK_MONOTONIC, ts);
    ns += (uint64_t)ts->tv_nsec;
    ts->tv_sec += (time_t)(ns / 1000000000u);
    ts->tv_nsec = (long)(ns % 1000000000u);
}

static void *sl_reaper_main(void *arg)
{
    struct sluice *l = arg;
    struct timespec deadline;

    pthread_mutex_lock(&l->reaper_lock);
    while (!l->reaper_stop) {
        uint64_t left = l->reap_interval_ns;
        while (left > 0 && !l->reaper_stop) {
            uint64_t step = sl_min64(left, SL_REAP_WAIT_MAX);
            sl_deadline_after(&deadline, step);
            while (!l->reaper_stop &&
                   pthread_cond_timedwait(&l->reaper_cond, &l->reaper_lock, &deadline) == 0)
                ;
            left -= step;
        }
        if (l->reaper_stop)
            break;
        pthread_mutex_unlock(&l->reaper_lock);
        (void)sluice_reap(l, sluice_now(l));
        pthread_mutex_lock(&l->reaper_lock);
    }
    pthread_mutex_unlock(&l->reaper_lock);
    return NULL;
}

int sl_reaper_start(struct sluice *l)
{
    pthread_condattr_t ca;

    if (l->reap_interval_ns == 0)
        return 0;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->reaper_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&l->reaper_lock, NULL);
    l->reaper_stop = false;
    if (pthread_create(&l->reaper, NULL, sl_reaper_main, l) != 0) {
        pthread_cond_destroy(&l->reaper_cond);
        pthread_mutex_destroy(&l->reaper_lock);
        return -EAGAIN;
    }
    l->reaper_running = true;
    return 0;
}

void sl_reaper_stop(struct sluice *l)
{
    if (!l->reaper_running)
        return;
    pthread_mutex_lock(&l->reaper_lock);
    l->reaper_stop = true;
    pthread_cond_signal(&l->reaper_cond);
    pthread_mutex_unlock(&l->reaper_lock);
    pthread_join(l->reaper, NULL);
    pthread_cond_destroy(&l->reaper_cond);
    pthread_mutex_destroy(&l->reaper_lock);
    l->reaper_running = false;
}

size_t sluice_reap(sluice_t *l, uint64_t now_ns)
{
    struct sl_thread *t;
    size_t removed = 0;

    if (l == NULL || (t = sl_thread_get()) == NULL)
        return 0;
    if (l->shm != NULL)
        return sl_shm_reap(l, now_ns);
    /* One section per shard: what a shard's reap unpublishes is retired
     * inside the section that unpublished it (ck's rule), and deciders are
     * never held up for more than one shard's scan. */
    for (unsigned i = 0; i < l->nshards; i++) {
        sl_epoch_begin(t);
        sl_shard_lock(&l->shards[i]);
        removed += sl_shard_reap(&l->shards[i], now_ns, l->idle_ttl_ns);
        sl_shard_unlock(&l->shards[i]);
        sl_epoch_end(t);
    }
    sl_epoch_begin(t); /* callbacks may retire more: inside a section */
    sl_epoch_reclaim(t);
    sl_epoch_end(t);
    return removed;
}
