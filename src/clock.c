/*
 * Clock sources.  The _at calls take time from the caller and never come
 * here: a server that already read the clock for its request pays nothing.
 *
 * SLUICE_CLOCK_TSC reads the CPU's time-stamp counter without a fence and
 * scales it to ns of CLOCK_MONOTONIC: about 11 ns instead of 26 for
 * clock_gettime here, and no serialisation of consecutive decisions.  Only
 * an invariant TSC (constant rate, synchronised across cores, CPUID
 * 0x80000007 EDX bit 8) qualifies; elsewhere the limiter uses
 * CLOCK_MONOTONIC and sluice_stats says so.  Calibration runs once per
 * process, when the first TSC limiter is created: 20 ms of CLOCK_MONOTONIC
 * against the counter give the rate to about 1e-5, and the scale is anchored
 * at CLOCK_MONOTONIC, so readings in different processes agree to within
 * that error.  An unfenced read may be a few ns early against other loads:
 * sluice decides stale times as the key's latest time, so that is harmless.
 */
#include <pthread.h>
#include <time.h>

#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define SL_HAVE_TSC 1
#endif

static uint64_t sl_clock_posix(clockid_t id)
{
    struct timespec ts;

    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t sl_mono_ns(void)
{
    return sl_clock_posix(CLOCK_MONOTONIC);
}

#ifdef SL_HAVE_TSC
/* ns = base_ns + ((tsc - base_tsc) * mult) >> 32; read-only after the once */
static struct {
    bool usable;
    uint64_t base_tsc, base_ns, mult;
} sl_tsc;
static pthread_once_t sl_tsc_once = PTHREAD_ONCE_INIT;

static bool sl_tsc_invariant(void)
{
    unsigned a, b, c, d;

    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
        return false;
    __cpuid(0x80000007u, a, b, c, d);
    (void)a, (void)b, (void)c;
    return (d >> 8) & 1u;
}

/* One (monotonic, tsc) pair, the tsc read between two clock reads that are
 * close together, so the pair is accurate to their distance. */
static void sl_tsc_pair(uint64_t *ns, uint64_t *tsc)
{
    uint64_t best = UINT64_MAX;

    for (int i = 0; i < 16; i++) {
        uint64_t t0 = sl_clock_posix(CLOCK_MONOTONIC), c = __rdtsc(),
                 t1 = sl_clock_posix(CLOCK_MONOTONIC);
        if (t1 - t0 < best) {
            best = t1 - t0;
            *ns = t0 + (t1 - t0) / 2;
            *tsc = c;
        }
    }
}

static void sl_tsc_calibrate(void)
{
    struct timespec nap = {0, 20 * 1000 * 1000};
    uint64_t ns0 = 0, tsc0 = 0, ns1 = 0, tsc1 = 0; /* set by sl_tsc_pair: said for -O3 */

    if (!sl_tsc_invariant())
        return;
    sl_tsc_pair(&ns0, &tsc0);
    while (nanosleep(&nap, &nap) != 0)
        ;
    sl_tsc_pair(&ns1, &tsc1);
    if (tsc1 <= tsc0 || ns1 <= ns0)
        return;
    sl_tsc.mult = (uint64_t)(((sl_u128)(ns1 - ns0) << 32) / (tsc1 - tsc0));
    sl_tsc.base_tsc = tsc1;
    sl_tsc.base_ns = ns1;
    sl_tsc.usable = sl_tsc.mult != 0;
}

static uint64_t sl_clock_tsc(void)
{
    uint64_t d = __rdtsc() - sl_tsc.base_tsc;

    return sl_tsc.base_ns + (uint64_t)(((sl_u128)d * sl_tsc.mult) >> 32);
}
#endif

enum sluice_clock sl_clock_resolve(enum sluice_clock c)
{
    if (c != SLUICE_CLOCK_TSC)
        return c;
#ifdef SL_HAVE_TSC
    (void)pthread_once(&sl_tsc_once, sl_tsc_calibrate);
    if (sl_tsc.usable)
        return SLUICE_CLOCK_TSC;
#endif
    return SLUICE_CLOCK_MONOTONIC;
}

uint64_t sl_clock_read(enum sluice_clock c, uint64_t (*fn)(void *), void *ctx)
{
    switch (c) {
    case SLUICE_CLOCK_REALTIME:
        return sl_clock_posix(CLOCK_REALTIME);
    case SLUICE_CLOCK_COARSE:
#ifdef CLOCK_MONOTONIC_COARSE
        return sl_clock_posix(CLOCK_MONOTONIC_COARSE);
#else
        return sl_clock_posix(CLOCK_MONOTONIC);
#endif
    case SLUICE_CLOCK_CUSTOM:
        return fn(ctx);
#ifdef SL_HAVE_TSC
    case SLUICE_CLOCK_TSC: /* only after sl_clock_resolve() said it is usable */
        return sl_clock_tsc();
#endif
    case SLUICE_CLOCK_MONOTONIC:
    default:
        return sl_clock_posix(CLOCK_MONOTONIC);
    }
}

uint64_t sluice_now(sluice_t *l)
{
    if (l == NULL)
        return 0;
    return sl_clock_read(l->clock, l->clock_fn, l->clock_ctx);
}
