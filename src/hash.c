/*
 * Keyed hash of key bytes.  A 64x64->128 multiply-fold construction in the
 * style of wyhash, keyed with 128 random bits per limiter: without the key an
 * attacker cannot choose keys that land in one probe sequence.  It costs a
 * few ns for short keys, where SipHash-1-3 costs about four times as much,
 * and the hot path budget is tens of ns.
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"

void sl_hkey_set(struct sl_hkey *k, uint64_t k0, uint64_t k1)
{
    k->k0 = k0;
    k->k1 = k1;
    k->s1 = sl_p1 ^ k1;
    k->s2 = sl_p2 ^ (k1 << 1);
    k->seed = k0 ^ sl_mum(k0 ^ sl_p0, k->s1);
}

uint64_t sl_hash(const struct sl_hkey *k, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t s1 = k->s1, s2 = k->s2, seed = k->seed;
    uint64_t a, b;

    if (len <= 16) {
        if (len >= 4)
            return sl_hash_4_16(k, p, len);
        if (len > 0) {
            a = ((uint64_t)p[0] << 16) | ((uint64_t)p[len >> 1] << 8) | p[len - 1];
            b = 0;
        } else {
            a = b = 0;
        }
    } else {
        size_t i = len;
        if (i > 32) {
            uint64_t see1 = seed;
            do {
                seed = sl_mum(sl_r64(p) ^ s1, sl_r64(p + 8) ^ seed);
                see1 = sl_mum(sl_r64(p + 16) ^ s2, sl_r64(p + 24) ^ see1);
                p += 32;
                i -= 32;
            } while (i > 32);
            seed ^= see1;
        }
        while (i > 16) {
            seed = sl_mum(sl_r64(p) ^ s1, sl_r64(p + 8) ^ seed);
            p += 16;
            i -= 16;
        }
        a = sl_r64(p + i - 16);
        b = sl_r64(p + i - 8);
    }
    return sl_mum(s1 ^ (uint64_t)len, sl_mum(a ^ s1, b ^ seed));
}

void sl_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n <= 0)
            break;
        p += n;
        len -= (size_t)n;
    }
    if (len > 0) {
        /* No getrandom (very old kernel): still different per limiter. */
        struct timespec ts;
        uint64_t x;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)buf ^
            (uint64_t)getpid();
        while (len > 0) {
            x = sl_mum(x ^ sl_p0, sl_p1);
            *p++ = (unsigned char)x;
            len--;
        }
    }
}
