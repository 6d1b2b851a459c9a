/*
 * Policy flips: set_policy and overrides never refill a limit.  A limit
 * whose algorithm and period stay the same keeps all of its spent capacity,
 * even above a lowered count, so lowering and raising again admits nothing
 * extra.  Every decision is compared with the serial model (test/model.h)
 * whose state is carried exactly across the same changes.  Then rollbacks
 * (undo) through the internal algorithm ops: a rollback never takes back
 * another charge, and a carry never loses state ahead of the time it reads at.
 */
#include "helpers.h"
#include "internal.h"
#include "model.h"

static const enum sluice_algo algos[] = {SLUICE_GCRA, SLUICE_FIXED_WINDOW, SLUICE_SLIDING_WINDOW,
                                         SLUICE_SLIDING_LOG, SLUICE_APPROX_SLIDING};
static const char *const names[] = {"gcra", "fixed", "sliding", "log", "approx"};

static struct sluice_limit lim(enum sluice_algo a, uint64_t count, uint64_t period, uint64_t burst)
{
    struct sluice_limit d = {.algo = a, .count = count, .period_ns = period, .burst = burst};
    if (a == SLUICE_SLIDING_WINDOW)
        d.precision_ns = period / 10;
    return d;
}

static struct sluice_policy pol1(struct sluice_limit a)
{
    struct sluice_policy p = {.nlimits = 1, .limits = {a}};
    return p;
}

static struct sluice_policy pol2(struct sluice_limit a, struct sluice_limit b)
{
    struct sluice_policy p = {.nlimits = 2, .limits = {a, b}};
    return p;
}

/* The model of a policy change: limits of the same algorithm and period
 * keep their state exactly; GCRA's TAT is kept (its scaled value rescaled,
 * rounded up).  The policies flipped here have at most one limit per
 * algorithm and period, where pairing one to one is what sl_policy_carry
 * does (several old limits feeding one: test_carry_from_several). */
static void model_carry(const struct sluice_policy *from, struct m_key *k,
                        const struct sluice_policy *to)
{
    static struct m_key nk;
    bool used[SLUICE_MAX_LIMITS] = {false};

    memset(&nk, 0, sizeof(nk));
    for (unsigned i = 0; i < to->nlimits; i++) {
        const struct sluice_limit *t = &to->limits[i];
        for (unsigned j = 0; j < from->nlimits; j++) {
            const struct sluice_limit *f = &from->limits[j];
            if (used[j] || f->algo != t->algo || f->period_ns != t->period_ns)
                continue;
            used[j] = true;
            nk.lim[i] = k->lim[j];
            if (t->algo == SLUICE_GCRA)
                nk.lim[i].tat_scaled = (k->lim[j].tat_scaled * t->count + f->count - 1) / f->count;
            break;
        }
    }
    *k = nk;
}

static uint64_t min_cap(const struct sluice_policy *p)
{
    uint64_t cap = UINT64_MAX;

    for (unsigned i = 0; i < p->nlimits; i++) {
        const struct sluice_limit *d = &p->limits[i];
        uint64_t c = d->algo == SLUICE_GCRA ? m_burst(d) : d->count;
        cap = c < cap ? c : cap;
    }
    return cap;
}

enum flip_how { VIA_SET_POLICY, VIA_OVERRIDE_CLEAR, VIA_OVERRIDE_SET, NHOW };
static const char *const hows[] = {"set_policy", "override set/clear", "override set/set"};

/*
 * Flip the key between policies a and b `flips` times; after each flip try
 * `tries` requests (cost 1..3, times advancing by up to `step` ns, or not at
 * all for step 0).  Returns the units admitted; every decision must be the
 * model's.
 */
static bool one_sided; /* carries that round: sluice may deny more, never admit more */

static uint64_t run_flips(const struct sluice_policy *a, const struct sluice_policy *b,
                          enum flip_how how, int flips, int tries, uint64_t step, uint64_t seed,
                          const char *what)
{
    static struct m_key model;
    struct sluice_config cfg;
    sluice_t *l;
    uint64_t now = 1000 * NS_PER_S + 12345, rng = seed, admitted = 0;
    const struct sluice_policy *cur = a;
    int bad = 0, mismatches = 0;

    memset(&model, 0, sizeof(model));
    sluice_config_init(&cfg);
    cfg.policy = *a;
    if (sluice_create(&cfg, &l) != 0) {
        fprintf(stderr, "%s: sluice_create failed\n", what);
        t_failures++;
        return 0;
    }
    for (int f = 0; f <= flips && !bad; f++) {
        if (f > 0) {
            const struct sluice_policy *next = cur == a ? b : a;
            int rc = 0;
            if (how == VIA_SET_POLICY)
                rc = sluice_set_policy(l, next);
            else if (how == VIA_OVERRIDE_CLEAR)
                rc = next == a ? sluice_override_clear(l, "k", 1)
                               : sluice_override_set(l, "k", 1, next);
            else
                rc = sluice_override_set(l, "k", 1, next);
            CHECK_EQ(rc, 0);
            model_carry(cur, &model, next);
            cur = next;
        }
        for (int i = 0; i < tries && !bad; i++) {
            uint64_t cost = 1 + t_rand(&rng) % 3, rem;
            unsigned mb;
            int got, want;
            if (cost > min_cap(cur))
                cost = min_cap(cur);
            now += step ? t_rand(&rng) % step : 0;
            got = sluice_acquire_at(l, "k", 1, cost, now, NULL);
            if (one_sided) {
                /* the model records what sluice admitted: is each admission
                 * within the serial bound of everything admitted before? */
                static struct m_key copy;
                copy = model;
                want = m_acquire(cur, &copy, now, cost, &mb, &rem);
                if (got == SLUICE_ALLOW && want == SLUICE_ALLOW)
                    model = copy;
                else if (got == SLUICE_ALLOW) /* over-admitted: reported below */
                    for (unsigned j = 0; j < cur->nlimits; j++)
                        m_charge(&cur->limits[j], &model.lim[j], now, cost);
                if (want == SLUICE_ALLOW)
                    want = got;
            } else {
                want = m_acquire(cur, &model, now, cost, &mb, &rem);
            }
            if (got != want) {
                if (mismatches++ < 2)
                    fprintf(stderr, "%s: flip %d try %d cost %llu now %llu: got %d, model %d\n",
                            what, f, i, (unsigned long long)cost, (unsigned long long)now, got,
                            want);
                /* at one instant keep going: the total admitted is the point */
                bad = step != 0;
            }
            if (got == SLUICE_ALLOW)
                admitted += cost;
        }
    }
    sluice_destroy(l);
    if (mismatches)
        t_failures++;
    return admitted;
}

/* The reported case: ten flips 20 -> 10 -> 20 at one instant admitted 60
 * units where 20 may pass.  Every algorithm, every way of flipping. */
static void test_one_instant(void)
{
    for (unsigned k = 0; k < 5; k++) {
        for (int how = 0; how < NHOW; how++) {
            /* GCRA: the lowered limit also has a smaller burst (tolerance) */
            struct sluice_policy hi = pol1(lim(algos[k], 20, NS_PER_S, 0));
            struct sluice_policy lo =
                pol1(lim(algos[k], 10, NS_PER_S, algos[k] == SLUICE_GCRA ? 5 : 0));
            char what[96];
            snprintf(what, sizeof(what), "one instant %s via %s", names[k], hows[how]);
            uint64_t n = run_flips(&hi, &lo, (enum flip_how)how, 10, 40, 0, k, what);
            if (n > 20)
                fprintf(stderr, "%s: %llu units admitted, at most 20 may pass\n", what,
                        (unsigned long long)n);
            CHECK(n <= 20);
        }
    }
}

/* Flips with time advancing: decisions stay the model's throughout. */
static void test_advancing(double scale)
{
    int rounds = (int)(20 * scale) + 1;

    for (unsigned k = 0; k < 5; k++)
        for (int how = 0; how < NHOW; how++)
            for (int r = 0; r < rounds; r++) {
                struct sluice_policy hi = pol1(lim(algos[k], 20, NS_PER_S, 0));
                struct sluice_policy lo =
                    pol1(lim(algos[k], 10, NS_PER_S, algos[k] == SLUICE_GCRA ? 5 : 0));
                char what[96];
                snprintf(what, sizeof(what), "advancing %s via %s round %d", names[k], hows[how],
                         r);
                run_flips(&hi, &lo, (enum flip_how)how, 30, 15, NS_PER_S / 8, 100 + (uint64_t)r,
                          what);
            }
}

/* Two limits: one keeps its algorithm and period (kept exactly), the other
 * changes algorithm or period (starts fresh), also with the limits in
 * another order. */
static void test_multi(double scale)
{
    int rounds = (int)(10 * scale) + 1;

    for (unsigned k = 0; k < 5; k++) {
        struct sluice_limit keep20 = lim(algos[k], 20, NS_PER_S, 0);
        struct sluice_limit keep10 = lim(algos[k], 10, NS_PER_S, 0);
        struct sluice_limit other = lim(algos[(k + 1) % 5], 50, 10 * NS_PER_S, 0);
        struct sluice_limit other_period = lim(algos[(k + 2) % 5], 50, 3 * NS_PER_S, 0);
        struct sluice_policy a = pol2(keep20, lim(algos[(k + 2) % 5], 50, 10 * NS_PER_S, 0));
        struct sluice_policy b = pol2(other, keep10);
        struct sluice_policy c = pol2(keep10, other_period);
        for (int how = 0; how < NHOW; how++)
            for (int r = 0; r < rounds; r++) {
                char what[96];
                snprintf(what, sizeof(what), "multi %s via %s round %d", names[k], hows[how], r);
                run_flips(&a, &b, (enum flip_how)how, 20, 12, NS_PER_S / 6, 200 + (uint64_t)r,
                          what);
                run_flips(&a, &c, (enum flip_how)how, 20, 12, NS_PER_S / 6, 300 + (uint64_t)r,
                          what);
                uint64_t n =
                    run_flips(&a, &b, (enum flip_how)how, 10, 40, 0, 400 + (uint64_t)r, what);
                CHECK(n <= 20);
            }
    }
}

/* Carries that must round toward more spent: sliding window precision
 * changes (the window's units go into one sub-bucket) and GCRA between
 * fraction grids (T = 50 ms and 1/7 s).  Never more than the model admits
 * given what was admitted before. */
static void test_rounding_carries(double scale)
{
    int rounds = (int)(20 * scale) + 1;
    struct sluice_limit s20 = lim(SLUICE_SLIDING_WINDOW, 20, NS_PER_S, 0);
    struct sluice_limit s10 = lim(SLUICE_SLIDING_WINDOW, 10, NS_PER_S, 0);
    struct sluice_policy pairs[][2] = {
        {pol1(s20), pol1(s10)},
        {pol1(lim(SLUICE_GCRA, 20, NS_PER_S, 0)), pol1(lim(SLUICE_GCRA, 7, NS_PER_S, 3))},
        {pol1(lim(SLUICE_GCRA, 1000, 7, 0)), pol1(lim(SLUICE_GCRA, 999, 7, 10))},
    };

    pairs[0][1].limits[0].precision_ns = NS_PER_S / 4;
    one_sided = true;
    for (unsigned p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
        for (int how = 0; how < NHOW; how++)
            for (int r = 0; r < rounds; r++) {
                char what[96];
                uint64_t step = p == 2 ? 3 : NS_PER_S / 8;
                snprintf(what, sizeof(what), "rounding pair %u via %s round %d", p, hows[how], r);
                run_flips(&pairs[p][0], &pairs[p][1], (enum flip_how)how, 30, 15, step,
                          500 + (uint64_t)r, what);
                uint64_t n = run_flips(&pairs[p][0], &pairs[p][1], (enum flip_how)how, 10, 40, 0,
                                       600 + (uint64_t)r, what);
                CHECK(n <= m_burst(&pairs[p][0].limits[0]));
            }
    one_sided = false;
}

/* ---- the internal ops ---------------------------------------------------- */

struct one {
    struct sl_lim lim;
    sl_aword w[64];
};

static void one_init(struct one *o, struct sluice_limit d)
{
    memset(o, 0, sizeof(*o));
    if (sl_limit_compile(&o->lim, &d) != 0 || o->lim.nwords > 64) {
        fprintf(stderr, "one_init: cannot compile\n");
        exit(1);
    }
}

static int one_charge(struct one *o, uint64_t now, uint64_t cost, uint64_t *receipt)
{
    return o->lim.ops->charge(&o->lim, o->w, now, cost, receipt);
}

static void one_undo(struct one *o, uint64_t cost, const uint64_t *receipt)
{
    o->lim.ops->undo(&o->lim, o->w, cost, receipt);
}

/* Units admissible at now, one by one (then rolled back: reads only). */
static uint64_t one_room(struct one *o, uint64_t now)
{
    struct sl_report r;

    o->lim.ops->report(&o->lim, o->w, now, 0, &r);
    return r.remaining;
}

/*
 * Race B, made deterministic: charge A, charge B, undo A.  B's charge must
 * remain.  GCRA's undo once moved TAT back by A's cost from whatever it was,
 * erasing B's charge when B came after A (11 units at one instant with
 * burst 10 through acquire_all).
 */
static void test_undo_keeps_later_charge(void)
{
    for (unsigned k = 0; k < 5; k++) {
        struct one o;
        sl_receipt ra = {0}, rb = {0};
        uint64_t t = 50 * NS_PER_S, tb = t + 2 * NS_PER_S;
        /* A read its time before B (B's time is past A's TAT and window) */
        one_init(&o, lim(algos[k], 10, NS_PER_S, 0));
        CHECK_EQ(one_charge(&o, t, 5, ra), SL_OK);
        CHECK_EQ(one_charge(&o, tb, 5, rb), SL_OK);
        one_undo(&o, 5, ra);
        /* A's rollback may keep A's units (when it cannot tell), but B's stay */
        uint64_t room = one_room(&o, tb);
        if (room > 5)
            fprintf(stderr, "undo %s: %llu units free after B's charge of 5 of 10\n", names[k],
                    (unsigned long long)room);
        CHECK(room <= 5);
        CHECK_EQ(one_charge(&o, tb, 6, ra), SL_NO);
        /* B alone rolled back: the state is as before B */
        one_init(&o, lim(algos[k], 10, NS_PER_S, 0));
        CHECK_EQ(one_charge(&o, t, 4, ra), SL_OK);
        CHECK_EQ(one_charge(&o, t, 3, rb), SL_OK);
        one_undo(&o, 3, rb);
        CHECK_EQ(one_room(&o, t), 6);
        one_undo(&o, 4, ra);
        CHECK_EQ(one_room(&o, t), 10);
    }
}

/*
 * Two charges that moved a sliding window's head on (B to sub-bucket 12,
 * then C to 13, each archiving the head before it into the one ring slot
 * of two sub-buckets), both taken back exactly, C first (an acquire_all
 * each, denied on another key): the head is back at 10, and the slot holds
 * C's archive of 12, newer than the head.  A call at 11 archived 10 there:
 * the slot read newer, the archive was skipped and 10's unit left the
 * window {10, 11}, which then admitted 2 more (a reviewer, with threads
 * held at these points).  Overwriting such a slot instead could lower it
 * under a slow archiver's CAS (ABA: 3 of 2 again); the refused head now
 * stays in the new one.
 */
static void test_undo_leaves_newer_slot(void)
{
    const uint64_t width = NS_PER_S / 1000;
    struct one o;
    sl_receipt rb = {0}, rc = {0}, r = {0};
    unsigned admitted = 0;

    one_init(&o, (struct sluice_limit){.algo = SLUICE_SLIDING_WINDOW, .count = 2,
                                       .period_ns = 2 * width, .precision_ns = width});
    CHECK_EQ(one_charge(&o, 10 * width, 1, r), SL_OK);
    CHECK_EQ(one_charge(&o, 12 * width, 1, rb), SL_OK);
    CHECK_EQ(one_charge(&o, 13 * width, 1, rc), SL_OK);
    one_undo(&o, 1, rc);
    one_undo(&o, 1, rb);
    for (int i = 0; i < 3; i++) /* {10, 11} holds 10's unit: one more at most */
        admitted += one_charge(&o, 11 * width, 1, r) == SL_OK;
    CHECK(admitted <= 1);
    admitted = 0;
    for (int i = 0; i < 3; i++) /* {11, 12}: one more at most (10's unit kept at 11) */
        admitted += one_charge(&o, 12 * width, 1, r) == SL_OK;
    CHECK(admitted <= 1);

    /* The same with 10 archived normally (D at 11) before B and C: C's
     * archive of 12 then overwrote 10's slot, and undoing both exactly put
     * the head back at 11 (a second review: 3 of 2 in {10, 11}). */
    one_init(&o, (struct sluice_limit){.algo = SLUICE_SLIDING_WINDOW, .count = 2,
                                       .period_ns = 2 * width, .precision_ns = width});
    CHECK_EQ(one_charge(&o, 10 * width, 1, r), SL_OK);
    CHECK_EQ(one_charge(&o, 11 * width, 1, r), SL_OK);
    CHECK_EQ(one_charge(&o, 12 * width, 1, rb), SL_OK);
    CHECK_EQ(one_charge(&o, 13 * width, 1, rc), SL_OK);
    one_undo(&o, 1, rc);
    one_undo(&o, 1, rb);
    { /* honest waits behind the head: none before 13 (a denial said retry 0) */
        struct sl_report rep;
        CHECK_EQ(o.lim.ops->report(&o.lim, o.w, 12 * width, 1, &rep), SL_NO);
        CHECK_EQ(rep.retry_after, width);
        CHECK_EQ(o.lim.ops->report(&o.lim, o.w, 13 * width - 1, 1, &rep), SL_NO);
        CHECK_EQ(o.lim.ops->report(&o.lim, o.w, 13 * width, 1, &rep), SL_OK);
    }
    CHECK_EQ(one_charge(&o, 11 * width, 1, r), SL_NO); /* {10, 11} holds 2 */
    CHECK_EQ(one_charge(&o, 12 * width, 1, r), SL_NO); /* {11, 12}: ahead of 13, read full */
    admitted = 0;
    for (int i = 0; i < 3; i++) /* {13, 14}: B's and C's taken back, the head keeps one */
        admitted += one_charge(&o, 14 * width, 1, r) == SL_OK;
    CHECK(admitted >= 1 && admitted <= 2);

    /* A head taken back to no units in sub-bucket I = 0 mod 2^ibits was
     * the word 0, read as no head at all (a third review: 4 of 2). */
    {
        uint64_t span = (UINT64_C(1) << 55) / width + 1, big = 1; /* algo_window.c */
        while (big <= span)
            big <<= 1;
        big <<= 1; /* 2^ibits sub-buckets */
        one_init(&o, (struct sluice_limit){.algo = SLUICE_SLIDING_WINDOW, .count = 2,
                                           .period_ns = 2 * width, .precision_ns = width});
        CHECK_EQ(one_charge(&o, (big - 3) * width, 1, r), SL_OK);
        CHECK_EQ(one_charge(&o, (big - 2) * width, 1, r), SL_OK);
        CHECK_EQ(one_charge(&o, (big - 1) * width, 1, rb), SL_OK);
        CHECK_EQ(one_charge(&o, big * width, 1, rc), SL_OK);
        one_undo(&o, 1, rc);
        one_undo(&o, 1, rb);
        admitted = 0;
        for (int i = 0; i < 3; i++) /* {big - 3, big - 2} holds 2 */
            admitted += one_charge(&o, (big - 2) * width, 1, r) == SL_OK;
        CHECK_EQ(admitted, 0);
    }
}

/*
 * The sliding log's undo removed "units j0.." by index: after an earlier
 * rollback shifted the newer units down, a later rollback removed a third
 * charge's units (stamped later) and left its own older ones, which expire
 * sooner: over-admission once they leave the window.
 */
static void test_log_undo_by_index(void)
{
    struct one o;
    sl_receipt ra, rb, rc;
    uint64_t t = 100 * NS_PER_S;

    one_init(&o, lim(SLUICE_SLIDING_LOG, 6, 10 * NS_PER_S, 0));
    CHECK_EQ(one_charge(&o, t, 2, ra), SL_OK);
    CHECK_EQ(one_charge(&o, t, 2, rb), SL_OK);
    CHECK_EQ(one_charge(&o, t + 5 * NS_PER_S, 2, rc), SL_OK); /* C stays admitted */
    one_undo(&o, 2, ra);
    one_undo(&o, 2, rb);
    /* at 110 s the units of 100 s left the window; C's 2 of 105 s are in it */
    CHECK(one_room(&o, t + 10 * NS_PER_S) <= 4);
    CHECK_EQ(one_charge(&o, t + 10 * NS_PER_S, 5, ra), SL_NO);
}

/*
 * Race 5: the replacing writer read last_ns before a racing admission's
 * touch, so the carry reads the state at a time behind the TAT's charge.
 * The carry must keep the TAT (and window state) whole, not cap it.
 */
static void test_carry_behind(void)
{
    for (unsigned k = 0; k < 5; k++) {
        struct one a, b, c;
        sl_receipt r;
        uint64_t t = 10 * NS_PER_S + NS_PER_S / 2, behind = t - 3 * NS_PER_S / 2;
        one_init(&a, lim(algos[k], 20, NS_PER_S, 0));
        one_init(&b, lim(algos[k], 10, NS_PER_S, algos[k] == SLUICE_GCRA ? 5 : 0));
        one_init(&c, lim(algos[k], 20, NS_PER_S, 0));
        CHECK_EQ(one_charge(&a, t, 20, r), SL_OK);
        a.lim.ops->freeze(&a.lim, a.w);
        a.lim.ops->carry(&a.lim, a.w, &b.lim, b.w, behind);
        b.lim.ops->freeze(&b.lim, b.w);
        b.lim.ops->carry(&b.lim, b.w, &c.lim, c.w, behind);
        if (one_room(&c, t) != 0)
            fprintf(stderr, "carry behind %s: %llu units refilled\n", names[k],
                    (unsigned long long)one_room(&c, t));
        CHECK_EQ(one_room(&c, t), 0);
        CHECK_EQ(one_charge(&c, t, 1, r), SL_NO);
    }
}

/*
 * A new policy listing a looser limit of the same algorithm and period
 * before the unchanged one: matching old and new limits one to one in list
 * order gave the spent state to the loose limit and refilled the unchanged
 * one (10 more at the same instant).
 */
static void test_carry_to_every_match(void)
{
    static const enum sluice_algo algos[] = {SLUICE_GCRA, SLUICE_FIXED_WINDOW,
                                             SLUICE_SLIDING_WINDOW, SLUICE_SLIDING_LOG,
                                             SLUICE_APPROX_SLIDING};
    const uint64_t min = 60 * NS_PER_S;

    for (unsigned a = 0; a < 5; a++) {
        struct sluice_config cfg;
        struct sluice_policy p = {0};
        sluice_t *l = NULL;
        unsigned more = 0;

        sluice_config_init(&cfg);
        sluice_policy_add(&cfg.policy, algos[a], 10, min);
        CHECK_EQ(sluice_create(&cfg, &l), 0);
        for (int i = 0; i < 10; i++)
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 5 * NS_PER_S, NULL), SLUICE_ALLOW);
        sluice_policy_add(&p, algos[a], 100, min);
        sluice_policy_add(&p, algos[a], 10, min);
        CHECK_EQ(sluice_set_policy(l, &p), 0);
        while (more < 50 && sluice_acquire_at(l, "k", 1, 1, 5 * NS_PER_S, NULL) == SLUICE_ALLOW)
            more++;
        if (more != 0)
            fprintf(stderr, "algo %d: %u more admitted after [100/min, 10/min]\n", algos[a], more);
        CHECK_EQ(more, 0);
        sluice_destroy(l);
    }
}

/*
 * Two old limits of one algorithm and period feed one new limit: it keeps
 * what both spent.  GCRA [100/s, 3/s] after 3 units at one instant has TATs
 * 30 ms and 1 s ahead; [4/s burst 3] then admits nothing at that instant
 * (carrying only the first TAT let more pass).  Only GCRA can differ
 * there: every charge reaches every limit, so two window limits of one
 * algorithm and period hold the same units.
 */
static void test_carry_from_several(void)
{
    const uint64_t t = 1000 * NS_PER_S;

    for (int how = 0; how < 2; how++) {
        struct sluice_config cfg;
        struct sluice_policy to = pol1(lim(SLUICE_GCRA, 4, NS_PER_S, 3));
        sluice_t *l = NULL;
        unsigned more = 0;

        sluice_config_init(&cfg);
        cfg.policy = pol2(lim(SLUICE_GCRA, 100, NS_PER_S, 0), lim(SLUICE_GCRA, 3, NS_PER_S, 0));
        CHECK_EQ(sluice_create(&cfg, &l), 0);
        for (int i = 0; i < 3; i++)
            CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, t, NULL), SLUICE_ALLOW);
        CHECK_EQ(how == 0 ? sluice_set_policy(l, &to) : sluice_override_set(l, "k", 1, &to), 0);
        while (more < 10 && sluice_acquire_at(l, "k", 1, 1, t, NULL) == SLUICE_ALLOW)
            more++;
        if (more != 0)
            fprintf(stderr, "gcra via %s: %u more admitted after [100/s, 3/s] -> [4/s b3]\n",
                    hows[how], more);
        CHECK_EQ(more, 0);
        sluice_destroy(l);
    }
}

/*
 * Sliding window precisions: units that a coarse window no longer counts
 * can still be inside a finer window at the same time.  6 units at
 * 1000.446 s (250 ms sub-buckets), then 500 ms sub-buckets: at 1001.246 s
 * the window [1000.5, 1001.5) holds only the 2 admitted then; back to
 * 250 ms, the window [1000.25, 1001.25) holds all 8, so with count 5 a
 * request for 3 is denied (the carry kept only the coarse window's 2).
 */
static void test_carry_precisions(void)
{
    const uint64_t t = 1000 * NS_PER_S + 446 * (NS_PER_S / 1000), later = t + NS_PER_S * 8 / 10;
    struct sluice_limit fine = lim(SLUICE_SLIDING_WINDOW, 10, NS_PER_S, 0), coarse = fine;
    struct sluice_config cfg;
    struct sluice_policy p;
    sluice_t *l = NULL;

    fine.precision_ns = NS_PER_S / 4;
    coarse.precision_ns = NS_PER_S / 2;
    coarse.count = 24;
    sluice_config_init(&cfg);
    cfg.policy = pol1(fine);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 6, t, NULL), SLUICE_ALLOW);
    p = pol1(coarse);
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, later, NULL), SLUICE_ALLOW);
    fine.count = 5;
    p = pol1(fine);
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, later, NULL), SLUICE_DENY);
    sluice_destroy(l);

    /* There and back: 5 units at 1000.769 s, 2 at 1001.519 s; the coarse
     * window then holds only the 2, but back in 250 ms sub-buckets the
     * window [1000.75, 1001.75) holds all 7: 9 more of 12 do not fit (the
     * carry had kept only what the coarse window counted). */
    fine.count = 12;
    coarse.count = 6;
    sluice_config_init(&cfg);
    cfg.policy = pol1(fine);
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 5, 1000769 * (NS_PER_S / 1000), NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, 1001519 * (NS_PER_S / 1000), NULL), SLUICE_ALLOW);
    p = pol1(coarse);
    CHECK_EQ(sluice_override_set(l, "k", 1, &p), 0);
    p = pol1(fine);
    CHECK_EQ(sluice_override_set(l, "k", 1, &p), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 9, 1001519 * (NS_PER_S / 1000), NULL), SLUICE_DENY);
    sluice_destroy(l);
}

/*
 * A windowed word that moved on from an older window stands for that
 * window's units too: A in W-1 (W-2 for the approximation, whose estimate
 * reads the window before), then B and C charge W and are both taken back,
 * B first.  Neither undo is exact, so each takes its cost off W; the word
 * was left with no units, read as a fresh key's, and a call in A's window
 * was admitted beside A (a reviewer, with threads held after their CAS;
 * at W = 0 mod 2^ibits the word was 0, which a failing call's take-back
 * read as a key nobody charged).  Now at least one unit stays.
 */
static void test_undo_keeps_older_window(void)
{
    static const enum sluice_algo which[] = {SLUICE_FIXED_WINDOW, SLUICE_APPROX_SLIDING};

    for (unsigned a = 0; a < 2; a++)
        for (int at_wrap = 0; at_wrap < 2; at_wrap++) {
            struct one o;
            sl_receipt ra, rb, rc;
            one_init(&o, lim(which[a], 4, NS_PER_S, 0));
            uint64_t W = at_wrap ? UINT64_C(1) << o.lim.ibits : 1000;
            uint64_t tw = W * NS_PER_S + NS_PER_S / 2, ta = tw - (a + 1) * NS_PER_S;
            CHECK_EQ(one_charge(&o, ta, 1, ra), SL_OK);
            CHECK_EQ(one_charge(&o, tw, 2, rb), SL_OK);
            CHECK_EQ(one_charge(&o, tw, 2, rc), SL_OK);
            one_undo(&o, 2, rb);
            one_undo(&o, 2, rc);
            CHECK(sl_load_rlx(&o.w[0]) != 0);
            /* A's window holds A's unit: 4 more never fit there */
            int more = one_charge(&o, ta, 4, ra);
            if (more != SL_NO)
                fprintf(stderr, "undo %s at W %llu: A's unit lost\n", names[which[a]],
                        (unsigned long long)W);
            CHECK_EQ(more, SL_NO);
        }
}

/*
 * A failing call takes back the key it made only if no charge stands in
 * it (decide.c): every word as a new entry's.  A sliding log's sequence
 * word wraps to 0 after 2^30 writes while its units stand (a reviewer:
 * 2^30 admissions while the failing call was held up, then the take-back
 * removed the key and a call in its window was admitted).  The sequence
 * is set to 0 here as the wrap leaves it.
 */
static void test_takeback_log_wrap(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 2, NS_PER_S, 0, 0);
    struct sl_thread *t = sl_thread_get();
    struct sl_target g;
    struct sl_entry *e;

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, NS_PER_S, NULL), SLUICE_ALLOW);
    sl_epoch_begin(t);
    sl_target_init(&g, l, "k", 1);
    e = sl_table_get(g.s, g.h, "k", 1);
    CHECK(e != NULL);
    if (e != NULL) {
        sl_store_rlx(&e->w[e->pol->lim[0].off], 0);
        bool taken = sl_entry_freeze_if_untouched(e, e->pol);
        CHECK(!taken);
        /* left as it was (thawed if the check failed: a frozen word left
         * in the table would make the next call wait for ever) */
        CHECK_U64(sl_load_rlx(&e->w[e->pol->lim[0].off]) & ~SL_DEAD, 0);
        sl_store_rlx(&e->w[e->pol->lim[0].off], 0);
    }
    sl_epoch_end(t);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, NS_PER_S, NULL), SLUICE_DENY);
    sluice_destroy(l);
}

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);

    test_one_instant();
    test_advancing(scale);
    test_multi(scale);
    test_rounding_carries(scale);
    test_undo_keeps_later_charge();
    test_log_undo_by_index();
    test_undo_leaves_newer_slot();
    test_undo_keeps_older_window();
    test_takeback_log_wrap();
    test_carry_behind();
    test_carry_to_every_match();
    test_carry_from_several();
    test_carry_precisions();
    return t_done("flips");
}
