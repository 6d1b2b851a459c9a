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
