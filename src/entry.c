/*
 * Entries: one cache-line-aligned allocation holding the header, the state
 * words of every limit and the key bytes.  Their policy pointer never
 * changes: a policy change, an override or a reset builds a new entry,
 * freezes the old one (so no charge can land on it), carries its state over
 * and swaps it in.  Entries taken out of the table are retired to the
 * epoch in batches (sl_limbo): one callback per batch, so an entry needs no
 * epoch header of its own and stays one cache line.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

size_t sl_entry_size(const struct sl_policy *pol, size_t len)
{
    return sizeof(struct sl_entry) + pol->nwords * sizeof(sl_aword) + len;
}

/* What the arena accounts per entry: nothing for slab blocks (the slab is
 * accounted), the padded size for large ones. */
size_t sl_entry_footprint(const struct sl_policy *pol, size_t len)
{
    size_t size = sl_entry_size(pol, len);

    if (sl_arena_class(size) >= 0)
        return 0;
    return (size + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1);
}

/* Takes a reference on pol; the words start fresh (all zero). */
int sl_entry_new(struct sluice *l, struct sl_policy *pol, const void *key, size_t len,
                 struct sl_entry **out)
{
    size_t size = sl_entry_size(pol, len);
    struct sl_thread *t = sl_thread_get();
    struct sl_entry *e;

    if (!sl_policy_tryref(pol))
        return -EAGAIN;
    /* the thread's own run: keys it makes share no line pair with another's */
    e = sl_arena_alloc(l->arena, size, t != NULL ? t->id : UINT_MAX);
    if (e == NULL) {
        sl_policy_unref(pol);
        return -ENOMEM;
    }
    memset(e, 0, size);
    e->key_len = (uint32_t)len;
    e->pol = pol;
    if (len != 0)
        memcpy((unsigned char *)&e->w[pol->nwords], key, len);
    *out = e;
    return 0;
}

void sl_entry_discard(struct sluice *l, struct sl_entry *e)
{
    sl_unaccount(&l->memory, sl_entry_footprint(e->pol, e->key_len));
    sl_entry_free(l->arena, e);
}

/* Unaccounted already (at retirement) or by the caller. */
void sl_entry_free(struct sl_arena *a, struct sl_entry *e)
{
    struct sl_policy *pol = e->pol;

    sl_arena_free(a, e, sl_entry_size(pol, e->key_len));
    sl_policy_unref(pol);
}

bool sl_entry_freeze(struct sl_entry *e)
{
    int rc = sl_entry_freeze_pol(e, e->pol);

    /* a private limiter's writers are its own threads: never given up on */
    SL_ASSERT(rc != -EBUSY);
    return rc == 0;
}

/* The same for an entry whose policy is given (a shared limiter's entries
 * name theirs by tag): 0, -EAGAIN (frozen already: nothing done) or
 * -EBUSY (a stopped process inside a sliding log's write: thawed again,
 * nothing changed). */
int sl_entry_freeze_pol(struct sl_entry *e, const struct sl_policy *pol)
{
    bool stable = true;

    if (sl_load_acq(&e->w[pol->lim[0].off]) & SL_DEAD)
        return -EAGAIN;
    for (unsigned i = 0; i < pol->nlimits && stable; i++)
        stable = pol->lim[i].ops->freeze(&pol->lim[i], &e->w[pol->lim[i].off]);
    if (!stable) {
        /* its late charge would land after the copy: as it was instead
         * (thawing a word not frozen yet changes nothing) */
        sl_entry_thaw_pol(e, pol);
        return -EBUSY;
    }
    /* The caller then takes last_ns with sl_last_seal(): an admission
     * whose time that misses is taken back (sl_last_commit). */
    return 0;
}

/* Undo a freeze of a published entry whose last_ns is not sealed (or was
 * given back): a dead writer's (sl_shm_reconcile), or a writer's that gave
 * up waiting for a call's commits (sl_shm_swap).  RMWs, not a load and a
 * store: a sliding log's writer (a decider, holding no shard lock) may have
 * been inside when the key was frozen, and its release may land between. */
void sl_entry_thaw_pol(struct sl_entry *e, const struct sl_policy *pol)
{
    for (unsigned i = 0; i < pol->nlimits; i++)
        (void)atomic_fetch_and_explicit(&e->w[pol->lim[i].off], ~SL_DEAD, memory_order_acq_rel);
}

/*
 * Once frozen and unpublished (moved or removed), each limit's control word
 * says where its state went: SL_DEAD | the id of the successor's word that
 * holds it, where it was carried there as it was (the same words:
 * sl_policy_same_words), SL_DEAD alone where it went nowhere or was
 * recomputed.  A charge still to be taken back follows that, one move at a
 * time (sl_undo_carried in charge.c).  The word, not the entry: the
 * follower would need the successor's policy to find the word, and a
 * shared successor's override may be cleared, its slot freed and taken by
 * another key, while the entry itself still waits for its grace period (a
 * charge that found no policy stayed spent: one unit lost to a race of
 * three overrides).  `kept`: bit j, limit j carried.  Only once
 * unpublished: a shared limiter thaws a published entry whose writer died,
 * and must find its state whole.
 */
void sl_entry_mark_moved(struct sl_entry *e, const struct sl_policy *from,
                         const struct sl_policy *to, unsigned kept, uint64_t succ)
{
    SL_ASSERT(kept == 0 || to != NULL);
    for (unsigned j = 0; j < from->nlimits; j++) {
        bool followed = (kept >> j & 1) && sl_policy_same_words(from, to, j);
        sl_store_rel(&e->w[from->lim[j].off], SL_DEAD | (followed ? succ + to->lim[j].off : 0));
    }
}

/*
 * A call on several keys commits their times one key after another, after
 * testing that none is frozen (sl_charge_all in charge.c).  A writer that
 * sealed one key between that test and its commit would fail the commit
 * there after the call committed other keys' times, which cannot be taken
 * back: the call, decided again and denied, would leave a time that stands
 * for no admission, and a call at an earlier time on those keys would then
 * be clamped past one decided before it (two units in one window of one).
 * So the call counts itself on each key before its test, and a writer reads
 * the count after its freeze: both are RMWs, so either the writer's read
 * comes first, and the call's acquiring increment makes the freeze visible
 * to its test (it commits nothing), or the writer sees the count and waits
 * for the call's commits before it seals.  Calls that count themselves
 * later see the freeze and leave.  A counted call takes no lock and runs a
 * few instructions, so a writer waits for it however long it is held up
 * (never going on past a live one: its late commit would be the gap above).
 * Only a count left by a process killed in its window is cleared: no live
 * process has a thread in a window any more (sl_shm_window_live).  A count
 * at or above SL_COMMITS_MAX is none: a leave after such a clear wraps it
 * near 2^32, and no live threads could raise it that far (a corrupt file).
 * A shared limiter's writer waits SL_COMMIT_WAIT_NS at most, and then gives
 * up, thawing the key and changing nothing (-EBUSY): a process stopped in
 * its window, or a corrupt file's record that looks like one (fuzz_shared:
 * pid 1 in a window, forever), must not hold the writer, and the shard lock
 * it holds, for ever.
 */
#define SL_COMMIT_SPINS 256
#define SL_COMMIT_CHECK_NS (UINT64_C(1000) * 1000) /* a killed process: checked each ms */
#define SL_COMMIT_WAIT_NS SL_HOLDER_GIVE_UP_NS /* a live one: waited for 2 s at most */

/* Calls counted on one key are at most the threads of every attached
 * process: waiting for a count past this would never end (fuzz_shared: a
 * writer hung on a corrupt file's 173,587,838). */
#define SL_COMMITS_MAX (UINT32_C(1) << 24)

static bool sl_commits_none(uint32_t c)
{
    return c == 0 || c >= SL_COMMITS_MAX;
}

bool sl_entry_commits_done(struct sl_entry *e, bool wait, struct sl_shm *shm)
{
    uint32_t c = atomic_fetch_add_explicit(&e->committing, 0, memory_order_acq_rel);
    uint64_t check = 0, give_up = 0;

    for (unsigned n = 0; !sl_commits_none(c); n++) {
        if (!wait) /* a reap: only a count no live call can hold is cleared */
            return shm != NULL && !sl_shm_window_live(shm) &&
                   atomic_compare_exchange_strong_explicit(&e->committing, &c, 0,
                                                           memory_order_acq_rel,
                                                           memory_order_acquire);
        if (n < SL_COMMIT_SPINS) {
            sl_cpu_relax();
        } else if (shm == NULL) {
            sched_yield();
        } else if (check == 0) {
            check = sl_mono_ns() + SL_COMMIT_CHECK_NS;
            give_up = check - SL_COMMIT_CHECK_NS + SL_COMMIT_WAIT_NS;
        } else if ((int64_t)(sl_mono_ns() - check) > 0) {
            if (!sl_shm_window_live(shm) &&
                atomic_compare_exchange_strong_explicit(&e->committing, &c, 0,
                                                        memory_order_acq_rel,
                                                        memory_order_acquire))
                return true; /* its caller died in its window */
            check = sl_mono_ns() + SL_COMMIT_CHECK_NS;
            if ((int64_t)(check - SL_COMMIT_CHECK_NS - give_up) > 0)
                return false; /* live, or looks it, for 2 s: the writer gives up */
        } else {
            sched_yield();
        }
        /* acquire: the leaving call's commits happen before the seal */
        c = atomic_load_explicit(&e->committing, memory_order_acquire);
    }
    return true;
}

/*
 * A key idle beyond its range starts fresh (sl_idle_beyond), and its last_ns
 * moves up to a time it was so by: every time a later call is decided at is
 * then one where the old state was over too, as a decision that read it
 * right would find.  The test reads last_ns as sealed after the freeze: it
 * has every admission that stands (sl_last_commit), so a racing admission
 * that came first keeps the state, carried as for any replacement.
 */
unsigned sl_entry_move_state(struct sl_entry *e, const struct sl_policy *from,
                             struct sl_entry *ne, const struct sl_policy *to,
                             const struct sl_policy *cur, enum sl_move how, uint64_t now,
                             sl_aword *save)
{
    uint64_t lastw, last;
    unsigned carried = 0;

    lastw = sl_last_seal(&e->last_ns, save);
    last = lastw - 1;

    if (how == SL_MOVE_EXPIRED) {
        uint64_t x = from->idle_fresh_ns;
        if (lastw != 0 && sl_idle_beyond(now, last, x)) {
            /* at least x after last (the old state over), at most x
             * before now (not idle beyond again at now) */
            uint64_t fresh_from = now - (last + x) > x ? sl_time_back(now, x) : last + x;
            SL_ASSERT(from == to);
            sl_store_rlx(&ne->last_ns, sl_last_encode(fresh_from));
            return 0;
        }
        how = SL_MOVE_CARRY;
    }
    /* Read the state at the key's own latest admission: administrative
     * calls pass the limiter clock, which _at callers may not use. */
    if (how == SL_MOVE_CARRY)
        carried = sl_policy_carry(from, e->w, to, ne->w, cur, lastw != 0 ? last : now);
    sl_store_rlx(&ne->last_ns, lastw);
    return carried;
}

int sl_entry_view(struct sl_target *g, struct sl_entry *e, const struct sl_policy *from,
                  struct sl_policy *to, const struct sl_policy *cur, uint64_t now)
{
    return sl_state_view(g, e->w, &e->last_ns, from, to, cur, now);
}

int sl_state_view(struct sl_target *g, sl_aword *w, sl_aword *lastp, const struct sl_policy *from,
                  struct sl_policy *to, const struct sl_policy *cur, uint64_t now)
{
    size_t words = (size_t)from->nwords + to->nwords;
    sl_aword *old, *moved;
    uint64_t lastw;

    for (unsigned j = 0; j < from->nlimits; j++)
        if (from->lim[j].def.algo == SLUICE_SLIDING_LOG)
            return -EAGAIN;
    if (g->view_words < words) {
        sl_entry_view_free(g);
        if ((g->view = sl_alloc(NULL, words * sizeof(sl_aword))) == NULL)
            return -ENOMEM;
        g->view_words = words;
    }
    old = g->view;
    moved = g->view + from->nwords;
    /* the time first: a charge that lands after it commits a later one,
     * and the copy then holds that charge too (read at an earlier time:
     * more spent, never less) */
    lastw = sl_load_acq(lastp);
    for (unsigned k = 0; k < from->nwords; k++)
        sl_store_rlx(&old[k], sl_load_acq(&w[k]));
    for (unsigned j = 0; j < from->nlimits; j++)
        if (sl_load_rlx(&old[from->lim[j].off]) & SL_DEAD)
            return -EBUSY;
    if (lastw == SL_LAST_SEALED)
        return -EBUSY;
    for (unsigned k = 0; k < to->nwords; k++)
        sl_store_rlx(&moved[k], 0);
    (void)sl_policy_carry(from, old, to, moved, cur, lastw != 0 ? lastw - 1 : now);
    sl_target_use_at(g, NULL, to, now, sl_decide_time(lastw, to, now));
    g->w = moved;
    return 0;
}

void sl_entry_view_free(struct sl_target *g)
{
    if (g->view != NULL)
        sl_free(NULL, g->view, g->view_words * sizeof(sl_aword));
    g->view = NULL;
    g->view_words = 0;
}

/*
 * Freeze limit by limit, each from a value that is fresh at `now`, by CAS:
 * a charge landing first makes the CAS fail.  On any failure the limits
 * frozen so far get their exact old values back (nobody else writes a
 * frozen word), and chargers that saw them frozen retry.
 */
bool sl_entry_freeze_if_idle(struct sl_entry *e, uint64_t now, uint64_t idle_ttl)
{
    const struct sl_policy *pol = e->pol;
    uint64_t last;

    /* pinned: acquire, pairs with the release that unpins after the
     * inserting decision's charge, so its last_ns is seen too */
    if (pol->is_override || atomic_load_explicit(&e->pinned, memory_order_acquire) != 0)
        return false;
    /* Idle at now: no admission later than now - idle_ttl.  With a ttl of
     * 0 too: a key admitted after now (a caller's later time) is not idle
     * at now, and a new key made for it after the reap would be decided
     * before that admission (new keys start at the reap's time). */
    if ((sl_entry_last(e, &last) ? sl_sat_add(last, idle_ttl) : idle_ttl) > now)
        return false;
    return sl_entry_freeze_fresh_pol(e, pol, now, idle_ttl, NULL, NULL);
}

/* Every state word of e 0, but the control words, which a freeze made
 * SL_DEAD. */
bool sl_entry_frozen_untouched(struct sl_entry *e, const struct sl_policy *pol)
{
    unsigned j = 0;

    for (unsigned k = 0; k < pol->nwords; k++) {
        uint64_t v = sl_load_acq(&e->w[k]);
        bool control = j < pol->nlimits && k == pol->lim[j].off; /* offsets ascend */
        j += control;
        if (v != (control ? SL_DEAD : 0))
            return false;
    }
    return true;
}

/*
 * A key a failing call made is taken back only if no charge stands in it.
 * Fresh at the failing call's time is not that: a charge at an earlier
 * time (times passed in, or clocks read in another order) may be over by
 * then, and the key would go with it, so that a later call at the charge's
 * time found a new key and was admitted beside it.  A new entry's words
 * are all zero, and a charge that stands leaves some word nonzero (GCRA's
 * TAT 0 means "never charged"; a window's count, which an undo never takes
 * to 0 unless exactly; a sliding head's units; a log's count of units).
 * So each control word is frozen by CAS from 0: a charge landing first
 * fails the CAS, and one coming after finds the word frozen and decides
 * again on the key's next entry; then, with no writer left, every other
 * word must be 0 too (a log's sequence word wraps to 0 after 2^30 writes
 * with its units standing).  Conservative: a word a charge wrote that did
 * not stand (a sliding window's archive, a log's stamps taken back) keeps
 * the key, for a reap to take.  acq_rel, as for every freeze.
 */
bool sl_entry_freeze_if_untouched(struct sl_entry *e, const struct sl_policy *pol)
{
    unsigned i;

    for (i = 0; i < pol->nlimits; i++) {
        uint64_t zero = 0;
        if (!sl_cas_acqrel(&e->w[pol->lim[i].off], &zero, SL_DEAD))
            break;
    }
    if (i == pol->nlimits && sl_entry_frozen_untouched(e, pol))
        return true;
    while (i-- > 0) /* nobody else writes a frozen word */
        sl_store_rel(&e->w[pol->lim[i].off], 0);
    return false;
}

bool sl_entry_freeze_fresh_pol(struct sl_entry *e, const struct sl_policy *pol, uint64_t now,
                               uint64_t idle_ttl, sl_aword *save, struct sl_shm *shm)
{
    uint64_t old[SLUICE_MAX_LIMITS], last, now0 = now;
    unsigned i, by_idle = 0;

    /* Fresh as decided at now (a reap at an older time than the latest
     * admission must not read a newer window as over). */
    now = sl_entry_time(e, pol, now);
    for (i = 0; i < pol->nlimits; i++) {
        const struct sl_lim *lim = &pol->lim[i];
        sl_aword *w = &e->w[lim->off];
        old[i] = sl_load_acq(w);
        bool fresh = lim->ops->is_fresh(lim, old[i], w, now);
        if (!fresh && sl_entry_last(e, &last) && sl_idle_beyond(now, last, lim->idle_over_ns)) {
            fresh = true; /* idle beyond the range: confirmed once frozen */
            by_idle |= 1u << i;
        }
        if ((old[i] & SL_DEAD) || !fresh || !sl_cas_acqrel(w, &old[i], old[i] | SL_DEAD))
            break;
    }
    /* Idle confirmed on last_ns sealed after the freeze, always (not only
     * for limits taken as fresh by idleness): a charge that landed before
     * the freeze has its time there or finds the seal and is taken back.
     * Without it, a call held between its charge and its commit (on a
     * later key of an acquire_all, reap_window) committed into a removed
     * key, and the key made again admitted beside that unit.  A call still
     * counted on e leaves it live (a reap never waits), unless no live
     * process has a thread in a window: then the count is a killed call's,
     * cleared, or the key would stand for good. */
    if (i == pol->nlimits && sl_entry_commits_done(e, false, shm)) {
        uint64_t lastw = sl_last_seal(&e->last_ns, save);
        bool ok = (lastw != 0 ? sl_sat_add(lastw - 1, idle_ttl) : idle_ttl) <= now0;
        for (unsigned j = 0; ok && j < pol->nlimits; j++)
            if ((by_idle >> j & 1) &&
                !(lastw != 0 && sl_idle_beyond(now, lastw - 1, pol->lim[j].idle_over_ns)))
                ok = false;
        if (ok)
            return true;
        sl_last_unseal(&e->last_ns, lastw);
    }
    while (i-- > 0)
        sl_store_rel(&e->w[pol->lim[i].off], old[i]);
    return false;
}


/* ---- batches of retired entries ------------------------------------- */

struct sl_limbo {
    ck_epoch_entry_t retire;
    struct sl_arena *arena;     /* referenced: may outlive the limiter */
    size_t n, cap;
    struct sl_entry *e[];
};

struct sl_limbo *sl_limbo_new(struct sluice *l, size_t cap)
{
    struct sl_limbo *b = sl_alloc(NULL, sizeof(*b) + cap * sizeof(b->e[0]));

    if (b != NULL) {
        b->n = 0;
        b->cap = cap;
        b->arena = l->arena;
        sl_arena_ref(l->arena);
    }
    return b;
}

bool sl_limbo_full(const struct sl_limbo *b)
{
    return b->n == b->cap;
}

bool sl_limbo_add(struct sl_limbo *b, struct sl_entry *e)
{
    if (b->n == b->cap)
        return false;
    b->e[b->n++] = e;
    return true;
}

/* Entries freed per arena lock (a reap retires 10^6 of them at once). */
#define SL_LIMBO_CHUNK 64

/*
 * The entries went cold during their grace period, so each costs a miss:
 * a chunk's misses are overlapped (prefetched together), its blocks go back
 * under one arena lock, and each policy loses its references with one
 * subtraction per run of entries that share it (usually the whole chunk).
 */
static void sl_limbo_free(ck_epoch_entry_t *ee)
{
    struct sl_limbo *b = (struct sl_limbo *)ee;

    for (size_t i = 0; i < b->n; i += SL_LIMBO_CHUNK) {
        size_t m = sl_min64(b->n - i, SL_LIMBO_CHUNK), run;
        struct sl_policy *pol[SL_LIMBO_CHUNK];
        size_t size[SL_LIMBO_CHUNK];
        void *blk[SL_LIMBO_CHUNK];

        for (size_t k = 0; k < m; k++)
            __builtin_prefetch(b->e[i + k], 1); /* freeing writes the block's first word */
        for (size_t k = 0; k < m; k++) {
            blk[k] = b->e[i + k];
            pol[k] = b->e[i + k]->pol;
            size[k] = sl_entry_size(pol[k], b->e[i + k]->key_len);
        }
        sl_arena_free_many(b->arena, blk, size, m);
        for (size_t k = 0; k < m; k += run) {
            for (run = 1; k + run < m && pol[k + run] == pol[k]; run++)
                ;
            sl_policy_unref_n(pol[k], run);
        }
    }
    sl_arena_unref(b->arena);
    free(b);
}

/* The thread's spare batch of one, if it has one: the insert and
 * replace paths then allocate nothing but the entry. */
struct sl_limbo *sl_limbo_one(struct sl_thread *t, struct sluice *l)
{
    struct sl_limbo *b = t->spare;

    if (b == NULL)
        return sl_limbo_new(l, 1);
    t->spare = NULL;
    b->n = 0;
    b->arena = l->arena;
    sl_arena_ref(l->arena);
    return b;
}

void sl_limbo_retire(struct sl_thread *t, struct sl_limbo *b)
{
    if (b->n == 0) {
        sl_arena_unref(b->arena);
        if (b->cap == 1 && t->spare == NULL) {
            b->arena = NULL;
            t->spare = b; /* kept for the next writer of this thread */
            return;
        }
        free(b);
        return;
    }
    sl_retire(t, &b->retire, sl_limbo_free);
}
