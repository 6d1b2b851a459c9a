/*
 * Entry allocator: cache-line-aligned blocks of 64, 128, 192 or 256 bytes
 * carved from 256 KiB slabs, with a free list per size.  glibc's
 * aligned_alloc spends about 110 bytes of address space around every
 * 64-byte block; slabs spend nothing, so a GCRA key with a short key costs
 * 64 bytes plus its table slot and still never straddles two cache lines.
 * Larger entries come from aligned_alloc.
 *
 * One-line blocks, the common entry (GCRA, a short key), are carved from
 * slabs of their own in an order that gives each a 128-byte pair of lines
 * to itself while the slab is less than half used: the odd lines first,
 * then the even ones.  The CPU's adjacent-line prefetch fetches a line's
 * pair with it, so two entries written by two threads in one pair slowed
 * both (a limiter of 1,000 keys, each thread deciding its own half, keys
 * inserted in turn: doc/BENCHMARKS.md); the memory is the same.
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

struct sl_slab {
    struct sl_slab *next;
};

struct sl_arena {
    struct sl_arena *prev, *next;   /* every arena alive (sl_arenas_hold) */
    _Atomic uint64_t refs;
    pthread_mutex_t lock;
    void *free[SL_ARENA_CLASSES];   /* singly linked through each block's first word */
    struct sl_slab *slabs;
    char *bump, *bump_end;          /* the current slab's unused tail */
    char *lines;                    /* the current slab of one-line blocks */
    unsigned lines_used;            /* blocks carved from it (sl_arena_line) */
    sl_aword *acct;                 /* the limiter's memory counter, while it lives */
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

#define SL_SLAB_LINES (SL_SLAB_BYTES / SL_CACHELINE)
#define SL_LINE_PAIR (2 * SL_CACHELINE)

/* A slab for the arena, linked through its first line; 128-byte aligned,
 * so its lines pair as the CPU's adjacent-line prefetch pairs them. */
static struct sl_slab *sl_arena_slab(struct sl_arena *a)
{
    struct sl_slab *s = sl_alloc_aligned_to(a->acct, SL_SLAB_BYTES, SL_LINE_PAIR);

    if (s == NULL)
        return NULL;
    s->next = a->slabs;
    a->slabs = s;
    return s;
}

static void *sl_arena_carve(struct sl_arena *a, size_t bytes)
{
    if (a->bump == NULL || (size_t)(a->bump_end - a->bump) < bytes) {
        struct sl_slab *s = sl_arena_slab(a);
        if (s == NULL)
            return NULL;
        a->bump = (char *)s + SL_CACHELINE;
        a->bump_end = (char *)s + SL_SLAB_BYTES;
    }
    a->bump += bytes;
    return a->bump - bytes;
}

/* The next one-line block: lines 1, 3, ..., N-1 of a slab (one to each
 * pair of lines), then 2, 4, ..., N-2 (line 0 links the slab). */
static void *sl_arena_line(struct sl_arena *a)
{
    unsigned i, line;

    if (a->lines == NULL || a->lines_used == SL_SLAB_LINES - 1) {
        struct sl_slab *s = sl_arena_slab(a);
        if (s == NULL)
            return NULL;
        a->lines = (char *)s;
        a->lines_used = 0;
    }
    i = a->lines_used++;
    line = i < SL_SLAB_LINES / 2 ? 2 * i + 1 : 2 * (i - SL_SLAB_LINES / 2) + 2;
    return a->lines + (size_t)line * SL_CACHELINE;
}

void *sl_arena_alloc(struct sl_arena *a, size_t size)
{
    int c = sl_arena_class(size);
    void *p;

    if (c < 0)
        return sl_alloc_aligned(a->acct, size);
    pthread_mutex_lock(&a->lock);
    p = a->free[c];
    if (p != NULL) {
        SL_UNPOISON(p, (size_t)(c + 1) * SL_CACHELINE);
        memcpy(&a->free[c], p, sizeof(void *));
    } else
        p = c == 0 ? sl_arena_line(a) : sl_arena_carve(a, (size_t)(c + 1) * SL_CACHELINE);
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
    memcpy(p, &a->free[c], sizeof(void *));
    SL_POISON(p, (size_t)(c + 1) * SL_CACHELINE);
    a->free[c] = p;
    pthread_mutex_unlock(&a->lock);
}

void sl_arena_free_many(struct sl_arena *a, void *const *p, const size_t *size, size_t n)
{
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < n; i++) {
        int c = sl_arena_class(size[i]);
        if (c >= 0) {
            memcpy(p[i], &a->free[c], sizeof(void *));
            SL_POISON(p[i], (size_t)(c + 1) * SL_CACHELINE);
            a->free[c] = p[i];
        }
    }
    pthread_mutex_unlock(&a->lock);
    for (size_t i = 0; i < n; i++)
        if (sl_arena_class(size[i]) < 0)
            free(p[i]); /* large blocks: outside the lock */
}
