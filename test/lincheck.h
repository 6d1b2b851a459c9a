/*
 * Linearizability checking of small sluice histories (test/linearize.c).
 *
 * A compact serial model of the contract, small enough to copy and hash at
 * every step of Wing & Gong's search: at most LC_KEYS keys, policies of at
 * most 2 limits, a handful of distinct times (lincheck_model.h: the state
 * and each limit's rule).  Here: keys, their migration across policies,
 * each operation's step, and the search.  The search is Porcupine's: depth-first
 * over the ops that may come next in real time, memoising the (linearized
 * set, model state) pairs that led nowhere.
 */
#ifndef SLUICE_TEST_LINCHECK_H
#define SLUICE_TEST_LINCHECK_H

#include "lincheck_model.h"

/* Limits of one kind (algorithm and period): a policy change carries them. */
static inline int lc_same_kind(const struct sluice_limit *a, const struct sluice_limit *b)
{
    return a->algo == b->algo && a->period_ns == b->period_ns;
}

/* The default in force has kept d's kind since generation gen. */
static inline int lc_kept_since(const struct lc_world *w, const struct lc_state *s, int lim,
                                const struct sluice_limit *d, int64_t gen)
{
    const struct sluice_policy *cur = &w->pol[s->def[lim]];

    for (unsigned j = 0; j < cur->nlimits; j++)
        if (lc_same_kind(&cur->limits[j], d))
            return s->since[lim][j] <= gen;
    return 0;
}

/* The key's layout has a sliding log (a peek migrates only such keys). */
static inline int lc_has_log(const struct lc_world *w, const struct lc_key *k)
{
    for (unsigned j = 0; k->pol >= 0 && j < w->pol[k->pol].nlimits; j++)
        if (w->pol[k->pol].limits[j].algo == SLUICE_SLIDING_LOG)
            return 1;
    return 0;
}

/* Lazy migration, as the library does it on a key's next call (a peek:
 * only a key with a sliding log; see lc_step): each limit
 * of `to` keeps the state of every limit of the same algorithm and period
 * in the key's layout (the most spent of them, lc_lim_merge); the others
 * start fresh.  From an older default, only a limit whose kind every
 * default since had (since, as the serial steps would), into an override
 * as well: is_default says `to` is the key's limiter's default in force,
 * not an override. */
static inline void lc_migrate(const struct lc_world *w, struct lc_state *s, int key, int to,
                              int is_default)
{
    struct lc_key *k = &s->k[key];
    int lim = w->key_lim[key];
    int64_t to_gen = is_default ? s->gen[lim] : 0;
    struct lc_lim out[2];

    if (k->pol == to && (k->gen == 0 || k->gen == to_gen)) {
        k->gen = to_gen;
        return;
    }
    memset(out, 0, sizeof(out));
    for (unsigned i = 0; k->pol >= 0 && i < w->pol[to].nlimits; i++) {
        const struct sluice_limit *tl = &w->pol[to].limits[i];
        int first = 1;
        if (to_gen != 0 && k->gen != 0 && s->since[lim][i] > k->gen)
            continue; /* some default in between lacked this kind: fresh */
        if (to_gen == 0 && k->gen != 0 && !lc_kept_since(w, s, lim, tl, k->gen))
            continue; /* into an override: as if through the default first */
        for (unsigned j = 0; j < w->pol[k->pol].nlimits; j++) {
            const struct sluice_limit *fl = &w->pol[k->pol].limits[j];
            struct lc_lim c;
            if (!lc_same_kind(fl, tl))
                continue;
            c = k->lim[j];
            if (tl->algo == SLUICE_SLIDING_WINDOW && m_precision(fl) != m_precision(tl))
                lc_rebucket(&c, m_precision(fl), (uint64_t)k->last);
            if (tl->algo == SLUICE_GCRA) {
                /* the library holds TAT in units of 1/q ns, q = count/gcd(period,
                 * count): a carry rounds it up to that grain (more spent) */
                uint64_t a = tl->period_ns, b = tl->count, step;
                while (b != 0) {
                    uint64_t r = a % b;
                    a = b;
                    b = r;
                }
                step = LC_D / (tl->count / a);
                c.tat = (c.tat + step - 1) / step * step;
            }
            if (first)
                out[i] = c;
            else
                lc_lim_merge(tl, &out[i], &c);
            first = 0;
        }
    }
    memcpy(k->lim, out, sizeof(out));
    k->pol = to;
    k->gen = to_gen;
}

/* set_policy: the next generation, each limit's kind followed from the
 * default it replaces (the library's sl_policy_follow). */
static inline void lc_set_default(const struct lc_world *w, struct lc_state *s, int lim, int pol)
{
    const struct sluice_policy *prev = &w->pol[s->def[lim]], *p = &w->pol[pol];
    int64_t since[2] = {0, 0};

    s->gen[lim]++;
    for (unsigned i = 0; i < p->nlimits; i++) {
        since[i] = s->gen[lim];
        for (unsigned j = 0; j < prev->nlimits; j++)
            if (lc_same_kind(&prev->limits[j], &p->limits[i]))
                since[i] = s->since[lim][j];
    }
    memcpy(s->since[lim], since, sizeof(since));
    s->def[lim] = pol;
}

/* A key laid out afresh for its policy in force. */
static inline void lc_layout(const struct lc_world *w, struct lc_state *s, int key, int pol)
{
    s->k[key].pol = pol;
    s->k[key].gen = s->k[key].ovr >= 0 ? 0 : s->gen[w->key_lim[key]];
}

static inline int lc_want(const struct lc_world *w, const struct lc_state *s, int key)
{
    return s->k[key].ovr >= 0 ? (int)s->k[key].ovr : (int)s->def[w->key_lim[key]];
}

/* Trees before 4b1a094 decided a stale time per limit (a window at its
 * stored window, GCRA at the time itself), not at the key's latest
 * admission: set for them (linearize.c: LIN_PER_LIMIT_TIME=1). */
static int lc_per_limit_time;

static inline int lc_key_fits(const struct lc_world *w, const struct lc_key *k, uint64_t now,
                              uint64_t cost)
{
    if (!lc_per_limit_time)
        now = now > (uint64_t)k->last ? now : (uint64_t)k->last;
    for (unsigned i = 0; i < w->pol[k->pol].nlimits; i++)
        if (!lc_fits(&w->pol[k->pol].limits[i], &k->lim[i], now, cost))
            return 0;
    return 1;
}

/* mask: which limits; an admission also moves the key's time (a rolled
 * back attempt does not) */
static inline void lc_key_charge(const struct lc_world *w, struct lc_key *k, uint64_t now,
                                 uint64_t cost, unsigned mask, int admit)
{
    if (!lc_per_limit_time)
        now = now > (uint64_t)k->last ? now : (uint64_t)k->last;
    if (admit)
        k->last = (int64_t)now;
    for (unsigned i = 0; i < w->pol[k->pol].nlimits; i++)
        if (mask >> i & 1)
            lc_charge(&w->pol[k->pol].limits[i], &k->lim[i], now, cost);
}

/* A key comes into the table: it starts at the limiter's latest reap time
 * (an earlier request is decided as at it), as the library's new entries. */
static inline void lc_create(const struct lc_world *w, struct lc_state *s, int key)
{
    struct lc_key *k = &s->k[key];

    if (k->exists != 0)
        return;
    k->exists = 1;
    if (k->last < s->floor[w->key_lim[key]])
        k->last = s->floor[w->key_lim[key]];
}

/* A key without an override, admitted at no time after t, whose state is a
 * fresh key's at the time it is decided at (full room in every limit). */
static inline int lc_fresh_at(const struct lc_world *w, const struct lc_state *s, int key,
                              uint64_t t)
{
    const struct lc_key *k = &s->k[key];

    if (k->exists == 0 || k->ovr >= 0 || k->last > (int64_t)t)
        return 0;
    for (unsigned i = 0; k->pol >= 0 && i < w->pol[k->pol].nlimits; i++) {
        const struct sluice_limit *d = &w->pol[k->pol].limits[i];
        if (!lc_fits(d, &k->lim[i], t, d->algo == SLUICE_GCRA ? m_burst(d) : d->count))
            return 0;
    }
    return 1;
}

/* A key no admission has touched since it was made (a failing call's take-back
 * may remove it: sl_entry_freeze_if_untouched).  Fresh at some time is not
 * that: a charge at an earlier time may be over by then, and must stay. */
static inline int lc_untouched(const struct lc_world *w, const struct lc_state *s, int key)
{
    const struct lc_key *k = &s->k[key];

    if (k->exists == 0 || k->ovr >= 0 || k->last > s->floor[w->key_lim[key]])
        return 0;
    for (int i = 0; i < 2; i++)
        if (k->lim[i].tat != 0 || k->lim[i].n != 0)
            return 0;
    return 1;
}

/* What sluice_reap may remove: such a key of that limiter, at its time. */
static inline int lc_reapable(const struct lc_world *w, const struct lc_state *s, int key,
                              const struct lc_op *op)
{
    return w->key_lim[key] == op->lim && lc_fresh_at(w, s, key, op->now);
}

static inline void lc_remove(struct lc_state *s, int key)
{
    memset(&s->k[key], 0, sizeof(s->k[key]));
    s->k[key].ovr = s->k[key].pol = -1;
}

/* The branches lc_step tries for op (nb: a decision's, by relaxation). */
static inline unsigned lc_branches(const struct lc_op *op, unsigned nb)
{
    switch (op->kind) {
    case LC_REAP:
        return op->split ? 1u : 1u << LC_KEYS;
    case LC_RESOLVE:
    case LC_REAPKEY:
        return 2;
    case LC_RESET:
        return 1;
    default:
        return nb;
    }
}

/*
 * Apply op to *s.  branch 0 is the contract's exact outcome; with relaxed,
 * branch 1 reads a DENY the model would allow as a transient denial
 * (nothing charged), and branch 2 + m leaves charges of a rolled-back
 * attempt on the (key, limit) pairs of bit mask m (the leftover a rollback
 * may not take back).  relaxed 2 (lenient) also lets the final probe drain
 * fewer units than the model.  Returns 1 if the branch explains the result.
 */
static long long lc_model_rc; /* what the last lc_step's model returned (diagnostics) */

static inline int lc_step(const struct lc_world *w, struct lc_state *s, const struct lc_op *op,
                          unsigned branch, int relaxed)
{
    int keys[4], n = 0, want, rc;
    struct lc_key peeked[4]; /* a peek's keys as they were */
    unsigned pairs = 0;

    if (branch > 0 && op->kind != LC_REAP && op->kind != LC_RESOLVE && op->kind != LC_REAPKEY &&
        op->kind != LC_RESET &&
        (!relaxed || (op->kind != LC_ACQ && op->kind != LC_ALL && op->kind != LC_PEEK)))
        return 0;
    switch (op->kind) {
    case LC_SETPOL:
        lc_set_default(w, s, op->lim, op->pid);
        lc_model_rc = 0;
        return op->rc == 0;
    case LC_OVSET:
        lc_create(w, s, op->key);
        lc_migrate(w, s, op->key, op->pid, 0);
        s->k[op->key].ovr = op->pid;
        lc_model_rc = 0;
        return op->rc == 0;
    case LC_OVCLR:
        lc_model_rc = -ENOENT;
        if (s->k[op->key].exists == 0 || s->k[op->key].ovr < 0)
            return op->rc == -ENOENT;
        s->k[op->key].ovr = -1;
        lc_migrate(w, s, op->key, lc_want(w, s, op->key), 1);
        lc_model_rc = 0;
        return op->rc == 0;
    case LC_RESET:
        if (s->k[op->key].exists == 0) {
            lc_model_rc = -ENOENT;
            return op->rc == -ENOENT;
        }
        lc_model_rc = 0;
        /* "decided as a fresh key's", at no time before its latest
         * admission, which a reset keeps (as any key, sluice.h), racing
         * admissions' times included (their times commit with their
         * charges: src/decide.c, sl_commit) */
        memset(s->k[op->key].lim, 0, sizeof(s->k[op->key].lim));
        lc_layout(w, s, op->key, lc_want(w, s, op->key));
        s->k[op->key].exists = 1;
        return op->rc == 0;
    case LC_RESOLVE: {
        /* branch 1: as the library's resolve, once the cost check passes, an
         * existing key moves to its policy, a new one is made (not by peek);
         * branch 0: the decision resolves it itself */
        struct lc_key *k = &s->k[op->key];
        want = lc_want(w, s, op->key);
        lc_model_rc = 0;
        if (branch == 0 || op->cost > lc_cap(&w->pol[want]))
            return branch <= 1;
        if (k->exists == 0 && op->pid != LC_PEEK) {
            lc_create(w, s, op->key);
            if (k->pol < 0)
                lc_layout(w, s, op->key, want); /* fresh in any layout */
        }
        if (k->exists != 0 && k->pol >= 0 && (op->pid != LC_PEEK || lc_has_log(w, k)))
            lc_migrate(w, s, op->key, want, k->ovr < 0);
        return branch == 1;
    }
    case LC_REAPKEY:
        /* branch 1: the split reap removes this key here */
        lc_model_rc = 0;
        if (branch == 0)
            return 1;
        if (branch > 1 || !lc_reapable(w, s, op->key, op))
            return 0;
        lc_remove(s, op->key);
        s->reaped[op->thread]++;
        if (s->floor[op->lim] < (int64_t)op->now)
            s->floor[op->lim] = (int64_t)op->now;
        return 1;
    case LC_REAP: {
        /* branch: the set of keys removed (bit per key), as many as it says;
         * each must be reapable, and is then absent, its state forgotten */
        unsigned removed = 0;
        lc_model_rc = 0;
        if (op->split) {
            removed = (unsigned)s->reaped[op->thread];
            s->reaped[op->thread] = 0;
            return branch == 0 && removed == (unsigned)op->rc;
        }
        for (int k = 0; k < LC_KEYS; k++) {
            if (!(branch >> k & 1))
                continue;
            if (k >= w->nkeys || !lc_reapable(w, s, k, op))
                return 0;
            lc_remove(s, k);
            removed++;
        }
        if (branch >= 1u << LC_KEYS || removed != (unsigned)op->rc)
            return 0;
        if (removed != 0 && s->floor[op->lim] < (int64_t)op->now)
            s->floor[op->lim] = (int64_t)op->now;
        return 1;
    }
    case LC_PROBE: {
        long long got = 0;
        for (int k = 0; k < w->nkeys; k++) {
            long long c = 0;
            lc_create(w, s, k);
            lc_migrate(w, s, k, lc_want(w, s, k), s->k[k].ovr < 0);
            while (c < 255 && lc_key_fits(w, &s->k[k], op->now, 1)) {
                lc_key_charge(w, &s->k[k], op->now, 1, 3, 1);
                c++;
            }
            got |= c << (8 * k);
        }
        lc_model_rc = got;
        if (relaxed == 2) /* lenient: fewer drained is an under-admission */
            for (int k = 0; k < w->nkeys; k++)
                if ((op->rc >> (8 * k) & 255) > (got >> (8 * k) & 255))
                    return 0;
        return relaxed == 2 || got == op->rc;
    }
    case LC_ACQ:
    case LC_PEEK:
        keys[n++] = op->key;
        break;
    case LC_ALL:
        for (int i = 0; i < op->nk; i++) { /* duplicates are one key */
            int dup = 0;
            for (int j = 0; j < n; j++)
                dup |= keys[j] == op->keys[i];
            if (!dup)
                keys[n++] = op->keys[i];
        }
        break;
    }
    /* every key's cost check first: an -E2BIG makes and migrates nothing
     * (a key made before a racing change is an LC_RESOLVE step's) */
    for (int i = 0; i < n; i++) {
        lc_model_rc = -E2BIG;
        if (op->cost > lc_cap(&w->pol[lc_want(w, s, keys[i])])) {
            if (op->rc != -E2BIG || branch > 1)
                return 0;
            /* relaxed branch 1: the keys it made (its LC_RESOLVE steps),
             * taken out again while no admission has touched them
             * (sl_table_unpublish_untouched), though a racing denial met them
             * meanwhile; here any untouched key of the call: existence is
             * all this changes */
            for (int k = 0; branch == 1 && k < n; k++)
                if (lc_untouched(w, s, keys[k]))
                    lc_remove(s, keys[k]);
            return 1;
        }
    }
    /* then resolve in order: each key migrated; an absent one is fresh, and
     * made only by a request that admits (a denial makes no key: the
     * library decides read-only first; a key a racing change made it make
     * is an LC_RESOLVE step's), or by an attempt's charge left standing */
    for (int i = 0; i < n; i++) {
        struct lc_key *k = &s->k[keys[i]];
        want = lc_want(w, s, keys[i]);
        peeked[i] = *k;
        if (k->exists == 0 && k->pol < 0)
            lc_layout(w, s, keys[i], want); /* never created: fresh in any layout */
        else
            lc_migrate(w, s, keys[i], want, k->ovr < 0);
        if (op->kind != LC_PEEK)
            pairs += w->pol[want].nlimits;
    }
    rc = SLUICE_ALLOW;
    for (int i = 0; i < n; i++)
        if (!lc_key_fits(w, &s->k[keys[i]], op->now, op->cost))
            rc = SLUICE_DENY;
    lc_model_rc = rc;
    /* a peek changes nothing: it decided on the keys as migrated, and they
     * stay as they were; but a key with a sliding log, which a peek
     * migrates as an acquire would (sl_entry_view) */
    for (int i = 0; op->kind == LC_PEEK && i < n; i++)
        if (!lc_has_log(w, &peeked[i]))
            s->k[keys[i]] = peeked[i];
    if (branch == 1) /* a transient denial: another call's reservation seen */
        return op->transient_ok && rc == SLUICE_ALLOW && op->rc == SLUICE_DENY;
    for (int i = 0; op->kind != LC_PEEK && (rc == SLUICE_ALLOW || branch >= 2) && i < n; i++)
        lc_create(w, s, keys[i]);
    if (branch >= 2) { /* leftovers: an attempt charged and could not take it all back */
        unsigned m = branch - 2, bit = 0;
        /* m == 0 on a denial: its keys made and left fresh, nothing charged
         * (sluice.h: a key this call's own taken-back charge touched stands,
         * fresh; a sliding log's sequence word is not a new key's then) */
        if (!op->leftover_ok || op->kind == LC_PEEK || (m == 0 && op->rc != SLUICE_DENY) ||
            m >> pairs != 0)
            return 0;
        if (op->rc != rc && !(op->transient_ok && op->rc == SLUICE_DENY))
            return 0;
        for (int i = 0; i < n; i++) {
            unsigned nl = w->pol[s->k[keys[i]].pol].nlimits;
            lc_key_charge(w, &s->k[keys[i]], op->now, op->cost,
                          (m >> bit) & ((1u << nl) - 1), 0);
            bit += nl;
        }
        if (op->rc == SLUICE_DENY)
            return 1;
    }
    if (op->rc != rc)
        return 0;
    if (rc == SLUICE_ALLOW && op->kind != LC_PEEK)
        for (int i = 0; i < n; i++)
            lc_key_charge(w, &s->k[keys[i]], op->now, op->cost, 3, 1);
    return 1;
}

/* ---- the search ----------------------------------------------------- */

#define LC_MEMO_BITS 16

struct lc_search {
    const struct lc_world *w;
    const struct lc_op *op;
    int n, relaxed, depth, best_depth;
    int path[LC_MAX_OPS], best[LC_MAX_OPS]; /* the longest linearized prefix (diagnostics) */
    uint64_t all, nodes, budget;
    uint64_t memo[1u << LC_MEMO_BITS];
    uint32_t gen[1u << LC_MEMO_BITS], cur_gen, used;
};

static inline uint64_t lc_hash(uint64_t mask, const struct lc_state *s)
{
    uint64_t h = mask * UINT64_C(0x9e3779b97f4a7c15) ^ UINT64_C(0xcbf29ce484222325), v;
    _Static_assert(sizeof(*s) % 8 == 0, "the state hashes as whole words");
    for (size_t i = 0; i < sizeof(*s); i += 8) {
        memcpy(&v, (const char *)s + i, 8);
        h = (h ^ v) * UINT64_C(0x100000001b3);
        h ^= h >> 29;
    }
    return h | 1;
}

/* Returns 1 found, 0 none, -1 out of budget. */
static int lc_dfs(struct lc_search *x, uint64_t mask, const struct lc_state *s)
{
    uint64_t min_resp = UINT64_MAX, h, slot;
    unsigned nb = x->relaxed ? 2 + 16 : 1;
    _Static_assert(1u << LC_KEYS <= 2 + 16, "a reap's branches are key sets");

    if (x->depth > x->best_depth) {
        x->best_depth = x->depth;
        memcpy(x->best, x->path, sizeof(x->best));
    }
    if (mask == x->all)
        return 1;
    if (++x->nodes > x->budget)
        return -1;
    h = lc_hash(mask, s);
    for (slot = h; x->gen[slot & ((1u << LC_MEMO_BITS) - 1)] == x->cur_gen; slot++)
        if (x->memo[slot & ((1u << LC_MEMO_BITS) - 1)] == h)
            return 0;
    for (int i = 0; i < x->n; i++)
        if (!(mask >> i & 1) && x->op[i].resp < min_resp)
            min_resp = x->op[i].resp;
    for (int i = 0; i < x->n; i++) {
        if ((mask >> i & 1) || x->op[i].inv > min_resp || (x->op[i].need & ~mask) != 0)
            continue;
        unsigned nbi = lc_branches(&x->op[i], nb);
        for (unsigned b = 0; b < nbi; b++) {
            struct lc_state t;
            int r;
            if (lc_branches(&x->op[i], 0) == 0 &&
                ((b == 1 && !(x->op[i].transient_ok && x->op[i].rc == SLUICE_DENY)) ||
                 (b >= 2 && !x->op[i].leftover_ok)))
                continue; /* cheap refusals before copying the state */
            t = *s;
            if (!lc_step(x->w, &t, &x->op[i], b, x->relaxed))
                continue;
            x->path[x->depth++] = i;
            r = lc_dfs(x, mask | UINT64_C(1) << i, &t);
            x->depth--;
            if (r != 0)
                return r;
        }
    }
    if (x->used < (1u << LC_MEMO_BITS) / 4 * 3) { /* past that, search without memo */
        x->memo[slot & ((1u << LC_MEMO_BITS) - 1)] = h;
        x->gen[slot & ((1u << LC_MEMO_BITS) - 1)] = x->cur_gen;
        x->used++;
    }
    return 0;
}

static inline void lc_initial(const struct lc_world *w, struct lc_state *s)
{
    memset(s, 0, sizeof(*s));
    for (int k = 0; k < LC_KEYS; k++) {
        s->k[k].ovr = -1;
        s->k[k].pol = -1;
    }
    for (int l = 0; l < LC_LIMITERS; l++) {
        s->def[l] = l < w->nlimiters ? l : 0;
        s->gen[l] = 1;
        s->since[l][0] = s->since[l][1] = 1;
    }
}

/* Is there a legal order?  1 yes, 0 no, -1 search budget exhausted. */
static inline int lc_check(struct lc_search *x, const struct lc_world *w, const struct lc_op *op,
                           int n, int relaxed, uint64_t budget)
{
    struct lc_state s;

    x->w = w;
    x->op = op;
    x->n = n;
    x->relaxed = relaxed;
    x->all = n == 64 ? UINT64_MAX : (UINT64_C(1) << n) - 1;
    x->nodes = 0;
    x->budget = budget;
    x->used = 0;
    x->depth = x->best_depth = 0;
    if (++x->cur_gen == 0) {
        memset(x->gen, 0, sizeof(x->gen));
        x->cur_gen = 1;
    }
    lc_initial(w, &s);
    return lc_dfs(x, 0, &s);
}

#endif
