/*
 * Every allocation of sluice goes through here, so that memory is accounted
 * to its limiter (sluice_stats.memory_bytes) and tests can make any single
 * allocation fail.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static _Atomic unsigned long fail_countdown;
static _Atomic unsigned long fail_period;

void sl_test_fail_alloc(unsigned long nth, bool every)
{
    atomic_store_explicit(&fail_period, every ? nth : 0, memory_order_relaxed);
    atomic_store_explicit(&fail_countdown, nth, memory_order_relaxed);
}

/* True when the injected failure says this allocation must fail. */
static bool sl_alloc_should_fail(void)
{
    unsigned long left = atomic_load_explicit(&fail_countdown, memory_order_relaxed);

    while (left != 0) {
        unsigned long next = left - 1;
        if (next == 0)
            next = atomic_load_explicit(&fail_period, memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&fail_countdown, &left, next,
                                                  memory_order_relaxed, memory_order_relaxed))
            return left == 1;
    }
    return false;
}

void *sl_alloc(sl_aword *acct, size_t size)
{
    void *p = sl_alloc_should_fail() ? NULL : malloc(size);

    if (p != NULL && acct != NULL)
        sl_count(acct, size);
    return p;
}

void *sl_calloc(sl_aword *acct, size_t size)
{
    void *p = sl_alloc(acct, size);

    if (p != NULL)
        memset(p, 0, size);
    return p;
}

/* Cache-line aligned and padded, so a small entry never straddles two lines. */
void *sl_alloc_aligned(sl_aword *acct, size_t size)
{
    size_t padded = (size + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1);
    void *p = sl_alloc_should_fail() ? NULL : aligned_alloc(SL_CACHELINE, padded);

    if (p != NULL && acct != NULL)
        sl_count(acct, padded);
    return p;
}

void sl_unaccount(sl_aword *acct, size_t size)
{
    if (acct != NULL)
        sl_uncount(acct, size);
}

void sl_free(sl_aword *acct, void *p, size_t size)
{
    if (p == NULL)
        return;
    sl_unaccount(acct, size);
    free(p);
}

/*
 * ck_hs allocates through a ck_malloc that has no context argument; the
 * shard writer names the account in a thread-local before calling ck_hs.
 * Maps get a header holding the epoch entry, so a deferred free needs no
 * allocation (ck_malloc's free(p, size, defer) contract).
 */
static _Thread_local sl_aword *ck_account;

void sl_ck_account_to(sl_aword *acct) { ck_account = acct; }

struct sl_ck_hdr {
    ck_epoch_entry_t retire;
    size_t size;
} SL_ALIGNED;

static void *sl_ck_malloc(size_t size)
{
    struct sl_ck_hdr *h = sl_alloc(ck_account, sizeof(*h) + size);

    if (h == NULL)
        return NULL;
    h->size = sizeof(*h) + size;
    return h + 1;
}

static void sl_ck_free_now(ck_epoch_entry_t *e)
{
    sl_epoch_callback_begin();
    free(e); /* retire is the first member of the header */
}

static void sl_ck_free(void *p, size_t size, bool defer)
{
    struct sl_ck_hdr *h;
    struct sl_thread *t;

    (void)size;
    if (p == NULL)
        return;
    h = (struct sl_ck_hdr *)p - 1;
    sl_unaccount(ck_account, h->size);
    t = defer ? sl_thread_get() : NULL;
    if (t != NULL)
        sl_retire(t, &h->retire, sl_ck_free_now);
    else
        free(h); /* not deferred: no reader can see it (or destroy) */
}

struct ck_malloc sl_ck_allocator = {
    .malloc = sl_ck_malloc,
    .realloc = NULL,
    .free = sl_ck_free,
};
