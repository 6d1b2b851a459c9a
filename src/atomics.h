/*
 * The one atomics wrapper of sluice.  Every access to shared mutable state
 * goes through these, with its memory order spelled out at the call site:
 *   sl_load_acq / sl_store_rel   publish-and-observe pairs
 *   sl_load_rlx / sl_store_rlx   values whose ordering another atomic gives
 *   sl_cas_acqrel                the linearization point of a charge
 *   sl_cas_pair_acqrel           the same for two adjacent words at once
 */
#ifndef SL_ATOMICS_H
#define SL_ATOMICS_H

#include <ck_pr.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef _Atomic uint64_t sl_aword;

static inline uint64_t sl_load_acq(sl_aword *w)
{
    return atomic_load_explicit(w, memory_order_acquire);
}

static inline uint64_t sl_load_rlx(sl_aword *w)
{
    return atomic_load_explicit(w, memory_order_relaxed);
}

static inline void sl_store_rel(sl_aword *w, uint64_t v)
{
    atomic_store_explicit(w, v, memory_order_release);
}

static inline void sl_store_rlx(sl_aword *w, uint64_t v)
{
    atomic_store_explicit(w, v, memory_order_relaxed);
}

/* On failure *expected holds the current value (acquire, so a retry sees
 * everything published before it). */
static inline bool sl_cas_acqrel(sl_aword *w, uint64_t *expected, uint64_t desired)
{
    return atomic_compare_exchange_strong_explicit(w, expected, desired, memory_order_acq_rel,
                                                   memory_order_acquire);
}

static inline uint64_t sl_fetch_or_acqrel(sl_aword *w, uint64_t bits)
{
    return atomic_fetch_or_explicit(w, bits, memory_order_acq_rel);
}

/* Statistics: only the total matters, never the order. */
static inline void sl_count(sl_aword *w, uint64_t n)
{
    atomic_fetch_add_explicit(w, n, memory_order_relaxed);
}

static inline void sl_uncount(sl_aword *w, uint64_t n)
{
    atomic_fetch_sub_explicit(w, n, memory_order_relaxed);
}

static inline void sl_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/*
 * ThreadSanitizer cannot see ordering given by inline assembly (ck_pr) or
 * by the kernel (membarrier).  The epoch (epoch.c) is plain C11 atomics,
 * fenced under ThreadSanitizer, so it needs no annotation; these remain
 * for (belt and braces) an entry published in the table happening before
 * a reader that found it, and compile to nothing otherwise.
 */
#if defined(__SANITIZE_THREAD__)
#define SL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SL_TSAN 1
#endif
#endif
#ifdef SL_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define SL_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define SL_TSAN_RELEASE(p) __tsan_release((void *)(p))
#else
#define SL_TSAN_ACQUIRE(p) ((void)(p))
#define SL_TSAN_RELEASE(p) ((void)(p))
#endif

/*
 * Two adjacent words, 16-byte aligned, compared and stored as one: a
 * stacked pair of one-word limits charged at one instant by one locked
 * instruction (lean.h).  x86-64's cmpxchg16b, by Concurrency Kit's
 * ck_pr_cas_64_2_value; where it is missing (the CPU or the port) the
 * callers keep one CAS per word (sl_cas_pair_usable).  It is a full
 * barrier, as sl_cas_acqrel is on x86; on failure seen holds both words
 * as they were at the instruction.  ThreadSanitizer is told of the order
 * the assembly gives (acquire and release on the pair).
 */
#if defined(__x86_64__) && defined(CK_F_PR_CAS_64_2_VALUE)
#include <cpuid.h>
static inline bool sl_cas_pair_acqrel(sl_aword *w, uint64_t seen[2], const uint64_t next[2])
{
    uint64_t want[2] = {next[0], next[1]}, was[2];
    bool ok;

    SL_TSAN_RELEASE(&w[0]);
    SL_TSAN_RELEASE(&w[1]);
    ok = ck_pr_cas_64_2_value((uint64_t *)(void *)w, seen, want, was);
    SL_TSAN_ACQUIRE(&w[0]);
    SL_TSAN_ACQUIRE(&w[1]);
    seen[0] = was[0];
    seen[1] = was[1];
    return ok;
}

/* cmpxchg16b is not in the first x86-64 CPUs (nor in x86-64's baseline).
 * Asked once: cpuid leaves the guest (a VM exit) under virtualisation,
 * and every override compiles a policy. */
static inline bool sl_cas_pair_usable(void)
{
    static _Atomic int known; /* 0: not asked yet, 1: no, 2: yes */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    unsigned a, b, c, d;

    if (k == 0) {
        k = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_CMPXCHG16B) != 0 ? 2 : 1;
        atomic_store_explicit(&known, k, memory_order_relaxed); /* the same answer every time */
    }
    return k == 2;
}
#else
#include <stdlib.h>
static inline bool sl_cas_pair_acqrel(sl_aword *w, uint64_t seen[2], const uint64_t next[2])
{
    /* never called (sl_cas_pair_usable says so): a failure for ever would
     * loop its caller for ever, so stop loudly instead */
    (void)w, (void)seen, (void)next;
    abort();
}

static inline bool sl_cas_pair_usable(void)
{
    return false;
}
#endif

#endif
