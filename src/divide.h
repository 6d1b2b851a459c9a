/*
 * Division by a divisor fixed when a policy is compiled, without a divide
 * instruction: a window's index is now / width on every charge and report
 * of the windowed algorithms, and a 64-bit DIV costs 14 to 45 cycles of
 * latency on the x86 cores sluice runs on, against 3 to 5 for the multiply
 * and shifts below.  The method is Granlund and Montgomery's (PLDI 1994),
 * in the form libdivide uses for 64-bit unsigned numerators; the result is
 * exact for every numerator and divisor (test/divide.c checks it against
 * the hardware at the edges of the range).
 */
#ifndef SL_DIVIDE_H
#define SL_DIVIDE_H

#include <stdbool.h>
#include <stdint.h>

struct sl_udiv {
    uint64_t magic;             /* 0: the divisor is a power of two */
    uint8_t shift;
    bool add;                   /* the 65-bit magic: add the numerator back */
};

/* d > 0. */
static inline struct sl_udiv sl_udiv_make(uint64_t d)
{
    __extension__ typedef unsigned __int128 u128;
    unsigned lg = 63u - (unsigned)__builtin_clzll(d);
    struct sl_udiv r = {0, (uint8_t)lg, false};
    u128 num;
    uint64_t m, rem;

    if ((d & (d - 1)) == 0)
        return r;
    /* m = floor(2^(64+lg) / d); it fits 64 bits since d > 2^lg */
    num = (u128)1 << (64 + lg);
    m = (uint64_t)(num / d);
    rem = (uint64_t)(num % d);
    if (d - rem < (UINT64_C(1) << lg)) {
        /* 2^(64+lg) is a power whose error stays below one quotient step */
        r.magic = m + 1;
        return r;
    }
    /* otherwise one more bit of magic, carried by adding n back (below) */
    m += m;
    if (rem + rem >= d || rem + rem < rem)
        m += 1;
    r.magic = m + 1;
    r.add = true;
    return r;
}

static inline uint64_t sl_udiv_do(uint64_t n, const struct sl_udiv *d)
{
    __extension__ typedef unsigned __int128 u128;
    uint64_t q;

    if (d->magic == 0)
        return n >> d->shift;
    q = (uint64_t)(((u128)d->magic * n) >> 64);
    if (d->add)
        return (((n - q) >> 1) + q) >> d->shift;
    return q >> d->shift;
}

#endif
