/*
 * One attempt at a decision on resolved keys; see charge.h.
 */
#include "charge.h"
#include "resolve.h"
#include "result.h"

/*
 * A charge to take back whose entry a writer froze first (a policy change,
 * an override, a reset, a key idle beyond its range, a reap): the state
 * went with the charge in it into the entry that replaced this one, or
 * nowhere.  Left there, the charge would stand for an admission that never
 * happened, and the decision made again on the new entry would charge a
 * second time (a set_policy to the policy in force, racing a peek that
 * moved the key, spent a cost-5 call's units up to four times over).  The
 * frozen entry says where each limit's state went once its writer is done
 * (sl_entry_mark_moved): the word its words went to, where they went as
 * they were (sl_policy_same_words).  The charge is taken back there, by
 * this limit's own undo, which still finds the charge by its receipt and
 * leaves the state if others charged since.  Only that word, one move at
 * a time: the key's current entry may hold a state this charge never
 * reached (made fresh, reset, or reaped and made again), whose words could
 * equal the receipt.  Elsewhere (a GCRA limit whose T changed its
 * fraction, a sliding log) it stays spent: an under-admission, never more.
 * Every entry on the way was unpublished after this call's section began,
 * so none is reclaimed before the call is done.
 */
#define SL_UNDO_HOPS 4096

static __attribute__((noinline)) void sl_undo_carried(struct sl_target *g, unsigned j,
                                                      uint64_t cost)
{
    const struct sl_lim *lim = &g->pol->lim[j];
    sl_aword *w = g->w + lim->off;

    /* Moves may come faster than one is followed (a set_policy loop and
     * peeks): the bound only keeps a call finite against a writer that
     * never stops; past it a private limiter's walk ends under its shard
     * lock (below), and a shared limiter's charge stays spent. */
    for (int hops = 0; w != NULL && hops < SL_UNDO_HOPS; hops++) {
        /* read under the shard lock: the writer that froze the word is
         * done, and no other is midway (a freeze undone and another begun) */
        uint64_t v = sl_target_settled(g, w);
        if (v & SL_DEAD) { /* else thawed (a shared limiter's writer died): w again */
            if (v == SL_DEAD)
                return; /* its state went nowhere */
            w = g->l->shm != NULL ? sl_shm_word_of_id(g->l, v & ~SL_DEAD, lim->nwords)
                                  : sl_word_of_id(v & ~SL_DEAD);
            if (w == NULL)
                return;
        }
        if (lim->ops->undo(lim, w, cost, g->receipt[j]))
            return;
    }
    /* Not caught up: each hop above takes the shard lock the mover takes
     * for each move, so a set_policy-and-peek loop can add moves as fast
     * as they are followed (a mutex convoy on a loaded machine: 4096 hops
     * in 7 ms, the charge left spent and the call charged again).  A
     * private entry is frozen, carried and marked only under its shard
     * lock (sl_entry_replace, the reaps, sl_table_unpublish_untouched), so
     * with the lock held throughout no move comes, every word read is
     * settled, and the rest of the chain (entries unpublished during this
     * call's section, so not reclaimed) is walked to its end. */
    if (w != NULL && g->l->shm == NULL) {
        sl_shard_lock(g->s);
        for (;;) {
            uint64_t v = sl_load_acq(w);
            if (!(v & SL_DEAD)) {
                (void)lim->ops->undo(lim, w, cost, g->receipt[j]); /* live: cannot freeze */
                break;
            }
            if (v == SL_DEAD || (w = sl_word_of_id(v & ~SL_DEAD)) == NULL)
                break;
        }
        sl_shard_unlock(g->s);
    }
}

void sl_undo_limit(struct sl_target *g, unsigned j, uint64_t cost)
{
    const struct sl_lim *lim = &g->pol->lim[j];

    if (!lim->ops->undo(lim, g->w + lim->off, cost, g->receipt[j]))
        sl_undo_carried(g, j, cost);
}

static void sl_undo_all(struct sl_target *g, size_t n, uint64_t cost)
{
    for (size_t i = 0; i < n; i++)
        while (g[i].charged > 0)
            sl_undo_limit(&g[i], --g[i].charged, cost);
}

void sl_floor_raise(struct sl_target *g, uint64_t cost)
{
    for (unsigned j = 0; j < g->pol->nlimits; j++) {
        const struct sl_lim *lim = &g->pol->lim[j];
        if (lim->ops->report(lim, g->w + lim->off, g->at, cost, NULL) != SL_OK)
            return; /* it will not pass (or is frozen): nothing to publish */
    }
    sl_time_raise(&g->e->last_ns, sl_time_back(g->at, SL_TIME_SLACK));
}

/* g[i]'s limiter is not that of an earlier key of g. */
static bool sl_first_of_limiter(const struct sl_target *g, size_t i)
{
    for (size_t k = 0; k < i; k++)
        if (g[k].l == g[i].l)
            return false;
    return true;
}

/*
 * A call on several keys counts itself on each (tracked) key before its
 * test that none is frozen, and leaves after its commits, or before taking
 * its charges back (whose undo may wait for the writer that waits for this
 * count): entry.c, sl_entry_commits_done.  acq_rel RMWs: a writer's read
 * of the count is an RMW too.
 */
/* Shared limiters: this thread's window, once per file (entry.c tells a
 * killed process's counts by it). */
static void sl_commits_window(struct sl_target *g, size_t n, int delta)
{
    struct sl_thread *t = NULL;

    for (size_t i = 0; i < n; i++)
        if (g[i].l->shm != NULL && sl_first_of_limiter(g, i) &&
            (t != NULL || (t = sl_thread_get()) != NULL))
            sl_shm_window(g[i].l, t->id, delta);
}

static void sl_commits_count(struct sl_target *g, size_t n, int delta)
{
    if (delta > 0)
        sl_commits_window(g, n, delta); /* marked before the counts */
    for (size_t i = 0; i < n; i++)
        if (g[i].e != NULL)
            (void)atomic_fetch_add_explicit(&g[i].e->committing, (uint32_t)delta,
                                            memory_order_acq_rel);
    if (delta < 0)
        sl_commits_window(g, n, delta); /* and cleared after */
}

/* A charge of every key that a test after it refused: the call leaves the
 * counts first (n > 1), then takes its charges back. */
static void sl_charge_all_back(struct sl_target *g, size_t n, uint64_t cost)
{
    if (n > 1)
        sl_commits_count(g, n, -1);
    sl_undo_all(g, n, cost);
}

/*
 * Charge every limit of every tracked key; all or nothing.  The first
 * charge decides its limit, which sl_decide_once left unchecked: its
 * denial is SL_NO (res: that limit), having written nothing.  A later
 * limit denying lost a race since the read-only check passed it: its
 * charges taken back, SL_RACED.  The lean paths take these steps on
 * locals, in this order (acquire.c for one key, acquire_all.c for a few
 * present keys with no result): a step changed here changes there too.
 */
static int sl_charge_all(struct sl_target *g, size_t n, uint64_t cost,
                         struct sluice_result *res, size_t *frozen)
{
    bool first = true;

    for (size_t i = 0; i < n; i++) {
        if (g[i].e == NULL)
            continue; /* untracked: the table is full and fails open */
        sl_floor_ahead(&g[i], cost);
        for (unsigned j = 0; j < g[i].pol->nlimits; j++) {
            const struct sl_lim *lim = &g[i].pol->lim[j];
            int rc = lim->ops->charge(lim, g[i].w + lim->off, g[i].at, cost, g[i].receipt[j]);
            if (rc == SL_OK) {
                g[i].charged = j + 1;
                first = false;
                continue;
            }
            if (!first)
                sl_undo_all(g, i + 1, cost);
            if (rc == SL_FROZEN) {
                *frozen = i;
                return SL_FROZEN;
            }
            if (!first)
                return SL_RACED;
            if (res != NULL) {
                struct sl_report r;
                int seen = lim->ops->report(lim, g[i].w + lim->off, g[i].at, cost, &r);
                if (seen == SL_FROZEN) /* moved since the charge: r unwritten, say the least */
                    r = (struct sl_report){0, 0, 0, 0};
                if (seen != SL_NO)
                    r.retry_after = 1; /* freed or moved meanwhile: try again now */
                sl_report_for_caller(&r, &g[i], cost);
                if (n > 1)
                    sl_wait_pinned_keys(g, n, cost, &r.retry_after);
                sl_result_fill(res, &g[i], (unsigned)i, j, &r);
            }
            return SL_NO;
        }
    }
    /* Charged under a default policy replaced meanwhile, or decided far
     * behind a racing admission: take it back and decide again, so every
     * admission happened under policies in force together.  Likewise when
     * a key charged earlier in this call was frozen since (a reset or a
     * migration replaced it between this call's charges): a reset drops
     * that charge while the later keys keep theirs, which no serial order
     * allows.  (acquire: the freeze is an RMW on the first control word.) */
    if (n > 1)
        sl_commits_count(g, n, 1);
    for (size_t i = 0; i < n; i++)
        if (!sl_floor_holds(&g[i]) ||
            (g[i].e != NULL && sl_policy_stale(g[i].l, g[i].pol)) ||
            (n > 1 && g[i].e != NULL && (sl_load_acq(&g[i].w[0]) & SL_DEAD))) {
            sl_charge_all_back(g, n, cost);
            return SL_RACED;
        }
    /* Every test passed before the first time is committed: a time once
     * committed cannot be taken back, and with several keys no writer
     * seals one of them until this call has left (sl_entry_commits_done):
     * a commit fails on one key's seal, or where a writer cleared a count
     * it took for a killed process's. */
    for (size_t i = 0; i < n; i++) {
        if (!sl_commit(&g[i])) {
            sl_charge_all_back(g, n, cost);
            *frozen = i; /* wait for its writer, as for a frozen word */
            return SL_FROZEN;
        }
        if (i == 0 && n > 1)
            SL_TEST_BETWEEN_COMMITS();
    }
    if (n > 1)
        sl_commits_count(g, n, -1);
    return SL_OK;
}

/*
 * Some key was decided under a default policy that set_policy has replaced
 * since it was resolved.  An admission checks this after its charges
 * (sl_charge_all); a denial, or a peek's answer, must too: read under
 * limits no longer in force, it may be one no serial order gives (a DENY
 * where the new policy's capacity makes it -E2BIG, or where the new limits
 * admit).  Decided again, under the policy now in force.
 */
static bool sl_any_stale(struct sl_target *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (sl_policy_stale(g[i].l, g[i].pol))
            return true;
    return false;
}

/* The key whose first limit sl_charge_all charges first: the first one
 * tracked (n: none, every key fails open untracked). */
static size_t sl_first_charged(const struct sl_target *g, size_t n)
{
    size_t i = 0;

    while (i < n && g[i].e == NULL)
        i++;
    return i;
}

/*
 * One attempt.  Every limit but the first to be charged is checked
 * read-only, so a denial there writes nothing; then every limit is
 * charged, the first deciding itself (a charge writes nothing when it
 * denies), so one limit costs one charge and no read.  A later charge
 * that loses a race to another thread is rolled back and the whole
 * decision made again.  A denial the check found fills res with every
 * limit's numbers, from one more read-only pass: an admission, the
 * common case, reads each limit once before its charge at most.
 */
int sl_decide_once(struct sl_target *g, size_t n, uint64_t cost, bool charge,
                          struct sluice_result *res, size_t *frozen)
{
    int rc;

    if (!charge) {
        rc = sl_report_all(g, n, cost, res, frozen);
        return rc != SL_FROZEN && sl_any_stale(g, n) ? SL_RACED : rc;
    }
    rc = sl_verdict_but(g, n, cost, sl_first_charged(g, n), frozen);
    if (rc == SL_NO && res != NULL) {
        rc = sl_report_all(g, n, cost, res, frozen);
        if (rc == SL_OK)
            return SL_RACED; /* freed since the check: decided again */
    }
    if (rc == SL_OK) {
        rc = sl_charge_all(g, n, cost, res, frozen);
        if (rc == SL_OK)
            sl_report_charged(g, n, res);
    }
    return rc == SL_NO && sl_any_stale(g, n) ? SL_RACED : rc;
}
