/*
 * Property test: random sequences of (time, key, cost) over random policies
 * of every algorithm, single and multi-limit, decided by sluice and by the
 * reference model in model.h.  Decisions, binding limit and remaining must
 * match exactly; every denial's retry_after must be exact: the least wait
 * after which the request passes every limit.  A peek just before each
 * acquire must give its answer: the same decision and the same numbers.
 * Some calls come from a clock behind (stamped before the key's latest
 * admission): decided as at that admission, and their retry_after still
 * counts from their own time (it counted from the admission's).
 * Usage: property [scale] [seed]
 */
#include "helpers.h"
#include "model.h"

#define NKEYS 3

static const uint64_t periods[] = {NS_PER_S, 3 * NS_PER_S, 7 * NS_PER_S, 10 * NS_PER_S,
                                   60 * NS_PER_S};

static void random_policy(uint64_t *rng, struct sluice_policy *p, int multi)
{
    memset(p, 0, sizeof(*p));
    p->nlimits = multi ? 1 + (unsigned)(t_rand(rng) % 3) : 1;
    for (unsigned i = 0; i < p->nlimits; i++) {
        struct sluice_limit *d = &p->limits[i];
        d->algo = (enum sluice_algo)(t_rand(rng) % 5);
        d->count = 1 + t_rand(rng) % 20;
        d->period_ns = periods[t_rand(rng) % 5];
        if (d->algo == SLUICE_GCRA && t_rand(rng) % 2)
            d->burst = 1 + t_rand(rng) % (2 * d->count);
        if (d->algo == SLUICE_SLIDING_WINDOW)
            d->precision_ns = d->period_ns / (1 + t_rand(rng) % 10) + t_rand(rng) % 3;
    }
}

static uint64_t min_cap(const struct sluice_policy *p)
{
    uint64_t cap = UINT64_MAX;
    for (unsigned i = 0; i < p->nlimits; i++) {
        uint64_t c = p->limits[i].algo == SLUICE_GCRA ? m_burst(&p->limits[i]) : p->limits[i].count;
        cap = c < cap ? c : cap;
    }
    return cap;
}

static int run_one(uint64_t seed, int steps, int multi)
{
    uint64_t rng = seed, now = 1000 * NS_PER_S + t_rand(&rng) % NS_PER_S, cap;
    static struct m_key model[NKEYS];
    uint64_t last[NKEYS] = {0}; /* each key's latest admission: the model's clamp */
    struct sluice_config cfg;
    sluice_t *l;
    int bad = 0;

    memset(model, 0, sizeof(model));
    sluice_config_init(&cfg);
    random_policy(&rng, &cfg.policy, multi);
    cap = min_cap(&cfg.policy);
    if (sluice_create(&cfg, &l) != 0)
        return 1;
    for (int s = 0; s < steps && !bad; s++) {
        unsigned k = (unsigned)(t_rand(&rng) % NKEYS), mb = 0, want_b;
        uint64_t cost = t_rand(&rng) % (cap + 2), rem = 0;
        uint64_t step = t_rand(&rng) % 8 == 0 ? t_rand(&rng) % (20 * NS_PER_S)
                                              : t_rand(&rng) % (NS_PER_S / 3);
        char key[8];
        struct sluice_result r;
        int got, want;

        now += step;
        /* one call in six from a clock behind, by up to 1 s */
        uint64_t when = t_rand(&rng) % 6 == 0 ? now - t_rand(&rng) % NS_PER_S : now;
        uint64_t dec = last[k] > when ? last[k] : when; /* decided as at */
        snprintf(key, sizeof(key), "key%u", k);
        /* a peek first: the acquire's very answer, numbers included */
        struct sluice_result pk;
        int peeked = sluice_peek_at(l, key, strlen(key), cost, when, &pk);
        got = sluice_acquire_at(l, key, strlen(key), cost, when, &r);
        if (peeked != got ||
            (got >= 0 && (pk.remaining != r.remaining || pk.limit_index != r.limit_index ||
                          pk.retry_after_ns != r.retry_after_ns ||
                          pk.reset_after_ns != r.reset_after_ns))) {
            fprintf(stderr,
                    "seed %llu step %d: peek %d rem %llu idx %u retry %llu reset %llu, acquire %d "
                    "rem %llu idx %u retry %llu reset %llu\n",
                    (unsigned long long)seed, s, peeked, (unsigned long long)pk.remaining,
                    pk.limit_index, (unsigned long long)pk.retry_after_ns,
                    (unsigned long long)pk.reset_after_ns, got, (unsigned long long)r.remaining,
                    r.limit_index, (unsigned long long)r.retry_after_ns,
                    (unsigned long long)r.reset_after_ns);
            bad = 1;
        }
        if (cost > cap) {
            bad |= got != -E2BIG;
            continue;
        }
        want = m_acquire(&cfg.policy, &model[k], dec, cost, &mb, &rem);
        want_b = mb;
        if (want == SLUICE_ALLOW && cost > 0)
            last[k] = dec;
        if (got != want || r.limit_index != want_b || (want == SLUICE_ALLOW && r.remaining != rem)) {
            fprintf(stderr,
                    "seed %llu step %d key %u cost %llu now %llu: got %d idx %u rem %llu, "
                    "model %d idx %u rem %llu\n",
                    (unsigned long long)seed, s, k, (unsigned long long)cost,
                    (unsigned long long)when, got, r.limit_index, (unsigned long long)r.remaining,
                    want, want_b, (unsigned long long)rem);
            for (unsigned i = 0; i < cfg.policy.nlimits; i++)
                fprintf(stderr, "  limit %u: algo %d count %llu period %llu burst %llu prec %llu\n",
                        i, cfg.policy.limits[i].algo, (unsigned long long)cfg.policy.limits[i].count,
                        (unsigned long long)cfg.policy.limits[i].period_ns,
                        (unsigned long long)cfg.policy.limits[i].burst,
                        (unsigned long long)cfg.policy.limits[i].precision_ns);
            bad = 1;
        }
        if (got == SLUICE_DENY) {
            /* retry_after is the earliest time the same request passes every limit */
            struct sluice_result pr;
            uint64_t at = when + r.retry_after_ns, dummy;
            unsigned di;
            struct m_key copy = model[k];
            int before = m_acquire(&cfg.policy, &copy, at - 1 > last[k] ? at - 1 : last[k], cost,
                                   &di, &dummy);
            copy = model[k];
            int after = m_acquire(&cfg.policy, &copy, at > last[k] ? at : last[k], cost, &di,
                                  &dummy);
            int p = sluice_peek_at(l, key, strlen(key), cost, at, &pr);
            if (after != SLUICE_ALLOW || p != SLUICE_ALLOW ||
                (r.retry_after_ns > 1 && before != SLUICE_DENY)) {
                fprintf(stderr, "seed %llu step %d: retry_after %llu not exact (%d %d %d)\n",
                        (unsigned long long)seed, s, (unsigned long long)r.retry_after_ns, before,
                        after, p);
                bad = 1;
            }
        }
    }
    sluice_destroy(l);
    return bad;
}

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);
    uint64_t seed0 = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    int runs = (int)(400 * scale), failed = 0;

    for (int i = 0; i < runs && failed < 5; i++)
        failed += run_one(seed0 + (uint64_t)i, 3000, i % 2);
    CHECK_EQ(failed, 0);
    printf("property: %d policies x 3000 steps\n", runs);
    return t_done("property");
}
