/*
 * Policies: validation, compilation into per-limit constants, reference
 * counting, and carrying state across a policy change.
 *
 * A policy is immutable once published.  The limiter's current-policy slot
 * and every entry laid out by it hold a reference; the last reference hands
 * it to the epoch, because a reader may have loaded the limiter's slot just
 * before it changed.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const struct sl_algo *const sl_algos[] = {
    [SLUICE_GCRA] = &sl_algo_gcra,
    [SLUICE_FIXED_WINDOW] = &sl_algo_fixed,
    [SLUICE_SLIDING_WINDOW] = &sl_algo_sliding,
    [SLUICE_SLIDING_LOG] = &sl_algo_log,
    [SLUICE_APPROX_SLIDING] = &sl_algo_approx,
};

int sl_limit_compile(struct sl_lim *lim, const struct sluice_limit *def)
{
    memset(lim, 0, sizeof(*lim));
    if ((unsigned)def->algo >= sizeof(sl_algos) / sizeof(sl_algos[0]))
        return -EINVAL;
    if (def->count == 0 || def->period_ns == 0)
        return -EINVAL;
    lim->def = *def;
    if (def->algo != SLUICE_GCRA)
        lim->def.burst = 0;
    if (def->algo != SLUICE_SLIDING_WINDOW)
        lim->def.precision_ns = 0;
    lim->ops = sl_algos[def->algo];
    return lim->ops->compile(lim);
}

int sluice_policy_add(struct sluice_policy *p, enum sluice_algo algo, uint64_t count,
                      uint64_t period_ns)
{
    struct sluice_limit def = {.algo = algo, .count = count, .period_ns = period_ns};
    struct sl_lim lim;
    int rc;

    if (p == NULL)
        return -EINVAL;
    if (p->nlimits >= SLUICE_MAX_LIMITS)
        return -ENOSPC;
    rc = sl_limit_compile(&lim, &def);
    if (rc < 0)
        return rc;
    p->limits[p->nlimits++] = def;
    return 0;
}

static void sl_policy_free(struct sl_policy *p)
{
    free(p->zero_w);
    free(p);
}

static void sl_policy_free_cb(ck_epoch_entry_t *e)
{
    sl_policy_free((struct sl_policy *)((char *)e - offsetof(struct sl_policy, retire)));
}

int sl_policy_new(const struct sluice_policy *def, bool is_override, struct sl_policy **out)
{
    struct sl_policy *p;
    uint32_t words = 0;

    if (def == NULL || def->nlimits == 0 || def->nlimits > SLUICE_MAX_LIMITS)
        return -EINVAL;
    p = sl_calloc(NULL, sizeof(*p) + def->nlimits * sizeof(p->lim[0]));
    if (p == NULL)
        return -ENOMEM;
    p->min_cap = UINT64_MAX;
    uint64_t over = 0, read = UINT64_MAX;

    for (unsigned i = 0; i < def->nlimits; i++) {
        int rc = sl_limit_compile(&p->lim[i], &def->limits[i]);
        if (rc < 0) {
            sl_policy_free(p);
            return rc;
        }
        p->lim[i].off = words;
        words += p->lim[i].nwords;
        p->min_cap = sl_min64(p->min_cap, p->lim[i].cap);
        p->absolute |= p->lim[i].def.algo != SLUICE_GCRA;
        /* a key restarts once every limit is over, while all read right */
        over = sl_max64(over, p->lim[i].idle_over_ns);
        read = sl_min64(read, p->lim[i].idle_read_ns);
        p->def.limits[i] = p->lim[i].def;
    }
    p->zero_w = sl_calloc(NULL, words * sizeof(sl_aword));
    if (p->zero_w == NULL) {
        sl_policy_free(p);
        return -ENOMEM;
    }
    p->idle_fresh_ns = over <= read ? over : UINT64_MAX;
    p->def.nlimits = def->nlimits;
    p->nlimits = def->nlimits;
    p->gcra_alone = def->nlimits == 1 && p->lim[0].def.algo == SLUICE_GCRA;
    p->pair_cas = def->nlimits == 2 && p->lim[0].ops->step != NULL && p->lim[0].nwords == 1 &&
                  p->lim[1].ops->step != NULL && p->lim[1].nwords == 1 && sl_cas_pair_usable();
    p->nwords = words;
    p->is_override = is_override;
    atomic_init(&p->refs, 1);
    *out = p;
    return 0;
}

bool sl_policy_tryref(struct sl_policy *p)
{
    uint64_t r = atomic_load_explicit(&p->refs, memory_order_relaxed);

    while (r != 0)
        if (atomic_compare_exchange_weak_explicit(&p->refs, &r, r + 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return true;
    return false;
}

void sl_policy_discard(struct sl_policy *p)
{
    sl_policy_free(p);
}

void sl_policy_unref(struct sl_policy *p)
{
    sl_policy_unref_n(p, 1);
}

void sl_policy_unref_n(struct sl_policy *p, uint64_t n)
{
    struct sl_thread *t;

    if (atomic_fetch_sub_explicit(&p->refs, n, memory_order_acq_rel) != n)
        return;
    t = sl_thread_get();
    if (t != NULL)
        sl_retire(t, &p->retire, sl_policy_free_cb);
    /* else: no record can be made (out of memory); leaking one policy is
     * the only safe choice, a reader may still hold it. */
}

/*
 * Keys of a private limiter migrate lazily: an entry under an old default
 * goes straight to the one in force when a call next meets it, skipping
 * those in between.  A serial order would have carried it through each, and
 * a limit whose algorithm and period some default in between lacked would
 * have started fresh there.  So each limit remembers the generation since
 * which every default has had its kind (since), and a carry from generation
 * g needs since <= g: the same as stepping through every generation, and
 * the same whenever the migration happens (a peek's included).
 */
/* Limits of one kind: the same algorithm and period, so one state layout
 * family that a policy change carries. */
static bool sl_lim_same_kind(const struct sl_lim *a, const struct sl_lim *b)
{
    return a->def.algo == b->def.algo && a->def.period_ns == b->def.period_ns;
}

void sl_policy_follow(struct sl_policy *p, const struct sl_policy *prev)
{
    p->gen = prev != NULL ? prev->gen + 1 : 1;
    for (unsigned i = 0; i < p->nlimits; i++) {
        struct sl_lim *l = &p->lim[i];
        l->since = p->gen;
        for (unsigned j = 0; prev != NULL && j < prev->nlimits; j++)
            if (sl_lim_same_kind(&prev->lim[j], l))
                l->since = prev->lim[j].since;
    }
}

/* `to`'s limit tl may take state from a key under `from` (see above); cur
 * is the default in force (NULL: shared limiters, which move eagerly).  A
 * key moved into an override from an older default moves as if through
 * cur first: only a kind cur has kept since from's generation. */
static bool sl_policy_lineage(const struct sl_policy *from, const struct sl_lim *tl,
                              const struct sl_policy *to, const struct sl_policy *cur)
{
    if (from->gen == 0)
        return true; /* an override's, or a shared limiter's */
    if (to->gen != 0)
        return tl->since <= from->gen;
    if (cur == NULL || cur->gen == 0)
        return true;
    for (unsigned j = 0; j < cur->nlimits; j++)
        if (sl_lim_same_kind(&cur->lim[j], tl))
            return cur->lim[j].since <= from->gen;
    return false;
}

unsigned sl_policy_carry(const struct sl_policy *from, sl_aword *from_w,
                         const struct sl_policy *to, sl_aword *to_w,
                         const struct sl_policy *cur, uint64_t now)
{
    unsigned carried = 0;

    /* Every new limit keeps the spent capacity of every old limit with its
     * algorithm and period: carry() raises its words to each in turn, so it
     * starts from the most spent of them.  Taking one of them (the first,
     * or the identical one) would refill the others' spent capacity when
     * two old limits share an algorithm and period. */
    for (unsigned i = 0; i < to->nlimits; i++) {
        const struct sl_lim *tl = &to->lim[i];
        if (!sl_policy_lineage(from, tl, to, cur))
            continue; /* its kind lapsed since from's generation: fresh */
        for (unsigned j = 0; j < from->nlimits; j++) {
            const struct sl_lim *fl = &from->lim[j];
            if (sl_lim_same_kind(fl, tl)) {
                tl->ops->carry(fl, from_w + fl->off, tl, to_w + tl->off, now);
                carried |= 1u << j;
            }
        }
    }
    return carried;
}

/* Limit j of `from` is the only one of its kind there, and `to` has one of
 * that kind at j too, alone, with the same word layout: a carry then puts
 * j's state into to's limit j word for word, and nothing else there (the
 * mover marks only such words, sl_entry_mark_moved, for sl_undo_carried).  The layout: a window's width (its count
 * only bounds the units); GCRA's q (T = p/q ns: a new count may change q,
 * and then the TAT is re-encoded).  Not the sliding log, whose carry
 * renumbers the units an undo identifies its charge by. */
static bool sl_lim_alone_of_kind(const struct sl_policy *p, unsigned j)
{
    for (unsigned k = 0; k < p->nlimits; k++)
        if (k != j && sl_lim_same_kind(&p->lim[k], &p->lim[j]))
            return false;
    return true;
}

bool sl_policy_same_words(const struct sl_policy *from, const struct sl_policy *to, unsigned j)
{
    const struct sl_lim *a, *b;

    if (j >= from->nlimits || j >= to->nlimits)
        return false;
    a = &from->lim[j];
    b = &to->lim[j];
    if (a->def.algo == SLUICE_SLIDING_LOG || !sl_lim_same_kind(a, b) ||
        !sl_lim_alone_of_kind(from, j) || !sl_lim_alone_of_kind(to, j))
        return false;
    if (a->def.algo == SLUICE_GCRA)
        return a->q == b->q && a->fbits == b->fbits;
    return a->width == b->width && a->nb == b->nb && a->ishift == b->ishift;
}

/* Reserved words are zero: a feature of a later minor version is refused
 * by this one, never ignored (see "Binary compatibility" in sluice.h). */
bool sl_policy_reserved_zero(const struct sluice_policy *p)
{
    for (unsigned i = 0; i < SLUICE_MAX_LIMITS; i++)
        if (!sl_zero(p->limits[i].reserved, 2))
            return false;
    return true;
}
