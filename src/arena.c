/*
 * Entry allocator: cache-line-aligned blocks of 64, 128, 192 or 256 bytes
 * carved from 256 KiB slabs, with a free list per size.  glibc's
 * aligned_alloc spends about 110 bytes of address space around every
 * 64-byte block; slabs spend nothing, so a GCRA key with a short key costs
 * 64 bytes plus its table slot and still never straddles two cache lines.
 * Larger entries come from aligned_alloc.
 *
 * Each thread carves its new entries from a run of its own (SL_RUN_BYTES
 * of a slab, 128-byte aligned), so that the entries of keys two threads
 * made never share a 128-byte pair of lines.  An admission writes its
 * entry's line, and this machine's CPUs fetch lines in such pairs: with
 * the keys of two threads dealt alternately from one bump, each write
 * took the neighbour's line from the other core, and two threads on 10^3
 * distinct keys decided at half the speed of one (doc/BENCHMARKS.md,
 * fourteenth round).  A free block is reused before a run is carved
 * from: a run used first let long-lived keys of one size take a run each
 * while another size's frees piled up (a reviewer: 79 MB where 1.8 MB
 * did, keys of 16 bytes kept while keys of 100 came and went).  So memory
 * is what the free lists bound plus one run per thread slot (65 runs:
 * two slabs once more than 63 threads made keys).
 *
 * Epoch callbacks free entries after a limiter may have been destroyed, so
 * the arena is reference counted: the limiter holds one reference and each
 * pending batch of retired entries another; the last one frees the slabs.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/*
 * Under AddressSanitizer a block on a free list is poisoned, so a reader
 * that touches an entry after its grace period (a reclamation bug) is
 * reported like a use after free of malloc'd memory.  The free-list link
 * is unpoisoned only while the arena lock is held to read or write it.
 */
#if defined(__SANITIZE_ADDRESS__)
#define SL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_ASAN 1
#endif
#endif
#ifdef SL_ASAN
#include <sanitizer/asan_interface.h>
#define SL_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SL_POISON(p, n) ((void)(p), (void)(n))
#define SL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define SL_SLAB_BYTES (256u * 1024u)
#define SL_ARENA_CLASSES 4
/* A page: the unit this machine's stream prefetcher keeps to. */
#define SL_RUN_BYTES 4096u
/* Lines fetched together (Intel's spatial prefetcher): runs start on them. */
#define SL_PAIR_BYTES 128u

struct sl_slab {
    struct sl_slab *next;
};

/* The unused part of a thread slot's run (under the arena lock). */
struct sl_run {
    char *bump, *end;
};

struct sl_arena {
    struct sl_arena *prev, *next;   /* every arena alive (sl_arenas_hold) */
    _Atomic uint64_t refs;
    pthread_mutex_t lock;
    void *free[SL_ARENA_CLASSES];   /* singly linked through each block's first word */
    struct sl_slab *slabs;
    char *bump, *bump_end;          /* the current slab's unused tail */
    sl_aword *acct;                 /* the limiter's memory counter, while it lives */
    struct sl_run run[SL_ARENA_RUNS];
};

/* Every arena until its last reference goes, a destroyed limiter's too:
 * epoch callbacks free entries into it after the limiter is gone, and a
 * fork must not copy its lock held (sl_arenas_hold). */
static pthread_mutex_t sl_arenas_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sl_arena *sl_arenas;

struct sl_arena *sl_arena_new(sl_aword *acct)
{
    struct sl_arena *a = sl_calloc(acct, sizeof(*a));

    if (a == NULL)
        return NULL;
    atomic_init(&a->refs, 1);
    pthread_mutex_init(&a->lock, NULL);
    a->acct = acct;
    pthread_mutex_lock(&sl_arenas_lock);
    a->next = sl_arenas;
    if (sl_arenas != NULL)
        sl_arenas->prev = a;
    sl_arenas = a;
    pthread_mutex_unlock(&sl_arenas_lock);
    return a;
}

void sl_arena_ref(struct sl_arena *a)
{
    atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
}

void sl_arena_unref(struct sl_arena *a)
{
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&sl_arenas_lock);
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        sl_arenas = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    pthread_mutex_unlock(&sl_arenas_lock);
    for (struct sl_slab *s = a->slabs, *next; s != NULL; s = next) {
        next = s->next;
        free(s);
    }
    pthread_mutex_destroy(&a->lock);
    free(a);
}

void sl_arenas_hold(bool hold)
{
    if (hold)
        pthread_mutex_lock(&sl_arenas_lock);
    for (struct sl_arena *a = sl_arenas; a != NULL; a = a->next)
        if (hold)
            pthread_mutex_lock(&a->lock);
        else
            pthread_mutex_unlock(&a->lock);
    if (!hold)
        pthread_mutex_unlock(&sl_arenas_lock);
}

/* The limiter goes away: later frees must not touch its counter. */
void sl_arena_detach(struct sl_arena *a)
{
    pthread_mutex_lock(&a->lock);
    a->acct = NULL;
    pthread_mutex_unlock(&a->lock);
    sl_arena_unref(a);
}

/* Size class of a block, or -1 when it comes from aligned_alloc. */
int sl_arena_class(size_t size)
{
    size_t lines = (size + SL_CACHELINE - 1) / SL_CACHELINE;

    return lines >= 1 && lines <= SL_ARENA_CLASSES ? (int)lines - 1 : -1;
}

/* bytes (a multiple of SL_PAIR_BYTES, at most a slab's) from the current
 * slab, or a new one; NULL if out of memory. */
static char *sl_arena_carve(struct sl_arena *a, size_t bytes)
{
    if (a->bump == NULL || (size_t)(a->bump_end - a->bump) < bytes) {
        /* the first line of a slab links the slabs; what it carves starts
         * on a pair of lines */
        struct sl_slab *s = sl_alloc_aligned(a->acct, SL_SLAB_BYTES);
        uintptr_t pair = SL_PAIR_BYTES - 1;
        if (s == NULL)
            return NULL;
        s->next = a->slabs;
        a->slabs = s;
        a->bump = (char *)(((uintptr_t)s + sizeof(*s) + pair) & ~pair);
        a->bump_end = (char *)(((uintptr_t)s + SL_SLAB_BYTES) & ~pair);
    }
    a->bump += bytes;
    return a->bump - bytes;
}

/* A block on its free list, poisoned (the arena locked). */
static void sl_free_push(struct sl_arena *a, void *p, int c)
{
    memcpy(p, &a->free[c], sizeof(void *));
    SL_POISON(p, (size_t)(c + 1) * SL_CACHELINE);
    a->free[c] = p;
}

/* A new run for r, which had too little left for a block of `bytes`:
 * its tail (under SL_ARENA_CLASSES lines, the largest block) goes to the
 * free list of its size from the first pair on (any thread may take it:
 * a line sharing a pair with the run's last block is left unused), and
 * the run is the rest of the slab where less than SL_RUN_BYTES is left
 * there but the block fits. */
static bool sl_run_renew(struct sl_arena *a, struct sl_run *r, size_t bytes)
{
    uintptr_t pair = SL_PAIR_BYTES - 1;
    char *tail = (char *)(((uintptr_t)r->bump + pair) & ~pair);
    size_t take = SL_RUN_BYTES;
    char *p;

    if (r->bump != NULL && tail < r->end) /* a run ends on a pair */
        sl_free_push(a, tail, (int)((size_t)(r->end - tail) / SL_CACHELINE) - 1);
    r->bump = r->end = NULL;
    if (a->bump != NULL && (size_t)(a->bump_end - a->bump) < take &&
        (size_t)(a->bump_end - a->bump) >= bytes)
        take = (size_t)(a->bump_end - a->bump); /* a whole number of pairs */
    if ((p = sl_arena_carve(a, take)) == NULL)
        return false;
    r->bump = p;
    r->end = p + take;
    return true;
}

void *sl_arena_alloc(struct sl_arena *a, size_t size, unsigned thread)
{
    int c = sl_arena_class(size);
    size_t bytes = (size_t)(c + 1) * SL_CACHELINE;
    struct sl_run *r = &a->run[thread < SL_ARENA_RUNS - 1 ? thread : SL_ARENA_RUNS - 1];
    void *p = NULL;

    if (c < 0)
        return sl_alloc_aligned(a->acct, size);
    pthread_mutex_lock(&a->lock);
    if ((p = a->free[c]) != NULL) {
        SL_UNPOISON(p, bytes);
        memcpy(&a->free[c], p, sizeof(void *));
    } else if ((r->bump != NULL && (size_t)(r->end - r->bump) >= bytes) ||
               sl_run_renew(a, r, bytes)) {
        p = r->bump;
        r->bump += bytes;
    }
    pthread_mutex_unlock(&a->lock);
    return p;
}

void sl_arena_free(struct sl_arena *a, void *p, size_t size)
{
    int c = sl_arena_class(size);

    if (c < 0) {
        free(p);
        return;
    }
    pthread_mutex_lock(&a->lock);
    sl_free_push(a, p, c);
    pthread_mutex_unlock(&a->lock);
}

void sl_arena_free_many(struct sl_arena *a, void *const *p, const size_t *size, size_t n)
{
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < n; i++) {
        int c = sl_arena_class(size[i]);
        if (c >= 0)
            sl_free_push(a, p[i], c);
    }
    pthread_mutex_unlock(&a->lock);
    for (size_t i = 0; i < n; i++)
        if (sl_arena_class(size[i]) < 0)
            free(p[i]); /* large blocks: outside the lock */
}
