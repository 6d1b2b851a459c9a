/*
 * Operation sequences against the reference model (test/model.h): the input
 * picks a policy (1-3 limits of any algorithm) and then (op, key, cost, time
 * step) tuples; acquire and peek must decide exactly as the model, with the
 * same binding limit and remaining; reset must forget.  Times only advance
 * (the contract's exact semantics; backward times are checked elsewhere).
 */
#include <errno.h>
#include <stdbool.h>

#include "../model.h"
#include "fuzz.h"

#define NKEYS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct m_key model[NKEYS];
    static const uint64_t periods[] = {1000, 1000000, 1000000000, 7000000000, 60000000000};
    struct fz f = {data, size};
    struct sluice_config cfg;
    sluice_t *l;
    uint64_t now = fz_u64(&f, 4), cap = UINT64_MAX;

    memset(model, 0, sizeof(model));
    sluice_config_init(&cfg);
    cfg.policy.nlimits = 1 + fz_u8(&f) % 3;
    for (unsigned i = 0; i < cfg.policy.nlimits; i++) {
        struct sluice_limit *d = &cfg.policy.limits[i];
        d->algo = (enum sluice_algo)(fz_u8(&f) % 5);
        d->count = 1 + fz_u8(&f) % 16;
        d->period_ns = periods[fz_u8(&f) % 5];
        if (d->algo == SLUICE_GCRA)
            d->burst = fz_u8(&f) % (2 * d->count + 1);
        if (d->algo == SLUICE_SLIDING_WINDOW)
            d->precision_ns = d->period_ns / (1 + fz_u8(&f) % 8);
        uint64_t c = d->algo == SLUICE_GCRA && d->burst ? d->burst : d->count;
        cap = c < cap ? c : cap;
    }
    if (sluice_create(&cfg, &l) != 0)
        abort();
    while (f.n >= 4) {
        uint8_t op = fz_u8(&f), k = op >> 6;
        uint64_t cost = fz_u8(&f) % (cap + 2), step = fz_u64(&f, 2);
        struct sluice_result r;
        unsigned mb = 0;
        uint64_t rem = 0;
        char key[2] = {(char)('a' + k), 0};
        int got, want;

        now += (op & 8) ? step * periods[(op >> 4) & 3] / 4096 : step;
        if ((op & 7) == 7) { /* reset */
            got = sluice_reset(l, key, 1);
            FZ_CHECK(got == 0 || got == -ENOENT);
            memset(&model[k], 0, sizeof(model[k]));
            continue;
        }
        bool peek = (op & 7) == 6;
        got = peek ? sluice_peek_at(l, key, 1, cost, now, &r)
                   : sluice_acquire_at(l, key, 1, cost, now, &r);
        if (cost > cap) {
            FZ_CHECK(got == -E2BIG);
            continue;
        }
        if (peek) {
            struct m_key copy = model[k];
            want = m_acquire(&cfg.policy, &copy, now, cost, &mb, &rem);
        } else {
            want = m_acquire(&cfg.policy, &model[k], now, cost, &mb, &rem);
        }
        FZ_CHECK(got == want);
        FZ_CHECK(r.limit_index == mb);
        if (want == SLUICE_ALLOW)
            FZ_CHECK(r.remaining == rem && r.retry_after_ns == 0);
        else
            FZ_CHECK(r.retry_after_ns > 0);
    }
    sluice_destroy(l);
    return 0;
}
