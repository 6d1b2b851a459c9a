/*
 * A flood of fresh keys: the memory it leaves resident is the memory the
 * limiter says it holds (sluice_stats), not several times that.  Each
 * growth of a shard's table retires the outgrown array to the epoch; one
 * retired array counted as one pending item among 64, so a flood that
 * outgrew a few dozen arrays kept them all until it stopped (10^6 fresh
 * keys: 193 resident bytes a key where the table holds 50).  Checked with
 * short keys (cells) and long ones (entries), the flood arriving on one
 * thread and then on two, at once on fresh limiters.
 * Usage: flood_memory [scale].  Under sanitizers it only reports.
 */
#include "helpers.h"

struct flood {
    sluice_t *l;
    size_t key_len;
    uint64_t from, n;
};

static void *flood_main(void *arg)
{
    struct flood *f = arg;

    for (uint64_t i = f->from; i < f->from + f->n; i++) {
        char key[32];
        memset(key, 'k', sizeof(key));
        memcpy(key, &i, sizeof(i));
        CHECK_EQ(sluice_acquire_at(f->l, key, f->key_len, 1, NS_PER_S, NULL), SLUICE_ALLOW);
    }
    return NULL;
}

static void flood(const char *what, size_t key_len, unsigned threads, uint64_t n)
{
    struct sluice_config cfg;
    struct sluice_stats st;
    struct flood f[2];
    uint64_t before, grown;
    sluice_t *l;

    sluice_config_init(&cfg);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, 1000, NS_PER_S), 0);
    cfg.max_keys = n;
    before = t_rss_bytes();
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    for (unsigned t = 0; t < threads; t++)
        f[t] = (struct flood){l, key_len, t * (n / threads), n / threads};
    t_run_threads(threads, flood_main, f, sizeof(f[0]));
    grown = t_rss_bytes() - before;
    sluice_stats(l, &st);
    CHECK_U64(st.keys, n / threads * threads);
    printf("%-30s %u thread(s), %" PRIu64 " keys: %.1f B/key held, %.1f B/key resident\n", what,
           threads, n, (double)st.memory_bytes / (double)n, (double)grown / (double)n);
#ifndef T_SANITIZED
    /* twice: glibc keeps some of what threads' arenas freed (two threads:
     * 62 to 94 resident bytes a key beside 50 held, over runs; 246 when
     * the outgrown arrays stayed) */
    CHECK(grown <= 2 * st.memory_bytes + (UINT64_C(16) << 20));
#endif
    sluice_destroy(l);
}

int main(int argc, char **argv)
{
    uint64_t n = (uint64_t)(1000000 * t_scale(argc, argv));

    if (n < 100000)
        n = 100000;
    flood("16-byte keys (cells)", 16, 1, n);
    flood("16-byte keys (cells)", 16, 2, n);
    flood("32-byte keys (entries)", 32, 1, n);
    flood("32-byte keys (entries)", 32, 2, n);
    return t_done("flood_memory");
}
