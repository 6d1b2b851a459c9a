/* Shared by the fuzz targets: a byte reader that never runs past the input. */
#ifndef SLUICE_FUZZ_H
#define SLUICE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

struct fz {
    const uint8_t *p;
    size_t n;
};

static inline uint64_t fz_u64(struct fz *f, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes && f->n > 0; i++, f->p++, f->n--)
        v |= (uint64_t)*f->p << (8 * i);
    return v;
}

static inline uint8_t fz_u8(struct fz *f)
{
    return (uint8_t)fz_u64(f, 1);
}

/* A value from an interesting spread: small, around powers of two, or huge. */
static inline uint64_t fz_num(struct fz *f)
{
    uint8_t kind = fz_u8(f);
    switch (kind & 3) {
    case 0:
        return kind >> 2;
    case 1:
        return fz_u64(f, 2);
    case 2:
        return (UINT64_C(1) << (kind >> 2)) + fz_u64(f, 1) - 128;
    default:
        return fz_u64(f, 8);
    }
}

#define FZ_CHECK(c)                                                                                \
    do {                                                                                           \
        if (!(c))                                                                                  \
            abort();                                                                               \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
