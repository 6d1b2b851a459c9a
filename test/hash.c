/*
 * The keyed hash (src/hash.c, src/hash.h): the lean paths hash keys of 4 to
 * 16 bytes inline (sl_hash_inline) while inserts and the general path call
 * sl_hash, so the two must agree at every length, alignment and key, or a
 * present key would never be found on the lean path.  For short keys every
 * byte must count (the overlapping reads cover them all): a byte left out
 * would put every key differing only there in one probe sequence, which is
 * what the hash's key is there to prevent.
 */
#include "helpers.h"

#include "hash.h"

static void t_agree(const struct sl_hkey *k, uint64_t *rng)
{
    unsigned char buf[96];

    for (size_t len = 0; len <= 64; len++)
        for (size_t off = 0; off < 8; off++)
            for (int r = 0; r < 64; r++) {
                for (size_t i = 0; i < sizeof buf; i++)
                    buf[i] = (unsigned char)t_rand(rng);
                CHECK_U64(sl_hash_inline(k, buf + off, len), sl_hash(k, buf + off, len));
            }
}

/* Flipping any one bit of a key of up to 16 bytes changes its hash. */
static void t_every_bit(const struct sl_hkey *k, uint64_t *rng)
{
    unsigned char key[16];

    for (size_t len = 1; len <= 16; len++)
        for (int r = 0; r < 16; r++) {
            for (size_t i = 0; i < len; i++)
                key[i] = (unsigned char)t_rand(rng);
            uint64_t h = sl_hash(k, key, len);
            for (size_t bit = 0; bit < len * 8; bit++) {
                key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
                CHECK(sl_hash(k, key, len) != h);
                key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            }
        }
}

int main(void)
{
    uint64_t rng = 0x243f6a8885a308d3u;

    for (int i = 0; i < 8; i++) {
        struct sl_hkey k;
        sl_hkey_set(&k, t_rand(&rng), t_rand(&rng));
        t_agree(&k, &rng);
        t_every_bit(&k, &rng);
        /* the same bytes under another key hash apart */
        struct sl_hkey k2;
        sl_hkey_set(&k2, t_rand(&rng), t_rand(&rng));
        CHECK(sl_hash(&k, "client-10.0.0.1", 15) != sl_hash(&k2, "client-10.0.0.1", 15));
    }
    return t_done("hash");
}
