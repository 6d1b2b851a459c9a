/*
 * Division by a precomputed reciprocal (src/divide.h), which every windowed
 * decision uses for its window index: exact against the hardware's divide
 * for divisors of every magnitude and the numerators where a wrong magic
 * would first show (the multiples of d and their neighbours, and the top of
 * the range, where the rounding error of the magic is largest).
 */
#include "helpers.h"

#include "divide.h"

static uint64_t t_rng = 0x9e3779b97f4a7c15u;

static uint64_t t_next(void)
{
    t_rng ^= t_rng << 13;
    t_rng ^= t_rng >> 7;
    t_rng ^= t_rng << 17;
    return t_rng;
}

static int t_wrong;

static void t_one(uint64_t n, uint64_t d, const struct sl_udiv *dv)
{
    uint64_t got = sl_udiv_do(n, dv);

    if (got != n / d && t_wrong++ < 10)
        fprintf(stderr, "%" PRIu64 " / %" PRIu64 ": %" PRIu64 ", expected %" PRIu64 "\n", n, d,
                got, n / d);
}

static void t_divisor(uint64_t d, int randoms)
{
    struct sl_udiv dv = sl_udiv_make(d);
    uint64_t top = UINT64_MAX / d; /* the largest quotient */
    uint64_t qs[] = {0, 1, 2, top / 2, top - 1, top};

    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        uint64_t m = qs[i] * d; /* no overflow: qs[i] <= top */
        t_one(m, d, &dv);
        if (m > 0)
            t_one(m - 1, d, &dv);
        if (m < UINT64_MAX)
            t_one(m + 1, d, &dv);
        if (d > 1 && UINT64_MAX - m >= d - 1)
            t_one(m + d - 1, d, &dv);
    }
    t_one(UINT64_MAX, d, &dv);
    t_one(UINT64_MAX - 1, d, &dv);
    t_one(UINT64_C(1) << 63, d, &dv);
    for (int i = 0; i < randoms; i++) {
        uint64_t n = t_next();
        t_one(n, d, &dv);
        t_one(n >> (t_next() % 64), d, &dv);
    }
}

int main(void)
{
    /* every small divisor, then each power of two and its neighbours */
    for (uint64_t d = 1; d <= 20000; d++)
        t_divisor(d, 16);
    for (unsigned b = 1; b < 64; b++) {
        uint64_t p = UINT64_C(1) << b;
        t_divisor(p - 1, 256);
        t_divisor(p, 256);
        t_divisor(p + 1, 256);
    }
    t_divisor(UINT64_MAX, 256);
    t_divisor(UINT64_MAX - 1, 256);
    /* the periods people configure: a second, a minute, an hour, a day,
     * a week, in ns, and the sub-bucket widths beneath them */
    static const uint64_t periods[] = {1000, 1000000, 1000000000, 60000000000, 3600000000000,
                                       86400000000000, 604800000000000, 100000000, 10000000};
    for (size_t i = 0; i < sizeof periods / sizeof periods[0]; i++)
        t_divisor(periods[i], 100000);
    /* random divisors of every bit length */
    for (int i = 0; i < 200000; i++) {
        uint64_t d = t_next() >> (t_next() % 64);
        t_divisor(d ? d : 1, 4);
    }
    CHECK_EQ(t_wrong, 0);
    return t_done("divide");
}
