/*
 * sluice_acquire_all as an outside caller meets it: repeated keys are one
 * key, each limiter's when_full decides its own new keys, a denial's
 * retry_after covers every limit of every key, an admission reports the
 * state after its charge, and a denial makes no key.  Each case once hung, over-admitted or lied;
 * a watchdog turns a hang into a failure.
 */
#include <signal.h>
#include <unistd.h>

#include "helpers.h"

#define MS (NS_PER_S / 1000)

static sluice_t *make(const struct sluice_policy *p, size_t max_keys, unsigned shards,
                      enum sluice_when_full full)
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    cfg.policy = *p;
    cfg.max_keys = max_keys;
    cfg.shards = shards;
    cfg.when_full = full;
    return t_create(&cfg);
}

static struct sluice_policy one(enum sluice_algo algo, uint64_t count, uint64_t period)
{
    struct sluice_policy p = {0};

    sluice_policy_add(&p, algo, count, period);
    return p;
}

/* Two new keys, room for one: inserting each must not reap the other's
 * fresh entry round after round (it hung, growing memory). */
static void full_pair(void)
{
    struct sluice_policy p = one(SLUICE_GCRA, 10, NS_PER_S);
    sluice_t *l = make(&p, 1, 1, SLUICE_FULL_DENY);
    struct sluice_key k[2] = {{l, "a", 1}, {l, "b", 1}};
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), SLUICE_DENY);
    CHECK(r.flags & SLUICE_F_FULL);
    CHECK_EQ(sluice_acquire_all(k, 2, 1, MS, &r), SLUICE_DENY);
    sluice_destroy(l);

    /* default shards, advancing time: hung at call 2,609 */
    l = make(&p, 1000, 0, SLUICE_FULL_DENY);
    for (unsigned i = 0; i < 20000; i++) {
        char a[16], b[16];
        struct sluice_key kk[2] = {{l, a, 0}, {l, b, 0}};
        kk[0].len = (size_t)snprintf(a, sizeof(a), "a%u", i);
        kk[1].len = (size_t)snprintf(b, sizeof(b), "b%u", i);
        int rc = sluice_acquire_all(kk, 2, 1, (uint64_t)i * MS, NULL);
        CHECK(rc == SLUICE_ALLOW || rc == SLUICE_DENY);
    }
    struct sluice_stats st;
    sluice_stats(l, &st);
    CHECK(st.keys <= 1000);
    sluice_destroy(l);
}

/* The same key twice is charged once (it spun forever once
 * cost <= remaining < 2*cost, after reporting remaining as if once). */
static void duplicates(void)
{
    struct sluice_policy p = one(SLUICE_GCRA, 3, NS_PER_S);
    sluice_t *l = make(&p, 100, 0, SLUICE_FULL_DENY), *l2 = make(&p, 100, 0, SLUICE_FULL_DENY);
    struct sluice_key k[3] = {{l, "k", 1}, {l2, "k", 1}, {l, "k", 1}};
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_all(k, 3, 2, 0, &r), SLUICE_ALLOW);
    CHECK_U64(r.remaining, 1);
    CHECK_EQ(sluice_acquire_all(k, 3, 2, 0, &r), SLUICE_DENY);
    CHECK(r.key_index == 0 || r.key_index == 1);
    CHECK_EQ(sluice_acquire_all(k, 3, 1, 0, &r), SLUICE_ALLOW);
    CHECK_U64(r.remaining, 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 0, NULL), SLUICE_DENY);
    /* a key index names the caller's array: the second key's twin */
    struct sluice_key k2[3] = {{l, "x", 1}, {l, "x", 1}, {l2, "y", 1}};
    CHECK_EQ(sluice_acquire_all(k2, 3, 3, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_all(k2, 3, 1, 0, &r), SLUICE_DENY);
    CHECK(r.key_index == 0 || r.key_index == 2);
    sluice_destroy(l);
    sluice_destroy(l2);
}

/* Each limiter's when_full decides its own new keys, whatever comes first. */
static void when_full_per_limiter(void)
{
    struct sluice_policy p = one(SLUICE_GCRA, 10, NS_PER_S), p100 = one(SLUICE_GCRA, 100, NS_PER_S);
    sluice_t *open = make(&p, 1, 1, SLUICE_FULL_ALLOW), *closed = make(&p100, 1, 1, SLUICE_FULL_DENY);
    struct sluice_result r;

    /* fill both (keys that stay busy, so nothing can be reaped) */
    CHECK_EQ(sluice_acquire_at(open, "old", 3, 10, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(closed, "old", 3, 10, 0, NULL), SLUICE_ALLOW);
    struct sluice_key k[2] = {{open, "new", 3}, {closed, "new", 3}};
    CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), SLUICE_DENY);
    CHECK(r.flags & SLUICE_F_FULL);
    CHECK_EQ(r.key_index, 1);
    struct sluice_key k2[2] = {{closed, "new", 3}, {open, "new", 3}};
    CHECK_EQ(sluice_acquire_all(k2, 2, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.key_index, 0);
    /* only the fail-open limiter's key is new: admitted untracked */
    struct sluice_key k3[2] = {{open, "new", 3}, {closed, "old", 3}};
    CHECK_EQ(sluice_acquire_all(k3, 2, 1, 0, &r), SLUICE_ALLOW);
    CHECK(r.flags & SLUICE_F_FULL);
    sluice_destroy(open);
    sluice_destroy(closed);
}

/* retry_after of a denial is the least wait after which the request passes
 * every limit of every key; checked by peeking just before and at it. */
static void check_retry(const struct sluice_key *k, size_t n, uint64_t cost, uint64_t now)
{
    struct sluice_result r, pr;
    int rc = sluice_acquire_all(k, n, cost, now, &r);

    CHECK_EQ(rc, SLUICE_DENY);
    if (rc != SLUICE_DENY)
        return;
    CHECK(r.retry_after_ns > 0 && r.retry_after_ns != UINT64_MAX);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(sluice_peek_at(k[i].limiter, k[i].key, k[i].len, cost, now + r.retry_after_ns,
                                &pr),
                 SLUICE_ALLOW);
    int before = SLUICE_ALLOW;
    for (size_t i = 0; i < n; i++)
        if (sluice_peek_at(k[i].limiter, k[i].key, k[i].len, cost, now + r.retry_after_ns - 1,
                           &pr) == SLUICE_DENY)
            before = SLUICE_DENY;
    CHECK_EQ(before, SLUICE_DENY);
}

static void retry_covers_all(void)
{
    struct sluice_policy p = {0};
    sluice_policy_add(&p, SLUICE_GCRA, 10, NS_PER_S);
    sluice_policy_add(&p, SLUICE_FIXED_WINDOW, 10, 3600 * NS_PER_S);
    sluice_t *l = make(&p, 100, 0, SLUICE_FULL_DENY);
    struct sluice_key k = {l, "u", 1};

    for (int i = 0; i < 10; i++)
        CHECK_EQ(sluice_acquire_at(l, "u", 1, 1, 0, NULL), SLUICE_ALLOW);
    /* both limits deny: the hourly window decides when it can pass */
    check_retry(&k, 1, 1, 0);
    struct sluice_result r;
    CHECK_EQ(sluice_acquire_at(l, "u", 1, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.limit_index, 1);
    CHECK_U64(r.retry_after_ns, 3600 * NS_PER_S);

    /* across keys of different limiters */
    struct sluice_policy fast = one(SLUICE_GCRA, 10, NS_PER_S), slow = one(SLUICE_GCRA, 1, 60 * NS_PER_S);
    sluice_t *a = make(&fast, 100, 0, SLUICE_FULL_DENY), *b = make(&slow, 100, 0, SLUICE_FULL_DENY);
    struct sluice_key ab[2] = {{a, "ip", 2}, {b, "user", 4}};
    for (int i = 0; i < 10; i++)
        CHECK_EQ(sluice_acquire_at(a, "ip", 2, 1, 0, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(b, "user", 4, 1, 0, NULL), SLUICE_ALLOW);
    check_retry(ab, 2, 1, 0);
    CHECK_EQ(sluice_acquire_all(ab, 2, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.key_index, 1);
    sluice_destroy(a);
    sluice_destroy(b);

    /* after an admission: the numbers after its charge (the README's
     * two-limit example said Remaining 9 with Reset 0) */
    struct sluice_policy two = {0};
    sluice_policy_add(&two, SLUICE_GCRA, 10, NS_PER_S);
    sluice_policy_add(&two, SLUICE_FIXED_WINDOW, 1000, 86400 * NS_PER_S);
    sluice_t *m = make(&two, 100, 0, SLUICE_FULL_DENY);
    CHECK_EQ(sluice_acquire_at(m, "c", 1, 1, 5 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_U64(r.remaining, 9);
    CHECK_EQ(r.limit_index, 0);
    CHECK_U64(r.reset_after_ns, NS_PER_S / 10);
    sluice_destroy(m);
    sluice_destroy(l);
}

/* Keys already present take the one-lookup path (acquire_all, peek, a
 * stacked policy's acquire): a cost above some key's least capacity is
 * still -E2BIG with nothing charged, not a denial (that path once charged
 * it as an ordinary request), and the result names the binding limit. */
static void present_keys(void)
{
    struct sluice_policy p10 = one(SLUICE_GCRA, 10, NS_PER_S), p3 = one(SLUICE_FIXED_WINDOW, 3, NS_PER_S);
    struct sluice_policy stacked = one(SLUICE_GCRA, 10, NS_PER_S);
    sluice_t *a = make(&p10, 100, 1, SLUICE_FULL_DENY), *b = make(&p3, 100, 1, SLUICE_FULL_DENY);
    sluice_t *s;
    struct sluice_key k[2] = {{a, "x", 1}, {b, "y", 1}};
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), SLUICE_ALLOW); /* both made */
    CHECK_EQ(r.key_index, 1u);
    CHECK_EQ(r.remaining, 2u);
    CHECK_EQ(sluice_acquire_all(k, 2, 4, 0, &r), -E2BIG);
    CHECK_EQ(sluice_peek_at(b, "y", 1, 4, 0, &r), -E2BIG);
    CHECK_EQ(sluice_peek_at(a, "x", 1, 1, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 8u); /* 9 left, less the 1 asked about: nothing more charged */
    CHECK_EQ(sluice_peek_at(b, "y", 1, 1, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 1u);
    CHECK_EQ(sluice_acquire_all(k, 2, 2, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 0u);
    CHECK_EQ(sluice_acquire_all(k, 2, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.key_index, 1u);
    CHECK(r.retry_after_ns > 0);
    CHECK_EQ(sluice_peek_at(a, "x", 1, 1, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 6u); /* the denial charged nothing */
    sluice_destroy(a);
    sluice_destroy(b);

    sluice_policy_add(&stacked, SLUICE_FIXED_WINDOW, 3, 86400 * NS_PER_S);
    s = make(&stacked, 100, 1, SLUICE_FULL_DENY);
    CHECK_EQ(sluice_acquire_at(s, "z", 1, 1, 0, &r), SLUICE_ALLOW); /* made */
    CHECK_EQ(sluice_acquire_at(s, "z", 1, 4, 0, &r), -E2BIG);
    CHECK_EQ(sluice_acquire_at(s, "z", 1, 3, 0, &r), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(s, "z", 1, 2, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(r.limit_index, 1u);
    CHECK_EQ(r.remaining, 0u);
    CHECK_EQ(sluice_acquire_at(s, "z", 1, 1, 0, &r), SLUICE_DENY);
    CHECK_EQ(r.limit_index, 1u);
    CHECK_EQ(sluice_peek_at(s, "z", 1, 1, 0, &r), SLUICE_DENY);
    sluice_destroy(s);
}

/* The user limiter under a spent IP: denied requests, each with a user id
 * of its own, must leave it as it was.  They made every user key before:
 * one IP filled max_keys (4) with keys that never admitted anything, and a
 * new user of another IP was then refused as full. */
static void denied_user_limiter(sluice_t *ip, sluice_t *user, const char *what)
{
    struct sluice_result r;
    struct sluice_stats st;

    CHECK_EQ(sluice_acquire_at(ip, "10.0.0.1", 8, 1, 0, &r), SLUICE_ALLOW); /* spent: 1/s */
    for (unsigned i = 0; i < 100; i++) {
        char id[16];
        size_t n = (size_t)snprintf(id, sizeof(id), "user%u", i);
        struct sluice_key k[2] = {{ip, "10.0.0.1", 8}, {user, id, n}};
        CHECK_EQ(sluice_acquire_all(k, 2, 1, 1000 + i, &r), SLUICE_DENY);
        CHECK_EQ(r.key_index, 0u);
        CHECK(!(r.flags & (SLUICE_F_NEW_KEY | SLUICE_F_FULL)));
        CHECK_EQ(sluice_reset(user, id, n), -ENOENT);
    }
    sluice_stats(user, &st);
    CHECK_U64(st.keys, 0);
    CHECK_U64(st.inserted, 0);
    /* a new user behind another IP: admitted, tracked */
    struct sluice_key ok[2] = {{ip, "10.0.0.2", 8}, {user, "alice", 5}};
    CHECK_EQ(sluice_acquire_all(ok, 2, 1, 2000, &r), SLUICE_ALLOW);
    CHECK((r.flags & SLUICE_F_NEW_KEY) && !(r.flags & SLUICE_F_FULL));
    sluice_stats(user, &st);
    CHECK_U64(st.keys, 1);
    if (t_failures)
        fprintf(stderr, "  (in denied_makes_nothing, %s)\n", what);
}

/* A full limiter that fails closed denies the request: the keys made in
 * the other limiters before its turn are taken back too. */
static void full_denial_takes_back(void)
{
    struct sluice_policy p = one(SLUICE_GCRA, 10, NS_PER_S);
    sluice_t *a = make(&p, 100, 1, SLUICE_FULL_DENY), *b = make(&p, 1, 1, SLUICE_FULL_DENY);
    struct sluice_key k[2] = {{a, "new", 3}, {b, "other", 5}};
    struct sluice_result r;
    struct sluice_stats st;

    CHECK_EQ(sluice_acquire_at(b, "held", 4, 1, NS_PER_S, &r), SLUICE_ALLOW); /* b is full */
    CHECK_EQ(sluice_acquire_all(k, 2, 1, NS_PER_S, &r), SLUICE_DENY);
    CHECK((r.flags & SLUICE_F_FULL) && !(r.flags & SLUICE_F_NEW_KEY));
    CHECK_EQ(r.key_index, 1u);
    sluice_stats(a, &st);
    CHECK_U64(st.keys, 0);
    CHECK_U64(st.inserted, 0);
    CHECK_EQ(sluice_reset(a, "new", 3), -ENOENT);
    /* denied by a spent key before the full limiter's turn: read-only,
     * and without the peek's SLUICE_F_AT_MAX_KEYS */
    CHECK_EQ(sluice_acquire_at(a, "spent", 5, 10, NS_PER_S, &r), SLUICE_ALLOW);
    struct sluice_key spent[2] = {{a, "spent", 5}, {b, "other", 5}};
    CHECK_EQ(sluice_acquire_all(spent, 2, 1, NS_PER_S, &r), SLUICE_DENY);
    CHECK_EQ(r.key_index, 0u);
    CHECK(!(r.flags & (SLUICE_F_AT_MAX_KEYS | SLUICE_F_FULL | SLUICE_F_NEW_KEY)));
    sluice_destroy(a);
    sluice_destroy(b);
}

static void denied_makes_nothing(void)
{
    struct sluice_policy p1 = one(SLUICE_GCRA, 1, NS_PER_S), p10 = one(SLUICE_GCRA, 10, NS_PER_S);
    struct sluice_config cfg;
    char path[128];
    sluice_t *ip = make(&p1, 100, 0, SLUICE_FULL_DENY), *user;

    user = make(&p10, 4, 1, SLUICE_FULL_DENY);
    denied_user_limiter(ip, user, "private");
    sluice_destroy(user);
    sluice_destroy(ip);

    sluice_config_init(&cfg);
    cfg.policy = p10;
    cfg.max_keys = 4;
    t_shm_path(path, sizeof(path), "acquire-all-denied");
    user = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    ip = make(&p1, 100, 0, SLUICE_FULL_DENY);
    denied_user_limiter(ip, user, "shared");
    sluice_destroy(user);
    sluice_destroy(ip);
    CHECK_EQ(sluice_unlink_shared(path), 0);

    full_denial_takes_back();
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "acquire_all: watchdog: a call did not return (hang)\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    _exit(1);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"full_pair", full_pair},
                 {"duplicates", duplicates},
                 {"when_full", when_full_per_limiter},
                 {"retry", retry_covers_all},
                 {"present", present_keys},
                 {"denied", denied_makes_nothing}};

    signal(SIGALRM, watchdog);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue; /* one case by name, as `acquire_all duplicates` */
        alarm(30);
        cases[i].fn();
        alarm(0);
    }
    return t_done("acquire_all");
}
