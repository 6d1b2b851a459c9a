/*
 * sluice_acquire_batch decides exactly as the single calls would: twin
 * limiters get the same requests, one as sluice_acquire_at calls in order,
 * the other in batches of every size, and every return code and every
 * result field must agree, over repeated keys (a request sees the charges
 * of the ones before it), every algorithm, stacked limits, overrides, new
 * keys, bad requests (NULL key, too long, cost 0, cost above the limit),
 * with results and without (the lean path's requests).
 */
#include "helpers.h"

#define NKEYS 24
#define NREQ 512

static sluice_t *twin(const struct sluice_policy *p)
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    cfg.policy = *p;
    cfg.max_key_len = 12;
    return t_create(&cfg);
}

static int same_result(const struct sluice_result *a, const struct sluice_result *b)
{
    return a->limit == b->limit && a->remaining == b->remaining &&
           a->retry_after_ns == b->retry_after_ns && a->reset_after_ns == b->reset_after_ns &&
           a->period_ns == b->period_ns && a->limit_index == b->limit_index &&
           a->flags == b->flags && a->key_index == b->key_index;
}

static void one_policy(const struct sluice_policy *p, uint64_t seed)
{
    static char names[NKEYS][16];
    static struct sluice_req reqs[NREQ];
    static struct sluice_result want[NREQ], got[NREQ];
    static int want_rc[NREQ], got_rc[NREQ];
    sluice_t *single = twin(p), *batched = twin(p);
    struct sluice_policy vip = {0};
    uint64_t rng = seed, now = 1000 * NS_PER_S;

    sluice_policy_add(&vip, SLUICE_FIXED_WINDOW, 5, NS_PER_S);
    CHECK_EQ(sluice_override_set(single, "k3", 2, &vip), 0);
    CHECK_EQ(sluice_override_set(batched, "k3", 2, &vip), 0);
    for (unsigned k = 0; k < NKEYS; k++)
        snprintf(names[k], sizeof(names[k]), "k%u", k);
    for (unsigned round = 0; round < 40; round++) {
        size_t n = 1 + t_rand(&rng) % NREQ;
        for (size_t i = 0; i < n; i++) {
            unsigned k = (unsigned)(t_rand(&rng) % NKEYS), kind = (unsigned)(t_rand(&rng) % 32);
            reqs[i] = (struct sluice_req){names[k], strlen(names[k]), 1 + t_rand(&rng) % 3};
            if (kind == 0)
                reqs[i].cost = 0;
            else if (kind == 1)
                reqs[i].cost = UINT64_MAX;
            else if (kind == 2)
                reqs[i] = (struct sluice_req){NULL, 3, 1};
            else if (kind == 3)
                reqs[i] = (struct sluice_req){"far-too-long-key", 16, 1};
            else if (kind == 4)
                reqs[i] = (struct sluice_req){NULL, 0, 1}; /* the empty key */
        }
        /* every other round without results: a private limiter's request
         * then takes the lean path, alone as in the batch */
        bool with = round % 2 == 0;
        for (size_t i = 0; i < n; i++)
            want_rc[i] = sluice_acquire_at(single, reqs[i].key, reqs[i].len, reqs[i].cost, now,
                                           with ? &want[i] : NULL);
        CHECK_EQ(sluice_acquire_batch(batched, reqs, n, now, got_rc, with ? got : NULL), 0);
        for (size_t i = 0; i < n; i++) {
            if (got_rc[i] != want_rc[i] ||
                (with && want_rc[i] >= 0 && !same_result(&got[i], &want[i]))) {
                fprintf(stderr, "seed %llu round %u request %zu: batch %d, single %d\n",
                        (unsigned long long)seed, round, i, got_rc[i], want_rc[i]);
                t_failures++;
                break;
            }
        }
        now += t_rand(&rng) % (NS_PER_S / 2);
    }
    /* without results */
    CHECK_EQ(sluice_acquire_batch(batched, reqs, 4, now, got_rc, NULL), 0);
    struct sluice_stats a, b;
    sluice_stats(single, &a);
    sluice_stats(batched, &b);
    CHECK_U64(b.allowed, a.allowed + (got_rc[0] == 0) + (got_rc[1] == 0) + (got_rc[2] == 0) +
                             (got_rc[3] == 0));
    sluice_destroy(single);
    sluice_destroy(batched);
}

static void bad_arguments(void)
{
    struct sluice_policy p = {0};
    struct sluice_req q = {"k", 1, 1};
    int rc = 7;

    sluice_policy_add(&p, SLUICE_GCRA, 2, NS_PER_S);
    sluice_t *l = twin(&p);
    CHECK_EQ(sluice_acquire_batch(NULL, &q, 1, 0, &rc, NULL), -EINVAL);
    CHECK_EQ(sluice_acquire_batch(l, NULL, 1, 0, &rc, NULL), -EINVAL);
    CHECK_EQ(sluice_acquire_batch(l, &q, 1, 0, NULL, NULL), -EINVAL);
    CHECK_EQ(rc, 7);
    CHECK_EQ(sluice_acquire_batch(l, NULL, 0, 0, NULL, NULL), 0);
    struct sluice_stats st;
    sluice_stats(l, &st);
    CHECK_U64(st.keys + st.allowed + st.denied, 0); /* refusals charged nothing */
    sluice_destroy(l);
}

int main(void)
{
    static const enum sluice_algo algos[] = {SLUICE_GCRA, SLUICE_FIXED_WINDOW,
                                             SLUICE_SLIDING_WINDOW, SLUICE_SLIDING_LOG,
                                             SLUICE_APPROX_SLIDING};

    for (unsigned a = 0; a < 5; a++) {
        struct sluice_policy p = {0};
        sluice_policy_add(&p, algos[a], 4, NS_PER_S);
        one_policy(&p, 11 + a);
        sluice_policy_add(&p, SLUICE_GCRA, 20, 60 * NS_PER_S);
        one_policy(&p, 101 + a);
    }
    bad_arguments();
    return t_done("batch");
}
