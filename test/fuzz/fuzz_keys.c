/*
 * Key bytes: any bytes of any length are a key (or -ENAMETOOLONG past
 * max_key_len), equal bytes are the same key and different bytes different
 * keys, under every operation that takes a key.
 */
#include <errno.h>

#include "fuzz.h"

#define MAX_LEN 40

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sluice_config cfg;
    struct sluice_policy big = {0};
    sluice_t *l;
    const uint8_t *key[8];
    size_t len[8], n = 0, off = 0;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 1, 1000);
    sluice_policy_add(&big, SLUICE_FIXED_WINDOW, 3, 1000);
    cfg.max_key_len = MAX_LEN;
    if (sluice_create(&cfg, &l) != 0)
        abort();
    /* split the input into up to 8 keys: a length byte, then the bytes */
    while (n < 8 && off < size) {
        size_t want = data[off++] % (MAX_LEN + 8);
        len[n] = want < size - off ? want : size - off;
        key[n++] = data + off;
        off += len[n - 1];
    }
    for (size_t i = 0; i < n; i++) {
        int rc = sluice_acquire_at(l, key[i], len[i], 1, 5, NULL);
        if (len[i] > MAX_LEN) {
            FZ_CHECK(rc == -ENAMETOOLONG);
            FZ_CHECK(sluice_reset(l, key[i], len[i]) == -ENAMETOOLONG);
            FZ_CHECK(sluice_override_set(l, key[i], len[i], &big) == -ENAMETOOLONG);
            continue;
        }
        /* the first time this key's bytes are seen it is fresh (count 1) */
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = len[j] == len[i] && memcmp(key[j], key[i], len[i]) == 0;
        FZ_CHECK(rc == (seen ? SLUICE_DENY : SLUICE_ALLOW));
        FZ_CHECK(sluice_acquire_at(l, key[i], len[i], 1, 5, NULL) == SLUICE_DENY);
    }
    /* an override and a reset reach exactly that key */
    if (n > 0 && len[0] <= MAX_LEN) {
        FZ_CHECK(sluice_override_set(l, key[0], len[0], &big) == 0);
        FZ_CHECK(sluice_acquire_at(l, key[0], len[0], 2, 5, NULL) == SLUICE_ALLOW);
        FZ_CHECK(sluice_reset(l, key[0], len[0]) == 0);
        FZ_CHECK(sluice_acquire_at(l, key[0], len[0], 3, 5, NULL) == SLUICE_ALLOW);
        FZ_CHECK(sluice_override_clear(l, key[0], len[0]) == 0);
    }
    sluice_destroy(l);
    return 0;
}
