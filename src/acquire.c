/*
 * sluice_acquire_at and sluice_acquire.  The commonest decision, a private
 * limiter's present key with no result asked for, takes the lean path
 * here: the steps the general path (decide.c, charge.c) takes for one
 * key, in the same order, on locals, in the fewest instructions; see
 * doc/DESIGN.md, "The lean path".  Whatever it declines (a new key, a
 * floor to raise, a frozen or sealed entry, a lost race, a policy
 * replaced) returns with no charge standing and goes the general way, as
 * does every call with a result or on a shared limiter.
 */
#include <string.h>

#include "lean.h"
#include "result.h"
#include "table_cells.h"

/* The lean path found neither a cell nor an entry: a new key. */
#define SL_LEAN_ABSENT (-0x10000)
/* A result asked for on a key in an entry: sl_acquire_fast's to decide. */
#define SL_LEAN_ENTRY (-0x10001)

/* lean.h */
__attribute__((noinline)) void sl_lean_take_back(struct sluice *l, const void *key, size_t len,
                                                 struct sl_entry *e, uint64_t now, uint64_t at,
                                                 uint64_t cost,
                                                 uint64_t (*receipt)[SL_RECEIPT_WORDS],
                                                 unsigned n)
{
    struct sl_target g;

    sl_target_init(&g, l, key, len);
    sl_target_use_at(&g, e, e->pol, now, at);
    memcpy(g.receipt, receipt, n * sizeof(g.receipt[0]));
    while (n > 0)
        sl_undo_limit(&g, --n, cost);
}

/*
 * Every limit of e charged at `at`, the first first, as sl_decide_once
 * charges one key: limits 1..n-1 checked read-only before any charge
 * (every one read, a frozen one waited for, so a denial there writes
 * nothing), then each charged, limit 0's charge deciding it (its denial
 * writes nothing); a later limit denying lost a race since its check.
 * A one-word later limit is stepped in its check (sl_algo.step), and its
 * charge is the CAS of that step's word, or, if another charge came
 * between, its whole charge; limit 0, if GCRA, is charged inline.
 * SL_OK, SL_NO, -EAGAIN with no charge standing, or SL_LEAN_BACK | j
 * where limits 0..j-1 are charged and must be taken back (by the caller,
 * which has what sl_lean_take_back needs: fewer arguments here).
 */
#define SL_LEAN_BACK 0x100 /* | j: limits 0..j-1 charged, to be taken back */
static inline __attribute__((always_inline)) int
sl_lean_charge_n(struct sl_entry *e, const struct sl_policy *pol, unsigned n, uint64_t cost,
                 uint64_t at, uint64_t (*receipt)[SL_RECEIPT_WORDS])
{
    uint64_t seen[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
    const struct sl_lim *lim;
    unsigned j;
    int rc;

    for (j = 1, rc = SL_OK; j < n; j++) {
        lim = &pol->lim[j];
        int got = sl_lean_check(lim, e->w + lim->off, at, cost, &seen[j], &next[j], receipt[j]);
        if (got == SL_FROZEN)
            return -EAGAIN;
        if (got == SL_NO)
            rc = SL_NO;
    }
    if (rc == SL_NO)
        return SL_NO;
    lim = &pol->lim[0];
    rc = sl_lean_charge_first(lim, e->w + lim->off, at, cost, receipt[0]);
    if (rc != SL_OK)
        return rc == SL_NO ? SL_NO : -EAGAIN;
    for (j = 1; j < n; j++) {
        lim = &pol->lim[j];
        if (sl_lean_charge_checked(lim, e->w + lim->off, at, cost, seen[j], next[j], receipt[j]) !=
            SL_OK)
            return SL_LEAN_BACK | (int)j; /* frozen, or a lost race */
    }
    return SL_OK;
}

/* Two limits, the commonest stack (a peak and a quota), with the count a
 * constant: the loops unrolled, the locals in registers. */
static __attribute__((noinline)) int
sl_lean_charge_two(struct sl_entry *e, const struct sl_policy *pol, uint64_t cost, uint64_t at,
                   uint64_t (*receipt)[SL_RECEIPT_WORDS])
{
    return sl_lean_charge_n(e, pol, 2, cost, at, receipt);
}

static __attribute__((noinline)) int
sl_lean_charge_all(struct sl_entry *e, const struct sl_policy *pol, uint64_t cost, uint64_t at,
                   uint64_t (*receipt)[SL_RECEIPT_WORDS])
{
    return sl_lean_charge_n(e, pol, pol->nlimits, cost, at, receipt);
}

/* One limit inline, GCRA's step too (the commonest policy); stacked
 * limits out of line, where their locals cost a single limit's decision
 * no registers or stack.  Always inline: left to itself GCC made this a
 * call of nine arguments, 37 of a hot decision's 309 instructions. */
static inline __attribute__((always_inline)) int
sl_lean_charge(struct sluice *l, const void *key, size_t len, struct sl_entry *e,
               const struct sl_policy *pol, uint64_t cost, uint64_t now, uint64_t at,
               uint64_t (*receipt)[SL_RECEIPT_WORDS])
{
    const struct sl_lim *lim = &pol->lim[0];
    int rc;

    if (pol->gcra_alone) {
        rc = sl_gcra_charge(lim, e->w + lim->off, at, cost, receipt[0]);
        return rc == SL_FROZEN ? -EAGAIN : rc;
    }
    if (pol->pair_cas) {
        rc = sl_lean_charge_pair(lim, e->w + lim->off, at, cost, receipt);
        return rc == SL_FROZEN ? -EAGAIN : rc;
    }
    if (pol->nlimits == 1) {
        rc = lim->ops->charge(lim, e->w + lim->off, at, cost, receipt[0]);
        return rc == SL_FROZEN ? -EAGAIN : rc;
    }
    rc = pol->nlimits == 2 ? sl_lean_charge_two(e, pol, cost, at, receipt)
                           : sl_lean_charge_all(e, pol, cost, at, receipt);
    if (rc < SL_LEAN_BACK)
        return rc; /* SL_OK, SL_NO or -EAGAIN */
    sl_lean_take_back(l, key, len, e, now, at, cost, receipt, (unsigned)rc & ~SL_LEAN_BACK);
    return -EAGAIN;
}

/*
 * The commonest decision alone: a private limiter's present key, one key,
 * no result asked for.  The same steps as sl_acquire_fast and
 * sl_decide_once take for one key, in the same order, on locals instead
 * of a target (its receipts included), with the table's probe inline, and
 * GCRA's step too for a single GCRA limit (doc/DESIGN.md, "The fast
 * path").  Whatever else happens (a new key, a floor to raise, a frozen or
 * sealed entry, a lost race, a policy replaced) returns -EAGAIN with no
 * charge standing, for the general path.  pol is e's policy.
 */
static inline __attribute__((always_inline)) int
sl_acquire_lean_on(struct sl_thread *t, struct sluice *l, const void *key, size_t len,
                   uint64_t cost, uint64_t now, struct sl_entry *e, const struct sl_policy *pol)
{
    uint64_t receipt[SLUICE_MAX_LIMITS][SL_RECEIPT_WORDS]; /* written before read */
    uint64_t lastw = sl_load_rlx(&e->last_ns), at;
    int rc;

    if (cost == 0 || !sl_present_decidable(l, pol, lastw, cost, now))
        return -EAGAIN;
    at = sl_decide_time_predicted(lastw, pol, now);
    if (!sl_floor_near_word(lastw, at))
        return -EAGAIN; /* a floor to raise first: sl_floor_ahead's */
    rc = sl_lean_charge(l, key, len, e, pol, cost, now, at, receipt);
    if (rc == SL_NO) {
        if (sl_policy_stale_private(l, pol))
            return -EAGAIN; /* read under limits replaced since: sl_any_stale */
        sl_stat_add_private(l, t, false);
        return SLUICE_DENY;
    }
    if (rc != SL_OK)
        return -EAGAIN;
    /* sl_charge_all's tests after the charges, then its commit */
    if (!sl_floor_kept(e, at) || sl_policy_stale_private(l, pol) || !sl_last_commit(&e->last_ns, at)) {
        sl_lean_take_back(l, key, len, e, now, at, cost, receipt, pol->nlimits);
        return -EAGAIN;
    }
    sl_stat_add_private(l, t, true);
    return SLUICE_ALLOW;
}

/*
 * The key found, its decision under its policy.  A key under the default
 * in force (nearly every key) is decided through the limiter's pointer to
 * that policy, read before the lookup: the same object, but its limits
 * are then loaded without waiting for the entry's line, which at 2^20
 * keys misses the cache (doc/BENCHMARKS.md, sixteenth round: 269 -> 227
 * ns, and with sl_decide_time_predicted a stacked pair 424 -> 263).  The
 * policy may be replaced after that read, as after any: the charge's own
 * stale test (sl_policy_stale_private, after it) decides, as before.
 */
/*
 * A key in a cell, decided under pol (its array's): the lean path's steps
 * on the cell's two words.  No floor and no separate commit: the one CAS
 * that charges writes the time too, and fails if either word changed since
 * they were read, so the time the decision was made at is the key's
 * latest at the instant it lands.  A denial writes nothing; its two loads
 * may straddle an admission (a later state with an earlier time), which
 * only decides it earlier, never more generously.  Whatever else (another
 * default, a frozen cell, an idle key, cost above the capacity) returns
 * -EAGAIN with nothing written: the general path moves the key to an
 * entry and decides there.  The policy is tested before the CAS, not
 * after: once a newer default is published, every path to this key's
 * state freezes the cell first (sl_table_get), so a charge landing after
 * the publish either fails or is carried, as if made before it.
 */
static inline __attribute__((always_inline)) int
sl_acquire_cell(struct sl_thread *t, struct sluice *l, struct sl_cell *c,
                const struct sl_policy *pol, const struct sl_policy *cur, uint64_t cost,
                uint64_t now, struct sluice_result *res, unsigned flags)
{
    uint64_t seen[2], at, nw;

    if (pol != cur)
        return -EAGAIN;
    /* acquire: the charges before the state's latest write */
    seen[0] = sl_load_acq(&c->state);
    seen[1] = sl_load_rlx(&c->last);
    for (;;) {
        int rc = sl_cell_decide(l, pol, seen, cost, now, &at, &nw);
        if (rc < 0)
            return -EAGAIN;
        if (rc != SL_OK) {
            if (sl_cell_policy_stale(l, pol))
                return -EAGAIN; /* read under limits replaced since */
            sl_stat_add_private(l, t, false);
            if (res != NULL)
                sl_result_one_word(l, pol, seen[0], at, now, cost, SL_NO, flags, res);
            return SLUICE_DENY;
        }
        if (sl_cell_policy_stale(l, pol))
            return -EAGAIN;
        if (sl_cell_commit(c, seen, nw, at)) {
            sl_stat_add_private(l, t, true);
            if (res != NULL)
                sl_result_one_word(l, pol, nw, at, now, cost, SL_OK, flags, res);
            return SLUICE_ALLOW;
        }
    }
}

static inline __attribute__((always_inline)) int
sl_acquire_lean_in(struct sl_thread *t, struct sluice *l, const void *key, size_t len,
                   uint64_t cost, uint64_t now, const struct sl_policy *cur, struct sl_shard *s,
                   uint64_t h, struct sluice_result *res, unsigned flags)
{
    struct sl_entry *e;

    if (len <= SL_CELL_KEY_MAX && l->cells_on) {
        struct sl_cells *in;
        struct sl_cell *c;
        uint64_t k[2];
        sl_cell_key_pack(key, len, k);
        if ((c = sl_cells_lookup_in(&s->cells, h, k, len, &in)) != NULL)
            return sl_acquire_cell(t, l, c, in->owner, cur, cost, now, res, flags);
    }
    if ((e = sl_table_find(s, h, key, len)) == NULL)
        return SL_LEAN_ABSENT;
    if (res != NULL)
        return SL_LEAN_ENTRY; /* an entry's result: the general path's */
    if (__builtin_expect(e->pol == sl_opaque(cur), 1))
        return sl_acquire_lean_on(t, l, key, len, cost, now, e, cur);
    return sl_acquire_lean_on(t, l, key, len, cost, now, e, e->pol);
}

/* internal.h */
int sl_acquire_lean_hashed(struct sl_thread *t, struct sluice *l, const void *key, size_t len,
                           uint64_t cost, uint64_t now, struct sl_shard *s, uint64_t h)
{
    /* acquire: as sl_acquire_lean's */
    const struct sl_policy *cur = atomic_load_explicit(&l->policy, memory_order_acquire);

    int rc;

    SL_ASSERT(l->shm == NULL && sl_epoch_active(t));
    rc = sl_acquire_lean_in(t, l, key, len, cost, now, cur, s, h, NULL, 0);
    return rc != SL_LEAN_ABSENT ? rc : -EAGAIN;
}

/*
 * A new key for a decision without a result: made in a cell if it may
 * live in one, then decided by the lean path; -EAGAIN (nothing made, or a
 * key made and left undecided: the general path finds it) otherwise.  Out
 * of line: the hot decision carries none of it.
 */
static __attribute__((noinline)) int sl_acquire_new_key(struct sl_thread *t, struct sluice *l,
                                                        const void *key, size_t len,
                                                        uint64_t cost, uint64_t now,
                                                        struct sluice_result *res)
{
    /* acquire: the policy's limits as published */
    struct sl_policy *cur = atomic_load_explicit(&l->policy, memory_order_acquire);
    uint64_t h = sl_hash_inline(&l->hkey, key, len);
    struct sl_shard *s = sl_shard_of(l, h);
    bool made;
    int rc;

    if (cost == 0 || cost > cur->min_cap)
        return -EAGAIN; /* decided by the general path: no key made for it here */
    rc = sl_key_insert_cell(t, l, s, h, key, len, cur, now);
    if (rc != 0 && rc != -EEXIST)
        return -EAGAIN;
    /* made here: a result says so (made and then moved to an entry by
     * another call, it is decided by the general path, which says not) */
    made = rc == 0;
    rc = sl_acquire_lean_in(t, l, key, len, cost, now, cur, s, h, res,
                            made ? SLUICE_F_NEW_KEY : 0);
    if (rc >= 0)
        return rc;
    /* Undecided (a set_policy came between): a key made here is taken
     * back, so that the general path makes it, and takes it back should
     * the call fail (-E2BIG under the new policy). */
    if (made)
        (void)sl_cell_take_back(s, h, key, len);
    return -EAGAIN;
}

/* A lean call's start: the key checked, the caller's thread record, an
 * epoch section entered, the default read and the key hashed; 0, or the
 * check's error with no section entered. */
static inline __attribute__((always_inline)) int
sl_lean_enter(sluice_t *l, const void *key, size_t len, struct sl_thread **t,
              const struct sl_policy **cur, uint64_t *h)
{
    int rc = sl_call_begin(l, key, len, t);

    if (rc < 0)
        return rc;
    sl_epoch_begin(*t);
    /* acquire: the policy's limits as published */
    *cur = atomic_load_explicit(&l->policy, memory_order_acquire);
    *h = sl_hash_inline(&l->hkey, key, len);
    return 0;
}

/* The lean path in its own epoch section; the general path where it
 * declined (its section ended: the general path waits for writers).
 * Inline in two callers: with no result (the hot decision, where res is
 * NULL at compile time) and with one (decided here only for a cell). */
static inline __attribute__((always_inline)) int
sl_acquire_hot_in(sluice_t *l, const void *key, size_t len, uint64_t cost, uint64_t now_ns,
                  struct sluice_result *res)
{
    const struct sl_policy *cur;
    struct sl_thread *t;
    uint64_t h;
    int rc = sl_lean_enter(l, key, len, &t, &cur, &h);

    if (rc < 0)
        return rc;
    rc = sl_acquire_lean_in(t, l, key, len, cost, now_ns, cur, sl_shard_of(l, h), h, res, 0);
    if (res != NULL && rc == SL_LEAN_ENTRY) {
        /* in this section, the key hashed once: the general path's first
         * step (its lookup again, of lines now cached) */
        struct sl_target g;
        sl_target_init_hashed(&g, l, key, len, h);
        rc = sl_acquire_fast(t, &g, cost, now_ns, res);
        sl_epoch_end_hot(t); /* it retired nothing */
    } else if (__builtin_expect(rc == SL_LEAN_ABSENT, 0)) {
        rc = sl_acquire_new_key(t, l, key, len, cost, now_ns, res);
        sl_epoch_end(t); /* a migration of cells may have retired an array */
    } else {
        sl_epoch_end_hot(t); /* it retired nothing */
    }
    return rc != -EAGAIN ? rc : sl_acquire_general(l, key, len, cost, now_ns, res);
}

static __attribute__((noinline)) int sl_acquire_hot(sluice_t *l, const void *key, size_t len,
                                                    uint64_t cost, uint64_t now_ns)
{
    return sl_acquire_hot_in(l, key, len, cost, now_ns, NULL);
}

static __attribute__((noinline)) int sl_acquire_hot_res(sluice_t *l, const void *key,
                                                        size_t len, uint64_t cost,
                                                        uint64_t now_ns,
                                                        struct sluice_result *res)
{
    return sl_acquire_hot_in(l, key, len, cost, now_ns, res);
}

/* Tail calls: a private limiter's call is likely the lean path's. */
int sluice_acquire_at(sluice_t *l, const void *key, size_t len, uint64_t cost, uint64_t now_ns,
                      struct sluice_result *res)
{
    if (l != NULL && l->shm == NULL && res == NULL)
        return sl_acquire_hot(l, key, len, cost, now_ns);
    /* a result on a key that may be in a cell: the lean path tries the
     * cells.  (Not filtered by the policy here: outside an epoch section
     * the policy may be freed under the reader; TSan's pair_race saw it.) */
    if (l != NULL && l->shm == NULL && len <= SL_CELL_KEY_MAX && l->cells_on)
        return sl_acquire_hot_res(l, key, len, cost, now_ns, res);
    return sl_acquire_general(l, key, len, cost, now_ns, res);
}

/*
 * A peek at a key in a cell: the cell read once, stepped as the acquire
 * would step it, nothing written, the result told from the word the
 * acquire would write (admitted) or the one read (denied), as
 * sl_acquire_cell tells it.  Whatever the acquire's cell path declines
 * (an absent key, another default, a frozen cell, cost 0 or above the
 * capacity), and the policy replaced since the read, is the general
 * path's, which decides on a view and moves nothing either.
 */
static __attribute__((noinline)) int sl_peek_cell(sluice_t *l, const void *key, size_t len,
                                                  uint64_t cost, uint64_t now,
                                                  struct sluice_result *res)
{
    const struct sl_policy *cur, *pol;
    struct sl_thread *t;
    struct sl_cells *in;
    struct sl_cell *c;
    uint64_t h, k[2], seen[2], at, nw;
    int rc = sl_lean_enter(l, key, len, &t, &cur, &h);

    if (rc < 0)
        return rc;
    sl_cell_key_pack(key, len, k);
    rc = -EAGAIN;
    if ((c = sl_cells_lookup_in(&sl_shard_of(l, h)->cells, h, k, len, &in)) != NULL &&
        (pol = in->owner) == cur) {
        /* acquire: the charges before the state's latest write */
        seen[0] = sl_load_acq(&c->state);
        seen[1] = sl_load_rlx(&c->last);
        rc = sl_cell_decide(l, pol, seen, cost, now, &at, &nw);
        if (rc >= 0 && sl_cell_policy_stale(l, pol))
            rc = -EAGAIN; /* read under limits replaced since */
        else if (rc >= 0 && res != NULL)
            sl_result_one_word(l, pol, rc == SL_OK ? nw : seen[0], at, now, cost, rc, 0, res);
    }
    sl_epoch_end_hot(t); /* it retired nothing */
    if (rc == -EAGAIN)
        return sl_peek_general(l, key, len, cost, now, res);
    return rc == SL_OK ? SLUICE_ALLOW : SLUICE_DENY;
}

int sluice_peek_at(sluice_t *l, const void *key, size_t len, uint64_t cost, uint64_t now_ns,
                   struct sluice_result *res)
{
    /* not filtered by the policy here: outside an epoch section it may be
     * freed under the reader (as sluice_acquire_at) */
    if (l != NULL && l->shm == NULL && len <= SL_CELL_KEY_MAX && l->cells_on)
        return sl_peek_cell(l, key, len, cost, now_ns, res);
    return sl_peek_general(l, key, len, cost, now_ns, res);
}

int sluice_acquire(sluice_t *l, const void *key, size_t len, uint64_t cost,
                   struct sluice_result *res)
{
    if (l == NULL)
        return -EINVAL;
    return sluice_acquire_at(l, key, len, cost, sluice_now(l), res);
}
