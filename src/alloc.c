/*
 * Every allocation of sluice goes through here, so that memory is accounted
 * to its limiter (sluice_stats.memory_bytes) and tests can make any single
 * allocation fail.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifdef SL_DEBUG_CHECKS
_Atomic(void (*)(void)) sl_test_between_commits; /* internal.h */
_Atomic(void (*)(void)) sl_test_cells_missed;    /* internal.h */
#endif

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
