/*
 * The keyed hash's parts, inline (hash.c has the whole function and says
 * why this construction): a key of 4 to 16 bytes, the commonest (an
 * address, an id, a token), hashed in the caller, so the lean paths take
 * no call for it.  sl_hash takes the same steps for those lengths.
 */
#ifndef SL_HASH_H
#define SL_HASH_H

#include <string.h>

#include "internal.h"

static const uint64_t sl_p0 = UINT64_C(0xa0761d6478bd642f);
static const uint64_t sl_p1 = UINT64_C(0xe7037ed1a0b428db);
static const uint64_t sl_p2 = UINT64_C(0x8ebc6af09c88c6e3);

static inline uint64_t sl_mum(uint64_t a, uint64_t b)
{
    sl_u128 r = (sl_u128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t sl_r64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t sl_r32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 4 <= len <= 16: four overlapping 32-bit reads cover every byte. */
static inline uint64_t sl_hash_4_16(const struct sl_hkey *k, const unsigned char *p, size_t len)
{
    size_t mid = (len >> 3) << 2;
    uint64_t a = (sl_r32(p) << 32) | sl_r32(p + mid);
    uint64_t b = (sl_r32(p + len - 4) << 32) | sl_r32(p + len - 4 - mid);

    return sl_mum(k->s1 ^ (uint64_t)len, sl_mum(a ^ k->s1, b ^ k->seed));
}

/* sl_hash, the short keys inline. */
static inline uint64_t sl_hash_inline(const struct sl_hkey *k, const void *data, size_t len)
{
    return len - 4 <= 12 ? sl_hash_4_16(k, data, len) : sl_hash(k, data, len);
}

#endif
