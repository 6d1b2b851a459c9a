/*
 * Serial histories the linearizability checker once judged wrongly, each
 * replayed through the library call by call and through the checker's
 * model (lincheck.h): the library must return what the history records,
 * and the model must find that order legal.  A history here has one order
 * only (no call overlaps another), so a model that rejects it is wrong, and
 * a library that answers otherwise has changed its serial behaviour.
 *
 * refill_1795563448: a sliding window carried into another precision
 * (500 ms to 250 ms sub-buckets) moves each old sub-bucket's units to one
 * new sub-bucket (algo_sliding.c, sliding_carry).  The model kept their
 * exact times instead, and a later change of policy merged those with the
 * same units at their moved time, counting one unit twice: it said k1 had
 * 5 of 5 units spent where 4 had been admitted, and flagged the library's
 * fifth admission as a VIOLATION (linearize_refill, seed 1795563448,
 * history 10940, seen once in a loaded run).  The drain of k1 admitting
 * exactly 1 is also checked: 2 would be an over-admission under the 5-unit
 * limit.
 */
#include "helpers.h"
#include "lincheck.h"

#define MS UINT64_C(1000000)

static struct lc_search search;

static struct sluice_limit sliding(uint64_t count, uint64_t period, uint64_t precision)
{
    struct sluice_limit l = {.algo = SLUICE_SLIDING_WINDOW, .count = count, .period_ns = period,
                             .precision_ns = precision};
    return l;
}

static const char *const key_names[LC_KEYS] = {"k0", "k1", "k2"}; /* as linearize.c names them */

static uint64_t admin_clock(void *ctx) { return *(const uint64_t *)ctx; }

/* One call of op through the library, as linearize.c makes it. */
static long long call(sluice_t **l, const struct lc_world *w, const struct lc_op *o)
{
    const char *name = key_names[o->key];
    struct sluice_key keys[4];
    long long drained = 0;

    switch (o->kind) {
    case LC_ACQ:
        return sluice_acquire_at(l[w->key_lim[o->key]], name, 2, o->cost, o->now, NULL);
    case LC_PEEK:
        return sluice_peek_at(l[w->key_lim[o->key]], name, 2, o->cost, o->now, NULL);
    case LC_ALL:
        for (int i = 0; i < o->nk; i++)
            keys[i] = (struct sluice_key){l[w->key_lim[o->keys[i]]], key_names[o->keys[i]], 2};
        return sluice_acquire_all(keys, (size_t)o->nk, o->cost, o->now, NULL);
    case LC_SETPOL:
        return sluice_set_policy(l[o->lim], &w->pol[o->pid]);
    case LC_OVSET:
        return sluice_override_set(l[w->key_lim[o->key]], name, 2, &w->pol[o->pid]);
    case LC_PROBE:
        for (int k = 0; k < w->nkeys; k++) {
            sluice_t *lk = l[w->key_lim[k]];
            long long c = 0;
            while (c < 255 && sluice_acquire_at(lk, key_names[k], 2, 1, o->now, NULL) == SLUICE_ALLOW)
                c++;
            drained |= c << (8 * k);
        }
        return drained;
    default:
        return -999; /* not used by these histories */
    }
}

/* Replays op[0..n) in order on fresh limiters; every result as recorded,
 * and the model finds the order legal. */
static void replay(const char *what, const struct lc_world *w, struct lc_op *op, int n,
                   uint64_t admin_now)
{
    sluice_t *l[LC_LIMITERS] = {NULL};

    for (int i = 0; i < w->nlimiters; i++) {
        struct sluice_config cfg;
        sluice_config_init(&cfg);
        cfg.policy = w->pol[i];
        cfg.shards = 1;
        cfg.clock = SLUICE_CLOCK_CUSTOM;
        cfg.clock_fn = admin_clock;
        cfg.clock_ctx = &admin_now;
        CHECK_EQ(sluice_create(&cfg, &l[i]), 0);
    }
    for (int i = 0; i < n; i++) {
        long long rc = call(l, w, &op[i]);
        if (rc != op[i].rc)
            fprintf(stderr, "%s: call %d returned %lld, the history says %lld\n", what, i, rc,
                    op[i].rc);
        CHECK(rc == op[i].rc);
        op[i].inv = 2 * (uint64_t)i;
        op[i].resp = 2 * (uint64_t)i + 1;
    }
    for (int i = 0; i < w->nlimiters; i++)
        sluice_destroy(l[i]);
    CHECK_EQ(lc_check(&search, w, op, n, 0, 2000000), 1);
}

static void refill_1795563448(void)
{
    const uint64_t t0 = UINT64_C(1000166911452), admin = t0 - 1000 * MS;
    struct lc_world w = {.npol = 4, .nkeys = 3, .nlimiters = 2, .key_lim = {0, 0, 1}};
    int n = 0;
    struct lc_op op[LC_MAX_OPS];

    w.pol[0].nlimits = 2;
    w.pol[0].limits[0] = sliding(10, 2000 * MS, 500 * MS);
    w.pol[0].limits[1] = sliding(7, 2000 * MS, 500 * MS);
    w.pol[1].nlimits = 1;
    w.pol[1].limits[0] = (struct sluice_limit){.algo = SLUICE_FIXED_WINDOW, .count = 7,
                                               .period_ns = 2000 * MS};
    w.pol[2].nlimits = 2;
    w.pol[2].limits[0] = sliding(20, 2000 * MS, 500 * MS);
    w.pol[2].limits[1] = (struct sluice_limit){.algo = SLUICE_SLIDING_LOG, .count = 2,
                                               .period_ns = 1000 * MS};
    w.pol[3].nlimits = 2;
    w.pol[3].limits[0] = sliding(6, 2000 * MS, 500 * MS);
    w.pol[3].limits[1] = sliding(5, 2000 * MS, 250 * MS);
#define OP(...) (op[n++] = (struct lc_op){__VA_ARGS__})
    OP(.kind = LC_OVSET, .key = 0, .pid = 2, .now = admin, .rc = 0);
    OP(.kind = LC_ACQ, .key = 0, .cost = 3, .now = t0 + 1125 * MS, .rc = -E2BIG);
    OP(.kind = LC_ACQ, .key = 1, .cost = 1, .now = t0, .rc = SLUICE_ALLOW);
    OP(.kind = LC_ACQ, .key = 0, .cost = 2, .now = t0, .rc = SLUICE_ALLOW);
    OP(.kind = LC_PEEK, .key = 1, .cost = 1, .now = t0, .rc = SLUICE_ALLOW);
    OP(.kind = LC_ACQ, .key = 1, .cost = 1, .now = t0 + 125 * MS, .rc = SLUICE_ALLOW);
    OP(.kind = LC_ACQ, .key = 0, .cost = 2, .now = t0 + 1125 * MS, .rc = SLUICE_ALLOW);
    OP(.kind = LC_PEEK, .key = 0, .cost = 3, .now = t0 + 1125 * MS, .rc = -E2BIG);
    OP(.kind = LC_SETPOL, .lim = 0, .pid = 3, .now = admin, .rc = 0);
    OP(.kind = LC_ACQ, .key = 0, .cost = 11, .now = t0 + 1125 * MS, .rc = -E2BIG);
    OP(.kind = LC_ACQ, .key = 1, .cost = 2, .now = t0 + 1125 * MS, .rc = SLUICE_ALLOW);
    OP(.kind = LC_SETPOL, .lim = 1, .pid = 2, .now = admin, .rc = 0);
    OP(.kind = LC_ACQ, .key = 2, .cost = 16, .now = t0, .rc = -E2BIG);
    OP(.kind = LC_ACQ, .key = 1, .cost = 3, .now = t0 + 125 * MS, .rc = SLUICE_DENY);
    OP(.kind = LC_SETPOL, .lim = 0, .pid = 2, .now = admin, .rc = 0);
    OP(.kind = LC_ACQ, .key = 0, .cost = 4, .now = t0 + 1125 * MS, .rc = -E2BIG);
    OP(.kind = LC_ALL, .nk = 3, .keys = {2, 2, 2}, .cost = 3, .now = t0 + 1125 * MS,
       .rc = -E2BIG);
    OP(.kind = LC_ALL, .nk = 3, .keys = {0, 0, 2}, .cost = 2, .now = t0 + 1125 * MS,
       .rc = SLUICE_DENY);
    OP(.kind = LC_OVSET, .key = 0, .pid = 2, .now = admin, .rc = 0);
    OP(.kind = LC_ALL, .nk = 3, .keys = {2, 2, 0}, .cost = 1, .now = t0 + 1725 * MS,
       .rc = SLUICE_DENY);
    OP(.kind = LC_SETPOL, .lim = 0, .pid = 3, .now = admin, .rc = 0);
    /* drained: k0 0, k1 1 (4 of its 5 units spent), k2 2 */
    OP(.kind = LC_PROBE, .thread = -1, .now = t0 + 1725 * MS, .rc = (2 << 16) | (1 << 8));
#undef OP
    for (int i = 0; i < n - 1; i++)
        op[i].thread = i % 3;
    replay("refill_1795563448", &w, op, n, admin);
}

int main(void)
{
    alarm(60);
    refill_1795563448();
    return t_done("lincheck_serial");
}
