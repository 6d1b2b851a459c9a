/*
 * sluice_acquire_all.  A call on a few present keys of private limiters
 * with no result asked for takes a lean path here: the steps the general
 * path takes for several present keys (decide.c's sl_resolve_present and
 * sl_decide_once, charge.c's sl_charge_all), in the same order, on
 * locals; see doc/DESIGN.md, "The lean path".  Whatever it declines (an
 * absent or repeated key, a shared limiter, a floor to raise, a frozen or
 * sealed entry, a lost race, a policy replaced) returns with no charge
 * standing and goes the general way, as does every call with a result on
 * entries.  Keys that may live in cells (short, under a single GCRA
 * default) are decided on their cells, and made there, with a result or
 * without (sl_lean_all_cells, below).
 */
#include "lean.h"
#include "result.h"
#include "table_cells.h"

#define SL_LEAN_KEYS 4 /* more keys: the general path, whose targets they fill */
/* inlined into both bodies of sl_acquire_all_hot (two keys unrolled) */
#define SL_LEAN_INLINE static inline __attribute__((always_inline))

struct sl_lean_key {
    struct sluice *l;
    const void *key;
    size_t len;
    uint64_t h, at;
    struct sl_shard *s;
    struct sl_entry *e;
    const struct sl_policy *pol;
    unsigned charged;           /* limits 0..charged-1 stand charged */
    uint64_t seen[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS]; /* sl_lean_check's */
    uint64_t receipt[SLUICE_MAX_LIMITS][SL_RECEIPT_WORDS];
};

/* The call's count on each key (sl_commits_count): a writer that freezes
 * one of them waits for it to leave before it seals last_ns.  acq_rel, as
 * there: a writer's read of the count is an RMW too. */
SL_LEAN_INLINE void sl_lean_count(struct sl_lean_key *k, size_t n, int delta)
{
    for (size_t i = 0; i < n; i++)
        (void)atomic_fetch_add_explicit(&k[i].e->committing, (uint32_t)delta,
                                        memory_order_acq_rel);
}

/* Key k's time committed (sl_last_commit) and the call's count on it left
 * at one instant, by one 16-byte CAS of last_ns and the word that holds
 * committing: one locked instruction where two were.  false: sealed (the
 * count still held).  Only where sl_cas_pair_usable(). */
_Static_assert(offsetof(struct sl_entry, last_ns) % 16 == 0 &&
                   offsetof(struct sl_entry, committing) == offsetof(struct sl_entry, last_ns) + 8,
               "last_ns and committing: one 16-byte aligned pair");
_Static_assert(offsetof(struct sl_entry, reserved) == offsetof(struct sl_entry, committing) + 4,
               "committing the low half of the pair's second word (x86-64, little-endian)");
SL_LEAN_INLINE bool sl_lean_commit_leave(const struct sl_lean_key *k)
{
    sl_aword *pair = &k->e->last_ns;
    uint64_t enc = sl_last_encode(k->at);
    uint64_t seen[2] = {sl_load_rlx(&k->e->last_ns),
                        atomic_load_explicit(&k->e->committing, memory_order_relaxed) |
                            (uint64_t)k->e->reserved << 32};

    for (;;) {
        if (seen[0] == SL_LAST_SEALED)
            return false;
        uint64_t next[2] = {seen[0] == 0 || (int64_t)(enc - seen[0]) > 0 ? enc : seen[0],
                            seen[1] - 1};
        if (sl_cas_pair_acqrel(pair, seen, next))
            return true;
    }
}

/* Every charge of the call taken back (sl_charge_all_back): its counts
 * left first, if it took them. */
static __attribute__((noinline)) int sl_lean_all_back(struct sl_lean_key *k, size_t n,
                                                      uint64_t cost, uint64_t now, bool counted)
{
    if (counted)
        sl_lean_count(k, n, -1);
    for (size_t i = 0; i < n; i++)
        if (k[i].charged > 0)
            sl_lean_take_back(k[i].l, k[i].key, k[i].len, k[i].e, now, k[i].at, cost,
                              k[i].receipt, k[i].charged);
    return -EAGAIN;
}

/* A denial stands only if every key was read under the policy in force
 * (sl_any_stale). */
SL_LEAN_INLINE int sl_lean_all_denied(const struct sl_lean_key *k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (sl_policy_stale_private(k[i].l, k[i].pol))
            return -EAGAIN;
    return SL_NO;
}

/* Every key present under the policy in force, found by one probe each,
 * the slot lines and then the entries fetched together first so that
 * their misses overlap (sl_resolve_present: there, a probe to prefetch the
 * entry and a lookup; here one probe, halved), each decidable now with no
 * floor to raise (sl_target_present, sl_floor_ahead). */
SL_LEAN_INLINE bool sl_lean_all_present(struct sl_lean_key *k, size_t n, uint64_t cost,
                                        uint64_t now, bool *gcra)
{
    struct sl_probe_at probe[SL_LEAN_KEYS];

    for (size_t i = 0; i < n; i++)
        sl_table_prefetch_home(k[i].s, k[i].h);
    for (size_t i = 0; i < n; i++) {
        sl_table_probe_start(k[i].s, k[i].h, &probe[i]);
        __builtin_prefetch(sl_table_probe_candidate(&probe[i]));
    }
    for (size_t i = 0; i < n; i++) {
        struct sl_entry *e = sl_table_probe_end(&probe[i], k[i].key, k[i].len);
        uint64_t lastw;
        if (e == NULL)
            return false;
        k[i].e = e;
        k[i].pol = e->pol;
        lastw = sl_load_rlx(&e->last_ns);
        if (!sl_present_decidable(k[i].l, k[i].pol, lastw, cost, now))
            return false;
        k[i].at = sl_decide_time(lastw, k[i].pol, now);
        if (!sl_floor_near_word(lastw, k[i].at))
            return false;
        k[i].charged = 0;
        *gcra = *gcra && k[i].pol->gcra_alone;
    }
    return true;
}

/* Limit j of key i checked, or charged once every check passed; gcra
 * (a constant at each call): one GCRA limit per key, its step and charge
 * inline (lean.h's choices, with the branches taken already). */
SL_LEAN_INLINE int sl_lean_all_check(struct sl_lean_key *k, size_t i, unsigned j, uint64_t cost,
                                     bool gcra)
{
    const struct sl_lim *lim = &k[i].pol->lim[j];
    sl_aword *w = k[i].e->w + lim->off;

    if (!gcra)
        return sl_lean_check(lim, w, k[i].at, cost, &k[i].seen[j], &k[i].next[j],
                             k[i].receipt[j]);
    k[i].seen[j] = sl_load_acq(w); /* acquire: as sl_lean_check's */
    return sl_gcra_step(lim, k[i].seen[j], k[i].at, cost, &k[i].next[j], k[i].receipt[j]);
}

SL_LEAN_INLINE int sl_lean_all_charge(struct sl_lean_key *k, size_t i, unsigned j, uint64_t cost,
                                      bool gcra)
{
    const struct sl_lim *lim = &k[i].pol->lim[j];
    sl_aword *w = k[i].e->w + lim->off;

    if (i == 0 && j == 0)
        return gcra ? sl_gcra_charge(lim, w, k[0].at, cost, k[0].receipt[0])
                    : sl_lean_charge_first(lim, w, k[0].at, cost, k[0].receipt[0]);
    if (!gcra)
        return sl_lean_charge_checked(lim, w, k[i].at, cost, k[i].seen[j], k[i].next[j],
                                      k[i].receipt[j]);
    uint64_t seen = k[i].seen[j];
    return sl_cas_acqrel(w, &seen, k[i].next[j])
               ? SL_OK
               : sl_gcra_charge(lim, w, k[i].at, cost, k[i].receipt[j]);
}

/*
 * sl_decide_once for present keys, with no result: every limit checked
 * read-only but key 0's first, which its charge decides (sl_verdict_but);
 * then every limit charged in order, all or nothing; the call's count on
 * each key; the tests after the charges; each key's time committed.
 * SL_OK or SL_NO, or -EAGAIN with no charge standing.  gcra as above.
 */
SL_LEAN_INLINE int sl_lean_all_decide(struct sl_lean_key *k, size_t n, uint64_t cost,
                                      uint64_t now, bool gcra)
{
    int verdict = SL_OK, rc;

    for (size_t i = 0; i < n; i++)
        for (unsigned j = i == 0; j < (gcra ? 1u : k[i].pol->nlimits); j++) {
            rc = sl_lean_all_check(k, i, j, cost, gcra);
            if (rc == SL_FROZEN)
                return -EAGAIN;
            if (rc == SL_NO)
                verdict = SL_NO; /* every limit still read: a frozen one waited for */
        }
    if (verdict == SL_NO)
        return sl_lean_all_denied(k, n);
    for (size_t i = 0; i < n; i++)
        for (unsigned j = 0; j < (gcra ? 1u : k[i].pol->nlimits); j++) {
            rc = sl_lean_all_charge(k, i, j, cost, gcra);
            if (rc != SL_OK && i == 0 && j == 0) /* nothing charged yet */
                return rc == SL_NO ? sl_lean_all_denied(k, n) : -EAGAIN;
            if (rc != SL_OK)
                return sl_lean_all_back(k, n, cost, now, false); /* frozen, or a lost race */
            k[i].charged = j + 1;
        }
    /* sl_charge_all's tests, counted on every key first: charged under a
     * default since replaced, far behind a racing admission, or on a key
     * frozen since its charge (a reset would drop that charge while the
     * others keep theirs) */
    sl_lean_count(k, n, 1);
    for (size_t i = 0; i < n; i++)
        if (!sl_floor_kept(k[i].e, k[i].at) || sl_policy_stale_private(k[i].l, k[i].pol) ||
            (sl_load_acq(&k[i].e->w[0]) & SL_DEAD))
            return sl_lean_all_back(k, n, cost, now, true);
    if (sl_cas_pair_usable()) {
        for (size_t i = 0; i < n; i++) {
            if (!sl_lean_commit_leave(&k[i])) {
                sl_lean_count(k + i, n - i, -1); /* keys 0..i-1 left with their commits */
                return sl_lean_all_back(k, n, cost, now, false);
            }
            if (i == 0)
                SL_TEST_BETWEEN_COMMITS();
        }
        return SL_OK;
    }
    for (size_t i = 0; i < n; i++) {
        if (!sl_last_commit(&k[i].e->last_ns, k[i].at))
            return sl_lean_all_back(k, n, cost, now, true);
        if (i == 0)
            SL_TEST_BETWEEN_COMMITS();
    }
    sl_lean_count(k, n, -1);
    return SL_OK;
}

/* Each limiter's statistics once (sl_count_decision). */
SL_LEAN_INLINE void sl_lean_all_stat(struct sl_thread *t, const struct sl_lean_key *k, size_t n,
                                     bool allowed)
{
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t m = 0; m < i && !seen; m++)
            seen = k[m].l == k[i].l;
        if (!seen)
            sl_stat_add_private(k[i].l, t, allowed);
    }
}

/*
 * Keys in cells: every key of the call decided by its cell's one CAS, as
 * a single key is (acquire.c, sl_acquire_cell), all or nothing.  Every
 * cell read and stepped first (a denial writes nothing); then each
 * charged by the CAS of the two words it read (state and time), the
 * policy tested before each as there; a CAS that fails (a charge came
 * between, or a writer froze the cell) takes the earlier ones back and
 * the call decides again from a fresh read (SL_LEAN_CELL_TRIES times,
 * then the general way).  A cell is taken back by the CAS of the words
 * this call wrote back to the words it read, both: the key's time too,
 * so that no later call is decided as after a charge that was not
 * (decided at a time it never had).  If that CAS fails, another charge
 * or a writer came after this call's: the charge stays, fewer admitted,
 * never more.  With a key absent the call is decided read-only first,
 * the absent key read as fresh, so that a denial makes nothing (as
 * decide.c's sl_decide_resolving); the absent keys are made in cells
 * then, and taken back (sl_cell_take_back) if the call does not admit
 * after all.
 */
#define SL_LEAN_NOT_CELLS (-0x10000) /* some key is not for a cell: entries */

struct sl_lean_cell {
    struct sl_cell *c;
    const struct sl_policy *pol;
    uint64_t seen[2], next[2];
    bool made;
};

/* Cells 0..n-1 of x taken back, and the keys this call made too; rc. */
static __attribute__((noinline)) int sl_lean_cells_back(const struct sl_lean_key *k,
                                                        struct sl_lean_cell *x, size_t charged,
                                                        size_t n, int rc)
{
    for (size_t i = 0; i < charged; i++) {
        uint64_t was[2] = {x[i].next[0], x[i].next[1]};
        (void)sl_cas_pair_acqrel(&x[i].c->state, was, x[i].seen);
    }
    for (size_t i = 0; i < n; i++)
        if (x[i].made)
            (void)sl_cell_take_back(k[i].s, k[i].h, k[i].key, k[i].len);
    return rc;
}

#define SL_LEAN_CELL_ABSENT 1 /* in no cell nor entry (make: false) */

/* Key i's cell found, or if make, made (once) and found;
 * SL_LEAN_CELL_ABSENT if absent and not make; SL_LEAN_NOT_CELLS if its key
 * cannot be in one, or is in an entry; -EAGAIN for the general path. */
SL_LEAN_INLINE int sl_lean_cell_find(struct sl_thread *t, const struct sl_lean_key *k, size_t i,
                                     struct sl_lean_cell *x, struct sl_policy *cur, uint64_t cost,
                                     uint64_t now, bool make)
{
    struct sl_cells *in;
    uint64_t kk[2];
    int rc;

    x[i].made = false;
    if (k[i].len > SL_CELL_KEY_MAX || !k[i].l->cells_on || !cur->gcra_alone)
        return SL_LEAN_NOT_CELLS;
    sl_cell_key_pack(k[i].key, k[i].len, kk);
    for (int tries = 0; tries < 2; tries++) {
        if ((x[i].c = sl_cells_lookup_in(&k[i].s->cells, k[i].h, kk, k[i].len, &in)) != NULL) {
            x[i].pol = in->owner;
            return x[i].pol == cur ? 0 : -EAGAIN;
        }
        if (sl_table_find(k[i].s, k[i].h, k[i].key, k[i].len) != NULL)
            return SL_LEAN_NOT_CELLS; /* in an entry */
        if (tries > 0 || cost > cur->min_cap)
            return -EAGAIN;
        if (!make)
            return SL_LEAN_CELL_ABSENT;
        rc = sl_key_insert_cell(t, k[i].l, k[i].s, k[i].h, k[i].key, k[i].len, cur, now);
        if (rc != 0 && rc != -EEXIST)
            return -EAGAIN;
        x[i].made = rc == 0;
    }
    return -EAGAIN;
}

/* Every cell read and stepped at its decision time: SL_OK (x[i].next
 * set), SL_NO (some key denies: nothing to charge) or -EAGAIN (frozen,
 * idle beyond its range, cost above its capacity, its policy replaced).
 * some_absent: keys with no cell yet (x[i].c NULL) are skipped, read as
 * fresh (a constant where inlined: the charging loop tests nothing). */
SL_LEAN_INLINE int sl_lean_cells_step(struct sl_lean_key *k, struct sl_lean_cell *x, size_t n,
                                      uint64_t cost, uint64_t now, bool some_absent)
{
    int verdict = SL_OK, rc;

    for (size_t i = 0; i < n; i++) {
        if (some_absent && x[i].c == NULL)
            continue; /* absent, read as fresh: a fresh key never denies */
        /* acquire: the charges before the state's latest write */
        x[i].seen[0] = sl_load_acq(&x[i].c->state);
        x[i].seen[1] = sl_load_rlx(&x[i].c->last);
        rc = sl_cell_decide(k[i].l, x[i].pol, x[i].seen, cost, now, &k[i].at, &x[i].next[0]);
        if (rc < 0)
            return -EAGAIN;
        if (rc != SL_OK) {
            verdict = SL_NO; /* every key still read: one frozen goes the general way */
            continue;
        }
        x[i].next[1] = sl_cell_last_after(x[i].seen[1], k[i].at);
    }
    if (verdict == SL_NO)
        for (size_t i = 0; i < n; i++)
            if (sl_policy_stale_private(k[i].l, x[i].pol))
                return -EAGAIN; /* read under limits replaced since: sl_any_stale */
    return verdict;
}

/*
 * The result of a decision on cells, as the general path tells it
 * (sl_report_all over every key, as sl_result_one_word for one): admitted,
 * the numbers of the words this call wrote (the cells may have moved on
 * since); denied, those of the words it read, at the cost asked.  Copies,
 * so the report reads no cell again.  new_key: a key made here stands.
 */
static __attribute__((noinline)) void sl_lean_cells_result(const struct sl_lean_key *k,
                                                           const struct sl_lean_cell *x, size_t n,
                                                           uint64_t cost, uint64_t now, int verdict,
                                                           bool new_key, struct sluice_result *res)
{
    struct sl_target g[SL_LEAN_KEYS];
    sl_aword w[SL_LEAN_KEYS];
    size_t frozen;

    for (size_t i = 0; i < n; i++) {
        w[i] = verdict == SL_OK ? x[i].next[0] : x[i].seen[0];
        memset(&g[i], 0, sizeof(g[i])); /* what the call is not told of reads as none */
        sl_target_of_word(&g[i], k[i].l, x[i].pol, &w[i], k[i].at, now, 0);
    }
    /* never frozen: both the words read and those written are live */
    (void)sl_report_all(g, n, verdict == SL_OK ? 0 : cost, res, &frozen);
    sl_result_finish(res, verdict, new_key ? SLUICE_F_NEW_KEY : 0);
}

/* Tries at a decision on cells that lose the race for a cell's CAS to
 * another charge before the call goes the general way (which moves its
 * keys to entries for good). */
#define SL_LEAN_CELL_TRIES 4

SL_LEAN_INLINE int sl_lean_all_cells(struct sl_thread *t, struct sl_lean_key *k, size_t n,
                                     uint64_t cost, uint64_t now, bool *made,
                                     struct sluice_result *res)
{
    struct sl_lean_cell x[SL_LEAN_KEYS];
    int rc;

    *made = false;
    for (size_t i = 0; i < n; i++) /* the misses of every key together, not in turn */
        if (k[i].len <= SL_CELL_KEY_MAX && k[i].l->cells_on)
            sl_cells_prefetch(&k[i].s->cells, k[i].h);
    bool absent = false;
    for (size_t i = 0; i < n; i++) {
        /* acquire: the policy's limits as published */
        struct sl_policy *cur = atomic_load_explicit(&k[i].l->policy, memory_order_acquire);
        rc = sl_lean_cell_find(t, k, i, x, cur, cost, now, false);
        if (rc == SL_LEAN_CELL_ABSENT) {
            /* read as fresh, at the time the cell made for it would be
             * decided at (from the latest reap's: sl_target_use_absent) */
            x[i].c = NULL;
            x[i].pol = cur;
            x[i].seen[0] = 0;
            k[i].at = sl_decide_time(sl_load_rlx(&k[i].l->reap_floor), cur, now);
            absent = true;
        } else if (rc != 0) {
            return rc; /* nothing made yet */
        }
    }
    /* Some key absent: decided read-only first, as the general path does
     * (sl_decide_resolving), so that a denial makes nothing.  Making first
     * and taking back after left a made key standing whenever another
     * call's charge, rolled back later, was in its cell at the take-back
     * (a reviewer's four threads on six keys: up to 1,035 such keys in
     * 180,000). */
    if (absent && (rc = sl_lean_cells_step(k, x, n, cost, now, true)) != SL_OK) {
        if (rc == SL_NO && res != NULL)
            sl_lean_cells_result(k, x, n, cost, now, SL_NO, false, res);
        return rc;
    }
    for (size_t i = 0; absent && i < n; i++) {
        struct sl_policy *cur = atomic_load_explicit(&k[i].l->policy, memory_order_acquire);
        if (x[i].c != NULL)
            continue;
        /* Near max_keys a make reaps for room, and a cell has no pin: it
         * could reap a key this call made or names.  The general path,
         * whose made entries are pinned, decides then (relaxed: a hint;
         * a racing insert is any other call's reap). */
        if (sl_load_rlx(&k[i].l->nkeys) + n > k[i].l->max_keys)
            return *made ? sl_lean_cells_back(k, x, 0, n, -EAGAIN) : -EAGAIN;
        rc = sl_lean_cell_find(t, k, i, x, cur, cost, now, true);
        *made |= x[i].made;
        if (rc != 0)
            return *made ? sl_lean_cells_back(k, x, 0, i + (rc == -EAGAIN), rc) : rc;
    }
    for (int tries = 0; tries < SL_LEAN_CELL_TRIES; tries++) {
        size_t i;
        if ((rc = sl_lean_cells_step(k, x, n, cost, now, false)) != SL_OK) {
            if (rc == SL_NO && res != NULL) /* a denial makes nothing: no new key */
                sl_lean_cells_result(k, x, n, cost, now, SL_NO, false, res);
            return *made ? sl_lean_cells_back(k, x, 0, n, rc) : rc;
        }
        for (i = 0; i < n; i++) {
            uint64_t was[2] = {x[i].seen[0], x[i].seen[1]};
            if (sl_policy_stale_private(k[i].l, x[i].pol))
                return sl_lean_cells_back(k, x, i, n, -EAGAIN);
            if (!sl_cas_pair_acqrel(&x[i].c->state, was, x[i].next))
                break;
        }
        if (i == n) {
            if (res != NULL)
                sl_lean_cells_result(k, x, n, cost, now, SL_OK, *made, res);
            return SL_OK;
        }
        /* cell i changed since it was read: a charge came between (again,
         * from a fresh read), or a writer froze it (the general path) */
        (void)sl_lean_cells_back(k, x, i, 0, 0);
    }
    return sl_lean_cells_back(k, x, 0, n, -EAGAIN);
}

/*
 * The keys checked in order (the first error is the call's), hashed, and
 * decided by the lean path if every limiter is private and no key repeats
 * (the general path merges repeats); else, or where it declined, by the
 * general path.  With a result (res), on cells only.
 */
SL_LEAN_INLINE int sl_acquire_all_lean(const struct sluice_key *keys, size_t n, uint64_t cost,
                                       uint64_t now, struct sluice_result *res)
{
    struct sl_lean_key k[SL_LEAN_KEYS];
    struct sl_thread *t;
    int rc;

    for (size_t i = 0; i < n; i++) {
        struct sluice *l = keys[i].limiter;
        if ((rc = sl_key_check(l, keys[i].key, keys[i].len)) < 0)
            return rc;
        if (l->shm != NULL)
            return sl_acquire_all_general(keys, n, cost, now, res);
        k[i].l = l;
        k[i].key = keys[i].key;
        k[i].len = keys[i].len;
        k[i].h = sl_hash_inline(&l->hkey, keys[i].key, keys[i].len);
        k[i].s = sl_shard_of(l, k[i].h);
        for (size_t m = 0; m < i; m++)
            if (k[m].l == l && k[m].h == k[i].h)
                return sl_acquire_all_general(keys, n, cost, now, res);
    }
    if ((t = sl_thread_get()) == NULL)
        return -ENOMEM;
    sl_epoch_begin(t);
    bool gcra = true, made = false;
    rc = sl_lean_all_cells(t, k, n, cost, now, &made, res);
    if (rc != SL_LEAN_NOT_CELLS)
        ; /* decided on cells, or for the general path */
    else if (res != NULL || !sl_lean_all_present(k, n, cost, now, &gcra))
        rc = -EAGAIN;
    else
        rc = gcra ? sl_lean_all_decide(k, n, cost, now, true)
                  : sl_lean_all_decide(k, n, cost, now, false);
    if (made)
        sl_epoch_end(t); /* a cell made may have grown its array, retiring the old */
    else
        sl_epoch_end_hot(t); /* it retired nothing */
    if (rc == -EAGAIN)
        return sl_acquire_all_general(keys, n, cost, now, res);
    sl_lean_all_stat(t, k, n, rc == SL_OK);
    return rc == SL_OK ? SLUICE_ALLOW : SLUICE_DENY;
}

/* Two keys (an IP and a user, a client and an endpoint), the commonest
 * call, with its loops unrolled; more the same way, looped. */
static __attribute__((noinline)) int sl_acquire_all_hot(const struct sluice_key *keys, size_t n,
                                                        uint64_t cost, uint64_t now)
{
    return n == 2 ? sl_acquire_all_lean(keys, 2, cost, now, NULL)
                  : sl_acquire_all_lean(keys, n, cost, now, NULL);
}

/* With a result: keys in cells keep their cells (the general path would
 * move them to entries for good: a server that always asks for headers
 * held every key at 270 B rather than 48). */
static __attribute__((noinline)) int sl_acquire_all_res(const struct sluice_key *keys, size_t n,
                                                        uint64_t cost, uint64_t now,
                                                        struct sluice_result *res)
{
    return sl_acquire_all_lean(keys, n, cost, now, res);
}

int sluice_acquire_all(const struct sluice_key *keys, size_t n, uint64_t cost, uint64_t now_ns,
                       struct sluice_result *res)
{
    if (keys == NULL || n == 0 || n > SL_MAX_KEYS)
        return -EINVAL;
    /* One key: as sluice_acquire_at decides it, whose general path is this
     * call's (sl_decide_keys of one key), so a key in a cell stays there. */
    if (n == 1 && cost > 0 && keys[0].limiter != NULL && keys[0].limiter->shm == NULL)
        return sluice_acquire_at(keys[0].limiter, keys[0].key, keys[0].len, cost, now_ns, res);
    if (res == NULL && cost > 0 && n >= 2 && n <= SL_LEAN_KEYS)
        return sl_acquire_all_hot(keys, n, cost, now_ns);
    if (cost > 0 && n >= 2 && n <= SL_LEAN_KEYS)
        return sl_acquire_all_res(keys, n, cost, now_ns, res);
    return sl_acquire_all_general(keys, n, cost, now_ns, res);
}
