/*
 * Config and policy validation, with allocation failures injected: any
 * input either creates a limiter that decides sanely or is refused with a
 * negative errno; nothing leaks, nothing crashes.
 */
#include <errno.h>
#include <stdbool.h>

#include "fuzz.h"

void sl_test_fail_alloc(unsigned long nth, bool every);

static int valid_rc(int rc)
{
    return rc == SLUICE_ALLOW || rc == SLUICE_DENY || rc == -E2BIG || rc == -ENOMEM ||
           rc == -ENOSPC || rc == -ENAMETOOLONG;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz f = {data, size};
    struct sluice_config cfg;
    struct sluice_result r;
    sluice_t *l = NULL;
    uint8_t fail = fz_u8(&f);
    int rc;

    sluice_config_init(&cfg);
    cfg.policy.nlimits = fz_u8(&f) % (SLUICE_MAX_LIMITS + 2);
    for (unsigned i = 0; i < SLUICE_MAX_LIMITS; i++) {
        struct sluice_limit *lim = &cfg.policy.limits[i];
        lim->algo = (enum sluice_algo)(fz_u8(&f) % 6);
        lim->count = fz_num(&f);
        lim->period_ns = fz_num(&f);
        lim->burst = fz_u8(&f) & 1 ? fz_num(&f) : 0;
        lim->precision_ns = fz_u8(&f) & 1 ? fz_num(&f) : 0;
    }
    cfg.max_keys = (size_t)fz_num(&f) % 100000;
    cfg.max_key_len = (size_t)fz_num(&f) % 2048;
    cfg.when_full = (enum sluice_when_full)(fz_u8(&f) % 3);
    cfg.shards = (unsigned)fz_num(&f) % 5000;
    cfg.idle_ttl_ns = fz_num(&f);
    sl_test_fail_alloc(fail & 0x80 ? fail & 0x7f : 0, false);
    rc = sluice_create(&cfg, &l);
    FZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc == 0) {
        for (unsigned i = 0; i < 8 && f.n > 0; i++) {
            uint64_t now = fz_num(&f), cost = fz_num(&f) % 70000;
            char key[4] = {(char)fz_u8(&f), 0, 0, 0};
            rc = sluice_acquire_at(l, key, fz_u8(&f) % 4, cost, now, &r);
            FZ_CHECK(valid_rc(rc));
            if (rc == SLUICE_ALLOW || rc == SLUICE_DENY)
                FZ_CHECK(r.limit_index < cfg.policy.nlimits && r.remaining <= UINT64_MAX);
            FZ_CHECK(valid_rc(sluice_peek_at(l, key, 1, cost, now, &r)));
        }
        (void)sluice_reap(l, fz_num(&f));
        sluice_destroy(l);
    }
    sl_test_fail_alloc(0, false);
    return 0;
}
