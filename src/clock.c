/*
 * Clock sources.  The _at calls take time from the caller and never come
 * here: a server that already read the clock for its request pays nothing.
 */
#include <time.h>

#include "internal.h"

static uint64_t sl_clock_posix(clockid_t id)
{
    struct timespec ts;

    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
    case SLUICE_CLOCK_MONOTONIC:
    default:
        return sl_clock_posix(CLOCK_MONOTONIC);
    }
}
