/*
 * Shared limiters, per-key overrides across processes (forked, real
 * SIGKILL), every decision at one fixed time so the serial bound is exact:
 *   obey     one process raises, lowers, clears and raises a key's limit;
 *            another's decisions admit exactly what the carried state
 *            leaves (lowering then raising refills nothing);
 *   late     a process attaching after the override sees it, and after
 *            the clear no longer does;
 *   flips    processes flip one key between two overrides and the default
 *            while others decide: never above the largest serial bound
 *            (the largest count of the three: every change carries the
 *            window's count, which only grows), and exactly that after a
 *            final raise (nothing lost either); threads of one process do
 *            the same (what ThreadSanitizer can see).  A high count of 20
 *            fills a key at once; one of 1000 keeps it open through many
 *            flips, so many charges are taken back from entries replaced
 *            twice, whose override slot may already be free (a charge that
 *            found no policy there stayed spent: 999 of 1000);
 *   kill     a child SIGKILLed at random points of override_set/clear loops
 *            wedges nobody, breaks no bound, and leaks no override slot
 *            (after a repair every slot can be taken again);
 *   full     the pool of min(max_keys, 4096) overrides full: -ENOSPC,
 *            making no key and changing no state; overridden keys are
 *            never reaped.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "helpers.h"
#include "shm.h" /* to count the file's taken override slots */

#define NOW (UINT64_C(1000) * NS_PER_S) /* every decision's time */
#define WATCHDOG 60                     /* s: a wedged call fails the test */

#define FLIP_KEYS 4
#define ROUNDS 200 /* fresh keys per round: each round races from empty */

struct page {
    _Atomic uint64_t errors, stop, ready, round;
    uint64_t big; /* the high override's count: the serial bound */
    _Atomic uint64_t value[8];
    _Atomic uint64_t admitted[ROUNDS][FLIP_KEYS];
};

static struct page *pg;

static struct sluice_policy pol1(enum sluice_algo a, uint64_t count)
{
    struct sluice_policy p = {0};

    sluice_policy_add(&p, a, count, NS_PER_S);
    return p;
}

static sluice_t *make(const char *path, enum sluice_algo a, uint64_t count, size_t max_keys)
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    cfg.policy = pol1(a, count);
    cfg.max_keys = max_keys;
    cfg.max_key_len = 32;
    return t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
}

/* Units of cost 1 admitted at NOW until the first denial. */
static uint64_t drain(sluice_t *l, const char *key)
{
    uint64_t n = 0;
    int rc;

    while ((rc = sluice_acquire_at(l, key, strlen(key), 1, NOW, NULL)) == SLUICE_ALLOW)
        n++;
    if (rc != SLUICE_DENY)
        atomic_fetch_add(&pg->errors, 1);
    return n;
}

/* Run fn in a child process with its own handle (or the inherited one);
 * its exit status (0 ok), or 1 if it died otherwise. */
static int in_child(const char *path, sluice_t *inherited, int (*fn)(sluice_t *, void *), void *arg)
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        sluice_t *l = inherited != NULL ? inherited : t_open_shared(path, NULL, 0);
        int rc;
        alarm(WATCHDOG);
        rc = fn(l, arg);
        if (inherited == NULL)
            sluice_destroy(l);
        _exit(rc);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return 1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* ---- obey, late ------------------------------------------------------ */

struct op {
    const char *key;
    int kind; /* 0 set, 1 clear */
    struct sluice_policy p;
};

static int child_op(sluice_t *l, void *arg)
{
    struct op *o = arg;

    return (o->kind == 0 ? sluice_override_set(l, o->key, strlen(o->key), &o->p)
                         : sluice_override_clear(l, o->key, strlen(o->key))) == 0
               ? 0
               : 2;
}

static int child_drain(sluice_t *l, void *arg)
{
    atomic_store(&pg->value[0], drain(l, arg));
    return 0;
}

/* What a late attacher sees of key: value[1] the limit, value[2] the flags. */
static int child_peek(sluice_t *l, void *arg)
{
    struct sluice_result r;
    int rc = sluice_peek_at(l, arg, strlen(arg), 1, NOW, &r);

    atomic_store(&pg->value[1], r.limit);
    atomic_store(&pg->value[2], r.flags);
    return rc == SLUICE_ALLOW || rc == SLUICE_DENY ? 0 : 2;
}

static void set_in_child(const char *path, const char *key, enum sluice_algo a, uint64_t count)
{
    struct op o = {.key = key, .kind = 0, .p = pol1(a, count)};

    CHECK_EQ(in_child(path, NULL, child_op, &o), 0);
}

static void clear_in_child(const char *path, const char *key)
{
    struct op o = {.key = key, .kind = 1};

    CHECK_EQ(in_child(path, NULL, child_op, &o), 0);
}

/* B's drain in another process after A's change: exactly `want`. */
static void drained_in_child(const char *path, const char *key, uint64_t want, const char *what)
{
    CHECK_EQ(in_child(path, NULL, child_drain, (void *)key), 0);
    if (atomic_load(&pg->value[0]) != want)
        fprintf(stderr, "obey/%s: admitted %" PRIu64 ", serial bound %" PRIu64 "\n", what,
                atomic_load(&pg->value[0]), want);
    CHECK_U64(atomic_load(&pg->value[0]), want);
}

/* What B admits after each change (the serial bound at NOW): windows
 * carry a count, GCRA a time (TAT - NOW: 4 units at 10/s spend 0.4 s of
 * the 1 s tolerance, leaving 18 units at 30/s). */
struct obey_want {
    uint64_t raise, raise_again, other;
};

static void test_obey(enum sluice_algo a, const char *name, struct obey_want w)
{
    char path[256];
    sluice_t *l;
    struct sluice_result r;

    t_shm_path(path, sizeof(path), "ovr-obey");
    l = make(path, a, 10, 1024);
    for (int i = 0; i < 4; i++) /* 4 of the default 10 spent */
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, NOW, NULL), SLUICE_ALLOW);
    set_in_child(path, "k", a, 30); /* raised */
    drained_in_child(path, "k", w.raise, "raise");
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, NOW, &r), SLUICE_DENY);
    CHECK(r.flags & SLUICE_F_OVERRIDE);
    CHECK_U64(r.limit, 30);
    set_in_child(path, "k", a, 5); /* lowered below what is spent */
    drained_in_child(path, "k", 0, "lower");
    clear_in_child(path, "k"); /* back to 10: still nothing */
    drained_in_child(path, "k", 0, "clear");
    CHECK_EQ(sluice_peek_at(l, "k", 1, 1, NOW, &r), SLUICE_DENY);
    CHECK(!(r.flags & SLUICE_F_OVERRIDE));
    set_in_child(path, "k", a, 40); /* raised again: what 30 spent stays spent */
    drained_in_child(path, "k", w.raise_again, "raise again");
    /* a key made by the override: the override's count, flagged */
    set_in_child(path, "new", a, 7);
    drained_in_child(path, "new", 7, "new key");
    /* clearing a key without an override, or an absent one */
    CHECK_EQ(sluice_override_clear(l, "other", 5), -ENOENT);
    CHECK_EQ(sluice_acquire_at(l, "other", 5, 1, NOW, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_override_clear(l, "other", 5), -ENOENT);
    /* reset keeps the override (sluice.h): a fresh 40 */
    CHECK_EQ(sluice_reset(l, "k", 1), 0);
    drained_in_child(path, "k", 40, "reset");
    /* set_policy leaves overridden keys alone and moves the others */
    {
        struct sluice_policy p = pol1(a, 12);
        CHECK_EQ(sluice_set_policy(l, &p), 0);
        CHECK_EQ(sluice_reset(l, "k", 1), 0);
        drained_in_child(path, "k", 40, "set_policy");
        CHECK_U64(drain(l, "other"), w.other);
    }
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    printf("obey %-13s raise %" PRIu64 ", lower 0, clear 0, raise again %" PRIu64
           ": the serial bound exactly\n", name, w.raise, w.raise_again);
}

static void test_late(void)
{
    char path[256];
    sluice_t *l;

    t_shm_path(path, sizeof(path), "ovr-late");
    l = make(path, SLUICE_GCRA, 10, 1024);
    set_in_child(path, "vip", SLUICE_GCRA, 25);
    sluice_destroy(l); /* nobody attached now: only the file holds it */
    CHECK_EQ(in_child(path, NULL, child_peek, "vip"), 0);
    CHECK_U64(atomic_load(&pg->value[1]), 25);
    CHECK(atomic_load(&pg->value[2]) & SLUICE_F_OVERRIDE);
    drained_in_child(path, "vip", 25, "late");
    clear_in_child(path, "vip");
    CHECK_EQ(in_child(path, NULL, child_peek, "vip"), 0);
    CHECK_U64(atomic_load(&pg->value[1]), 10);
    CHECK(!(atomic_load(&pg->value[2]) & SLUICE_F_OVERRIDE));
    CHECK_EQ(sluice_unlink_shared(path), 0);
    printf("late attachers see the override, then its clear\n");
}

/* ---- flips ---------------------------------------------------------- */

/* The high override's count, the largest of default (10) and overrides
 * (big, 5): the serial bound. */
#define BIG 20
#define BIG_OPEN 1000

struct flipcfg {
    enum sluice_algo algo;
    uint64_t seed;
};

/* Key k of round r. */
static uint64_t t_min(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t t_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Rounds of the flip tests: fewer under sanitizers. */
static uint64_t t_rounds(double scale)
{
    return t_min(ROUNDS, (uint64_t)(150 * scale) + 20);
}

static int flip_key(char *key, size_t cap, uint64_t r, uint64_t k)
{
    return snprintf(key, cap, "r%" PRIu64 "-%" PRIu64, r, k);
}

/* Flips keys of the current round between the overrides and the default
 * until told to stop. */
static int flipper(sluice_t *l, void *arg)
{
    struct flipcfg *c = arg;
    struct sluice_policy hi = pol1(c->algo, pg->big), lo = pol1(c->algo, 5);
    uint64_t rng = c->seed;

    while (!atomic_load(&pg->stop)) {
        char key[32];
        unsigned what = (unsigned)(t_rand(&rng) % 3);
        int rc;
        flip_key(key, sizeof(key), atomic_load(&pg->round), t_rand(&rng) % FLIP_KEYS);
        rc = what == 0   ? sluice_override_set(l, key, strlen(key), &hi)
             : what == 1 ? sluice_override_set(l, key, strlen(key), &lo)
                         : sluice_override_clear(l, key, strlen(key));
        if (rc != 0 && !(what == 2 && rc == -ENOENT))
            atomic_fetch_add(&pg->errors, 1);
    }
    return 0;
}

static int decider(sluice_t *l, void *arg)
{
    uint64_t rng = *(uint64_t *)arg;

    while (!atomic_load(&pg->stop)) {
        char key[32];
        uint64_t r = atomic_load(&pg->round), k = t_rand(&rng) % FLIP_KEYS;
        int rc;
        flip_key(key, sizeof(key), r, k);
        rc = sluice_acquire_at(l, key, strlen(key), 1, NOW, NULL);
        if (rc == SLUICE_ALLOW)
            atomic_fetch_add(&pg->admitted[r][k], 1);
        else if (rc != SLUICE_DENY)
            atomic_fetch_add(&pg->errors, 1);
    }
    return 0;
}

static pid_t spawn(const char *path, int (*fn)(sluice_t *, void *), void *arg)
{
    pid_t pid = fork();

    if (pid == 0) {
        sluice_t *l = t_open_shared(path, NULL, 0);
        alarm(WATCHDOG);
        _exit(fn(l, arg));
    }
    CHECK(pid > 0);
    return pid;
}

static bool reaped_ok(pid_t pid)
{
    int st;

    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* After the races: every key of rounds [0, rounds) raised to the largest
 * override, then drained in this process; never above pg->big in all, and
 * (single limit, nothing lost) exactly that where the carry is a count. */
static void check_flip_totals(sluice_t *l, const char *name, enum sluice_algo a, bool exact,
                              uint64_t rounds)
{
    uint64_t big = pg->big;
    struct sluice_policy hi = pol1(a, big);
    uint64_t worst = 0, least = UINT64_MAX, racing = 0;

    for (uint64_t r = 0; r < rounds; r++)
        for (uint64_t k = 0; k < FLIP_KEYS; k++) {
            char key[32];
            uint64_t during = atomic_load(&pg->admitted[r][k]), after;
            flip_key(key, sizeof(key), r, k);
            CHECK_EQ(sluice_override_set(l, key, strlen(key), &hi), 0);
            after = drain(l, key);
            if (during + after > big)
                fprintf(stderr, "%s: key %s admitted %" PRIu64 " + %" PRIu64
                        " > serial bound %" PRIu64 "\n", name, key, during, after, big);
            CHECK(during + after <= big);
            if (exact && during + after != big)
                fprintf(stderr, "%s: key %s admitted %" PRIu64 " + %" PRIu64 " of %" PRIu64 "\n",
                        name, key, during, after, big);
            if (exact)
                CHECK_U64(during + after, big);
            worst = t_max(worst, during + after);
            least = during + after < least ? during + after : least;
            racing += during;
        }
    printf("%-20s %3" PRIu64 " rounds x %d keys: %" PRIu64 " admitted racing the flips; per key "
           "%" PRIu64 "..%" PRIu64 " in all, bound %" PRIu64 "\n",
           name, rounds, FLIP_KEYS, racing, least, worst, big);
}

/* Rounds of fresh keys, a few ms each, while flippers and deciders run. */
static void drive_rounds(uint64_t rounds)
{
    struct timespec ts = {0, 3000000};

    for (uint64_t r = 0; r < rounds; r++) {
        atomic_store(&pg->round, r);
        nanosleep(&ts, NULL);
    }
    atomic_store(&pg->stop, 1);
}

static void test_flips(enum sluice_algo a, const char *name, uint64_t big, double scale)
{
    enum { FLIPPERS = 3, DECIDERS = 3 };
    uint64_t rounds = t_rounds(scale);
    char path[256];
    struct flipcfg fc[FLIPPERS];
    uint64_t seeds[DECIDERS];
    pid_t f[FLIPPERS], d[DECIDERS];
    sluice_t *l;

    t_shm_path(path, sizeof(path), "ovr-flips");
    l = make(path, a, 10, 4096);
    memset(pg, 0, sizeof(*pg));
    pg->big = big;
    for (int i = 0; i < DECIDERS; i++) {
        seeds[i] = (uint64_t)i * 31 + 7;
        d[i] = spawn(path, decider, &seeds[i]);
    }
    for (int i = 0; i < FLIPPERS; i++) {
        fc[i] = (struct flipcfg){a, (uint64_t)i * 977 + 3};
        f[i] = spawn(path, flipper, &fc[i]);
    }
    drive_rounds(rounds);
    for (int i = 0; i < FLIPPERS; i++)
        CHECK(reaped_ok(f[i]));
    for (int i = 0; i < DECIDERS; i++)
        CHECK(reaped_ok(d[i]));
    CHECK_U64(atomic_load(&pg->errors), 0);
    check_flip_totals(l, name, a, a == SLUICE_FIXED_WINDOW, rounds);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/* The same with threads of one process (ThreadSanitizer sees them). */
struct tharg {
    sluice_t *l;
    struct flipcfg fc;
    uint64_t seed;
    bool flip;
};

static void *th_main(void *p)
{
    struct tharg *t = p;

    if (t->flip)
        flipper(t->l, &t->fc);
    else
        decider(t->l, &t->seed);
    return NULL;
}

static void test_flip_threads(uint64_t big, double scale)
{
    enum { T = 4 };
    uint64_t rounds = t_rounds(scale);
    char path[256];
    struct tharg args[T];
    pthread_t th[T];
    sluice_t *l;

    t_shm_path(path, sizeof(path), "ovr-threads");
    l = make(path, SLUICE_FIXED_WINDOW, 10, 4096);
    memset(pg, 0, sizeof(*pg));
    pg->big = big;
    for (int i = 0; i < T; i++) {
        args[i] = (struct tharg){l, {SLUICE_FIXED_WINDOW, (uint64_t)i * 13 + 1}, (uint64_t)i + 99,
                                 i < 2};
        CHECK(pthread_create(&th[i], NULL, th_main, &args[i]) == 0);
    }
    drive_rounds(rounds);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    CHECK_U64(atomic_load(&pg->errors), 0);
    check_flip_totals(l, big == BIG ? "flips threads" : "flips threads open", SLUICE_FIXED_WINDOW,
                      true, rounds);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/* ---- kill ----------------------------------------------------------- */

/* Override slots taken in the file at path (its own layout), or UINT64_MAX. */
static uint64_t slots_taken(const char *path)
{
    struct sl_shm_layout lay;
    struct stat st;
    uint64_t n = 0;
    unsigned char *base;
    int fd = open(path, O_RDONLY);

    if (fd < 0 || fstat(fd, &st) != 0)
        return UINT64_MAX;
    base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return UINT64_MAX;
    if (sl_shm_layout((struct sl_shm_hdr *)(void *)base, &lay) != 0) {
        munmap(base, (size_t)st.st_size);
        return UINT64_MAX;
    }
    for (uint64_t i = 0; i < ((struct sl_shm_hdr *)(void *)base)->novr; i++)
        n += sl_load_acq(&((struct sl_shm_ovr *)(void *)(base + lay.ovr))[i].tag) != 0;
    munmap(base, (size_t)st.st_size);
    return n;
}

static int set_clear_forever(sluice_t *l, void *arg)
{
    struct flipcfg c = *(struct flipcfg *)arg;

    atomic_store(&pg->ready, 1);
    return flipper(l, &c); /* until killed */
}

static void test_kill(double scale)
{
    enum { DECIDERS = 2, MAX_KEYS = 1024 }; /* as many override slots */
    unsigned kills = (unsigned)(150 * scale) + 10;
    uint64_t rounds = 0;
    char path[256];
    uint64_t seeds[DECIDERS], rng = 12345;
    pid_t d[DECIDERS];
    sluice_t *l;
    unsigned taken = 0;

    t_shm_path(path, sizeof(path), "ovr-kill");
    l = make(path, SLUICE_FIXED_WINDOW, 10, MAX_KEYS);
    memset(pg, 0, sizeof(*pg));
    pg->big = BIG;
    for (int i = 0; i < DECIDERS; i++) {
        seeds[i] = (uint64_t)i * 31 + 11;
        d[i] = spawn(path, decider, &seeds[i]);
    }
    for (unsigned i = 0; i < kills; i++) {
        struct flipcfg fc = {SLUICE_FIXED_WINDOW, t_rand(&rng)};
        struct timespec ts = {0, (long)(t_rand(&rng) % 2000000)};
        pid_t pid;
        int st;
        rounds = t_min(i / 2, ROUNDS - 1) + 1; /* fresh keys every other kill */
        atomic_store(&pg->round, rounds - 1);
        atomic_store(&pg->ready, 0);
        pid = spawn(path, set_clear_forever, &fc);
        while (!atomic_load(&pg->ready))
            sched_yield();
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    }
    atomic_store(&pg->stop, 1);
    for (int i = 0; i < DECIDERS; i++)
        CHECK(reaped_ok(d[i]));
    CHECK_U64(atomic_load(&pg->errors), 0);
    alarm(WATCHDOG); /* this process's own calls below must not wedge either */
    /* every key still answers override calls, no bound was broken, and
     * nothing was lost (a dead writer's frozen entry is thawed, whole) */
    check_flip_totals(l, "kill", SLUICE_FIXED_WINDOW, true, rounds);
    /* no slot leaked: with every override cleared (and the keys reaped,
     * for room), every slot can be taken again */
    for (uint64_t r = 0; r < rounds; r++)
        for (uint64_t k = 0; k < FLIP_KEYS; k++) {
            char key[32];
            flip_key(key, sizeof(key), r, k);
            CHECK_EQ(sluice_override_clear(l, key, strlen(key)), 0);
        }
    /* takes every shard lock (a dead holder's repair), removes the keys */
    CHECK_EQ(sluice_reap(l, NOW + 3600 * NS_PER_S), rounds * FLIP_KEYS);
    CHECK_U64(slots_taken(path), 0);
    for (unsigned k = 0; k < MAX_KEYS; k++) {
        char key[16];
        struct sluice_policy p = pol1(SLUICE_FIXED_WINDOW, 3);
        snprintf(key, sizeof(key), "s%u", k);
        taken += sluice_override_set(l, key, strlen(key), &p) == 0;
    }
    CHECK_EQ(taken, MAX_KEYS);
    CHECK_U64(slots_taken(path), MAX_KEYS);
    alarm(0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    printf("kill: %u set/clear loops SIGKILLed, bounds held, %u of %u slots free after\n",
           kills, taken, (unsigned)MAX_KEYS);
}

/* ---- full ----------------------------------------------------------- */

static int child_fill(sluice_t *l, void *arg)
{
    struct sluice_policy p = pol1(SLUICE_FIXED_WINDOW, 20);
    uint64_t n = *(uint64_t *)arg;

    for (uint64_t k = 0; k < n; k++) {
        char key[24];
        snprintf(key, sizeof(key), "o%" PRIu64, k);
        if (sluice_override_set(l, key, strlen(key), &p) != 0)
            return 2;
    }
    return 0;
}

static void test_full(void)
{
    enum { MAX_KEYS = 5000, POOL = 4096 };
    char path[256];
    struct sluice_policy p = pol1(SLUICE_FIXED_WINDOW, 20);
    struct sluice_result r;
    struct sluice_stats st;
    uint64_t n = POOL - 1, keys;
    sluice_t *l;

    t_shm_path(path, sizeof(path), "ovr-full");
    l = make(path, SLUICE_FIXED_WINDOW, 10, MAX_KEYS);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(sluice_acquire_at(l, "spent", 5, 1, NOW, NULL), SLUICE_ALLOW);
    CHECK_EQ(in_child(path, NULL, child_fill, &n), 0); /* another process fills it */
    CHECK_EQ(sluice_override_set(l, "last", 4, &p), 0);
    sluice_stats(l, &st);
    keys = st.keys;
    /* a key that has one changes it at full (spare slots) */
    {
        struct sluice_policy q = pol1(SLUICE_FIXED_WINDOW, 30);
        CHECK_EQ(sluice_override_set(l, "o9", 2, &q), 0);
        CHECK_EQ(in_child(path, NULL, child_peek, "o9"), 0);
        CHECK_U64(atomic_load(&pg->value[1]), 30);
    }
    /* full: refused, nothing made, nothing changed */
    CHECK_EQ(sluice_override_set(l, "absent", 6, &p), -ENOSPC);
    CHECK_EQ(sluice_override_set(l, "spent", 5, &p), -ENOSPC);
    sluice_stats(l, &st);
    CHECK_U64(st.keys, keys);
    CHECK_EQ(sluice_reset(l, "absent", 6), -ENOENT);
    CHECK_EQ(sluice_peek_at(l, "spent", 5, 1, NOW, &r), SLUICE_ALLOW);
    CHECK_U64(r.remaining, 5); /* 6 left of 10, less this peek's 1 */
    CHECK(!(r.flags & SLUICE_F_OVERRIDE));
    /* a slot cleared is a slot free: the state carries over as ever */
    CHECK_EQ(sluice_override_clear(l, "last", 4), 0);
    CHECK_EQ(sluice_override_set(l, "spent", 5, &p), 0);
    CHECK_U64(drain(l, "spent"), 16);
    /* overridden keys are never reaped, however idle and fresh: only
     * "last", back under the default, goes */
    CHECK_EQ(in_child(path, NULL, child_peek, "o7"), 0);
    CHECK(atomic_load(&pg->value[2]) & SLUICE_F_OVERRIDE);
    CHECK_EQ(sluice_reap(l, NOW + 3600 * NS_PER_S), 1);
    sluice_stats(l, &st);
    CHECK_U64(st.keys, keys - 1);
    CHECK_EQ(sluice_override_clear(l, "o7", 2), 0);
    CHECK_EQ(sluice_reap(l, NOW + 3600 * NS_PER_S), 1); /* now it may go */
    CHECK_EQ(sluice_override_clear(l, "o7", 2), -ENOENT);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    printf("full: %d overrides at max_keys %d, the next -ENOSPC with nothing changed\n", POOL,
           MAX_KEYS);
}

/*
 * A new key's override at max_keys where the decisions pass their own
 * clock (NOW, far behind the limiter's): room was made by reaping at the
 * limiter's clock, which took the spent key for idle, and made again it
 * admitted its 8 a second time in one window (16 of 8).
 */
static void test_full_caller_clock(void)
{
    char path[256];
    struct sluice_policy p = pol1(SLUICE_FIXED_WINDOW, 9);
    uint64_t admitted;
    sluice_t *l;

    t_shm_path(path, sizeof(path), "ovr-clock");
    l = make(path, SLUICE_FIXED_WINDOW, 8, 2);
    admitted = drain(l, "k0");
    CHECK_EQ(sluice_acquire_at(l, "k1", 2, 1, NOW, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_override_set(l, "k2", 2, &p), -ENOSPC);
    admitted += drain(l, "k0");
    CHECK_U64(admitted, 8);
    CHECK_EQ(sluice_reap(l, NOW + 2 * NS_PER_S), 2); /* by the decisions' clock */
    CHECK_EQ(sluice_override_set(l, "k2", 2, &p), 0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);

    pg = t_shared_page(sizeof(*pg));
    test_obey(SLUICE_FIXED_WINDOW, "fixed window", (struct obey_want){26, 10, 11});
    test_obey(SLUICE_GCRA, "gcra", (struct obey_want){18, 0, 10});
    test_obey(SLUICE_APPROX_SLIDING, "approx", (struct obey_want){26, 10, 11});
    test_late();
    test_flips(SLUICE_FIXED_WINDOW, "flips fixed window", BIG, scale);
    test_flips(SLUICE_FIXED_WINDOW, "flips fixed open", BIG_OPEN, scale);
    test_flips(SLUICE_GCRA, "flips gcra", BIG, scale);
    test_flips(SLUICE_GCRA, "flips gcra open", BIG_OPEN, scale);
    test_flip_threads(BIG, scale);
    test_flip_threads(BIG_OPEN, scale);
    test_kill(scale);
    test_full();
    test_full_caller_clock();
    CHECK_U64(atomic_load(&pg->errors), 0);
    return t_done("shared_override");
}
