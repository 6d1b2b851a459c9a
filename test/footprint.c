/*
 * What a decision writes.  On a key that exists, under the policy in force,
 * a decision may write that key's entry (its state words and its latest
 * time) and the calling thread's own statistics slot, and nothing else of
 * the limiter: no table slot, no shard, no policy, no shared counter.  A
 * denial writes only the thread's slot, and a peek writes nothing at all.
 * That is what lets threads on distinct keys scale (no line of the limiter
 * written by two of them) and keeps the deny path free of writes under a
 * flood of refused calls.  Each case copies every byte the limiter owns
 * that a decision could reach (the handle, the shards, every slot array,
 * the policy, every key's entry), decides, and compares.
 *
 * A store of the value already there is not seen here (callgrind's and
 * cachegrind's counts are the tools for that); a store of anything else
 * anywhere in those bytes is, and says where.
 */
#include "helpers.h"
#include "internal.h"

#define MAX_REGIONS 64
#define MAX_ALLOWED 16

struct region {
    char what[32];
    const unsigned char *base;
    size_t len;
    unsigned char *copy;
};

struct snapshot {
    struct region r[MAX_REGIONS];
    size_t n;
};

struct range {
    const void *base;
    size_t len;
};

static const char *const key_names[] = {"alpha", "bravo", "charlie", "delta", "echo",
                                        "foxtrot", "golf", "hotel"};
#define NKEYS (sizeof(key_names) / sizeof(key_names[0]))

static void add_region(struct snapshot *s, const char *what, const void *base, size_t len)
{
    struct region *r = &s->r[s->n++];

    if (s->n > MAX_REGIONS) {
        fprintf(stderr, "footprint: too many regions\n");
        exit(1);
    }
    snprintf(r->what, sizeof(r->what), "%s", what);
    r->base = base;
    r->len = len;
    r->copy = malloc(len);
    if (r->copy == NULL)
        exit(1);
    memcpy(r->copy, base, len);
}

static struct sl_entry *entry_of(sluice_t *l, const char *key)
{
    uint64_t h = sl_hash(&l->hkey, key, strlen(key));

    return sl_table_get(sl_shard_of(l, h), h, key, strlen(key));
}

static void snap_limiter(struct snapshot *s, sluice_t *l)
{
    struct sl_policy *pol = atomic_load_explicit(&l->policy, memory_order_acquire);
    char what[32];

    add_region(s, "limiter", l, sizeof(*l));
    add_region(s, "shards", l->shards, l->nshards * sizeof(*l->shards));
    for (unsigned i = 0; i < l->nshards; i++) {
        const void *base;
        size_t len;
        sl_table_span(&l->shards[i], &base, &len);
        snprintf(what, sizeof(what), "slots of shard %u", i);
        add_region(s, what, base, len);
    }
    add_region(s, "policy", pol, sizeof(*pol));
    add_region(s, "policy zero words", pol->zero_w, pol->nwords * sizeof(sl_aword));
    for (size_t k = 0; k < NKEYS; k++) {
        struct sl_entry *e = entry_of(l, key_names[k]);
        if (e == NULL)
            continue;
        snprintf(what, sizeof(what), "entry of %s", key_names[k]);
        add_region(s, what, e, sl_entry_size(e->pol, e->key_len));
    }
}

static bool in_ranges(const unsigned char *p, const struct range *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p >= (const unsigned char *)a[i].base &&
            p < (const unsigned char *)a[i].base + a[i].len)
            return true;
    return false;
}

static bool range_changed(const struct snapshot *s, const struct range *a)
{
    for (size_t i = 0; i < s->n; i++) {
        const struct region *r = &s->r[i];
        const unsigned char *p = a->base;
        if (p >= r->base && p + a->len <= r->base + r->len)
            return memcmp(r->copy + (p - r->base), p, a->len) != 0;
    }
    fprintf(stderr, "footprint: a range outside every region\n");
    exit(1);
}

/* Every byte that changed lies in allowed[]; each of must[] changed. */
static void check_writes(const char *what, struct snapshot *s, const struct range *allowed,
                         size_t nallowed, const struct range *must, size_t nmust)
{
    for (size_t i = 0; i < s->n; i++) {
        const struct region *r = &s->r[i];
        for (size_t b = 0; b < r->len; b++)
            if (r->copy[b] != r->base[b] && !in_ranges(r->base + b, allowed, nallowed)) {
                fprintf(stderr, "%s: wrote byte %zu of the %s\n", what, b, r->what);
                t_failures++;
                break;
            }
    }
    for (size_t i = 0; i < nmust; i++)
        if (!range_changed(s, &must[i])) {
            fprintf(stderr, "%s: range %zu of what it must write is unchanged\n", what, i);
            t_failures++;
        }
    for (size_t i = 0; i < s->n; i++)
        free(s->r[i].copy);
    s->n = 0;
}

/* The calling thread's statistics slot of l. */
static struct range my_stat(sluice_t *l)
{
    struct sl_thread *t = sl_thread_get();

    CHECK(t != NULL && t->id < SL_STAT_SLOTS);
    return (struct range){&l->stat[t->id], sizeof(l->stat[t->id])};
}

/* What an admission may write in key's entry: its state words and last_ns. */
static void entry_ranges(sluice_t *l, const char *key, struct range *words, struct range *last)
{
    struct sl_entry *e = entry_of(l, key);

    CHECK(e != NULL);
    *words = (struct range){e->w, e->pol->nwords * sizeof(sl_aword)};
    *last = (struct range){&e->last_ns, sizeof(e->last_ns)};
}

static sluice_t *limiter_with(const struct sluice_policy *pol, uint64_t t0)
{
    struct sluice_config cfg;
    sluice_t *l;

    sluice_config_init(&cfg);
    cfg.policy = *pol;
    l = t_create(&cfg);
    for (size_t k = 0; k < NKEYS; k++) /* every key exists before any case */
        CHECK_EQ(sluice_acquire_at(l, key_names[k], strlen(key_names[k]), 1, t0, NULL),
                 SLUICE_ALLOW);
    return l;
}

/* A request of cost 1 on n keys, key[i] in lim[i] (distinct limiters). */
struct call {
    sluice_t *lim[2];
    const char *key[2];
    size_t n;
};

static int call_decide(const struct call *c, uint64_t now, struct sluice_result *res)
{
    struct sluice_key keys[2];

    if (c->n == 1)
        return sluice_acquire_at(c->lim[0], c->key[0], strlen(c->key[0]), 1, now, res);
    for (size_t k = 0; k < c->n; k++)
        keys[k] = (struct sluice_key){c->lim[k], c->key[k], strlen(c->key[k])};
    return sluice_acquire_all(keys, c->n, 1, now, res);
}

/* c decided at now, now + 1, ... until denied.  An admission may write the
 * thread's slot in each limiter and each key's state words and time, and
 * must write the slots and the words (commit counts come back to what
 * they were); the denial writes the slots and nothing else. */
static void until_denied(const char *name, const struct call *c, uint64_t now,
                         struct sluice_result *res)
{
    for (int i = 0; i < 1000; i++, now++) {
        struct range allowed[MAX_ALLOWED], must[MAX_ALLOWED];
        struct snapshot s = {.n = 0};
        size_t na = 0, nm = 0;
        char what[96];
        int rc;

        for (size_t k = 0; k < c->n; k++) {
            allowed[na++] = must[nm++] = my_stat(c->lim[k]);
            snap_limiter(&s, c->lim[k]);
        }
        for (size_t k = 0; k < c->n; k++, na += 2) {
            entry_ranges(c->lim[k], c->key[k], &allowed[na], &allowed[na + 1]);
            must[nm++] = allowed[na];
        }
        rc = call_decide(c, now, res);
        snprintf(what, sizeof(what), "%s: %s %d%s", name,
                 rc == SLUICE_ALLOW ? "admission" : "denial", i, res ? " (result)" : "");
        if (rc != SLUICE_ALLOW) {
            CHECK_EQ(rc, SLUICE_DENY);
            check_writes(what, &s, allowed, c->n, must, c->n);
            return;
        }
        check_writes(what, &s, allowed, na, must, nm);
    }
    fprintf(stderr, "%s: never denied\n", name);
    t_failures++;
}

/* One limiter, one key: admitted until denied, then peeked, with and
 * without a result. */
static void single_key_cases(const char *name, const struct sluice_policy *pol, uint64_t t0)
{
    sluice_t *l = limiter_with(pol, t0);
    struct sluice_result res;
    struct snapshot s = {.n = 0};
    char what[96];
    uint64_t now = t0 + 1;

    for (int with_res = 0; with_res < 2; with_res++, now += 1000) {
        struct sluice_result *r = with_res ? &res : NULL;
        struct call c = {{l}, {with_res ? "bravo" : "charlie"}, 1};

        until_denied(name, &c, now, r);
        /* a peek writes nothing at all, admitting or not */
        snap_limiter(&s, l);
        CHECK_EQ(sluice_peek_at(l, c.key[0], strlen(c.key[0]), 1, now + 999, r), SLUICE_DENY);
        snprintf(what, sizeof(what), "%s: peek denied%s", name, with_res ? " (result)" : "");
        check_writes(what, &s, NULL, 0, NULL, 0);
        snap_limiter(&s, l);
        CHECK_EQ(sluice_peek_at(l, "delta", 5, 1, now + 999, r), SLUICE_ALLOW);
        snprintf(what, sizeof(what), "%s: peek admitted%s", name, with_res ? " (result)" : "");
        check_writes(what, &s, NULL, 0, NULL, 0);
    }
    sluice_destroy(l);
}

static struct sluice_policy one(struct sluice_limit lim)
{
    struct sluice_policy p = {.nlimits = 1};

    p.limits[0] = lim;
    return p;
}

static void test_single_limits(void)
{
    const uint64_t t0 = 1000 * NS_PER_S;
    struct sluice_policy p;

    p = one(t_limit(SLUICE_GCRA, 3, NS_PER_S, 0, 0));
    single_key_cases("gcra", &p, t0);
    p = one(t_limit(SLUICE_FIXED_WINDOW, 3, NS_PER_S, 0, 0));
    single_key_cases("fixed window", &p, t0);
    p = one(t_limit(SLUICE_SLIDING_WINDOW, 3, NS_PER_S, 0, NS_PER_S / 10));
    single_key_cases("sliding window", &p, t0);
    p = one(t_limit(SLUICE_SLIDING_LOG, 3, NS_PER_S, 0, 0));
    single_key_cases("sliding log", &p, t0);
    p = one(t_limit(SLUICE_APPROX_SLIDING, 3, NS_PER_S, 0, 0));
    single_key_cases("approximate sliding", &p, t0);
}

/* Stacked limits, denied by each of them in turn: the daily quota last. */
static void test_stacked(void)
{
    const uint64_t t0 = 1000 * NS_PER_S;
    struct sluice_policy p = {.nlimits = 4};

    p.limits[0] = t_limit(SLUICE_GCRA, 10, NS_PER_S, 0, 0);
    p.limits[1] = t_limit(SLUICE_SLIDING_WINDOW, 8, 60 * NS_PER_S, 0, NS_PER_S);
    p.limits[2] = t_limit(SLUICE_SLIDING_LOG, 6, NS_PER_S, 0, 0);
    p.limits[3] = t_limit(SLUICE_FIXED_WINDOW, 4, 86400 * NS_PER_S, 0, 0);
    single_key_cases("stacked, the daily quota binding", &p, t0);
    p.limits[3] = t_limit(SLUICE_FIXED_WINDOW, 40, 86400 * NS_PER_S, 0, 0);
    single_key_cases("stacked, the log binding", &p, t0);
    p.limits[0] = t_limit(SLUICE_GCRA, 2, NS_PER_S, 0, 0);
    single_key_cases("stacked, GCRA binding", &p, t0);
}

/* Two limiters, one key in each: acquire_all admitted until the second
 * key denies, with and without a result. */
static void test_acquire_all(void)
{
    const uint64_t t0 = 1000 * NS_PER_S;
    struct sluice_policy pa = one(t_limit(SLUICE_GCRA, 100, NS_PER_S, 0, 0));
    struct sluice_policy pb = one(t_limit(SLUICE_FIXED_WINDOW, 3, NS_PER_S, 0, 0));
    sluice_t *a = limiter_with(&pa, t0), *b = limiter_with(&pb, t0);
    struct call c = {{a, b}, {"echo", "golf"}, 2}, d = {{a, b}, {"foxtrot", "hotel"}, 2};
    struct sluice_result res;

    until_denied("acquire_all", &c, t0 + 1, NULL);
    until_denied("acquire_all", &d, t0 + 1, &res);
    sluice_destroy(a);
    sluice_destroy(b);
}

/* A batch writes the entries of the keys it admits and the thread's slot. */
static void test_batch(void)
{
    const uint64_t t0 = 1000 * NS_PER_S;
    struct sluice_policy p = one(t_limit(SLUICE_GCRA, 2, NS_PER_S, 0, 0));
    sluice_t *l = limiter_with(&p, t0);
    struct sluice_req reqs[4] = {{"alpha", 5, 1}, {"hotel", 5, 1}, {"alpha", 5, 1},
                                 {"hotel", 5, 5}};
    struct range allowed[MAX_ALLOWED];
    struct snapshot s = {.n = 0};
    struct sluice_result res[4];
    int rcs[4];

    allowed[0] = my_stat(l);
    entry_ranges(l, "alpha", &allowed[1], &allowed[2]);
    entry_ranges(l, "hotel", &allowed[3], &allowed[4]);
    snap_limiter(&s, l);
    CHECK_EQ(sluice_acquire_batch(l, reqs, 4, t0 + 1, rcs, res), 0);
    CHECK_EQ(rcs[0], SLUICE_ALLOW);
    CHECK_EQ(rcs[1], SLUICE_ALLOW);
    CHECK_EQ(rcs[2], SLUICE_DENY);
    CHECK_EQ(rcs[3], -E2BIG);
    check_writes("batch", &s, allowed, 5, allowed, 4);
    /* every request refused: the slot only */
    snap_limiter(&s, l);
    CHECK_EQ(sluice_acquire_batch(l, reqs, 3, t0 + 2, rcs, NULL), 0);
    CHECK_EQ(rcs[0] + rcs[1] + rcs[2], 3 * SLUICE_DENY);
    check_writes("batch, all denied", &s, allowed, 1, allowed, 1);
    sluice_destroy(l);
}

/*
 * A peek at a key whose policy changed since its last decision: it answers
 * as an acquire would after migrating the key (the same remaining, waits
 * and verdict the acquire then reports), and writes nothing (the reviewer
 * of 2026-12-01 found a peek migrating the key, which changed what a later
 * reap removed).  Every algorithm but the sliding log, whose words only its
 * lock reads whole (a peek still migrates such a key, as an acquire would).
 */
static void peek_after_change(const char *name, struct sluice_limit before,
                              struct sluice_limit after, bool shared)
{
    const uint64_t t0 = 1000 * NS_PER_S;
    struct sluice_policy pb = one(before), pa = one(after);
    struct sluice_config cfg;
    struct sluice_result peek, got;
    struct snapshot s = {.n = 0};
    char path[128], what[96];
    sluice_t *l;

    sluice_config_init(&cfg);
    cfg.policy = pb;
    if (shared) {
        t_shm_path(path, sizeof(path), "footprint");
        l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    } else {
        l = t_create(&cfg);
    }
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sluice_acquire_at(l, "alpha", 5, 1, t0 + (uint64_t)i, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_set_policy(l, &pa), 0);
    if (!shared)
        snap_limiter(&s, l);
    CHECK_EQ(sluice_peek_at(l, "alpha", 5, 1, t0 + 10, &peek), SLUICE_ALLOW);
    CHECK_EQ(sluice_peek_at(l, "alpha", 5, 1, t0 + 10, &got), SLUICE_ALLOW);
    CHECK_U64(got.remaining, peek.remaining); /* a second peek the same: nothing moved */
    if (!shared) {
        snprintf(what, sizeof(what), "peek after set_policy (%s)", name);
        check_writes(what, &s, NULL, 0, NULL, 0);
    }
    CHECK_EQ(sluice_acquire_at(l, "alpha", 5, 1, t0 + 10, &got), SLUICE_ALLOW);
    CHECK_U64(got.remaining, peek.remaining);
    CHECK_U64(got.reset_after_ns, peek.reset_after_ns);
    CHECK_U64(got.limit, peek.limit);
    sluice_destroy(l);
    if (shared)
        (void)sluice_unlink_shared(path);
}

static void test_peek_after_policy_change(void)
{
    for (int shared = 0; shared < 2; shared++) {
        peek_after_change("GCRA 10/s to 20/s", t_limit(SLUICE_GCRA, 10, NS_PER_S, 0, 0),
                          t_limit(SLUICE_GCRA, 20, NS_PER_S, 0, 0), shared);
        peek_after_change("fixed 10/min to 7/min",
                          t_limit(SLUICE_FIXED_WINDOW, 10, 60 * NS_PER_S, 0, 0),
                          t_limit(SLUICE_FIXED_WINDOW, 7, 60 * NS_PER_S, 0, 0), shared);
        peek_after_change("approx 10/s to 30/s", t_limit(SLUICE_APPROX_SLIDING, 10, NS_PER_S, 0, 0),
                          t_limit(SLUICE_APPROX_SLIDING, 30, NS_PER_S, 0, 0), shared);
        peek_after_change("sliding 10/min to 5/min",
                          t_limit(SLUICE_SLIDING_WINDOW, 10, 60 * NS_PER_S, 0, NS_PER_S),
                          t_limit(SLUICE_SLIDING_WINDOW, 5, 60 * NS_PER_S, 0, NS_PER_S), shared);
        peek_after_change("GCRA to fixed", t_limit(SLUICE_GCRA, 10, NS_PER_S, 0, 0),
                          t_limit(SLUICE_FIXED_WINDOW, 10, NS_PER_S, 0, 0), shared);
    }
}

int main(void)
{
    /* The entries' footprint, their slots and lines: with cells on, short
     * keys of one GCRA limit live in cells (src/table_cells.c) instead,
     * and this test's locating of a key's entry would itself move it out
     * of its cell.  test/cells_limiter.c checks what a decision on a cell
     * writes. */
    sl_cells_enabled = false;
    test_single_limits();
    test_stacked();
    test_acquire_all();
    test_batch();
    test_peek_after_policy_change();
    return t_done("footprint");
}
