/*
 * Hostile conditions: floods of fresh keys, keys chosen to collide, clock
 * faults, arithmetic at the top of the range, thread churn.
 * Usage: hostile [scale]
 */
#include <stdatomic.h>

#include "../src/internal.h"
#include "helpers.h"

static double scale = 1.0;

/* ---- key flood ---------------------------------------------------------- */

struct flooder {
    sluice_t *l;
    unsigned id;
    uint64_t keys;
    _Atomic uint64_t *peak_keys, *peak_memory;
};

static void *flood_main(void *arg)
{
    struct flooder *f = arg;
    char key[32];

    for (uint64_t i = 0; i < f->keys; i++) {
        int n = snprintf(key, sizeof(key), "flood-%u-%llu", f->id, (unsigned long long)i);
        int rc = sluice_acquire_at(f->l, key, (size_t)n, 1, NS_PER_S, NULL);
        if (rc < 0)
            abort();
        if ((i & 1023) == 0) {
            struct sluice_stats st;
            sluice_stats(f->l, &st);
            for (uint64_t p = atomic_load(f->peak_keys); st.keys > p;)
                atomic_compare_exchange_weak(f->peak_keys, &p, st.keys);
            for (uint64_t p = atomic_load(f->peak_memory); st.memory_bytes > p;)
                atomic_compare_exchange_weak(f->peak_memory, &p, st.memory_bytes);
        }
    }
    return NULL;
}

static void test_key_flood(void)
{
    const size_t max_keys = 10000;
    struct sluice_config cfg;
    struct sluice_stats st;
    _Atomic uint64_t peak_keys = 0, peak_memory = 0;
    struct flooder f[4];
    uint64_t per_thread = (uint64_t)(250000 * scale) + 20000, settled;
    sluice_t *l;
    int exact = 0;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 5, NS_PER_S);
    cfg.max_keys = max_keys;
    cfg.when_full = SLUICE_FULL_DENY;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    /* 100 customers before the flood, each spends 2 of 5 */
    for (int i = 0; i < 100; i++) {
        char key[16];
        int n = snprintf(key, sizeof(key), "cust%d", i);
        CHECK_EQ(sluice_acquire_at(l, key, (size_t)n, 2, NS_PER_S, NULL), SLUICE_ALLOW);
    }
    for (unsigned i = 0; i < 4; i++)
        f[i] = (struct flooder){l, i, per_thread, &peak_keys, &peak_memory};
    t_run_threads(4, flood_main, f, sizeof(f[0]));
    sluice_stats(l, &st);
    CHECK(atomic_load(&peak_keys) <= max_keys);
    CHECK(st.keys <= max_keys);
    CHECK(st.full > 0);
    settled = st.memory_bytes;
    /* the customers kept exact decisions: 3 more each, not 4 */
    for (int i = 0; i < 100; i++) {
        char key[16];
        int n = snprintf(key, sizeof(key), "cust%d", i), got = 0;
        while (sluice_acquire_at(l, key, (size_t)n, 1, NS_PER_S, NULL) == SLUICE_ALLOW)
            got++;
        exact += got == 3;
    }
    CHECK_EQ(exact, 100);
    /* memory is bounded by max_keys: a second flood does not grow it */
    t_run_threads(4, flood_main, f, sizeof(f[0]));
    sluice_stats(l, &st);
    CHECK(st.memory_bytes <= settled + settled / 4);
    /* once idle, the flood's keys go */
    CHECK(sluice_reap(l, 10 * NS_PER_S) >= max_keys - 100);
    sluice_stats(l, &st);
    CHECK_EQ(st.keys, 0);
    printf("key flood: %llu fresh keys, peak %llu live (max %zu), %llu full decisions, "
           "%.0f bytes/key at max\n",
           (unsigned long long)(8 * per_thread), (unsigned long long)atomic_load(&peak_keys),
           max_keys, (unsigned long long)st.full, (double)settled / (double)max_keys);
    sluice_destroy(l);
}

/* ---- hash flooding -------------------------------------------------------- */

static uint32_t fnv1a(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint32_t h = 2166136261u;
    while (n--)
        h = (h ^ *c++) * 16777619u;
    return h;
}

/* Keys that an unseeded hash puts in one bucket of 1024 are spread by the
 * keyed hash as random keys would be. */
static void test_hash_flood(void)
{
    enum { BITS = 10, WANT = 512 };
    static char keys[WANT][16];
    static unsigned counts[1 << BITS];
    struct sl_hkey k;
    unsigned n = 0, worst = 0;
    uint64_t rng = 99;

    for (uint64_t i = 0; n < WANT; i++) {
        char key[16];
        snprintf(key, sizeof(key), "atk%012llx", (unsigned long long)t_rand(&rng));
        if ((fnv1a(key, 15) & ((1u << BITS) - 1)) == 0)
            memcpy(keys[n++], key, 16);
    }
    {
        uint64_t r[2];
        sl_random_bytes(r, sizeof(r));
        sl_hkey_set(&k, r[0], r[1]);
    }
    for (unsigned i = 0; i < WANT; i++) {
        unsigned b = (unsigned)(sl_hash(&k, keys[i], 15) & ((1u << BITS) - 1));
        worst = ++counts[b] > worst ? counts[b] : worst;
    }
    /* 512 keys into 1024 buckets: a random hash's fullest bucket holds ~5 */
    CHECK(worst <= 8);
    printf("hash flood: %d keys in one unseeded bucket; keyed hash's fullest bucket: %u\n", WANT,
           worst);
    /* and the limiter decides them all without trouble */
    sluice_t *l = t_limiter1(SLUICE_GCRA, 1, NS_PER_S, 0, 0);
    int allowed = 0;
    for (unsigned i = 0; i < WANT; i++)
        allowed += sluice_acquire_at(l, keys[i], 15, 1, 0, NULL) == SLUICE_ALLOW;
    CHECK_EQ(allowed, WANT);
    sluice_destroy(l);
}

/* ---- clock faults ---------------------------------------------------------- */

static _Atomic uint64_t fake_time;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return atomic_load(&fake_time);
}

/* A clock that jumps back, forward by years, stalls: never more than the
 * latest observed time allows. */
static void test_clock_faults(void)
{
    static const int64_t steps_ms[] = {0, 100, -5000, 0, 0, 200, 31536000000, -31536000000, 50,
                                       -1, 1000, 0, -100000, 300};
    enum sluice_algo algos[] = {SLUICE_GCRA, SLUICE_FIXED_WINDOW, SLUICE_SLIDING_WINDOW,
                                SLUICE_SLIDING_LOG, SLUICE_APPROX_SLIDING};

    for (unsigned a = 0; a < 5; a++) {
        struct sluice_config cfg;
        sluice_t *l;
        uint64_t latest = 0, t = 1000 * NS_PER_S, admitted_total = 0;
        sluice_config_init(&cfg);
        sluice_policy_add(&cfg.policy, algos[a], 10, NS_PER_S);
        cfg.clock = SLUICE_CLOCK_CUSTOM;
        cfg.clock_fn = fake_clock;
        CHECK_EQ(sluice_create(&cfg, &l), 0);
        for (unsigned s = 0; s < sizeof(steps_ms) / sizeof(steps_ms[0]); s++) {
            uint64_t admitted = 0;
            t += (uint64_t)(steps_ms[s] * 1000000);
            atomic_store(&fake_time, t);
            latest = t > latest ? t : latest;
            while (admitted < 100 && sluice_acquire(l, "k", 1, 1, NULL) == SLUICE_ALLOW)
                admitted++;
            /* 10 per second at most, however the clock moves */
            CHECK(admitted <= 10);
            admitted_total += admitted;
        }
        /* going back never refills: only forward steps of >= 1 s may */
        CHECK(admitted_total <= 10 * 5);
        sluice_destroy(l);
    }
}

/* Periods, counts and times at the top of the range saturate, never wrap. */
static void test_extremes(void)
{
    struct {
        enum sluice_algo algo;
        uint64_t count, period;
    } cases[] = {
        {SLUICE_GCRA, 1, UINT64_MAX / 8},        {SLUICE_GCRA, UINT64_MAX / 2, UINT64_MAX / 2},
        {SLUICE_FIXED_WINDOW, UINT64_C(1) << 46, UINT64_MAX},
        {SLUICE_FIXED_WINDOW, 3, 1},             {SLUICE_APPROX_SLIDING, UINT64_C(1) << 27, UINT64_MAX},
        {SLUICE_APPROX_SLIDING, 5, 1},           {SLUICE_SLIDING_WINDOW, 1000, UINT64_MAX},
        {SLUICE_SLIDING_LOG, 7, UINT64_MAX},     {SLUICE_GCRA, UINT64_MAX, 1},
    };
    uint64_t times[] = {0, 1, UINT64_MAX / 2, UINT64_MAX - 1000, UINT64_MAX, 12345};

    for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct sluice_policy p = {0};
        struct sluice_result r;
        int rc = sluice_policy_add(&p, cases[c].algo, cases[c].count, cases[c].period);
        if (cases[c].algo == SLUICE_SLIDING_WINDOW)
            p.limits[0].precision_ns = UINT64_MAX / 1000;
        if (rc != 0)
            continue; /* refused with -EINVAL: fine, that is the contract */
        struct sluice_config cfg;
        sluice_t *l;
        sluice_config_init(&cfg);
        cfg.policy = p;
        if (sluice_create(&cfg, &l) != 0)
            continue;
        for (unsigned i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
            rc = sluice_acquire_at(l, "x", 1, 1, times[i], &r);
            CHECK(rc == SLUICE_ALLOW || rc == SLUICE_DENY);
            CHECK(r.remaining <= r.limit);
            rc = sluice_peek_at(l, "x", 1, 1, times[i], &r);
            CHECK(rc == SLUICE_ALLOW || rc == SLUICE_DENY);
        }
        CHECK_EQ(sluice_acquire_at(l, "fresh", 5, 1, UINT64_MAX, &r), SLUICE_ALLOW);
        sluice_destroy(l);
    }
}

/* ---- thread churn -------------------------------------------------------- */

static void *churn_main(void *arg)
{
    sluice_t *l = arg;
    char key[16];

    for (int i = 0; i < 20; i++) {
        int n = snprintf(key, sizeof(key), "churn%d", i);
        (void)sluice_acquire_at(l, key, (size_t)n, 1, 0, NULL);
    }
    (void)sluice_reap(l, 10 * NS_PER_S); /* retires memory from this thread */
    return NULL;
}

static void test_thread_churn(void)
{
    sluice_t *l = t_limiter1(SLUICE_GCRA, 1000000, NS_PER_S, 0, 0);
    unsigned rounds = (unsigned)(500 * scale) + 50;
    size_t before;

    churn_main(l);
    before = sl_epoch_records();
    for (unsigned r = 0; r < rounds; r++) {
        pthread_t th[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&th[i], NULL, churn_main, l);
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
    }
    /* 4 at a time, 4*rounds threads in all: records are recycled */
    CHECK(sl_epoch_records() <= before + 4);
    printf("thread churn: %u threads, epoch records %zu -> %zu\n", rounds * 4, before,
           sl_epoch_records());
    sluice_destroy(l);
}

int main(int argc, char **argv)
{
    scale = t_scale(argc, argv);
    test_key_flood();
    test_hash_flood();
    test_clock_faults();
    test_extremes();
    test_thread_churn();
    return t_done("hostile");
}
