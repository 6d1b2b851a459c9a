/* Keys, key distributions, clocks and progress for sluice-bench. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

void keyset_make(struct keyset *k, uint64_t n)
{
    k->n = n;
    k->bytes = malloc(n * KEY_LEN + 1);
    for (uint64_t i = 0; i < n; i++) {
        char tmp[32];
        snprintf(tmp, sizeof(tmp), "key-%011llu", (unsigned long long)(i % 100000000000ull));
        memcpy(k->bytes + i * KEY_LEN, tmp, KEY_LEN);
    }
}

void keyset_free(struct keyset *k)
{
    free(k->bytes);
    k->bytes = NULL;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t x = *s += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* Drawn before timing, so the draw costs nothing in the measurement. */
uint32_t *index_stream(enum dist d, uint64_t nkeys, uint64_t n, uint64_t seed, unsigned thread,
                       unsigned threads)
{
    uint32_t *idx = malloc(n * sizeof(*idx));
    double *cdf = NULL;

    if (d == DIST_ZIPF) {
        double sum = 0;
        cdf = malloc(nkeys * sizeof(*cdf));
        for (uint64_t i = 0; i < nkeys; i++)
            cdf[i] = (sum += 1.0 / pow((double)(i + 1), 1.1));
        for (uint64_t i = 0; i < nkeys; i++)
            cdf[i] /= sum;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(&seed);
        if (d == DIST_HOT || nkeys == 1) {
            idx[i] = 0;
        } else if (d == DIST_UNIFORM) {
            idx[i] = (uint32_t)(r % nkeys);
        } else if (d == DIST_SPLIT) {
            uint64_t share = nkeys / threads ? nkeys / threads : 1;
            idx[i] = (uint32_t)(((r % share) * threads + thread) % nkeys);
        } else {
            double u = (double)(r >> 11) / 9007199254740992.0;
            uint64_t lo = 0, hi = nkeys - 1;
            while (lo < hi) {
                uint64_t mid = (lo + hi) / 2;
                if (cdf[mid] < u)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            /* scatter ranks over the key space so hot keys are not neighbours */
            idx[i] = (uint32_t)((lo * 2654435761u) % nkeys);
        }
    }
    free(cdf);
    return idx;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

uint64_t rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* One status line on stderr, rewritten in place when it is a terminal. */
void progress(const char *fmt, ...)
{
    static int tty = -1;
    va_list ap;

    if (tty < 0)
        tty = isatty(2);
    va_start(ap, fmt);
    fputs(tty ? "\r\033[K" : "", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(tty ? "" : "\n", stderr);
    va_end(ap);
    fflush(stderr);
}
