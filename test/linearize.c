/*
 * Linearizability checker: thousands of short concurrent histories (2-4
 * threads, 1-3 keys on 1-2 limiters, 3-8 ops a thread, every operation),
 * each checked against the serial model of lincheck.h: is there a total
 * order, consistent with real time, in which the model returns what every
 * call returned?  Each history ends with a serial probe that drains every
 * key with cost-1 acquires, so an over-admission no call saw still shows.
 *
 * Outcomes per history: linearizable; an under-admission the contract
 * allows (a DENY explained only by an acquire_all / multi-limit rollback
 * racing it, or by the charge such a rollback leaves behind); an
 * unexplained under-admission (reported, counted, not failed); a violation
 * (no order explains an ALLOW or an error code: fails); a hang (watchdog).
 *
 * Usage: linearize [SEED [ITERATIONS [FIRST]]] (default: time-seeded,
 * 250000 * SLUICE_TEST_SCALE histories, about 25 s).  Environment:
 *   LIN_FOCUS=random|rollback|policy|refill|dup|reap  one history shape only
 *   LIN_NODUP=1       acquire_all never names a key twice (a tree that hangs)
 *   LIN_KEEP_GOING=1  count every violation instead of stopping at 3
 *   LIN_PER_LIMIT_TIME=1  stale times as trees before 4b1a094 decided them
 *   LIN_NO_CELLS=1    every key an entry (short GCRA keys live in cells else)
 * A failing history prints its seed and index: `linearize SEED 1 INDEX`
 * replays its shape and ops (the interleaving is the machine's).
 * The reap shape passes sluice_reap() times later than racing calls; it is
 * kept out of the default mix (see gen_history).
 */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h" /* sl_cells_enabled */
#include "lincheck.h"

#define MAX_THREADS 4
_Static_assert(MAX_THREADS <= LC_THREADS, "a split reap counts per thread");
#define MAX_OPS 8

enum shape { S_RANDOM, S_ROLLBACK, S_POLICY, S_REFILL, S_DUP, S_REAP, S_NSHAPES };
static const char *shape_name[] = {"random", "rollback", "policy", "refill", "dup", "reap"};

struct history {
    struct lc_world w;
    int nthreads, nops[MAX_THREADS];
    struct lc_op op[MAX_THREADS][MAX_OPS];
    uint64_t delay[MAX_THREADS][MAX_OPS]; /* spins before the call; ~0: sched_yield */
    uint64_t probe_now, admin_now, t0;
    sluice_t *l[LC_LIMITERS];
};

static struct history H;
static atomic_ullong ticket; /* seq_cst: tickets order calls as real time does */
static pthread_barrier_t start_bar, end_bar;
static atomic_int quit, arrived;
static volatile sig_atomic_t cur_index;
static uint64_t cur_seed;

static uint64_t admin_clock(void *ctx) { return *(const uint64_t *)ctx; }

static const unsigned watchdog_s = 20; /* one history's calls, probe and destroy */

static void on_alarm(int sig)
{
    static const char msg[] = "linearize: HANG: a history did not finish (watchdog), index ";
    char num[24];
    int n = 0;
    unsigned long v = (unsigned long)cur_index;

    (void)sig;
    (void)!write(2, msg, sizeof(msg) - 1);
    do
        num[sizeof(num) - 1 - n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    (void)!write(2, num + sizeof(num) - n, (size_t)n);
    (void)!write(2, "\n", 1);
    _exit(1);
}

static long long call(const struct lc_op *o)
{
    char name[16];
    const struct lc_world *w = &H.w;

    snprintf(name, sizeof(name), "k%d", o->key);
    switch (o->kind) {
    case LC_ACQ:
        /* every third op slot's acquire by a batch of one, which must
         * decide as the single call does, concurrency included */
        if ((o - &H.op[0][0]) % 3 == 2) {
            struct sluice_req q = {name, 2, o->cost};
            int rc = -1;
            int brc = sluice_acquire_batch(H.l[w->key_lim[o->key]], &q, 1, o->now, &rc, NULL);
            return brc != 0 ? brc : rc;
        }
        return sluice_acquire_at(H.l[w->key_lim[o->key]], name, 2, o->cost, o->now, NULL);
    case LC_PEEK:
        return sluice_peek_at(H.l[w->key_lim[o->key]], name, 2, o->cost, o->now, NULL);
    case LC_ALL: {
        static const char *names[] = {"k0", "k1", "k2"};
        struct sluice_key keys[4];
        for (int i = 0; i < o->nk; i++)
            keys[i] = (struct sluice_key){H.l[w->key_lim[o->keys[i]]], names[o->keys[i]], 2};
        return sluice_acquire_all(keys, (size_t)o->nk, o->cost, o->now, NULL);
    }
    case LC_SETPOL:
        return sluice_set_policy(H.l[o->lim], &w->pol[o->pid]);
    case LC_OVSET:
        return sluice_override_set(H.l[w->key_lim[o->key]], name, 2, &w->pol[o->pid]);
    case LC_OVCLR:
        return sluice_override_clear(H.l[w->key_lim[o->key]], name, 2);
    case LC_RESET:
        return sluice_reset(H.l[w->key_lim[o->key]], name, 2);
    case LC_REAP:
        return (long long)sluice_reap(H.l[o->lim], o->now);
    default:
        abort();
    }
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;

    for (;;) {
        pthread_barrier_wait(&start_bar);
        if (atomic_load(&quit))
            return NULL;
        if (t < H.nthreads) {
            /* a spinning rendezvous: the barrier's wake-ups are microseconds
             * apart, which would leave the first calls mostly serial */
            unsigned spins = 0;
            atomic_fetch_add(&arrived, 1);
            while (atomic_load(&arrived) < H.nthreads)
                if (++spins > 2000)
                    sched_yield();
        }
        for (int i = 0; t < H.nthreads && i < H.nops[t]; i++) {
            struct lc_op *o = &H.op[t][i];
            if (H.delay[t][i] == UINT64_MAX)
                sched_yield();
            else
                for (volatile uint64_t s = 0; s < H.delay[t][i]; s++)
                    ;
            o->inv = atomic_fetch_add(&ticket, 1);
            o->rc = call(o);
            o->resp = atomic_fetch_add(&ticket, 1);
        }
        pthread_barrier_wait(&end_bar);
    }
}

/* ---- generation ------------------------------------------------------ */

static int no_dup; /* LIN_NODUP=1: acquire_all never names a key twice */

static uint64_t rnd(uint64_t *r, uint64_t n) { return t_rand(r) % n; }

static void gen_limit(uint64_t *r, struct sluice_limit *d, enum sluice_algo algo)
{
    memset(d, 0, sizeof(*d));
    d->algo = algo;
    d->period_ns = (1 + rnd(r, 2)) * NS_PER_S;
    d->count = algo == SLUICE_GCRA ? 2 + rnd(r, 15) : 2 + rnd(r, 11);
    if (algo == SLUICE_GCRA && rnd(r, 2))
        d->burst = 1 + rnd(r, 2 * d->count);
    if (algo == SLUICE_SLIDING_WINDOW) /* one precision per period: carry is exact */
        d->precision_ns = d->period_ns / 4;
}

static void gen_policy(uint64_t *r, struct sluice_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->nlimits = 1 + (unsigned)rnd(r, 2);
    for (unsigned i = 0; i < p->nlimits; i++)
        gen_limit(r, &p->limits[i], (enum sluice_algo)rnd(r, 5));
}

/* A variant of *from: counts/bursts changed (state kept), sometimes one
 * limit of another algorithm (fresh) or a limit more or fewer. */
static void gen_variant(uint64_t *r, const struct sluice_policy *from, struct sluice_policy *p)
{
    *p = *from;
    for (unsigned i = 0; i < p->nlimits; i++) {
        struct sluice_limit *d = &p->limits[i];
        if (d->algo == SLUICE_GCRA) {
            d->count = 2 + rnd(r, 15);
            d->burst = rnd(r, 2) ? 1 + rnd(r, 2 * d->count) : 0;
        } else {
            d->count = rnd(r, 2) ? d->count / 2 + 1 : 2 * d->count;
        }
    }
    if (rnd(r, 4) == 0)
        gen_limit(r, &p->limits[rnd(r, p->nlimits)], (enum sluice_algo)rnd(r, 5));
    if (rnd(r, 6) == 0 && p->nlimits == 2)
        p->nlimits = 1;
    else if (rnd(r, 6) == 0 && p->nlimits == 1)
        gen_limit(r, &p->limits[p->nlimits++], (enum sluice_algo)rnd(r, 5));
}

static struct sluice_limit gcra10(uint64_t count, uint64_t burst)
{
    return (struct sluice_limit){
        .algo = SLUICE_GCRA, .count = count, .period_ns = NS_PER_S, .burst = burst};
}

/* Op kinds drawn per shape, as weights of enum lc_kind up to LC_REAP. */
static const unsigned weights[S_NSHAPES][8] = {
    [S_RANDOM] = {30, 10, 20, 10, 7, 6, 7, 5},
    [S_ROLLBACK] = {40, 0, 60, 0, 0, 0, 0, 0},
    [S_POLICY] = {50, 0, 5, 25, 10, 10, 0, 0},
    [S_REFILL] = {35, 10, 10, 25, 15, 5, 0, 0},
    [S_DUP] = {20, 5, 75, 0, 0, 0, 0, 0},
    [S_REAP] = {40, 10, 10, 0, 0, 0, 10, 30},
};

static void gen_history(uint64_t seed, enum shape sh)
{
    /* half the histories at any magnitude up to 2^62 ns: windows and rings
     * index time modulo a range, and a bug may live in its upper half */
    uint64_t r = seed, T0 = 1000 * NS_PER_S + rnd(&r, NS_PER_S), times[4] = {0};
    static const uint64_t offs[] = {0, NS_PER_S / 4, 3 * NS_PER_S / 5, NS_PER_S, 3 * NS_PER_S / 2};
    int ntimes = 1, advancing = sh == S_RANDOM || sh == S_REAP ? (int)rnd(&r, 2) : (int)(rnd(&r, 4) == 0);
    struct lc_world *w = &H.w;
    uint64_t race_cost = 0;

    if (rnd(&r, 2) == 0)
        T0 += rnd(&r, UINT64_C(1) << 62);

    memset(w, 0, sizeof(*w));
    w->nlimiters = 1 + (int)rnd(&r, 2);
    w->nkeys = 1 + (int)rnd(&r, 3);
    H.nthreads = 2 + (int)rnd(&r, 3);
    gen_policy(&r, &w->pol[0]);
    gen_policy(&r, &w->pol[1]);
    gen_variant(&r, &w->pol[0], &w->pol[2]);
    gen_variant(&r, &w->pol[rnd(&r, 2)], &w->pol[3]);
    w->npol = 4;
    switch (sh) {
    case S_ROLLBACK: /* GCRA charged, then a second limit (or key) loses a race and rolls back */
        H.nthreads = 2;
        w->nkeys = 2;
        w->pol[0].nlimits = 2;
        w->pol[0].limits[0] = gcra10(10, 10);
        gen_limit(&r, &w->pol[0].limits[1], rnd(&r, 2) ? SLUICE_FIXED_WINDOW : SLUICE_GCRA);
        /* room for exactly one first call of each thread (see below) */
        w->pol[0].limits[1].count = race_cost = 1 + rnd(&r, 3);
        w->pol[0].limits[1].burst = 0;
        w->pol[1] = w->pol[0];
        w->pol[1].nlimits = 1;
        w->pol[1].limits[0] = w->pol[0].limits[1];
        /* mostly GCRA alone on k0 and the small limit alone on k1 (two
         * limiters): the loser charges k0, fails on k1, rolls k0 back just as
         * the winner charges k0 */
        w->nlimiters = 2;
        w->pol[0].nlimits = rnd(&r, 4) == 0 ? 2 : 1;
        break;
    case S_POLICY: /* GCRA 10/s admissions racing policy changes that keep its TAT */
        H.nthreads = 2;
        w->nlimiters = 1;
        w->nkeys = 1 + (int)rnd(&r, 2);
        /* one definition: a serial carry is exact, so only the race loses units */
        for (int p = 0; p < 4; p++) {
            memset(&w->pol[p], 0, sizeof(w->pol[p]));
            w->pol[p].nlimits = 1;
            w->pol[p].limits[0] = gcra10(10, 10);
        }
        break;
    case S_REFILL: /* lowering and raising a limit keeps what was spent */
        for (int p = 2; p < 4; p++)
            for (unsigned i = 0; i < w->pol[p].nlimits && i < w->pol[0].nlimits; i++)
                if (w->pol[p].limits[i].algo == w->pol[0].limits[i].algo)
                    w->pol[p].limits[i].period_ns = w->pol[0].limits[i].period_ns;
        break;
    default:
        break;
    }
    for (int k = 0; k < w->nkeys; k++)
        w->key_lim[k] = (int)rnd(&r, (uint64_t)w->nlimiters);
    if (sh == S_ROLLBACK && w->nlimiters == 2)
        w->key_lim[0] = 0, w->key_lim[1] = 1;
    times[0] = H.t0 = T0;
    if (sh == S_ROLLBACK || sh == S_POLICY) {
        /* a period later: charges there absorb the earlier ones (rollback),
         * a carry read at the earlier time sees a gap above tau (policy) */
        times[1] = T0 + NS_PER_S;
        ntimes = 2;
    } else if (advancing)
        for (ntimes = 1; ntimes < 4; ntimes++)
            times[ntimes] = times[ntimes - 1] + offs[1 + rnd(&r, 4)] / (1 + rnd(&r, 2));
    H.probe_now = times[ntimes - 1];
    /* the limiter clock (administrative calls' time) at or before the _at times */
    H.admin_now = T0 - (rnd(&r, 2) || sh == S_POLICY ? NS_PER_S : 0);
    for (int t = 0; t < H.nthreads; t++) {
        int ti = sh == S_POLICY && t == 1; /* thread 1 a period later throughout */
        H.nops[t] = 3 + (int)rnd(&r, MAX_OPS - 2);
        for (int i = 0; i < H.nops[t]; i++) {
            struct lc_op *o = &H.op[t][i];
            unsigned sum = 0, pick;
            int kind = 0;
            memset(o, 0, sizeof(*o));
            for (int k = 0; k < 8; k++)
                sum += weights[sh][k];
            pick = (unsigned)rnd(&r, sum);
            while (pick >= weights[sh][kind])
                pick -= weights[sh][kind++];
            o->kind = (enum lc_kind)kind;
            o->thread = t;
            o->key = (int)rnd(&r, (uint64_t)w->nkeys);
            o->lim = (int)rnd(&r, (uint64_t)w->nlimiters);
            o->pid = (int)rnd(&r, 4);
            if (sh == S_POLICY && o->kind == LC_SETPOL)
                o->pid = (i % 2) ? 2 + (int)rnd(&r, 2) : (int)rnd(&r, 2);
            o->cost = rnd(&r, 8) == 0 ? 1 + rnd(&r, 16) : 1 + rnd(&r, 3);
            if (sh == S_POLICY)
                o->cost = 1 + rnd(&r, 5);
            o->nk = 2 + (int)rnd(&r, 2);
            for (int j = 0; j < o->nk; j++)
                o->keys[j] = (int)rnd(&r, (uint64_t)w->nkeys);
            if (sh == S_DUP && o->nk == 2)
                o->keys[1] = o->keys[0];
            if (sh == S_ROLLBACK && o->kind == LC_ALL) /* both orders, so charges interleave */
                o->nk = 2, o->keys[0] = t, o->keys[1] = 1 - t;
            ti += rnd(&r, 3) == 0 && ti < ntimes - 1;
            o->now = sh == S_ROLLBACK ? times[t] : times[ti];
            if (no_dup && o->kind == LC_ALL) /* a tree that hangs on duplicates */
                for (int j = 1; j < o->nk;) {
                    int dup = 0;
                    for (int m = 0; m < j; m++)
                        dup |= o->keys[m] == o->keys[j];
                    if (dup)
                        o->keys[j] = o->keys[--o->nk];
                    else
                        j++;
                }
            /* Reaps at the first time, where "fresh at now" is fresh for every
             * call; LIN_FOCUS=reap also reaps at later times than racing calls. */
            if (o->kind == LC_REAP && sh != S_REAP)
                o->now = T0;
            H.delay[t][i] = rnd(&r, 4) == 0 ? UINT64_MAX : rnd(&r, 3) == 0 ? rnd(&r, 400) : 0;
            if (sh == S_ROLLBACK && i == 0) {
                /* Both threads start (together) with the whole room of the
                 * second limit: one charges it, the other loses it after
                 * charging GCRA and rolls back while the winner, a period
                 * later, charges GCRA too. */
                o->kind = w->pol[0].nlimits == 2 && rnd(&r, 2) ? LC_ACQ : LC_ALL;
                o->key = 0;
                o->nk = 2, o->keys[0] = t, o->keys[1] = 1 - t;
                o->cost = race_cost;
                H.delay[t][i] = t == 0 ? 0 : rnd(&r, 60);
            }
            if (sh == S_POLICY && i == 0) {
                /* Both threads start by admitting k0, at t0 and at t1: the
                 * key's latest admission must end up t1 (two racing records
                 * of it), or a later migration reads the state at t0, where
                 * its TAT is more than tau ahead. */
                o->kind = LC_ACQ;
                o->key = 0;
                H.delay[t][i] = t == 0 ? 0 : rnd(&r, 60);
            }
        }
    }
}

/* ---- checking -------------------------------------------------------- */

static const char *kind_name[] = {"acquire", "peek", "all", "set_policy", "override_set",
                                  "override_clear", "reset", "reap", "probe", "(resolve)",
                                  "(reap key)"};

static void print_history(const struct lc_op *op, int n)
{
    const struct lc_world *w = &H.w;

    for (int p = 0; p < w->npol; p++) {
        fprintf(stderr, "  policy %d:", p);
        for (unsigned i = 0; i < w->pol[p].nlimits; i++) {
            const struct sluice_limit *d = &w->pol[p].limits[i];
            fprintf(stderr, " [algo %d count %" PRIu64 " period %" PRIu64 "s burst %" PRIu64, d->algo,
                    d->count, d->period_ns / NS_PER_S, d->burst);
            if (d->precision_ns != 0)
                fprintf(stderr, " precision %" PRIu64 "ms", d->precision_ns / 1000000);
            fprintf(stderr, "]");
        }
        fprintf(stderr, "%s\n", p < w->nlimiters ? " (initial default)" : "");
    }
    for (int k = 0; k < w->nkeys; k++)
        fprintf(stderr, "  key k%d on limiter %d\n", k, w->key_lim[k]);
    fprintf(stderr, "  t0 %" PRIu64 " ns; limiter clock (admin calls) t0-%" PRIu64 "ms\n", H.t0,
            (H.t0 - H.admin_now) / 1000000);
    for (int i = 0; i < n; i++) {
        const struct lc_op *o = &op[i];
        fprintf(stderr, "  T%d [%3" PRIu64 ",%3" PRIu64 "] %-14s", o->thread, o->inv, o->resp,
                kind_name[o->kind]);
        if (o->kind == LC_ALL) {
            for (int j = 0; j < o->nk; j++)
                fprintf(stderr, "%sk%d", j ? "," : " ", o->keys[j]);
        } else if (o->kind == LC_SETPOL || o->kind == LC_REAP) {
            fprintf(stderr, " limiter %d", o->lim);
        } else if (o->kind != LC_PROBE) {
            fprintf(stderr, " k%d", o->key);
        }
        if (o->kind == LC_SETPOL || o->kind == LC_OVSET)
            fprintf(stderr, " policy %d", o->pid);
        if (o->kind <= LC_ALL)
            fprintf(stderr, " cost %" PRIu64, o->cost);
        if (o->kind <= LC_ALL || o->kind == LC_REAP || o->kind == LC_PROBE)
            fprintf(stderr, " at t0+%" PRIu64 "ms", (o->now - H.t0) / 1000000);
        if (o->kind == LC_PROBE)
            fprintf(stderr, " -> drained k0 %lld k1 %lld k2 %lld\n", o->rc & 255, o->rc >> 8 & 255,
                    o->rc >> 16 & 255);
        else
            fprintf(stderr, " -> %lld\n", o->rc);
    }
}

static struct lc_search search;

/* The longest order the strict search found, and what the model says of
 * each op that could come next: where the history stops making sense. */
static void print_stuck(const struct lc_op *op, int n)
{
    struct lc_state s, t;
    uint64_t mask = 0, min_resp = UINT64_MAX;

    (void)lc_check(&search, &H.w, op, n, 0, 2000000);
    lc_initial(&H.w, &s);
    fprintf(stderr, "  longest legal prefix:");
    for (int d = 0; d < search.best_depth; d++) {
        const struct lc_op *o = &op[search.best[d]];
        fprintf(stderr, " T%d[%" PRIu64 "]", o->thread, o->inv);
        for (unsigned b = 0; b < lc_branches(o, 1); b++) {
            t = s; /* a reap's branch: the keys it removed */
            if (lc_step(&H.w, &t, o, b, 0))
                break;
        }
        s = t;
        mask |= UINT64_C(1) << search.best[d];
    }
    fprintf(stderr, "\n  then the model says:");
    for (int i = 0; i < n; i++)
        if (!(mask >> i & 1) && op[i].resp < min_resp)
            min_resp = op[i].resp;
    for (int i = 0; i < n; i++)
        if (!(mask >> i & 1) && op[i].inv < min_resp) {
            t = s;
            (void)lc_step(&H.w, &t, &op[i], 0, 0);
            fprintf(stderr, " T%d[%" PRIu64 "] -> %lld (got %lld);", op[i].thread, op[i].inv,
                    lc_model_rc, op[i].rc);
        }
    fprintf(stderr, "\n");
}

static int overlaps(const struct lc_op *a, const struct lc_op *b)
{
    return !(a->resp < b->inv || b->resp < a->inv);
}

static int multi_pair(const struct lc_op *o)
{
    int multi = 0;
    for (int p = 0; p < H.w.npol; p++)
        multi |= H.w.pol[p].nlimits > 1;
    return (o->kind == LC_ACQ || o->kind == LC_ALL) &&
           (multi || (o->kind == LC_ALL && (o->keys[0] != o->keys[1] ||
                                            (o->nk > 2 && o->keys[2] != o->keys[0]))));
}

static uint64_t n_ok, n_under_explained, n_under_unexplained, n_violations, n_budget;

/* Calls that can see a decision's key between its resolve and its charge:
 * set_policy and reap of the key's limiter, and the key's own reset and
 * overrides. */
static int sees_resolve(const struct lc_op *m, int key)
{
    switch (m->kind) {
    case LC_SETPOL:
    case LC_REAP:
        return m->lim == H.w.key_lim[key];
    case LC_RESET:
    case LC_OVSET:
    case LC_OVCLR:
        return m->key == key;
    default:
        return 0;
    }
}

/* A decision racing such a call gets one LC_RESOLVE step per key
 * (lincheck.h), in its own interval and before it. */
static int add_resolves(struct lc_op *op, int n)
{
    int total = n;

    for (int i = 0; i < n; i++) {
        const struct lc_op *o = &op[i];
        int keys[4], nk = 0, any = 0;
        if (o->kind > LC_ALL)
            continue;
        /* a multi-key call resolves its keys one by one: one that fails
         * (-E2BIG after a racing override) may have moved the others */
        for (int j = 0; o->kind == LC_ALL && j < o->nk; j++)
            for (int m = 0; m < n; m++)
                any |= sees_resolve(&op[m], o->keys[j]) && overlaps(o, &op[m]);
        for (int j = 0; j < (o->kind == LC_ALL ? o->nk : 1); j++) {
            int k = o->kind == LC_ALL ? o->keys[j] : o->key, dup = 0, racing = any;
            for (int m = 0; m < nk; m++)
                dup |= keys[m] == k;
            for (int m = 0; m < n && !dup; m++)
                racing |= sees_resolve(&op[m], k) && overlaps(o, &op[m]);
            if (dup || !racing)
                continue;
            keys[nk++] = k;
            if (total == LC_MAX_OPS)
                continue; /* no room: checked without it */
            memset(&op[total], 0, sizeof(op[total]));
            op[total].kind = LC_RESOLVE;
            op[total].key = k;
            op[total].pid = (int)o->kind; /* a peek makes no key */
            op[total].cost = o->cost;
            op[total].inv = o->inv;
            op[total].resp = o->resp;
            op[total].thread = o->thread;
            op[i].need |= UINT64_C(1) << total;
            total++;
        }
    }
    return total;
}

/* A reap that removed two keys or more while other calls ran is checked
 * as the library does it, one key at a time: one LC_REAPKEY step per key
 * of its limiter (lincheck.h). */
static int add_reap_steps(struct lc_op *op, int n)
{
    int total = n;

    for (int i = 0; i < n; i++) {
        int racing = 0, nk = 0;
        if (op[i].kind != LC_REAP || op[i].rc < 2)
            continue;
        for (int m = 0; m < n; m++)
            racing |= m != i && overlaps(&op[i], &op[m]);
        for (int k = 0; k < H.w.nkeys; k++)
            nk += H.w.key_lim[k] == op[i].lim;
        if (!racing || total + nk > LC_MAX_OPS)
            continue; /* atomic then: a removal order no call can tell apart */
        op[i].split = 1;
        for (int k = 0; k < H.w.nkeys; k++) {
            if (H.w.key_lim[k] != op[i].lim)
                continue;
            memset(&op[total], 0, sizeof(op[total]));
            op[total].kind = LC_REAPKEY;
            op[total].key = k;
            op[total].lim = op[i].lim;
            op[total].now = op[i].now;
            op[total].inv = op[i].inv;
            op[total].resp = op[i].resp;
            op[total].thread = op[i].thread;
            op[i].need |= UINT64_C(1) << total;
            total++;
        }
    }
    return total;
}

/* Runs the current history and checks it; returns 1 on a violation. */
static int run_and_check(uint64_t index, enum shape sh)
{
    static struct lc_op op[LC_MAX_OPS];
    struct sluice_config cfg;
    int n = 0, rc;
    char name[16];

    for (int i = 0; i < H.w.nlimiters; i++) {
        sluice_config_init(&cfg);
        cfg.policy = H.w.pol[i];
        cfg.shards = 1 + (unsigned)(index % 4);
        cfg.clock = SLUICE_CLOCK_CUSTOM;
        cfg.clock_fn = admin_clock;
        cfg.clock_ctx = &H.admin_now;
        if (sluice_create(&cfg, &H.l[i]) != 0) {
            fprintf(stderr, "sluice_create failed\n");
            exit(1);
        }
    }
    atomic_store(&ticket, 0);
    atomic_store(&arrived, 0);
    /* The watchdog times the calls only: the search after them is bounded
     * by its node budget (and slow under ThreadSanitizer). */
    alarm(watchdog_s);
    pthread_barrier_wait(&start_bar);
    pthread_barrier_wait(&end_bar);
    for (int t = 0; t < H.nthreads; t++)
        for (int i = 0; i < H.nops[t]; i++)
            op[n++] = H.op[t][i];
    /* the final probe: serial, after every call returned */
    memset(&op[n], 0, sizeof(op[n]));
    op[n].kind = LC_PROBE;
    op[n].now = H.probe_now;
    op[n].thread = -1;
    op[n].inv = atomic_fetch_add(&ticket, 1);
    for (int k = 0; k < H.w.nkeys; k++) {
        long long c = 0;
        snprintf(name, sizeof(name), "k%d", k);
        while (c < 255 && sluice_acquire_at(H.l[H.w.key_lim[k]], name, 2, 1, H.probe_now, NULL) ==
                              SLUICE_ALLOW)
            c++;
        op[n].rc |= c << (8 * k);
    }
    op[n].resp = atomic_fetch_add(&ticket, 1);
    n++;
    for (int i = 0; i < H.w.nlimiters; i++)
        sluice_destroy(H.l[i]);
    alarm(0);
    n = add_resolves(op, n);
    n = add_reap_steps(op, n);
    /* the narrow allowances: only next to an acquire_all / multi-limit call */
    for (int i = 0; i < n; i++) {
        op[i].transient_ok = op[i].leftover_ok = 0;
        for (int j = 0; j < n; j++)
            if (j != i && overlaps(&op[i], &op[j]) && multi_pair(&op[j]))
                op[i].transient_ok = 1;
        if (multi_pair(&op[i]))
            for (int j = 0; j < n; j++)
                op[i].leftover_ok |= j != i && overlaps(&op[i], &op[j]) && op[j].kind <= LC_ALL;
    }
    rc = lc_check(&search, &H.w, op, n, 0, 2000000);
    if (rc == 1) {
        n_ok++;
        return 0;
    }
    if (rc < 0) {
        n_budget++;
        return 0;
    }
    if (lc_check(&search, &H.w, op, n, 1, 2000000) != 0) {
        n_under_explained++;
        return 0;
    }
    for (int i = 0; i < n; i++)
        op[i].transient_ok = op[i].leftover_ok = op[i].kind <= LC_ALL;
    rc = lc_check(&search, &H.w, op, n, 2, 2000000);
    if (rc != 0) {
        if (n_under_unexplained++ == 0) {
            fprintf(stderr, "linearize: unexplained under-admission, seed %" PRIu64
                            " index %" PRIu64 " (%s):\n", cur_seed, index, shape_name[sh]);
            print_history(op, n);
        }
        return 0;
    }
    if (n_violations++ < 3) {
        fprintf(stderr, "linearize: VIOLATION (no order explains an admission or a return code), "
                        "seed %" PRIu64 " index %" PRIu64 " (%s):\n", cur_seed, index,
                shape_name[sh]);
        print_history(op, n);
        print_stuck(op, n);
    }
    return 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
    double scale = t_scale(1, argv); /* SLUICE_TEST_SCALE and sanitizers only */
    uint64_t iters = argc > 2 ? strtoull(argv[2], NULL, 0) : (uint64_t)(250000 * scale);
    uint64_t first = argc > 3 ? strtoull(argv[3], NULL, 0) : 0, per_shape[S_NSHAPES] = {0};
    const char *focus = getenv("LIN_FOCUS");

    int keep_going = getenv("LIN_KEEP_GOING") != NULL && atoi(getenv("LIN_KEEP_GOING")) != 0;
    uint64_t viol_shape[S_NSHAPES] = {0};

    no_dup = getenv("LIN_NODUP") != NULL && atoi(getenv("LIN_NODUP")) != 0;
    lc_per_limit_time = getenv("LIN_PER_LIMIT_TIME") != NULL && atoi(getenv("LIN_PER_LIMIT_TIME"));
    if (getenv("LIN_NO_CELLS") != NULL && atoi(getenv("LIN_NO_CELLS")) != 0)
        sl_cells_enabled = false; /* every key an entry: the entry paths' turn */
    int forced = -1;
    pthread_t th[MAX_THREADS];
    double t0 = now_s();

    for (int s = 0; focus && s < S_NSHAPES; s++)
        if (strcmp(focus, shape_name[s]) == 0)
            forced = s;
    if (focus && forced < 0) {
        fprintf(stderr, "LIN_FOCUS: random, rollback, policy, refill, dup or reap\n");
        return 2;
    }
    cur_seed = seed;
    printf("linearize: seed %" PRIu64 ", %" PRIu64 " histories from %" PRIu64 "%s%s\n", seed,
           iters, first, focus ? ", shape " : "", focus ? focus : "");
    fflush(stdout);
    signal(SIGALRM, on_alarm);
    if (pthread_barrier_init(&start_bar, NULL, MAX_THREADS + 1) != 0 ||
        pthread_barrier_init(&end_bar, NULL, MAX_THREADS + 1) != 0)
        return T_SKIP;
    for (int t = 0; t < MAX_THREADS; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) != 0)
            return T_SKIP;
    /* LIN_KEEP_GOING=1: count every violation (the first 3 are printed) */
    for (uint64_t i = first; i < first + iters && (keep_going || n_violations < 3); i++) {
        /* 10% random; 40% each the two rare races (a rollback erasing a later
         * charge, a policy change losing a racing admission: about one in
         * 10^4 such histories catches them, and they are cheap); 5% each
         * flips and duplicates, which need no race */
        unsigned slot = (unsigned)(i % 20);
        enum shape sh = forced >= 0 ? (enum shape)forced
                        : slot < 2   ? S_RANDOM
                        : slot < 10  ? S_ROLLBACK
                        : slot < 18  ? S_POLICY
                        : slot == 18 ? S_REFILL
                                     : S_DUP;
        cur_index = (sig_atomic_t)i;
        gen_history(t_rand(&(uint64_t){seed ^ (i * UINT64_C(0x2545f4914f6cdd1d))}), sh);
        per_shape[sh]++;
        if (run_and_check(i, sh) && viol_shape[sh]++ == 0)
            fprintf(stderr, "  first violation of shape %s at history %" PRIu64 " after %.1f s\n",
                    shape_name[sh], i - first + 1, now_s() - t0);
    }
    for (int sh = 0; sh < S_NSHAPES; sh++)
        if (viol_shape[sh])
            printf("linearize: %" PRIu64 " violation(s) in %s histories\n", viol_shape[sh],
                   shape_name[sh]);
    atomic_store(&quit, 1);
    pthread_barrier_wait(&start_bar);
    for (int t = 0; t < MAX_THREADS; t++)
        pthread_join(th[t], NULL);
    printf("linearize: %" PRIu64 " histories (random %" PRIu64 ", rollback %" PRIu64
           ", policy %" PRIu64 ", refill %" PRIu64 ", dup %" PRIu64 ", reap %" PRIu64
           ") in %.1f s\n",
           n_ok + n_under_explained + n_under_unexplained + n_violations + n_budget,
           per_shape[0], per_shape[1], per_shape[2], per_shape[3], per_shape[4], per_shape[5],
           now_s() - t0);
    printf("linearize: linearizable %" PRIu64 ", under-admission by a racing rollback %" PRIu64
           ", unexplained under-admission %" PRIu64 ", search budget out %" PRIu64
           ", VIOLATIONS %" PRIu64 "\n",
           n_ok, n_under_explained, n_under_unexplained, n_budget, n_violations);
    CHECK_EQ(n_violations, 0);
    return t_done("linearize");
}
