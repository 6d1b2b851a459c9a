/*
 * Epoch-based reclamation shared by every limiter of the process, with
 * sections that readers enter without a fence.
 *
 * One record per thread, made on the thread's first call and handed back
 * (after draining what it retired) by a pthread-key destructor when the
 * thread exits; a later thread recycles a free record, so thread churn
 * does not grow memory.  One global epoch keeps the hot path at one
 * thread-local load: no per-limiter record lookup.  Callbacks only free
 * memory, never touch a limiter, so a limiter can be destroyed while other
 * threads still hold retired memory of it.
 *
 * The scheme (a reader R, a reclaimer W that retired o after unpublishing
 * it; the full argument is in doc/DESIGN.md, "Reclamation"):
 *
 *   R enters:  e = G (acquire); R.word = e (release); compiler barrier;
 *              then loads shared pointers
 *   R leaves:  R.word = 0 (release)
 *   W retires: unpublish o; push o on its own list `cur`
 *   W polls:   cur -> wait; HEAVY FENCE; tag = G++ (seq_cst RMW);
 *              free `wait` once every record's word is 0 or > tag
 *
 * Why a reader needs no fence: the heavy fence is membarrier(2)
 * (MEMBARRIER_CMD_PRIVATE_EXPEDITED), which returns only after every
 * running thread of the process has executed a full memory barrier (a
 * thread not running passed one when it was switched out).  That is as if
 * a seq_cst fence were inserted into every thread at some point during the
 * call.  So R's entry store and W's unpublish form Dekker's pattern with
 * fences on both sides: W (store unpublish; fence; load R.word) against R
 * (store R.word; [fence somewhere]; load pointer).  If R's barrier point
 * falls after its store, the store is visible to W's later scan; if
 * before, R's pointer load comes after the barrier and sees the unpublish
 * W made before the call.  Hence a reader that still holds o is seen by
 * every scan W makes after the fence, with its word e (or a later value,
 * which it writes only after that section ended).  And e <= tag: had R's
 * acquire load of G read tag + 1 or later, it would have read W's release
 * RMW (or a later RMW of its release sequence: G only changes by RMW), so
 * the unpublish would happen before R's pointer load.  A word of 0 or
 * above tag therefore means that section cannot hold o, and the release
 * stores of the word (0 at exit, the epoch at the next entry) read by the
 * scan's acquire loads make every access of the section that did hold it
 * happen before the free.  The fence must come after the unpublish in the
 * reclaimer's own program order: that is why each thread frees only what
 * it retired itself, fenced by its own poll.
 *
 * Where membarrier is unavailable (ENOSYS, EINVAL from an old kernel, a
 * seccomp filter), or under ThreadSanitizer (which understands neither
 * membarrier nor the store-load argument), or when SLUICE_EPOCH_FENCED=1
 * asks for it (tests run both paths), the process uses fenced entries
 * instead, chosen once before any record exists: R stores its word and
 * then a full fence (ck_pr_fence_memory), and W's heavy fence is a full
 * fence too; the argument is the same with two ordinary fences.
 *
 * A thread that stops calling is outside every section (word 0) and never
 * holds reclamation back; one inside a section holds back only what was
 * retired while it was in it.
 */
#include <linux/membarrier.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

sl_aword sl_epoch_global = 1; /* G: only ever raised by an RMW (see above) */
bool sl_epoch_fenced;         /* set once, before any record exists */

static _Atomic(struct sl_thread *) sl_records; /* push-only list of every record */
static pthread_once_t sl_epoch_once = PTHREAD_ONCE_INIT;
static pthread_key_t sl_thread_key;
static _Atomic unsigned sl_thread_ids;

_Thread_local struct sl_thread *sl_tls __attribute__((tls_model("initial-exec")));

enum { SL_REC_USED = 0, SL_REC_FREE = 1 };

static long sl_membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

/* The asymmetric fence is usable: the kernel has it, lets us register and
 * lets us call it (a seccomp filter may refuse any of the three). */
static bool sl_membarrier_init(void)
{
    long mask = sl_membarrier(MEMBARRIER_CMD_QUERY);

    if (mask < 0 || !(mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
        return false;
    return sl_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
           sl_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
}

/*
 * The reclaimer's side of the store-load ordering.  After a successful
 * registration the call fails only with EPERM in a process that is not
 * registered: register again (cheap, idempotent) and retry.  Failing after
 * that would leave no safe way to reclaim (readers entered without a
 * fence), so it is fatal rather than silently unsafe.
 */
static void sl_heavy_fence(void)
{
    if (sl_epoch_fenced) {
        ck_pr_fence_memory(); /* seq_cst: pairs with the readers' fences */
        return;
    }
    if (sl_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
        return;
    if (sl_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
        sl_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
        return;
    fprintf(stderr, "sluice: membarrier(2) failed after registration\n");
    abort();
}

static void sl_thread_exit(void *arg)
{
    struct sl_thread *t = arg;

    sl_epoch_drain(t); /* nothing it retired outlives it */
    free(t->spare); /* empty, holding nothing */
    t->spare = NULL;
    sl_tls = NULL;
    /* release: the record's owner-only fields go to the next owner, whose
     * acquire CAS in sl_record_recycle takes them over */
    atomic_store_explicit(&t->state, SL_REC_FREE, memory_order_release);
}

/* At exit, run what the exiting thread still has pending, so memory
 * checkers see every retired block returned. */
__attribute__((destructor)) static void sl_epoch_at_exit(void)
{
    if (sl_tls != NULL && !sl_epoch_active(sl_tls))
        sl_epoch_drain(sl_tls);
}

/* The child of fork has one thread: the records of the others belong to
 * nobody now.  Free them (their words may show sections that will never
 * end), so they cannot hold reclamation back; what they had pending goes
 * to whoever recycles them.  relaxed: the child is single-threaded here. */
static void sl_epoch_after_fork(void)
{
    for (struct sl_thread *r = atomic_load_explicit(&sl_records, memory_order_relaxed); r != NULL;
         r = r->next) {
        if (r == sl_tls)
            continue;
        atomic_store_explicit(&r->word, 0, memory_order_relaxed);
        r->depth = 0;
        atomic_store_explicit(&r->state, SL_REC_FREE, memory_order_relaxed);
    }
}

static void sl_epoch_global_init(void)
{
    const char *env = getenv("SLUICE_EPOCH_FENCED");
    bool fenced = env != NULL && env[0] == '1';

#ifdef SL_TSAN
    fenced = true; /* ThreadSanitizer knows nothing of membarrier */
#endif
    sl_epoch_fenced = fenced || !sl_membarrier_init();
    (void)pthread_key_create(&sl_thread_key, sl_thread_exit);
    (void)pthread_atfork(NULL, NULL, sl_epoch_after_fork);
}

static struct sl_thread *sl_record_recycle(void)
{
    /* acquire: the records pushed before are complete (their next links) */
    for (struct sl_thread *r = atomic_load_explicit(&sl_records, memory_order_acquire); r != NULL;
         r = r->next) {
        unsigned expect = SL_REC_FREE;
        /* acquire: takes over the leaving thread's owner-only fields */
        if (atomic_load_explicit(&r->state, memory_order_relaxed) == SL_REC_FREE &&
            atomic_compare_exchange_strong_explicit(&r->state, &expect, SL_REC_USED,
                                                    memory_order_acquire, memory_order_relaxed))
            return r;
    }
    return NULL;
}

static struct sl_thread *sl_record_new(void)
{
    /* Records are never freed: a thread that exits leaves its record free
     * for the next one, and the list only grows with concurrent threads. */
    struct sl_thread *t = sl_alloc_aligned(NULL, sizeof(*t)), *head;

    if (t == NULL)
        return NULL;
    memset(t, 0, sizeof(*t));
    t->id = atomic_fetch_add_explicit(&sl_thread_ids, 1, memory_order_relaxed);
    atomic_init(&t->word, 0);
    atomic_init(&t->state, SL_REC_USED);
    head = atomic_load_explicit(&sl_records, memory_order_relaxed);
    do
        t->next = head;
    /* release: the record is complete before a scan can reach it */
    while (!atomic_compare_exchange_weak_explicit(&sl_records, &head, t, memory_order_release,
                                                  memory_order_relaxed));
    return t;
}

struct sl_thread *sl_thread_make(void)
{
    struct sl_thread *t;

    (void)pthread_once(&sl_epoch_once, sl_epoch_global_init);
    t = sl_record_recycle();
    if (t == NULL && (t = sl_record_new()) == NULL)
        return NULL;
    if (pthread_setspecific(sl_thread_key, t) != 0) {
        atomic_store_explicit(&t->state, SL_REC_FREE, memory_order_release);
        return NULL;
    }
    sl_tls = t;
    return t;
}

bool sl_epoch_asymmetric(void)
{
    (void)pthread_once(&sl_epoch_once, sl_epoch_global_init);
    return !sl_epoch_fenced;
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
    /* Retire inside the section that unpublished (or while draining): a
     * poll made from that section then cannot free it, its own word being
     * at most the tag (kept from ck's rule, and checked). */
    SL_ASSERT(sl_epoch_active(t) || t->draining);
    entry->function = cb;
    entry->stack_entry.next = t->cur;
    t->cur = &entry->stack_entry;
    t->n_cur++;
}

void sl_retire_array(struct sl_thread *t, ck_epoch_entry_t *entry, ck_epoch_cb_t *cb)
{
    sl_retire(t, entry, cb);
    t->n_cur += SL_POLL_PENDING;
}

/* No record shows a section that began at or before epoch tag. */
static bool sl_epoch_clear(uint64_t tag)
{
    for (struct sl_thread *r = atomic_load_explicit(&sl_records, memory_order_acquire); r != NULL;
         r = r->next) {
        /* acquire: pairs with the release stores of the word, so what that
         * reader did before its exit (or its next entry) happens before
         * the frees that follow */
        uint64_t w = sl_load_acq(&r->word);
        if (w != 0 && w <= tag)
            return false;
    }
    return true;
}

static void sl_epoch_dispatch(struct sl_thread *t)
{
    ck_stack_entry_t *s = t->wait;

    t->wait = NULL; /* callbacks may retire more: onto cur */
    t->n_wait = 0;
    while (s != NULL) {
        ck_stack_entry_t *next = s->next;
        ck_epoch_entry_t *e =
            (ck_epoch_entry_t *)((char *)s - offsetof(ck_epoch_entry_t, stack_entry));
        e->function(e);
        s = next;
    }
}

/*
 * One step: free the waiting batch if its grace period is over, then (if
 * there is enough, or force) fence what was retired since and make it the
 * waiting batch.  Never waits.
 */
static void sl_epoch_step(struct sl_thread *t, bool force)
{
    SL_ASSERT(sl_epoch_active(t) || t->draining); /* callbacks may retire */
    if (t->wait != NULL) {
        if (!sl_epoch_clear(t->wait_tag))
            return;
        sl_epoch_dispatch(t);
    }
    if (t->cur == NULL || (!force && t->n_cur <= SL_POLL_PENDING))
        return;
    t->wait = t->cur;
    t->n_wait = t->n_cur;
    t->cur = NULL;
    t->n_cur = 0;
    sl_heavy_fence();
    /* seq_cst (a release RMW at least): a reader whose entry reads the new
     * value sees every unpublish this thread made before */
    t->wait_tag = atomic_fetch_add_explicit(&sl_epoch_global, 1, memory_order_seq_cst);
    if (sl_epoch_clear(t->wait_tag))
        sl_epoch_dispatch(t);
}

void sl_epoch_poll(struct sl_thread *t)
{
    if (t->n_cur + t->n_wait > SL_POLL_PENDING)
        sl_epoch_step(t, false);
}

void sl_epoch_reclaim(struct sl_thread *t) { sl_epoch_step(t, true); }

size_t sl_epoch_records(void)
{
    size_t n = 0;

    for (struct sl_thread *r = atomic_load_explicit(&sl_records, memory_order_acquire); r != NULL;
         r = r->next)
        n++;
    return n;
}

void sl_epoch_drain(struct sl_thread *t)
{
    /* A barrier must not run inside a section: it would wait for itself.
     * Callbacks may retire more (an entry's last policy reference); the
     * loop waits for those too.  Bounded by the readers' sections. */
    SL_ASSERT(!sl_epoch_active(t));
    t->draining = true;
    for (;;) {
        sl_epoch_step(t, true);
        if (t->wait == NULL && t->cur == NULL)
            break;
        sched_yield(); /* a reader in a section may need this CPU to leave it */
    }
    t->draining = false;
}
