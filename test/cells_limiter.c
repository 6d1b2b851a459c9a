/*
 * Short keys in cells, through the library (src/table_cells.c): a key of
 * up to 16 bytes under a single GCRA default, made by an acquire without
 * a result, lives in a cell; checked here:
 *   - it admits exactly its burst at one instant, as an entry would;
 *   - a denial and a peek write nothing to its shard's cells, and a peek
 *     leaves it in its cell;
 *   - moved to an entry (a call with a result, a set_policy), it keeps its
 *     state and time: nothing more is admitted at that instant, and a call
 *     at an earlier time is still decided at its latest admission;
 *   - an idle key is reaped out of its cell, and made again fresh;
 *   - a call with a result, and an acquire_all of 2-4 keys in cells (with
 *     a result or none), is decided there, and every verdict and result
 *     is the one a limiter without cells gives.
 */
#include "helpers.h"
#include "internal.h"
#include "table_cells.h"

#define BURST 10u

static struct sl_cell *cell_of(sluice_t *l, const char *key, size_t len, struct sl_shard **sp)
{
    uint64_t h = sl_hash(&l->hkey, key, len), k[2];
    struct sl_shard *s = sl_shard_of(l, h);

    *sp = s;
    sl_cell_key_pack(key, len, k);
    return sl_cells_lookup(&s->cells, h, k, len);
}

/* The shard's cells as bytes: compared around calls that must not write. */
static void *cells_copy(struct sl_shard *s, size_t *bytes)
{
    struct sl_cells *t = atomic_load(&s->cells);
    size_t cells = (size_t)t->cap << t->stride_shift; /* the cells' places (sl_cells_at) */
    size_t n = sizeof(*t) + cells + t->cap * sizeof(t->ctrl[0]);
    void *copy = malloc(n);

    memcpy(copy, t, sizeof(*t) + cells);
    memcpy((char *)copy + sizeof(*t) + cells, t->ctrl, t->cap * sizeof(t->ctrl[0]));
    *bytes = n;
    return copy;
}

static bool cells_same(struct sl_shard *s, const void *copy, size_t bytes)
{
    size_t now_bytes;
    void *again = cells_copy(s, &now_bytes);
    bool same = now_bytes == bytes && memcmp(again, copy, bytes) == 0;

    free(again);
    return same;
}

/*
 * The same calls on a limiter with cells and one without (every key an
 * entry): every verdict and every field of every result the same, from
 * random keys (lengths 0 to 17), costs (some above the capacity), times
 * (repeated, stale, far ahead so keys go idle), calls with and without a
 * result, peeks, acquire_all of one key and of two (on cells where both
 * are in one), resets and reaps.
 */
static void same_as_entries(uint64_t seed, unsigned ops)
{
    static const char *keys[] = {"", "a", "ab", "ab\0", "10.0.0.1", "user:42",
                                 "0123456789abcde", "0123456789abcdef", "0123456789abcdefg",
                                 "x", "y", "z"};
    static const uint64_t steps[] = {0, 0, 1, 7000000, 100000000, NS_PER_S, 30 * NS_PER_S};
    struct sluice_config cfg;
    sluice_t *lc, *le;
    uint64_t rng = seed, t = 40 * NS_PER_S;
    unsigned on_cells = 0;

    sluice_config_init(&cfg);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, BURST, NS_PER_S), 0);
    cfg.idle_ttl_ns = 5 * NS_PER_S;
    CHECK_EQ(sluice_create(&cfg, &lc), 0);
    sl_cells_enabled = false;
    CHECK_EQ(sluice_create(&cfg, &le), 0);
    sl_cells_enabled = true;
    for (unsigned i = 0; i < ops; i++) {
        unsigned k = (unsigned)(t_rand(&rng) % (sizeof(keys) / sizeof(keys[0])));
        size_t len = k == 3 ? 3 : strlen(keys[k]);
        uint64_t cost = 1 + t_rand(&rng) % (BURST + 2), op = t_rand(&rng) % 100, at;
        struct sluice_result rc_res, re_res;
        int rc, re;

        struct sl_shard *s;
        on_cells += len <= SL_CELL_KEY_MAX && cell_of(lc, keys[k], len, &s) != NULL;
        t += steps[t_rand(&rng) % (sizeof(steps) / sizeof(steps[0]))];
        at = t_rand(&rng) % 8 == 0 ? t - t_rand(&rng) % NS_PER_S : t; /* out of order */
        cost = cost > 3 && t_rand(&rng) % 2 ? 1 : cost;
        memset(&rc_res, 0xa5, sizeof(rc_res));
        memset(&re_res, 0xa5, sizeof(re_res));
        if (op < 55) {
            rc = sluice_acquire_at(lc, keys[k], len, cost, at, &rc_res);
            re = sluice_acquire_at(le, keys[k], len, cost, at, &re_res);
        } else if (op < 80) {
            rc = sluice_acquire_at(lc, keys[k], len, cost, at, NULL);
            re = sluice_acquire_at(le, keys[k], len, cost, at, NULL);
        } else if (op < 90) {
            /* decided on the cell, with a result or none (acquire.c) */
            bool with_res = op < 87;
            rc = sluice_peek_at(lc, keys[k], len, cost, at, with_res ? &rc_res : NULL);
            re = sluice_peek_at(le, keys[k], len, cost, at, with_res ? &re_res : NULL);
        } else if (op < 93) {
            struct sluice_key onec = {lc, keys[k], len}, onee = {le, keys[k], len};
            rc = sluice_acquire_all(&onec, 1, cost, at, &rc_res);
            re = sluice_acquire_all(&onee, 1, cost, at, &re_res);
        } else if (op < 97) {
            /* two or three keys, with a result or none: decided on their
             * cells (acquire_all.c) */
            unsigned k2 = (unsigned)(t_rand(&rng) % (sizeof(keys) / sizeof(keys[0])));
            unsigned k3 = (unsigned)(t_rand(&rng) % (sizeof(keys) / sizeof(keys[0])));
            size_t len2 = k2 == 3 ? 3 : strlen(keys[k2]), len3 = k3 == 3 ? 3 : strlen(keys[k3]);
            size_t nk = 2 + t_rand(&rng) % 2;
            bool with_res = t_rand(&rng) % 2;
            struct sluice_key manyc[3] = {{lc, keys[k], len}, {lc, keys[k2], len2},
                                          {lc, keys[k3], len3}};
            struct sluice_key manye[3] = {{le, keys[k], len}, {le, keys[k2], len2},
                                          {le, keys[k3], len3}};
            rc = sluice_acquire_all(manyc, nk, cost, at, with_res ? &rc_res : NULL);
            re = sluice_acquire_all(manye, nk, cost, at, with_res ? &re_res : NULL);
        } else if (op < 98) {
            rc = sluice_reset(lc, keys[k], len);
            re = sluice_reset(le, keys[k], len);
        } else {
            rc = (int)sluice_reap(lc, at);
            re = (int)sluice_reap(le, at);
        }
        if (rc != re || memcmp(&rc_res, &re_res, sizeof(rc_res)) != 0) {
            fprintf(stderr,
                    "op %u (kind %u, key %u, cost %u): %d vs %d; remaining %llu vs %llu, "
                    "retry %llu vs %llu, reset %llu vs %llu, flags %u vs %u\n",
                    i, (unsigned)op, k, (unsigned)cost, rc, re,
                    (unsigned long long)rc_res.remaining, (unsigned long long)re_res.remaining,
                    (unsigned long long)rc_res.retry_after_ns,
                    (unsigned long long)re_res.retry_after_ns,
                    (unsigned long long)rc_res.reset_after_ns,
                    (unsigned long long)re_res.reset_after_ns, rc_res.flags, re_res.flags);
            CHECK(0);
            break;
        }
    }
    /* the comparison was of cells: many calls met their key in one */
    CHECK(on_cells * 4 > ops);
    sluice_destroy(lc);
    sluice_destroy(le);
}

int main(int argc, char **argv)
{
    struct sluice_config cfg;
    struct sluice_result res;
    struct sl_shard *s;
    sluice_t *l;
    const char key[] = "0123456789abcdef"; /* 16 bytes: an IPv6 address's size */
    uint64_t t0 = 5 * NS_PER_S;
    unsigned admitted = 0;

    if (!sl_cas_pair_usable()) {
        printf("cells_limiter: no cmpxchg16b here, skipped\n");
        return T_SKIP;
    }
    sluice_config_init(&cfg);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, BURST, NS_PER_S), 0);
    CHECK_EQ(sluice_create(&cfg, &l), 0);

    /* exactly its burst at one instant, from a cell */
    for (unsigned i = 0; i < 3 * BURST; i++)
        admitted += sluice_acquire_at(l, key, 16, 1, t0, NULL) == SLUICE_ALLOW;
    CHECK_EQ(admitted, BURST);
    CHECK(cell_of(l, key, 16, &s) != NULL);

    /* a denial and a peek write nothing there; the peek tells the truth */
    {
        size_t bytes;
        void *before = cells_copy(s, &bytes);
        CHECK_EQ(sluice_acquire_at(l, key, 16, 1, t0, NULL), SLUICE_DENY);
        CHECK(cells_same(s, before, bytes));
        CHECK_EQ(sluice_peek_at(l, key, 16, 1, t0, &res), SLUICE_DENY);
        CHECK_U64(res.remaining, 0);
        CHECK(cells_same(s, before, bytes));
        free(before);
    }
    CHECK(cell_of(l, key, 16, &s) != NULL);

    /* a later time refills one unit per 100 ms; an earlier one is decided
     * at the latest admission's time */
    CHECK_EQ(sluice_acquire_at(l, key, 16, 1, t0 + NS_PER_S / 10, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, key, 16, 1, t0, NULL), SLUICE_DENY);

    /* a call with a result is decided in the cell too */
    CHECK_EQ(sluice_acquire_at(l, key, 16, 1, t0 + NS_PER_S / 10, &res), SLUICE_DENY);
    CHECK(cell_of(l, key, 16, &s) != NULL);
    CHECK_U64(res.remaining, 0);
    CHECK_U64(res.retry_after_ns, NS_PER_S / 10);

    /* acquire_all of one key decides it in its cell, as an acquire */
    {
        struct sluice_key one = {l, key, 16};
        CHECK_EQ(sluice_acquire_all(&one, 1, 1, t0 + NS_PER_S / 10, &res), SLUICE_DENY);
        CHECK(cell_of(l, key, 16, &s) != NULL);
    }
    /* the general path (a key repeated) moves it to an entry, state and
     * time kept */
    {
        struct sluice_key twice[2] = {{l, key, 16}, {l, key, 16}};
        CHECK_EQ(sluice_acquire_all(twice, 2, 1, t0 + NS_PER_S / 10, &res), SLUICE_DENY);
    }
    CHECK(cell_of(l, key, 16, &s) == NULL);
    CHECK_EQ(sluice_acquire_at(l, key, 16, 1, t0, NULL), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, key, 16, 1, t0 + 2 * NS_PER_S / 10, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, key, 16, 1, t0 + 2 * NS_PER_S / 10, NULL), SLUICE_DENY);

    /* set_policy: another key of 5 bytes, spent in its cell, then moved by
     * the change (a wider limit of the same kind carries its spent state) */
    {
        struct sluice_policy wider;
        unsigned n = 0;
        for (unsigned i = 0; i < 2 * BURST; i++)
            n += sluice_acquire_at(l, "short", 5, 1, t0, NULL) == SLUICE_ALLOW;
        CHECK_EQ(n, BURST);
        CHECK(cell_of(l, "short", 5, &s) != NULL);
        memset(&wider, 0, sizeof(wider));
        CHECK_EQ(sluice_policy_add(&wider, SLUICE_GCRA, BURST, NS_PER_S), 0);
        wider.limits[0].burst = 2 * BURST;
        CHECK_EQ(sluice_set_policy(l, &wider), 0);
        n = 0;
        for (unsigned i = 0; i < 3 * BURST; i++)
            n += sluice_acquire_at(l, "short", 5, 1, t0, NULL) == SLUICE_ALLOW;
        CHECK_EQ(n, BURST); /* 2 * BURST in all at t0, never more */
        CHECK(cell_of(l, "short", 5, &s) == NULL);
    }
    sluice_destroy(l);

    /* reaped when idle, made again fresh */
    sluice_config_init(&cfg);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, BURST, NS_PER_S), 0);
    cfg.idle_ttl_ns = NS_PER_S;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    for (unsigned i = 0; i < BURST; i++)
        CHECK_EQ(sluice_acquire_at(l, "ip4", 4, 1, t0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "ip4", 4, 1, t0, NULL), SLUICE_DENY);
    CHECK(cell_of(l, "ip4", 4, &s) != NULL);
    CHECK_EQ(sluice_reap(l, t0 + NS_PER_S / 2), 0); /* not idle yet */
    CHECK_EQ(sluice_reap(l, t0 + 3 * NS_PER_S), 1);
    CHECK(cell_of(l, "ip4", 4, &s) == NULL);
    {
        struct sluice_stats st;
        sluice_stats(l, &st);
        CHECK_U64(st.keys, 0);
    }
    CHECK_EQ(sluice_acquire_at(l, "ip4", 4, 1, t0 + 3 * NS_PER_S, NULL), SLUICE_ALLOW);
    CHECK(cell_of(l, "ip4", 4, &s) != NULL);

    /* acquire_all of keys in cells with no result: decided there, all or
     * nothing, new keys made there; a denial makes no key */
    {
        struct sluice_key ab[2] = {{l, "ip4", 4}, {l, "user-7", 6}};
        struct sluice_key ac[2] = {{l, "ip4", 4}, {l, "user-8", 6}};
        struct sluice_stats st;
        unsigned n = 1; /* ip4's one admission above */
        uint64_t t1 = t0 + 3 * NS_PER_S;
        while (n < 3 * BURST && sluice_acquire_all(ab, 2, 1, t1, NULL) == SLUICE_ALLOW)
            n++;
        CHECK_EQ(n, BURST); /* ip4 binds: BURST in all at t1 */
        CHECK(cell_of(l, "ip4", 4, &s) != NULL);
        CHECK(cell_of(l, "user-7", 6, &s) != NULL);
        /* user-7 was charged BURST - 1 times with ip4, never once more */
        CHECK_EQ(sluice_acquire_at(l, "user-7", 6, 1, t1, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_at(l, "user-7", 6, 1, t1, NULL), SLUICE_DENY);
        sluice_stats(l, &st);
        CHECK_U64(st.keys, 2);
        CHECK_EQ(sluice_acquire_all(ac, 2, 1, t1, NULL), SLUICE_DENY);
        CHECK(cell_of(l, "user-8", 6, &s) == NULL);
        sluice_stats(l, &st);
        CHECK_U64(st.keys, 2);
    }
    /* with a result too: decided there, the keys kept in their cells (the
     * general path moved them to entries, 270 B a key) */
    {
        struct sluice_key ad[2] = {{l, "ip5", 4}, {l, "user-9", 6}};
        struct sluice_result r2;
        uint64_t t2 = t0 + 3 * NS_PER_S;
        CHECK_EQ(sluice_acquire_all(ad, 2, 3, t2, &r2), SLUICE_ALLOW);
        CHECK((r2.flags & SLUICE_F_NEW_KEY) != 0);
        CHECK_U64(r2.remaining, BURST - 3);
        CHECK(cell_of(l, "ip5", 4, &s) != NULL);
        CHECK(cell_of(l, "user-9", 6, &s) != NULL);
        CHECK_EQ(sluice_acquire_at(l, "user-9", 6, BURST - 3, t2, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_all(ad, 2, 1, t2, &r2), SLUICE_DENY);
        CHECK_U64(r2.key_index, 1); /* user-9 refuses */
        CHECK_U64(r2.remaining, 0);
        CHECK_U64(r2.retry_after_ns, NS_PER_S / BURST);
        CHECK(cell_of(l, "ip5", 4, &s) != NULL);
        CHECK(cell_of(l, "user-9", 6, &s) != NULL);
    }
    sluice_destroy(l);

    /* A denial by a spent key writes nothing, not even the new keys beside
     * it: decided read-only before any key is made.  (Made first and taken
     * back after, a key stood whenever another call's charge, taken back
     * later, was in its cell: a reviewer's four threads left up to 1,035
     * keys in 180,000 no serial order has.)  One shard: its cells are the
     * limiter's. */
    sluice_config_init(&cfg);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, BURST, NS_PER_S), 0);
    cfg.shards = 1;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    for (unsigned i = 0; i < BURST; i++)
        CHECK_EQ(sluice_acquire_at(l, "ip9", 3, 1, t0, NULL), SLUICE_ALLOW);
    CHECK(cell_of(l, "ip9", 3, &s) != NULL);
    {
        size_t bytes;
        void *before = cells_copy(s, &bytes);
        struct sluice_stats st;
        for (unsigned i = 0; i < 64; i++) {
            char user[16];
            struct sluice_result r3;
            snprintf(user, sizeof(user), "user-%u", i);
            struct sluice_key pair[2] = {{l, "ip9", 3}, {l, user, strlen(user)}};
            CHECK_EQ(sluice_acquire_all(pair, 2, 1, t0, i % 2 ? &r3 : NULL), SLUICE_DENY);
        }
        CHECK(cells_same(s, before, bytes));
        free(before);
        sluice_stats(l, &st);
        CHECK_U64(st.keys, 1);
    }
    sluice_destroy(l);

    /* A key idle beyond GCRA's range reads fresh to a peek, as to the
     * acquire after it (the peek's view of the cell read its word past
     * that range as spent: a reviewer, at 2^62 ns on), and as an entry. */
    {
        sluice_t *le;
        struct sluice_result rc_res, re_res;
        uint64_t far = t0 + (UINT64_C(1) << 62) + 1000 * NS_PER_S;
        sluice_config_init(&cfg);
        CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, BURST, NS_PER_S), 0);
        CHECK_EQ(sluice_create(&cfg, &l), 0);
        sl_cells_enabled = false;
        CHECK_EQ(sluice_create(&cfg, &le), 0);
        sl_cells_enabled = true;
        CHECK_EQ(sluice_acquire_at(l, "k", 1, BURST, t0, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_acquire_at(le, "k", 1, BURST, t0, NULL), SLUICE_ALLOW);
        CHECK(cell_of(l, "k", 1, &s) != NULL);
        memset(&rc_res, 0, sizeof(rc_res));
        memset(&re_res, 0, sizeof(re_res));
        CHECK_EQ(sluice_peek_at(l, "k", 1, 1, far, &rc_res), SLUICE_ALLOW);
        CHECK_EQ(sluice_peek_at(le, "k", 1, 1, far, &re_res), SLUICE_ALLOW);
        CHECK(memcmp(&rc_res, &re_res, sizeof(rc_res)) == 0);
        CHECK_U64(rc_res.remaining, BURST - 1);
        CHECK(cell_of(l, "k", 1, &s) != NULL); /* the peek moved nothing */
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, far, NULL), SLUICE_ALLOW);
        sluice_destroy(l);
        sluice_destroy(le);
    }

    for (uint64_t seed = 1; seed <= 8; seed++)
        same_as_entries(seed, (unsigned)(20000 * t_scale(argc, argv)));
    return t_done("cells_limiter");
}
