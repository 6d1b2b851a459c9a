/*
 * Epoch-based reclamation shared by every limiter of the process.
 *
 * One global ck_epoch, one record per thread, made lazily on the thread's
 * first call and handed back (after draining what it retired) by a
 * pthread-key destructor when the thread exits; ck_epoch_recycle reuses the
 * records of dead threads, so thread churn does not grow memory.  A global
 * epoch keeps the hot path at one thread-local load: no per-limiter record
 * lookup.  Callbacks only free memory, never touch a limiter, so a limiter
 * can be destroyed while other threads still hold retired memory of it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"

static ck_epoch_t sl_epoch;
char sl_epoch_tsan_sync;
static pthread_once_t sl_epoch_once = PTHREAD_ONCE_INIT;
static pthread_key_t sl_thread_key;
static _Atomic unsigned sl_thread_ids;

static _Thread_local struct sl_thread *sl_tls __attribute__((tls_model("initial-exec")));

/* Past this many pending callbacks a retiring thread reclaims what it can. */
#define SL_POLL_PENDING 64

static void sl_thread_exit(void *arg)
{
    struct sl_thread *t = arg;

    /* ck_epoch_unregister drops pending callbacks: run them first. */
    sl_epoch_drain(t);
    SL_TSAN_RELEASE(t);
    ck_epoch_unregister(&t->rec);
    sl_tls = NULL;
}

/* At exit, run what the exiting thread still has pending, so memory
 * checkers see every retired block returned. */
__attribute__((destructor)) static void sl_epoch_at_exit(void)
{
    if (sl_tls != NULL)
        sl_epoch_drain(sl_tls);
}

static void sl_epoch_global_init(void)
{
    ck_epoch_init(&sl_epoch);
    (void)pthread_key_create(&sl_thread_key, sl_thread_exit);
}

static struct sl_thread *sl_thread_make(void)
{
    struct sl_thread *t;
    ck_epoch_record_t *r;

    (void)pthread_once(&sl_epoch_once, sl_epoch_global_init);
    r = ck_epoch_recycle(&sl_epoch, NULL);
    if (r != NULL) {
        t = (struct sl_thread *)r;
        SL_TSAN_ACQUIRE(t); /* handed over by ck from the thread that left it */
    } else {
        /* Records are never freed: ck keeps them on its list for recycling. */
        t = sl_alloc_aligned(NULL, sizeof(*t));
        if (t == NULL)
            return NULL;
        ck_epoch_register(&sl_epoch, &t->rec, NULL);
        t->id = atomic_fetch_add_explicit(&sl_thread_ids, 1, memory_order_relaxed);
    }
    if (pthread_setspecific(sl_thread_key, t) != 0) {
        ck_epoch_unregister(&t->rec);
        return NULL;
    }
    sl_tls = t;
    return t;
}

struct sl_thread *sl_thread_get(void)
{
    struct sl_thread *t = sl_tls;

    return t != NULL ? t : sl_thread_make();
}

#ifdef SL_DEBUG_CHECKS
void sl_assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "sluice: internal assertion failed: %s (%s:%d)\n", cond, file, line);
    abort();
}
#endif

void sl_retire(struct sl_thread *t, ck_epoch_entry_t *entry, ck_epoch_cb_t *cb)
{
    /* ck_epoch_call(3): writers that reclaim through ck_epoch_poll must
     * defer inside the section that removed the object */
    SL_ASSERT(sl_epoch_active(t) || t->draining);
    ck_epoch_call(&t->rec, entry, cb);
}

void sl_epoch_poll(struct sl_thread *t)
{
    if (t->rec.n_pending > SL_POLL_PENDING)
        (void)ck_epoch_poll(&t->rec);
}

size_t sl_epoch_records(void)
{
    ck_stack_entry_t *cursor;
    size_t n = 0;

    (void)pthread_once(&sl_epoch_once, sl_epoch_global_init);
    CK_STACK_FOREACH(&sl_epoch.records, cursor)
        n++;
    return n;
}

void sl_epoch_drain(struct sl_thread *t)
{
    /* ck_epoch_barrier(3) must not run inside a section: it would wait for
     * itself.  Callbacks may retire more (an entry's last policy
     * reference); the next barrier waits for those. */
    SL_ASSERT(!sl_epoch_active(t));
    t->draining = true;
    do
        ck_epoch_barrier(&t->rec);
    while (t->rec.n_pending > 0);
    t->draining = false;
}

/* ---- batches of retired entries ------------------------------------- */

struct sl_limbo {
    ck_epoch_entry_t retire;
    struct sl_arena *arena;     /* referenced: may outlive the limiter */
    size_t n, cap;
    struct sl_entry *e[];
};

struct sl_limbo *sl_limbo_new(struct sluice *l, size_t cap)
{
    struct sl_limbo *b = sl_alloc(NULL, sizeof(*b) + cap * sizeof(b->e[0]));

    if (b != NULL) {
        b->n = 0;
        b->cap = cap;
        b->arena = l->arena;
        sl_arena_ref(l->arena);
    }
    return b;
}

bool sl_limbo_full(const struct sl_limbo *b)
{
    return b->n == b->cap;
}

bool sl_limbo_add(struct sl_limbo *b, struct sl_entry *e)
{
    if (b->n == b->cap)
        return false;
    b->e[b->n++] = e;
    return true;
}

static void sl_limbo_free(ck_epoch_entry_t *ee)
{
    struct sl_limbo *b = (struct sl_limbo *)ee;

    sl_epoch_callback_begin();
    for (size_t i = 0; i < b->n; i++)
        sl_entry_free(b->arena, b->e[i]);
    sl_arena_unref(b->arena);
    free(b);
}

void sl_limbo_retire(struct sl_thread *t, struct sl_limbo *b)
{
    if (b->n == 0) {
        sl_arena_unref(b->arena);
        free(b);
        return;
    }
    sl_retire(t, &b->retire, sl_limbo_free);
}

/* ---- background reaper ---------------------------------------------- */

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
