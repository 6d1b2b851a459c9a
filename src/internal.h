/*
 * Internal interfaces shared by sluice's modules.  Public names start with
 * sluice_, internal ones with sl_.  See doc/DESIGN.md for the picture.
 */
#ifndef SL_INTERNAL_H
#define SL_INTERNAL_H

#include <ck_epoch.h>
#include <ck_pr.h>
#include <ck_stack.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <stdint.h>

#include "atomics.h"
#include "divide.h"
#include "sluice.h"

__extension__ typedef unsigned __int128 sl_u128;
__extension__ typedef __int128 sl_i128;

/*
 * Internal assertions (mimalloc style): the rules the comments state ("shard
 * locked", "inside an epoch section", "not frozen") are checked in debug and
 * sanitizer builds (meson defines SL_DEBUG_CHECKS there) and cost nothing
 * in release builds.
 */
#ifdef SL_DEBUG_CHECKS
void sl_assert_fail(const char *cond, const char *file, int line) __attribute__((noreturn));
#define SL_ASSERT(cond) ((cond) ? (void)0 : sl_assert_fail(#cond, __FILE__, __LINE__))
#else
#define SL_ASSERT(cond) ((void)0)
#endif

/* The same pointer, of an origin the compiler no longer knows: after
 * `if (a == sl_opaque(b))` it cannot replace b's later uses by a, so what
 * is loaded through b never waits on the load that produced a (the lean
 * path's policy, doc/BENCHMARKS.md, sixteenth round). */
static inline const void *sl_opaque(const void *p)
{
    __asm__("" : "+r"(p));
    return p;
}

#define SL_CACHELINE 64
#define SL_ALIGNED __attribute__((aligned(SL_CACHELINE)))

/*
 * Bit 63 of a limit's control word (its first state word) marks the state as
 * frozen: the entry is being reaped or replaced.  Every charge is a CAS (or,
 * for the sliding log, a lock taken by CAS) on the control word, so once the
 * bit is set no charge can land and the captured state is final.
 */
#define SL_DEAD (UINT64_C(1) << 63)

/* Outcomes of an algorithm's charge/report. */
enum { SL_OK = 0, SL_NO = 1, SL_FROZEN = 2 };

static inline uint64_t sl_min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t sl_max64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static inline uint64_t sl_sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static inline uint64_t sl_u128_sat(sl_u128 v) { return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v; }
static inline bool sl_zero(const uint64_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (w[i] != 0)
            return false;
    return true;
}
/* Bits needed to hold v (0 for 0). */
static inline unsigned sl_bits(uint64_t v) { return v ? 64u - (unsigned)__builtin_clzll(v) : 0u; }

#include "policy.h"
#include "entry.h"

/* ---- entry memory (arena.c) ------------------------------------------- */
/* Take (hold) or release every allocator's lock around a fork (fork.c). */
void sl_fork_track(struct sluice *l);   /* an open limiter's locks kept whole across fork */
void sl_fork_untrack(struct sluice *l); /* before it goes */
/* Forks counted (never 0), from the first sl_fork_watch() on: what a
 * process holds under one generation, a child of it does not (forkgen.c). */
extern _Atomic uint32_t sl_fork_gen;
void sl_fork_watch(void);
static inline uint32_t sl_fork_generation(void)
{
    /* relaxed: a process's own generation, changed only in a fork's child */
    return atomic_load_explicit(&sl_fork_gen, memory_order_relaxed);
}
void sl_arenas_hold(bool hold);

struct sl_arena;
struct sl_arena *sl_arena_new(sl_aword *acct);
void sl_arena_ref(struct sl_arena *a);
void sl_arena_unref(struct sl_arena *a);
void sl_arena_detach(struct sl_arena *a);
int sl_arena_class(size_t size);
/* Cache-line aligned; slabs and large blocks are accounted to acct.
 * thread: the caller's thread id (sl_thread.id), whose run the block
 * comes from, one per id as the statistics slots are (ids from
 * SL_STAT_SLOTS on share one); NULL if out of memory. */
#define SL_ARENA_RUNS (SL_STAT_SLOTS + 1)
void *sl_arena_alloc(struct sl_arena *a, size_t size, unsigned thread);
void sl_arena_free(struct sl_arena *a, void *p, size_t size);
/* n blocks (p[i] of size[i] bytes) under one lock. */
void sl_arena_free_many(struct sl_arena *a, void *const *p, const size_t *size, size_t n);

/* ---- epoch reclamation (epoch.c) ------------------------------------- */

#include "epoch.h" /* here: it uses sl_aword and SL_ASSERT from above */

/* A batch of entries retired with one epoch callback (reaping, replacing;
 * entry.c). */
struct sl_limbo *sl_limbo_new(struct sluice *l, size_t cap);
/* A batch of one, the thread's spare if it has one (given back by
 * sl_limbo_retire when nothing was added); NULL out of memory. */
struct sl_limbo *sl_limbo_one(struct sl_thread *t, struct sluice *l);
/* Add e; false if the batch is full. */
bool sl_limbo_add(struct sl_limbo *b, struct sl_entry *e);
bool sl_limbo_full(const struct sl_limbo *b);
void sl_limbo_retire(struct sl_thread *t, struct sl_limbo *b);

/* ---- allocation with accounting (alloc.c) ---------------------------- */

void *sl_alloc(sl_aword *acct, size_t size);
void *sl_alloc_aligned(sl_aword *acct, size_t size);
void *sl_calloc(sl_aword *acct, size_t size);
/* Frees and un-accounts at once. */
void sl_free(sl_aword *acct, void *p, size_t size);
/* The memory is no longer the limiter's (it is about to be retired). */
void sl_unaccount(sl_aword *acct, size_t size);
/* Short keys into cells (table_cells.c) for limiters created from now on;
 * true by default.  Tests and the bench turn it off to compare. */
extern bool sl_cells_enabled;
/* Tests: fail the nth allocation from now (1 = next), every nth if `every`; 0 disables. */
void sl_test_fail_alloc(unsigned long nth, bool every);
#ifdef SL_DEBUG_CHECKS
/* Tests, in debug and sanitizer builds: a hook a test may set, called
 * where a window it would widen is (relaxed: set before the racers run). */
#define SL_TEST_HOOK(hook)                                                                 \
    do {                                                                                   \
        void (*hook_)(void) = atomic_load_explicit(&(hook), memory_order_relaxed);         \
        if (hook_ != NULL)                                                                 \
            hook_();                                                                       \
    } while (0)
/* Called by a call on several keys after its first key's time is
 * committed and before the others', the window in which a writer freezing
 * a later key must wait for the call (sl_entry_commits_done); commit_race
 * widens it with a spin. */
extern _Atomic(void (*)(void)) sl_test_between_commits;
#define SL_TEST_BETWEEN_COMMITS() SL_TEST_HOOK(sl_test_between_commits)
/* Called by a cell lookup that missed the current array, before it turns
 * to the array a migration is copying from; test/cells stalls there, so
 * that a lookup that read `prev` only now would meet whole migrations
 * finished behind its probe. */
extern _Atomic(void (*)(void)) sl_test_cells_missed;
#define SL_TEST_CELLS_MISSED() SL_TEST_HOOK(sl_test_cells_missed)
#else
#define SL_TEST_BETWEEN_COMMITS() ((void)0)
#define SL_TEST_CELLS_MISSED() ((void)0)
#endif


/* ---- keys into the table (insert.c), used by decide.c and admin.c ---- */

/* One key of a decision, as it is resolved. */
struct sl_target {
    struct sluice *l;
    const void *key;
    size_t len;
    uint64_t h;
    struct sl_shard *s;
    struct sl_entry *e;         /* NULL: absent (peek) or untracked (full) */
    struct sl_policy *pol;      /* the policy deciding this key */
    sl_aword *w;                /* e->w, or pol->zero_w when e is NULL */
    uint64_t at;                /* the time it is decided at (never before its
                                   latest admission) */
    uint64_t behind;            /* at less the caller's time, if after it: the
                                   result's waits count from the caller's time */
    uint64_t now;               /* the caller's time */
    unsigned flags;             /* SLUICE_F_* */
    unsigned charged;           /* limits charged so far */
    struct sl_entry *pinned;    /* the entry this decision inserted (see sl_entry.pinned) */
    struct sl_limbo *takeback;  /* while pinned, a private limiter's: retires it if
                                   the decision fails (resolve.c, sl_target_insert) */
    bool peek;                  /* sluice_peek_at's: decided on a view, never migrated */
    sl_aword *view;             /* a peek's copy of a key's state, carried to a
                                   changed policy (sl_entry_view); freed by sl_decide */
    size_t view_words;
    uint64_t receipt[SLUICE_MAX_LIMITS][SL_RECEIPT_WORDS];
};

/* Inline: every decision starts here (a call into another file costs the
 * hot path ~20 instructions). */
static inline void sl_target_init_hashed(struct sl_target *g, struct sluice *l, const void *key,
                                         size_t len, uint64_t h)
{
    /* every field but the receipts (written before read) */
    g->e = NULL;
    g->pol = NULL;
    g->w = NULL;
    g->flags = 0;
    g->charged = 0;
    g->behind = 0;
    g->pinned = NULL;
    g->peek = false;
    g->view = NULL;
    g->view_words = 0;
    g->l = l;
    g->key = key;
    g->len = len;
    g->h = h;
    g->s = l->shm != NULL ? NULL : sl_shard_of(l, g->h); /* shared: the file's shards */
}

static inline void sl_target_init(struct sl_target *g, struct sluice *l, const void *key,
                                  size_t len)
{
    sl_target_init_hashed(g, l, key, len, sl_hash(&l->hkey, key, len));
}

/* g, asked for at now, is decided with entry e (NULL: absent or
 * untracked) under pol, at `at` (sl_entry_time of e: see sl_target_use);
 * inline: decide.c and the shared table (shm_table.c) both resolve
 * targets. */
static inline void sl_target_use_at(struct sl_target *g, struct sl_entry *e,
                                    struct sl_policy *pol, uint64_t now, uint64_t at)
{
    g->e = e;
    g->pol = pol;
    g->at = at;
    g->now = now;
    /* modular; past the wrap (sl_decide_time's absolute rule) it stays 0:
     * such a key's waits are told by sl_report_for_caller */
    g->behind = (int64_t)(at - now) > 0 ? at - now : 0;
    g->w = e != NULL ? e->w : pol->zero_w;
    if (pol->is_override)
        g->flags |= SLUICE_F_OVERRIDE;
}

/* The same, decided at the time a call at now is decided at. */
static inline void sl_target_use(struct sl_target *g, struct sl_entry *e, struct sl_policy *pol,
                                 uint64_t now)
{
    sl_target_use_at(g, e, pol, now, sl_entry_time(e, pol, now));
}

/*
 * g's key absent, asked for by a peek: decided as the acquire that made it
 * would decide it, from the latest reap's time if that is later (floor: a
 * reap_floor word; new keys start there, sl_entry_new).
 */
static inline void sl_target_use_absent(struct sl_target *g, struct sl_policy *pol, uint64_t now,
                                        uint64_t floor)
{
    sl_target_use_at(g, NULL, pol, now, sl_decide_time(floor, pol, now));
}

/* g's key found as e, under its policy pol: g decided with it (true), or,
 * idle beyond its range (sl_entry_expired), as absent by a peek (true) or
 * to be made fresh first by an acquire (false: SL_MOVE_EXPIRED, then look
 * again).  Both resolvers, private (resolve.c) and shared (shm_table.c). */
static inline bool sl_target_use_present(struct sl_target *g, struct sl_entry *e,
                                         struct sl_policy *pol, uint64_t now, bool create)
{
    bool expired = sl_entry_expired(e, pol, now);

    if (expired && create)
        return false;
    sl_target_use(g, expired ? NULL : e, pol, now);
    return true;
}

/* pol is a default policy that set_policy has replaced since it was read:
 * an entry made under it now would be decided under a policy no longer in
 * force (checked under the shard lock, which admin calls also take). */
static inline bool sl_policy_stale_private(struct sluice *l, const struct sl_policy *pol)
{
    SL_ASSERT(l->shm_gen == NULL);
    /* acquire: pairs with the release that publishes a new policy */
    return !pol->is_override && pol != atomic_load_explicit(&l->policy, memory_order_acquire);
}

static inline bool sl_policy_stale(struct sluice *l, const struct sl_policy *pol)
{
    /* acquire: pairs with the release that publishes a new generation */
    if (l->shm_gen != NULL)
        return !pol->is_override && pol->shm_ref != sl_load_acq(l->shm_gen);
    return sl_policy_stale_private(l, pol);
}
/* Replace g's entry by one laid out for `to` (its state as `how` says),
 * under the shard lock.  -EAGAIN: the entry changed meanwhile, look again.
 * The entry g's call made (g->pinned) passes its pin to its replacement. */
int sl_entry_replace(struct sl_thread *t, struct sl_target *g, struct sl_entry *e,
                     struct sl_policy *to, enum sl_move how, uint64_t now);
/* Insert g's key under pol, inside an epoch section: 0 (*out the entry),
 * -ENOSPC (no room at max_keys, even after reaping), -EAGAIN (inserted
 * meanwhile, or pol is a default policy since replaced: look again) or
 * -ENOMEM.  pin: published pinned (sl_entry.pinned) for the caller's
 * decision.  exhaustive: room is sought in every shard, not a bounded scan. */
int sl_key_insert(struct sl_thread *t, struct sl_target *g, struct sl_policy *pol, uint64_t now,
                  bool pin, bool exhaustive, struct sl_entry **out);
/* A new key into a cell (table_cells.c) for a decision without a result
 * under pol, the default read at its start: 0, -EEXIST (made meanwhile:
 * decide on it), or -EAGAIN, -ENOSPC, -ENOMEM (the general path decides,
 * making an entry or finding the limiter full). */
int sl_key_insert_cell(struct sl_thread *t, struct sluice *l, struct sl_shard *s, uint64_t h,
                       const void *key, size_t len, struct sl_policy *pol, uint64_t now);
/* 0, or the errno of a call's limiter/key arguments. */
static inline int sl_key_check(struct sluice *l, const void *key, size_t len)
{
    if (l == NULL || (key == NULL && len > 0))
        return -EINVAL;
    return len > l->max_key_len ? -ENAMETOOLONG : 0;
}

/* A single-key call's checks and the calling thread's record: 0 and *t,
 * or the call's error. */
static inline int sl_call_begin(sluice_t *l, const void *key, size_t len, struct sl_thread **t)
{
    int rc = sl_key_check(l, key, len);

    if (rc < 0)
        return rc;
    return (*t = sl_thread_get()) != NULL ? 0 : -ENOMEM;
}

/*
 * A present key whose entry is laid out for pol, its last_ns read as
 * lastw, can be decided at now on the fast paths: cost within pol's least
 * capacity, the entry not being moved (no time to read), pol in force (its
 * override, or the default now current), and the key not idle beyond its
 * range (sl_entry_expired, on the same read of last_ns).
 */
static inline bool sl_present_decidable(struct sluice *l, const struct sl_policy *pol,
                                        uint64_t lastw, uint64_t cost, uint64_t now)
{
    uint64_t since = now - (lastw - 1);

    return cost <= pol->min_cap && lastw != SL_LAST_SEALED &&
           (pol == atomic_load_explicit(&l->policy, memory_order_acquire) || pol->is_override) &&
           (lastw == 0 || (int64_t)since <= 0 || since <= pol->idle_fresh_ns);
}

/*
 * Counters without a locked instruction: the first SL_STAT_SLOTS thread
 * records each own a slot (a record serves one live thread at a time and
 * keeps its id when it is recycled, handing the slot over with it), so a
 * plain load and store is exact; threads past that share the last slot,
 * by atomic add, and a shared limiter counts in its file (limiter.c).
 */
void sl_stat_add_shared(struct sluice *l, const struct sl_thread *t, bool allowed);

/* A private limiter's count (the lean paths know it is private).  Always
 * inline: GCC called it, 9 of a hot decision's 289 instructions. */
static inline __attribute__((always_inline)) void
sl_stat_add_private(struct sluice *l, const struct sl_thread *t, bool allowed)
{
    struct sl_stat_slot *slot;

    SL_ASSERT(l->shm == NULL);
    if (t->id >= SL_STAT_SLOTS) {
        sl_stat_add_shared(l, t, allowed);
        return;
    }
    slot = &l->stat[t->id]; /* only now: past the array, even unused, is undefined */
    if (allowed) /* the only writer of its slot */
        sl_store_rlx(&slot->allowed, sl_load_rlx(&slot->allowed) + 1);
    else
        sl_store_rlx(&slot->denied, sl_load_rlx(&slot->denied) + 1);
}

static inline void sl_stat_add(struct sluice *l, const struct sl_thread *t, bool allowed)
{
    if (l->shm != NULL)
        sl_stat_add_shared(l, t, allowed);
    else
        sl_stat_add_private(l, t, allowed);
}

/* A single-key acquire decided by the general path (decide.c): what the
 * lean path (acquire.c) does not take. */
int sl_acquire_general(sluice_t *l, const void *key, size_t len, uint64_t cost, uint64_t now_ns,
                       struct sluice_result *res);
/* A single key's fast pass (decide.c): g present under the policy in
 * force, decided in one lookup and one charge; -EAGAIN with nothing
 * charged otherwise.  In an epoch section; sl_acquire_general's first
 * step, and acquire_batch's for each request it prefetched. */
int sl_acquire_fast(struct sl_thread *t, struct sl_target *g, uint64_t cost, uint64_t now,
                    struct sluice_result *res);
/* The lean path (acquire.c) on a key already hashed (h, its shard s), in
 * the caller's epoch section: a private limiter's present key with no
 * result, -EAGAIN with nothing charged for what it declines. */
int sl_acquire_lean_hashed(struct sl_thread *t, struct sluice *l, const void *key, size_t len,
                           uint64_t cost, uint64_t now, struct sl_shard *s, uint64_t h);
/* sluice_acquire_all of 1..SL_MAX_KEYS keys (checked) by the general
 * path: what the lean path (acquire_all.c) does not take. */
#define SL_MAX_KEYS 16
int sl_acquire_all_general(const struct sluice_key *keys, size_t n, uint64_t cost, uint64_t now_ns,
                           struct sluice_result *res);
/* sluice_peek_at of a key in no cell, or one that the cell path declines
 * (decide.c). */
int sl_peek_general(sluice_t *l, const void *key, size_t len, uint64_t cost, uint64_t now_ns,
                    struct sluice_result *res);

/* ---- the background reaper (reaper.c) -------------------------------- */

/* Started by sluice_create when reap_interval_ns is set, stopped by destroy. */
int sl_reaper_start(struct sluice *l);
void sl_reaper_stop(struct sluice *l);

/* ---- clock (clock.c), limiter helpers --------------------------------- */

uint64_t sl_clock_read(enum sluice_clock c, uint64_t (*fn)(void *), void *ctx);
/* CLOCK_MONOTONIC in ns, for the library's own timeouts (not a limiter's clock). */
uint64_t sl_mono_ns(void);
/* The clock a limiter asked for, or the one it gets instead (TSC unusable). */
enum sluice_clock sl_clock_resolve(enum sluice_clock c);
int sl_config_check(const struct sluice_config *cfg);
/* The shard count a configuration asks for (limiter.c). */
unsigned sl_shard_count(unsigned asked);
bool sl_policy_reserved_zero(const struct sluice_policy *p);
int sl_entry_freeze_pol(struct sl_entry *e, const struct sl_policy *pol);
void sl_entry_thaw_pol(struct sl_entry *e, const struct sl_policy *pol);
/* After a freeze, before sealing last_ns: true once no call on several
 * keys is between its test of the frozen word and its commits on e (wait:
 * for every live one; shm: a shared limiter's file, whose dead callers'
 * counts are cleared, and whose live ones are waited for 2 s at most;
 * false, then, or not waiting, while one is: not waiting, a shared
 * limiter's count is cleared if no live process is in a window). */
bool sl_entry_commits_done(struct sl_entry *e, bool wait, struct sl_shm *shm);
/* Freeze e for removal if every limit is fresh at now and its latest
 * admission, read sealed, is idle_ttl or more before now; save: as for
 * sl_last_seal (a shared limiter's shard, else NULL); shm: a shared
 * limiter's file, whose killed callers' counts are cleared, else NULL */
bool sl_entry_freeze_fresh_pol(struct sl_entry *e, const struct sl_policy *pol, uint64_t now,
                               uint64_t idle_ttl, sl_aword *save, struct sl_shm *shm);

/* ---- shared limiters (shm_file.c, shm_epoch.c, shm_table.c) ---------- */

/* Sections of the file's own epoch around every lookup of a shared
 * limiter (process-local ck sections do not cover other processes). */
unsigned sl_shm_enter(struct sluice *l);
void sl_shm_leave(struct sluice *l, unsigned token);
void sl_shm_enter_targets(struct sl_target *g, size_t n, unsigned *tokens);
void sl_shm_leave_targets(struct sl_target *g, size_t n, const unsigned *tokens);
/* This thread (id tid) enters (+1) or leaves (-1) the window between its
 * count on a shared limiter's keys and its commits (sl_commits_count);
 * and whether some live process has a thread there (shm_epoch.c). */
void sl_shm_window(struct sluice *l, unsigned tid, int delta);
bool sl_shm_window_live(struct sl_shm *m);
/* A decision found no free entry in a shared limiter (-EAGAIN): help the
 * file's epoch along, outside every section; false once it has tried long
 * enough (the call then fails with -ENOMEM). */
bool sl_shm_starved(struct sl_target *g, size_t n, unsigned round, uint64_t *until);
int sl_shm_resolve(struct sl_thread *t, struct sl_target *g, uint64_t cost, uint64_t now,
                   bool create);
/* The fast path's lookup: an existing entry under the current policy, else NULL. */
struct sl_entry *sl_shm_get_current(struct sl_target *g);
/* g's key's entry in the file, whatever its policy (NULL: absent). */
struct sl_entry *sl_shm_find(const struct sl_target *g);
/* The policy a shared limiter's entry is laid out for (NULL: gone). */
struct sl_policy *sl_shm_policy_of(struct sluice *l, const struct sl_entry *e);
/* Two handles of one file (opened twice in a process): one limiter, whose
 * keys are the same keys (sl_same_limiter). */
bool sl_shm_same_file(const struct sl_shm *a, const struct sl_shm *b);
static inline bool sl_same_limiter(const struct sluice *a, const struct sluice *b)
{
    return a == b || (a->shm != NULL && b->shm != NULL && sl_shm_same_file(a->shm, b->shm));
}
/* A shared entry's first state word as a successor id (sl_entry_mark_moved),
 * and a word's id back, the first of nwords (NULL: not nwords state words
 * of one entry of this file). */
uint64_t sl_shm_word_id(const struct sl_shm *m, const struct sl_entry *e);
sl_aword *sl_shm_word_of_id(struct sluice *l, uint64_t id, uint32_t nwords);
/* Wait for the writer of g's key's shard; w non-NULL: *v = *w read while
 * holding its lock (no writer midway). */
void sl_shm_wait(struct sl_target *g, sl_aword *w, uint64_t *v);
bool sl_shm_unpublish_untouched(struct sl_target *g);
void sl_shm_stat(struct sluice *l, const struct sl_thread *t, bool allowed);
void sl_shm_stats(struct sluice *l, struct sluice_stats *out);
size_t sl_shm_reap(struct sluice *l, uint64_t now);
int sl_shm_set_policy(struct sluice *l, const struct sluice_policy *p);
int sl_shm_reset(struct sluice *l, const void *key, size_t len);
int sl_shm_override_set(struct sluice *l, const void *key, size_t len,
                        const struct sluice_policy *p);
int sl_shm_override_clear(struct sluice *l, const void *key, size_t len);
/* The policy deciding g's key now: its override, else the default (inside
 * a section of the file's epoch). */
struct sl_policy *sl_shm_key_policy(struct sl_target *g);
void sl_shm_detach(struct sluice *l);

#endif
