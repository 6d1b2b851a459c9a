/*
 * Sliding log (exact): one timestamp per admitted unit; admit iff the units
 * with timestamp in (now - period, now] plus the cost stay <= count.
 *
 * State: w[0] a sequence word (odd while a writer holds the key; below), w[1] the
 * total units ever admitted N, w[2] and w[3] the "excess" (below),
 * w[4..4+count) a ring of the last `count` timestamps, unit j at slot
 * j mod count, in time order (times older than the newest are stamped as
 * the newest).  Decisions read a consistent snapshot seqlock-style and
 * write nothing when they deny; an admission takes the per-key sequence by
 * CAS, so it is guarded per key rather than lock-free.  The check is O(1):
 * the cost fits iff the (count - cost + 1)-th newest unit has left the
 * window.
 * Excess: a policy change to a lower count keeps every unit still in the
 * window: those the smaller ring cannot hold are counted in w[2], all
 * stamped w[3] (the newest of them: later than the truth, so more spent).
 * They are older than the ring, so they never change a decision of this
 * count; they come back into the ring when a later change raises it.
 * The sequence word: bit 63 SL_DEAD (frozen), bits 31..62 the holder's
 * token while a writer holds the key (struct sl_holder: on a shared
 * limiter, the process), bits 0..30 the sequence, odd while held (a reader
 * would have to sleep through 2^30 writes of the key between its snapshot
 * and its CAS to mistake the snapshot); in-process, bits 0..62 the
 * sequence.  In-process the holder is the process too (sl_log_local): a
 * child forked while another thread held a key has no such thread, and
 * its waiters would have spun for ever; the token is the fork generation,
 * so a child finds the key's holder gone, as for a process killed.
 * A process killed while it holds a key is found dead by a waiter,
 * which releases the key as it is: the killed charge wrote its stamps over
 * the oldest units' slots before it stored N, so either N was stored (the
 * charge is complete) or its units are not counted and the slots it wrote
 * hold stamps later than the units they replaced (more spent: an
 * under-admission, never over); a killed undo stored N or did not.
 * Range: stamps are absolute times, read the same from any time.
 * Memory: 8 bytes per unit of count, plus 32, per key.
 */
#include <sched.h>

#include "hash.h"
#include "internal.h"

/* A stamp ts is out of the window (now - period, now] at now.  Not
 * ts + period <= now: that saturates at the top of time, where every
 * stamp would look expired and the log would admit without limit. */
static inline bool log_expired(uint64_t period, uint64_t ts, uint64_t now)
{
    return now >= period && ts <= now - period;
}

#define SL_LOG_MAX_COUNT 65536u
#define SL_LOG_RING 4u /* first ring word */

/* In-process holders: this process, numbered by fork generation (a
 * child's waiters release keys its parent's other threads held). */
static uint32_t sl_log_local_token(const struct sl_holder *h)
{
    (void)h;
    return sl_fork_generation();
}

static bool sl_log_local_dead(const struct sl_holder *h, uint32_t token)
{
    return token != sl_log_local_token(h);
}

static const struct sl_holder sl_log_local = {
    .token = sl_log_local_token, .dead = sl_log_local_dead, .give_up_ns = 0, .stuck = NULL};

static int log_compile(struct sl_lim *lim)
{
    sl_fork_watch();
    lim->holder = &sl_log_local; /* a shared limiter's binds its file's instead */
    if (lim->def.count > SL_LOG_MAX_COUNT)
        return -EINVAL;
    lim->cap = lim->def.count;
    lim->nwords = (uint32_t)(SL_LOG_RING + lim->def.count);
    /* absolute stamps read right at any time, and never wrap: a key is
     * never restarted for them (a time past the clock's wrap is not
     * later to a stamp) */
    lim->idle_over_ns = lim->idle_read_ns = UINT64_MAX;
    return 0;
}

/* Acquire loads of the snapshot keep the sequence re-check after them (the
 * seqlock's read side, without a fence; free on x86). */
static uint64_t log_ts(const struct sl_lim *lim, sl_aword *w, uint64_t j)
{
    return sl_load_acq(&w[SL_LOG_RING + j % lim->def.count]);
}

#define LOG_HOLDER_SHIFT 31
#define LOG_SEQ_MASK ((UINT64_C(1) << LOG_HOLDER_SHIFT) - 1)

static uint64_t log_seq_mask(const struct sl_lim *lim)
{
    return lim->holder != NULL ? LOG_SEQ_MASK : ~SL_DEAD;
}

/* The word once the holder of s lets go: the next (even) sequence, no
 * holder, SL_DEAD kept (a freezer may have set it meanwhile). */
static uint64_t log_released(const struct sl_lim *lim, uint64_t s)
{
    return ((s + 1) & log_seq_mask(lim)) | (s & SL_DEAD);
}

/* The word once the caller holds the key of s (even, not frozen). */
static uint64_t log_held(const struct sl_lim *lim, uint64_t s)
{
    uint64_t token = lim->holder != NULL ? lim->holder->token(lim->holder) : 0;

    return ((s + 1) & log_seq_mask(lim)) | token << LOG_HOLDER_SHIFT;
}

/* Let go of a key this thread holds. */
static void log_release(const struct sl_lim *lim, sl_aword *w)
{
    uint64_t s = sl_load_rlx(&w[0]);

    /* release: the stamps and N written under the key happen before any
     * access of whoever sees the new word; a CAS, not a store, keeps a
     * SL_DEAD a freezer sets meanwhile */
    while (!sl_cas_acqrel(&w[0], &s, log_released(lim, s)))
        ;
}

/*
 * Holds given up on, as fingerprints of the word's place and value (its
 * sequence and holder; SL_DEAD masked, which a freezer sets and clears on
 * the same hold), in the holder's process-local slots: a hold once found
 * stopped is given up on by every later wait at its first check, instead
 * of give_up_ns each.  Without that, each call on the key (a reset in a
 * loop, or each decision migrating it under its shard's lock after a
 * set_policy that gave up) waited 2 s, and those waits held up calls on
 * other keys of the shard for as long as they came.  The value names the
 * hold: the holder's next write, or its release, changes the sequence, so
 * a resumed holder's key is waited for afresh.  Relaxed: a hint.  A
 * fingerprint lost (overwritten, or read before it was stored) costs one
 * more wait; a false match one call's early give-up: fewer admitted,
 * never more.  One is a 2^-64 collision, another a sequence that wrapped
 * 2^30 writes later, and a third an entry reused: a new entry's word
 * starts at sequence 0, so the same process's first write of a key made
 * at the same place names the same hold (held for a few stores, so a
 * waiter that meets it at all is rare).
 */
static uint64_t log_stuck_print(sl_aword *w, uint64_t held)
{
    return sl_mum((uint64_t)(uintptr_t)w ^ UINT64_C(0x9e3779b97f4a7c15),
                  held ^ UINT64_C(0xc2b2ae3d27d4eb4f)) | 1;
}

static bool log_stuck_seen(const struct sl_holder *h, sl_aword *w, uint64_t held)
{
    uint64_t f = log_stuck_print(w, held);

    return atomic_load_explicit(&h->stuck[f % SL_HOLDER_STUCK], memory_order_relaxed) == f;
}

static void log_stuck_note(const struct sl_holder *h, sl_aword *w, uint64_t held)
{
    uint64_t f = log_stuck_print(w, held);

    atomic_store_explicit(&h->stuck[f % SL_HOLDER_STUCK], f, memory_order_relaxed);
}

/*
 * Wait until no writer holds the key; *out: the word then (SL_DEAD set if
 * it is frozen meanwhile), and true.  A frozen key's writer is waited for
 * as any: the freezer waits for it too, and a caller that went round by
 * the shard's lock each time it saw SL_DEAD started its wait over, for as
 * long as writers kept freezing the key (a reset in a loop).  A holder
 * that died there (shared limiters only) is released by the waiter (see
 * the top of the file: its state is safe to read as it is).  Writers hold
 * a key for a few stores, so a waiter spins, then yields; it asks whether
 * the holder lives every 256 rounds.  One live holder that stays in the
 * same write section for its holder's give_up_ns (a process stopped
 * there), or a hold given up on before (log_stuck_seen: at the first
 * look, after asking whether it died), is not waited for: false, *out
 * the held word.  Its state cannot be read, and taking
 * the key from a live holder could corrupt what it writes.
 */
static bool log_wait(const struct sl_lim *lim, sl_aword *w, uint64_t *out)
{
    const struct sl_holder *h = lim->holder;
    uint64_t held = 0, give_up = 0;

    for (unsigned n = 1;; n++) {
        uint64_t s = sl_load_acq(&w[0]);
        *out = s;
        if (!(s & 1))
            return true;
        /* a hold known stopped: given up on at once, but for a death */
        if (h != NULL &&
            (n % 256 == 0 || (n == 1 && h->stuck != NULL && log_stuck_seen(h, w, s & ~SL_DEAD)))) {
            if (h->dead(h, (uint32_t)(s >> LOG_HOLDER_SHIFT))) {
                (void)sl_cas_acqrel(&w[0], &s, log_released(lim, s));
                continue;
            }
            if (h->give_up_ns != 0) {
                /* the deadline runs from the first check of this hold;
                 * another holder, or the same one's next write, starts it
                 * again */
                if ((s & ~SL_DEAD) != held) {
                    held = s & ~SL_DEAD;
                    if (log_stuck_seen(h, w, held))
                        return false;
                    give_up = sl_mono_ns() + h->give_up_ns;
                } else if ((int64_t)(sl_mono_ns() - give_up) > 0) {
                    log_stuck_note(h, w, held);
                    return false;
                }
            }
        }
        if (n < 1024)
            sl_cpu_relax();
        else
            sched_yield();
    }
}

/* Wait out a writer: true with the even sequence, SL_DEAD set if frozen,
 * in *s; false if a stopped writer holds the key (log_wait). */
static bool log_read_begin(const struct sl_lim *lim, sl_aword *w, uint64_t *s)
{
    return log_wait(lim, w, s);
}

static bool log_read_valid(sl_aword *w, uint64_t s)
{
    return sl_load_rlx(&w[0]) == s;
}

struct log_view {
    uint64_t n;                 /* units ever admitted */
    uint64_t eff;               /* now, or the newest stamp if later */
    uint64_t blocker;           /* stamp that must leave the window for `cost` to fit */
    bool fits;
};

/*
 * Decide `cost` on the current words (caller validates the snapshot).
 * The units counted are those stamped after now - period, the ones past
 * now included: as full as the log reads at any time from now to its
 * newest stamp.  A stamp past now is a charge whose time is not yet the
 * key's latest (decide.c clamps a call to that): one in flight, or taken
 * back but kept.  Read at that stamp instead, the log let a call at now
 * fit where its units had left, while the key's other limits, not yet
 * charged, read at now: an admission no order gives (linearize: [log 5
 * per 2 s, window 3 per s], 3 units at 1 s, a charge at 3.5 s in flight,
 * 3 more admitted at 2 s).  Fewer admitted then, never more; decisions at
 * the key's latest time or after are unchanged.  A charge is stamped at
 * eff, so the ring stays in time order.
 */
static void log_view(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                     struct log_view *v)
{
    uint64_t count = lim->def.count;

    v->n = sl_load_acq(&w[1]);
    v->eff = v->n ? sl_max64(now, log_ts(lim, w, v->n - 1)) : now;
    v->fits = true;
    v->blocker = 0;
    if (cost > 0 && v->n + cost > count) {
        v->blocker = log_ts(lim, w, v->n + cost - count - 1);
        v->fits = log_expired(lim->def.period_ns, v->blocker, now);
    }
}

/* A charge or report that a stopped writer kept from the key's words
 * (log_wait) denies, writing nothing: fewer admitted, never more, and the
 * call returns.  A report says so as the least it can promise: nothing
 * left, a retry after the wait that gave up, the window's end a period
 * away. */
static void log_busy_report(const struct sl_lim *lim, struct sl_report *out)
{
    if (out != NULL)
        *out = (struct sl_report){.remaining = 0,
                                  .retry_after = lim->holder->give_up_ns,
                                  .reset_after = lim->def.period_ns,
                                  .reset_charged = lim->def.period_ns};
}

static int log_charge(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                      uint64_t *receipt)
{
    for (;;) {
        struct log_view v;
        uint64_t s;
        if (!log_read_begin(lim, w, &s))
            return SL_NO; /* a stopped writer's: log_busy_report */
        if (s & SL_DEAD)
            return SL_FROZEN;
        log_view(lim, w, now, cost, &v);
        if (!log_read_valid(w, s))
            continue;
        if (!v.fits)
            return SL_NO;
        if (!sl_cas_acqrel(&w[0], &s, log_held(lim, s)))
            continue; /* someone wrote since the snapshot: decide again */
        /* release, not relaxed: a reader whose acquire load sees one of
         * these values then also sees the odd sequence of the CAS above
         * (synchronizes-with), so its re-check fails; relaxed stores after
         * an RMW give no such edge in C11 on weak-memory CPUs.  Plain
         * stores on x86. */
        for (uint64_t i = 0; i < cost; i++)
            sl_store_rel(&w[SL_LOG_RING + (v.n + i) % lim->def.count], v.eff);
        sl_store_rel(&w[1], v.n + cost);
        log_release(lim, w);
        receipt[0] = v.n + cost; /* N after this charge: see log_undo() */
        receipt[1] = receipt[2] = 0;
        return SL_OK;
    }
}

/*
 * Take back the charge that left N at `receipt`: only if its units are
 * still the newest (N unchanged, or back to it after later charges were
 * taken back), by dropping them.  Removing units from the middle would
 * shift newer units into the taken-back ones' indexes and let a later undo
 * remove someone else's units; when ours are not on top, keep them
 * (under-admission, never over-admission).
 */
static bool log_undo(const struct sl_lim *lim, sl_aword *w, uint64_t cost,
                     const uint64_t *receipt)
{
    uint64_t s;

    /* a stopped writer holds the key: the units stay (fewer admitted) */
    if (!log_read_begin(lim, w, &s))
        return true;
    while (!(s & SL_DEAD) && !sl_cas_acqrel(&w[0], &s, log_held(lim, s)))
        if (!log_read_begin(lim, w, &s))
            return true;
    if (s & SL_DEAD)
        return false;
    /* the load is ours (the CAS above acquired the key); the store is
     * release for readers, as in log_charge */
    if (sl_load_rlx(&w[1]) == receipt[0])
        sl_store_rel(&w[1], receipt[0] - cost);
    log_release(lim, w);
    return true;
}

/* Units of the last min(n, count) whose stamp is inside the window at eff. */
static uint64_t log_in_window(const struct sl_lim *lim, sl_aword *w, uint64_t n, uint64_t eff)
{
    uint64_t lo = n > lim->def.count ? n - lim->def.count : 0, hi = n;

    /* stamps ascend with j: find the first j whose stamp is in the window */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (log_expired(lim->def.period_ns, log_ts(lim, w, mid), eff))
            lo = mid + 1;
        else
            hi = mid;
    }
    return n - lo;
}

static int log_report(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                      struct sl_report *out)
{
    for (;;) {
        struct log_view v;
        uint64_t s, inwin;
        sl_u128 newest_end;
        if (!log_read_begin(lim, w, &s)) {
            log_busy_report(lim, out);
            return SL_NO;
        }
        if (s & SL_DEAD)
            return SL_FROZEN;
        log_view(lim, w, now, cost, &v);
        inwin = log_in_window(lim, w, v.n, now); /* as log_view counts */
        newest_end = v.n ? (sl_u128)log_ts(lim, w, v.n - 1) + lim->def.period_ns : 0;
        if (!log_read_valid(w, s))
            continue;
        if (out == NULL)
            return v.fits ? SL_OK : SL_NO;
        out->remaining = lim->def.count - sl_min64(inwin, lim->def.count);
        out->reset_after = sl_wait_until(newest_end, now, 0);
        /* a charge is stamped v.eff, which then is the newest stamp */
        out->reset_charged = out->reset_after;
        if (cost != 0)
            out->reset_charged = sl_wait_until((sl_u128)v.eff + lim->def.period_ns, now, 0);
        out->retry_after = 0;
        if (!v.fits)
            out->retry_after = sl_wait_until((sl_u128)v.blocker + lim->def.period_ns, now, 1);
        return v.fits ? SL_OK : SL_NO;
    }
}

static bool log_is_fresh(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now)
{
    uint64_t n = sl_load_rlx(&w[1]);

    if (c & 1)
        return false; /* a writer is in */
    return n == 0 || log_expired(lim->def.period_ns, log_ts(lim, w, n - 1), now);
}

/* The writer in finishes; no new one can enter.  False: a stopped one
 * stays in (log_wait), and its charge would land after a copy. */
static bool log_freeze(const struct sl_lim *lim, sl_aword *w)
{
    uint64_t s;

    (void)sl_fetch_or_acqrel(&w[0], SL_DEAD);
    return log_wait(lim, w, &s);
}

/*
 * The carried units, oldest first: the excess (all at its stamp) then the
 * ring.  Unit i of n_all; only called with i < n_all.
 */
struct log_units {
    uint64_t xn, xts;           /* excess units and their stamp */
    uint64_t first, n;          /* ring units first..n-1 */
};

static uint64_t log_unit_ts(const struct sl_lim *lim, sl_aword *w, const struct log_units *u,
                            uint64_t i)
{
    return i < u->xn ? u->xts : log_ts(lim, w, u->first + (i - u->xn));
}

/*
 * Same period: keep every unit that is in the window at the earliest time
 * the state can be decided at, whatever the new count; the newest min(that,
 * new count) go into the ring, the rest into the excess.  That time is the
 * key's latest admission (`now`: decide.c clamps calls to it), or the
 * newest stamp if earlier.  Not the newest stamp alone: a stamp past the
 * key's latest time is a charge in flight or kept after a take-back
 * (log_view counts such units), and a charge in flight when its key moved
 * is decided again while its units stay; pruned at its stamp, the units
 * before it were lost (a reviewer: 4 admitted in a window of 3).
 */
static void log_carry(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to,
                      sl_aword *tw, uint64_t now)
{
    uint64_t n = sl_load_rlx(&fw[1]), oldest_read, all, keep, skip, had, merged;
    struct log_units u = {sl_load_rlx(&fw[2]), sl_load_rlx(&fw[3]), 0, n};

    if (n == 0)
        return;
    u.first = n > from->def.count ? n - from->def.count : 0;
    oldest_read = sl_min64(now, log_ts(from, fw, n - 1));
    /* drop what left the window: the excess is older than every ring unit */
    while (u.first < n &&
           log_expired(from->def.period_ns, log_ts(from, fw, u.first), oldest_read))
        u.first++;
    if (u.xn != 0 && (u.first > n - sl_min64(n, from->def.count) ||
                      log_expired(from->def.period_ns, u.xts, oldest_read)))
        u.xn = 0;
    all = u.xn + (n - u.first);
    keep = sl_min64(all, to->def.count);
    skip = all - keep;
    /* tw may hold units carried from another old limit, oldest first in
     * slots 0..had-1: merge newest with newest, taking the later stamp of
     * each pair.  Each sequence is in time order, so for every window the
     * merge holds as many units as the larger of the two. */
    had = sl_load_rlx(&tw[1]);
    merged = sl_max64(had, keep);
    for (uint64_t i = had; i-- > 0;)
        sl_store_rlx(&tw[SL_LOG_RING + i + (merged - had)], sl_load_rlx(&tw[SL_LOG_RING + i]));
    for (uint64_t i = 0; i < merged - had; i++)
        sl_store_rlx(&tw[SL_LOG_RING + i], 0);
    for (uint64_t i = 0; i < keep; i++) {
        sl_aword *slot = &tw[SL_LOG_RING + merged - keep + i];
        sl_store_rlx(slot, sl_max64(sl_load_rlx(slot), log_unit_ts(from, fw, &u, skip + i)));
    }
    sl_store_rlx(&tw[1], merged);
    if (skip != 0) {
        sl_store_rlx(&tw[2], sl_max64(sl_load_rlx(&tw[2]), skip));
        sl_store_rlx(&tw[3], sl_max64(sl_load_rlx(&tw[3]), log_unit_ts(from, fw, &u, skip - 1)));
    }
}

const struct sl_algo sl_algo_log = {
    .name = "sliding_log",
    .compile = log_compile,
    .charge = log_charge,
    .undo = log_undo,
    .report = log_report,
    .is_fresh = log_is_fresh,
    .freeze = log_freeze,
    .carry = log_carry,
};
