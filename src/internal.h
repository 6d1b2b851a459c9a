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

/* ---- compiled policies (policy.c) ------------------------------------ */

/*
 * Who holds a sliding log's key while writing it (algo_log.c).  On a shared
 * limiter that is a process, which a SIGKILL can stop there for good, so a
 * waiter must be able to tell it died and release the key; the writer's
 * token (its process's place in the file) is stored in the word it holds.
 * NULL on in-process limiters, whose writers only die with their waiters.
 */
struct sl_holder {
    uint32_t (*token)(const struct sl_holder *h);    /* the caller's: nonzero */
    bool (*dead)(const struct sl_holder *h, uint32_t token);
};

/* One limit, validated and with everything the hot path needs precomputed. */
struct sl_lim {
    struct sluice_limit def;    /* as configured, burst/precision defaults filled */
    const struct sl_algo *ops;
    const struct sl_holder *holder; /* shared limiters' processes (above); else NULL */
    uint32_t off;               /* first state word of this limit in an entry */
    uint32_t nwords;
    uint64_t cap;               /* the largest cost ever admissible */
    /* GCRA: T = p/q ns (reduced; exact when count/gcd <= 1024, else rounded
     * up to q = a power of two), TAT stored as (A << fbits) | f meaning
     * A + f/q ns, A modulo 2^abits (algo_gcra.c). */
    uint64_t p, q, amask;
    unsigned fbits, abits;
    sl_u128 tau;                /* burst * p: tolerance scaled by q */
    /* Windowed algorithms: a word is (index mod 2^ibits) << ishift | counts;
     * the layout depends on the width only (algo_window.c). */
    uint64_t width;             /* window or sub-bucket width, ns */
    uint64_t nb;                /* SLIDING_WINDOW: sub-buckets per window */
    struct sl_udiv by_width, by_nb; /* x / width and x / nb with no divide */
    /* Idle beyond the range (sl_idle_beyond): after idle_over_ns since
     * last_ns the state is surely over; up to idle_read_ns its words read
     * right. */
    uint64_t idle_over_ns, idle_read_ns;
    unsigned cbits, ibits, ishift;
    uint64_t cmask, imask;
    /* A private limiter's default policies: the generation since which
     * every default has had a limit of this algorithm and period (policy.c,
     * sl_policy_follow); 0 elsewhere. */
    uint64_t since;
};

struct sl_policy {
    _Atomic uint64_t refs;      /* the limiter's current-policy slot and each entry */
    ck_epoch_entry_t retire;
    bool is_override;
    /* A private limiter's defaults: 1 for the first, +1 per set_policy; 0
     * for overrides and shared limiters' policies (migrated eagerly). */
    uint64_t gen;
    uint64_t shm_ref;           /* shared limiters: the entry tag it was compiled for */
    unsigned nlimits;
    uint32_t nwords;            /* state words of an entry under this policy */
    uint64_t min_cap;           /* the smallest cap: costs above it get -E2BIG */
    /* the greatest idle_over_ns of its limits if no limit's idle_read_ns is
     * below it, else UINT64_MAX (sl_idle_beyond) */
    uint64_t idle_fresh_ns;
    /* some limit numbers windows from time 0 or keeps absolute stamps (all
     * but GCRA): a time past the clock's wrap at 2^64 ns is decided as at
     * the key's latest admission before it (sl_decide_time) */
    bool absolute;
    sl_aword *zero_w;           /* nwords zero words: the state of an absent key */
    struct sluice_policy def;
    struct sl_lim lim[SLUICE_MAX_LIMITS];
};

int sl_limit_compile(struct sl_lim *lim, const struct sluice_limit *def);
int sl_policy_new(const struct sluice_policy *def, bool is_override, struct sl_policy **out);
bool sl_policy_tryref(struct sl_policy *p);
void sl_policy_unref(struct sl_policy *p);
/* Drop n references at once (a batch of freed entries). */
void sl_policy_unref_n(struct sl_policy *p, uint64_t n);
/* Free a policy that was never published. */
void sl_policy_discard(struct sl_policy *p);
/* The policy's reserved words are zero (else -EINVAL: see sluice.h). */
bool sl_policy_reserved_zero(const struct sluice_policy *p);
/* A charge on `from`'s limit j, carried, sits word for word in `to`'s limit
 * j (policy.c: the conditions). */
bool sl_policy_same_words(const struct sl_policy *from, const struct sl_policy *to, unsigned j);
/* Number `p` as the default after `prev` (NULL: the first); unpublished. */
void sl_policy_follow(struct sl_policy *p, const struct sl_policy *prev);
/* Carry the frozen state of `from` into the private words of `to`: limits
 * with the same algorithm and period keep their state exactly (never
 * refilled, even when the count was lowered), others start fresh; from an
 * older default, only if every default since had that limit too (cur: the
 * default in force, NULL on shared limiters).  Returns the set of `from`'s
 * limits carried somewhere (bit j: limit j). */
unsigned sl_policy_carry(const struct sl_policy *from, sl_aword *from_w,
                         const struct sl_policy *to, sl_aword *to_w,
                         const struct sl_policy *cur, uint64_t now);

/* ---- algorithms (algo_*.c) ------------------------------------------- */

struct sl_report {
    uint64_t remaining;         /* units admissible now (after the charge, if any) */
    uint64_t retry_after;       /* wait before `cost` fits; 0 if it fits now */
    uint64_t reset_after;       /* wait until the limit is fully replenished */
    uint64_t reset_charged;     /* the same once `cost` is charged, if it fits
                                   (what a peek reports: sl_report_all) */
};

/*
 * The operations every algorithm provides; `w` points at the limit's words.
 * charge:   admit `cost` at `now` or write nothing (SL_OK / SL_NO / SL_FROZEN);
 *           receipt[0..SL_RECEIPT_WORDS) lets undo() find what was charged:
 *           receipt[0] is the algorithm's own, [1] and [2] the control word
 *           before and after the charge's CAS (windowed algorithms).
 * undo:     take back a charge (all-or-nothing rollback): only what that
 *           charge added, never another's; when it cannot tell, or the
 *           state is frozen, it leaves the state as it is.  false: left
 *           because frozen (the charge went with the state: decide.c,
 *           sl_undo_carried); true otherwise.
 * report:   read-only: would `cost` fit at `now`, and the numbers for results;
 *           out NULL: the verdict alone, without the divisions the numbers
 *           take (the read-only check before a stacked policy's charges).
 * is_fresh: given the control word c, does the state equal a fresh key's?
 * freeze:   set SL_DEAD on the control word and wait until the words are
 *           stable; returns the control word before.
 * carry:    raise the private words of `to` to the frozen state of `from`
 *           (same algorithm and period), exactly: all spent capacity is
 *           kept, even above a lower count, rounded only toward more spent.
 *           Words already carried from another old limit are kept where
 *           they are more spent (several old limits may feed one new one).
 *           `now` only unwraps modular times; state ahead of it is kept.
 */
#define SL_RECEIPT_WORDS 3
typedef uint64_t sl_receipt[SL_RECEIPT_WORDS];

struct sl_algo {
    const char *name;
    int (*compile)(struct sl_lim *lim);
    int (*charge)(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                  uint64_t *receipt);
    bool (*undo)(const struct sl_lim *lim, sl_aword *w, uint64_t cost, const uint64_t *receipt);
    int (*report)(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                  struct sl_report *out);
    bool (*is_fresh)(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now);
    uint64_t (*freeze)(const struct sl_lim *lim, sl_aword *w);
    void (*carry)(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to, sl_aword *tw,
                  uint64_t now);
};

/* Restore the control word to its value before a charge, if nothing has
 * changed it since (windowed undo: exact, even when the charge moved the
 * window).  True if it did. */
static inline bool sl_undo_exact(sl_aword *w, const uint64_t *receipt)
{
    uint64_t expect = receipt[2];

    return receipt[1] != receipt[2] && sl_cas_acqrel(w, &expect, receipt[1]);
}

extern const struct sl_algo sl_algo_gcra, sl_algo_fixed, sl_algo_sliding, sl_algo_log,
    sl_algo_approx;

/*
 * Ranges (see the algo files): a key's state is read correctly from any time
 * within these of its latest observed time, behind or ahead; limits that
 * cannot guarantee them are refused with -EINVAL.
 *   windows: SL_WINDOW_RANGE_NS both ways;
 *   GCRA:    SL_GCRA_RANGE_NS behind, 2^(62 - fbits) ns (>= 2^52) ahead.
 */
#define SL_WINDOW_RANGE_NS (UINT64_C(1) << 55)
#define SL_GCRA_RANGE_NS (UINT64_C(1) << 50)
/* How far a charge's time may run ahead of its key's last_ns before it
 * publishes a floor first (decide.c, sl_floor_ahead): every charge that
 * stands was made at most 2 * SL_TIME_SLACK after last_ns as read after it. */
#define SL_TIME_SLACK (UINT64_C(1) << 40)

/*
 * Idle beyond the range.  A key idle longer than its limits' idle_fresh_ns
 * (since its latest admission, last_ns) is fresh under every one of them,
 * and its words may no longer be read right (a stored time modulo the range
 * looks recent again: spent, although over long ago).  So such a key is
 * not read: decisions replace it by a fresh entry (sl_entry_move_state),
 * peeks read it as absent, reaping takes it.  Each limit states how long
 * its state can stay busy after an admission, plus the 2 * SL_TIME_SLACK a
 * charge may run ahead of last_ns (idle_over_ns), and how far its words
 * read right (idle_read_ns: UINT64_MAX for the sliding log's absolute
 * stamps).  A policy restarts a key past the greatest idle_over_ns of its
 * limits, if that is within every one's idle_read_ns; never otherwise
 * (a limit read beyond its range then fails closed).  Reaping takes each
 * limit idle past its own idle_over_ns as fresh.
 */
static inline bool sl_idle_beyond(uint64_t at, uint64_t last, uint64_t idle_fresh_ns)
{
    uint64_t d = at - last; /* times are modular: behind is negative */

    return (int64_t)d > 0 && d > idle_fresh_ns;
}

/* Shared by the windowed algorithms (algo_window.c). */
int sl_window_pack_compile(struct sl_lim *lim, unsigned nfields);
void sl_window_copy(sl_aword *fw, sl_aword *tw, uint32_t nwords);
uint64_t sl_window_freeze(const struct sl_lim *lim, sl_aword *w);
uint64_t sl_window_later(const struct sl_lim *lim, unsigned nfields, uint64_t x, uint64_t y);
/* Signed distance a - b of two window indexes modulo 2^ibits. */
int64_t sl_index_diff(const struct sl_lim *lim, uint64_t a, uint64_t b);
uint64_t sl_word_index(const struct sl_lim *lim, uint64_t word);
uint64_t sl_word_make(const struct sl_lim *lim, uint64_t index, uint64_t counts);

/* ---- entries and the key table (table.c) ----------------------------- */

struct sl_entry {
    uint32_t key_len;           /* SL_PROBE_TAG in a lookup probe instead */
    /* Non-zero while the decision that inserted the key is still running:
     * the reaper skips it, so two new keys of one acquire_all never reap
     * each other round after round at max_keys. */
    _Atomic uint32_t pinned;
    union {
        struct sl_policy *pol;  /* immutable: the layout of w[] */
        uint64_t polref;        /* in a shared limiter's file instead (shm_table.c) */
    };
    sl_aword last_ns;           /* 1 + time of the latest admission, 0: none
                                   (sl_entry_last; idle tracking, carry, decide time) */
    /* Calls on several keys between the test that no key is frozen and the
     * commit of their times (sl_charge_all): a writer that freezes the key
     * waits for them before it seals last_ns (sl_entry_commits_done). */
    _Atomic uint32_t committing;
    uint32_t reserved;
    sl_aword w[];               /* pol->nwords state words, then the key bytes */
};

#define SL_PROBE_TAG UINT32_MAX
struct sl_probe {
    uint32_t tag;               /* SL_PROBE_TAG */
    uint32_t reserved;
    const void *key;
    size_t len;
    uint64_t hash;
};

/* last_ns holds 1 + the time, 0 for none, SL_LAST_SEALED once a writer
 * has taken it for a replacement (sl_last_seal).  The two latest times
 * read back as UINT64_MAX - 2, which only ever decides 2 ns earlier. */
#define SL_LAST_SEALED UINT64_MAX
static inline uint64_t sl_last_encode(uint64_t t)
{
    return t >= UINT64_MAX - 2 ? UINT64_MAX - 1 : t + 1;
}

/* Raise an encoded time word to t in modular order, by CAS so racing
 * writers never lower it, and never past a seal.  relaxed: its readers
 * either hold the shard lock or only need some value it held (a floor for
 * later decisions). */
static inline void sl_time_raise(sl_aword *w, uint64_t t)
{
    uint64_t enc = sl_last_encode(t), seen = sl_load_rlx(w);

    while (seen != SL_LAST_SEALED && (seen == 0 || (int64_t)(enc - seen) > 0) &&
           !atomic_compare_exchange_weak_explicit(w, &seen, enc, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/*
 * An admission's time, made part of its charge.  A writer that replaces
 * an entry freezes its state words and then takes last_ns by sealing it
 * (sl_last_seal), and the replacement starts from what it took.  Both are
 * RMWs on this one word, so exactly one of two things holds: this raise
 * came first, and the writer carries it (the charge, landed before the
 * freeze, is carried with it); or the seal came first, and this returns
 * false: the charge must be taken back and decided again.  (A raise that
 * follows the key to the replacement after the fact would come too late:
 * a call at an earlier time may have been decided there meanwhile, and a
 * later one at that time would then be clamped past it.)  Release: the
 * charge before it is visible to a writer that reads the raise.
 */
static inline bool sl_last_commit(sl_aword *w, uint64_t t)
{
    uint64_t enc = sl_last_encode(t), seen = sl_load_rlx(w);

    while (seen == 0 || (seen != SL_LAST_SEALED && (int64_t)(enc - seen) > 0))
        if (atomic_compare_exchange_weak_explicit(w, &seen, enc, memory_order_release,
                                                  memory_order_relaxed))
            return true;
    return seen != SL_LAST_SEALED;
}

/*
 * last_ns of an entry just frozen, for its replacement or an idle test:
 * the value it had, sealed so that no admission raises it after this
 * (sl_last_commit).  save: where a shared limiter keeps the value until
 * the writer is done, so that a survivor can unseal the entry if the
 * writer dies (sl_last_unseal); stored before the CAS that seals, each
 * time it is tried.  A locked CAS on x86, off the hot path.
 */
static inline uint64_t sl_last_seal(sl_aword *w, sl_aword *save)
{
    uint64_t seen = atomic_load_explicit(w, memory_order_acquire);

    for (;;) {
        /* one writer at a time (the shard lock), and a dead one's seal is
         * given back first: sealed already, the word is a corrupt file's */
        if (seen == SL_LAST_SEALED)
            return 0; /* no time known */
        if (save != NULL)
            sl_store_rlx(save, seen);
        if (atomic_compare_exchange_weak_explicit(w, &seen, SL_LAST_SEALED,
                                                  memory_order_acq_rel, memory_order_acquire))
            return seen;
    }
}

/* A time word read from a shared limiter's file, which any process (or a
 * corrupt file) may have written: never the seal, which no commit passes. */
static inline uint64_t sl_last_sane(uint64_t v)
{
    return v == SL_LAST_SEALED ? v - 1 : v;
}

/*
 * The time an administrative call that creates a key (sluice_override_set)
 * judges other keys idle at, to make room at max_keys: the latest reap's
 * (floor: a reap_floor word, 1 + the time, 0: never).  Such a call takes no
 * time, and the limiter's clock may not be the one the decisions pass
 * (sluice_acquire_at): reaping at it removed spent keys as idle, and a key
 * made again at that clock's time admitted its limit twice in one window.
 * A time some reap has used is of the decisions' clock, and removing keys
 * idle at it admits nothing that reap did not.
 */
static inline uint64_t sl_admin_reap_time(uint64_t floor)
{
    floor = sl_last_sane(floor);
    return floor == 0 ? 0 : floor - 1;
}

/* Give back a sealed last_ns (a freeze undone): before the state words
 * are thawed, so that no charge lands to meet a seal that stays. */
static inline void sl_last_unseal(sl_aword *w, uint64_t v)
{
    sl_store_rel(w, v);
}

/* The time of e's latest admission; false if it had none. */
static inline bool sl_entry_last(struct sl_entry *e, uint64_t *t)
{
    uint64_t v = sl_load_rlx(&e->last_ns);

    *t = v - 1;
    return v != 0 && v != SL_LAST_SEALED; /* sealed: frozen, never decided on */
}

/*
 * The time a call at now is decided at: now, or e's latest admission if now
 * is earlier (a stepped clock, a stale cached time).  The state words keep
 * times modulo a range, so a time older than that range could otherwise be
 * read as a fresh window.  Signed distance: times themselves may wrap.
 */
/*
 * The time a call at now is decided at, lastw being the key's last_ns word:
 * never before its latest admission (modulo 2^64), and, under a policy
 * whose limits read times absolutely (pol->absolute), never past the
 * clock's wrap either: windows numbered from 0 and absolute stamps do not
 * follow it, so such a key reads as it did before the wrap (full if it
 * was), until reaped or reset: fail closed, as sluice.h says.
 */
static inline uint64_t sl_decide_time(uint64_t lastw, const struct sl_policy *pol, uint64_t now)
{
    uint64_t last = lastw - 1;

    if (lastw == 0 || lastw == SL_LAST_SEALED)
        return now;
    return (int64_t)(now - last) < 0 || (pol->absolute && now < last) ? last : now;
}

/* t less d as a floor for last_ns, never below 0: a floor past the wrap
 * would read as a time before it (sl_decide_time) under a policy that
 * reads times absolutely, the key's now or after a policy change (on a
 * clock started at boot, for the first 2^40 ns, 18 minutes).  It only
 * differs from the modular difference within d after the clock's wrap. */
static inline uint64_t sl_time_back(uint64_t t, uint64_t d)
{
    return t < d ? 0 : t - d;
}

static inline uint64_t sl_entry_time(struct sl_entry *e, const struct sl_policy *pol,
                                     uint64_t now)
{
    return e != NULL ? sl_decide_time(sl_load_rlx(&e->last_ns), pol, now) : now;
}

/* e, laid out for pol, has been idle beyond its range at now: fresh, and
 * not to be read (sl_idle_beyond). */
static inline bool sl_entry_expired(struct sl_entry *e, const struct sl_policy *pol, uint64_t now)
{
    uint64_t last;

    return sl_entry_last(e, &last) && sl_idle_beyond(now, last, pol->idle_fresh_ns);
}

static inline const unsigned char *sl_entry_key(const struct sl_entry *e)
{
    return (const unsigned char *)&e->w[e->pol->nwords];
}

struct sl_hkey {
    uint64_t k0, k1;            /* the 128 random bits (a shared file keeps these) */
    uint64_t s1, s2, seed;      /* derived from them once, not on every hash */
};
void sl_hkey_set(struct sl_hkey *k, uint64_t k0, uint64_t k1);
uint64_t sl_hash(const struct sl_hkey *k, const void *data, size_t len);
void sl_random_bytes(void *buf, size_t len);

struct sl_slots;
struct sl_shard {
    _Atomic(struct sl_slots *) slots; /* the current array; readers load it */
    pthread_mutex_t lock;       /* writers only: insert, replace, remove, rehash */
    uint64_t live, used;        /* entries; entries + tombstones (under lock) */
    uint64_t reap_cursor;       /* where the next bounded reap scan starts (under lock) */
    struct sluice *owner;
#ifdef SL_DEBUG_CHECKS
    _Atomic(const void *) holder; /* the thread holding lock: SL_ASSERT(sl_shard_held(s)) */
#endif
} SL_ALIGNED;

struct sl_shm;

struct sl_stat_slot {
    sl_aword allowed, denied;
    /* shared limiters: calls of this thread between their count on keys
     * and leaving it (sl_commits_count in decide.c; sl_shm_window_live) */
    sl_aword window;
} SL_ALIGNED;

#define SL_STAT_SLOTS 64          /* owned by thread ids 0..63; one more is shared */

struct sluice {
    struct sl_hkey hkey;
    struct sl_shard *shards;
    struct sl_arena *arena;     /* entries */
    unsigned shard_shift;       /* shard = hash >> shard_shift */
    unsigned nshards;
    _Atomic(struct sl_policy *) policy;
    size_t max_keys, max_key_len;
    uint64_t idle_ttl_ns;
    enum sluice_when_full when_full;
    enum sluice_clock clock;
    uint64_t (*clock_fn)(void *);
    void *clock_ctx;
    char *name;

    sl_aword nkeys SL_ALIGNED;  /* live keys, reserved before insert */
    sl_aword inserted, reaped, full, memory;
    sl_aword reap_floor;        /* 1 + the latest time keys were reaped at, 0: never;
                                   new keys start from it (sl_entry_new) */
    /* reaping for room at max_keys (decide.c): slots scanned in vain since
     * room was last found; 1 + the time before which no scan is made, 0 none */
    sl_aword room_fruitless, room_quiet_until;
    _Atomic unsigned reap_next; /* the next other shard such a scan visits */
    struct sl_stat_slot stat[SL_STAT_SLOTS + 1];

    pthread_t reaper;
    bool reaper_running;
    uint64_t reap_interval_ns;
    pthread_mutex_t reaper_lock;
    pthread_cond_t reaper_cond;
    bool reaper_stop;

    struct sl_shm *shm;         /* a shared limiter (shm_*.c); NULL: in-process */
    sl_aword *shm_gen;          /* its file's policy generation */
    struct sluice *fork_prev, *fork_next; /* every open limiter (fork.c) */
};

int sl_table_init(struct sluice *l, unsigned nshards);
void sl_table_destroy(struct sluice *l);
/* A forked child's copy forgets its parent's calls in flight (fork.c). */
void sl_table_after_fork(struct sluice *l);
/* Inline: every decision on a private limiter starts here. */
static inline struct sl_shard *sl_shard_of(struct sluice *l, uint64_t h)
{
    return &l->shards[l->shard_shift == 64 ? 0 : h >> l->shard_shift];
}
/* Lock-free lookup; call inside an epoch section. */
struct sl_entry *sl_table_get(struct sl_shard *s, uint64_t h, const void *key, size_t len);
/* Start loading the slot line a lookup of h will read (inside a section). */
void sl_table_prefetch(struct sl_shard *s, uint64_t h);
/* The entry h's key most likely has (the first slot from its home whose
 * tag matches), prefetched once the slot line is in: a hint only. */
void sl_table_prefetch_entry(struct sl_shard *s, uint64_t h);
void sl_shard_lock(struct sl_shard *s);
/* Never blocks: reaping other shards while holding one must not deadlock. */
bool sl_shard_trylock(struct sl_shard *s);
void sl_shard_unlock(struct sl_shard *s);
#ifdef SL_DEBUG_CHECKS
bool sl_shard_held(struct sl_shard *s);
#endif
/* Writers (shard locked, inside an epoch section). */
int sl_table_insert_locked(struct sl_shard *s, uint64_t h, struct sl_entry *e);
int sl_table_replace_locked(struct sl_shard *s, uint64_t h, struct sl_entry *old,
                            struct sl_entry *repl);
/* Reap idle keys of a locked shard, inside an epoch section: the whole
 * shard (sl_table_reap_shard), or at most *budget slots from the shard's
 * cursor, stopping after max_remove removals (sl_table_reap_some). */
size_t sl_table_reap_shard(struct sl_shard *s, uint64_t now, uint64_t idle_ttl);
size_t sl_table_reap_some(struct sl_shard *s, uint64_t now, uint64_t idle_ttl, uint64_t *budget,
                          size_t max_remove);

/* 0, -EAGAIN (pol was retired meanwhile: look it up again) or -ENOMEM. */
int sl_entry_new(struct sluice *l, struct sl_policy *pol, const void *key, size_t len,
                 struct sl_entry **out);
/* Free an entry that was never published. */
void sl_entry_discard(struct sluice *l, struct sl_entry *e);
void sl_entry_free(struct sl_arena *a, struct sl_entry *e);
size_t sl_entry_size(const struct sl_policy *pol, size_t len);
size_t sl_entry_footprint(const struct sl_policy *pol, size_t len);
/* Freeze every limit of e; returns false (nothing frozen) if it is frozen already. */
bool sl_entry_freeze(struct sl_entry *e);
/* Freeze e if it is fresh at now and idle for idle_ttl; false leaves it as it was. */
bool sl_entry_freeze_if_idle(struct sl_entry *e, uint64_t now, uint64_t idle_ttl);
/* Freeze e if no charge stands in it (every control word as made); false
 * leaves it as it was (entry.c). */
bool sl_entry_freeze_if_untouched(struct sl_entry *e, const struct sl_policy *pol);
/* How the replacement of a frozen entry starts: fresh (a reset), with the
 * state carried (a policy change, an override), or fresh if the key is
 * still idle beyond its range once frozen, else carried (sl_idle_beyond). */
enum sl_move { SL_MOVE_FRESH, SL_MOVE_CARRY, SL_MOVE_EXPIRED };
/* Start ne (laid out for `to`) from the frozen e (laid out for `from`):
 * its state words as `how` says and its last_ns; cur: the default in force
 * (sl_policy_carry); now: the caller's time; save: as for sl_last_seal;
 * shm: a shared limiter's file (sl_entry_commits_done), else NULL.
 * Returns the set of e's limits
 * whose state went to ne (bit j: limit j). */
unsigned sl_entry_move_state(struct sl_entry *e, const struct sl_policy *from,
                             struct sl_entry *ne, const struct sl_policy *to,
                             const struct sl_policy *cur, enum sl_move how, uint64_t now,
                             sl_aword *save, struct sl_shm *shm);
/* After e (frozen) is unpublished: say in each limit's control word where
 * its state went (entry.c); kept: the mask sl_entry_move_state returned
 * (0 for a removal, to then NULL), succ: the id of the successor's first
 * state word (sl_word_id, sl_shm_word_id). */
void sl_entry_mark_moved(struct sl_entry *e, const struct sl_policy *from,
                         const struct sl_policy *to, unsigned kept, uint64_t succ);
/* A private limiter's state word as a successor id (nonzero, below
 * SL_DEAD: words are 8-byte aligned; the id of w + k is the id of w plus
 * k), and back. */
static inline uint64_t sl_word_id(const sl_aword *w) { return (uintptr_t)w >> 3; }
static inline sl_aword *sl_word_of_id(uint64_t id)
{
    return (sl_aword *)(uintptr_t)(id << 3);
}
/* Take back the key this failing call inserted, if nobody has charged it
 * since (shard lock taken here, inside an epoch section). */
struct sl_limbo;
void sl_table_unpublish_untouched(struct sl_shard *s, uint64_t h, struct sl_entry *e,
                              struct sl_limbo *batch);

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
/* Cache-line aligned; slabs and large blocks are accounted to acct. */
void *sl_arena_alloc(struct sl_arena *a, size_t size);
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
/* Tests: fail the nth allocation from now (1 = next), every nth if `every`; 0 disables. */
void sl_test_fail_alloc(unsigned long nth, bool every);


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
    unsigned flags;             /* SLUICE_F_* */
    unsigned charged;           /* limits charged so far */
    struct sl_entry *pinned;    /* the entry this decision inserted (see sl_entry.pinned) */
    struct sl_limbo *takeback;  /* while pinned, a private limiter's: retires it if
                                   the decision fails (resolve.c, sl_target_insert) */
    uint64_t receipt[SLUICE_MAX_LIMITS][SL_RECEIPT_WORDS];
};

/* Inline: every decision starts here (a call into another file costs the
 * hot path ~20 instructions). */
static inline void sl_target_init(struct sl_target *g, struct sluice *l, const void *key,
                                  size_t len)
{
    /* every field but the receipts (written before read) */
    g->e = NULL;
    g->pol = NULL;
    g->w = NULL;
    g->flags = 0;
    g->charged = 0;
    g->behind = 0;
    g->pinned = NULL;
    g->l = l;
    g->key = key;
    g->len = len;
    g->h = sl_hash(&l->hkey, key, len);
    g->s = l->shm != NULL ? NULL : sl_shard_of(l, g->h); /* shared: the file's shards */
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
    /* modular; past the wrap (sl_decide_time's absolute rule) it stays 0: open */
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
static inline bool sl_policy_stale(struct sluice *l, const struct sl_policy *pol)
{
    /* acquire: pairs with the release that publishes a new generation */
    if (l->shm_gen != NULL)
        return !pol->is_override && pol->shm_ref != sl_load_acq(l->shm_gen);
    return !pol->is_override && pol != atomic_load_explicit(&l->policy, memory_order_acquire);
}
/* Replace g's entry by one laid out for `to` (its state as `how` says),
 * under the shard lock.  -EAGAIN: the entry changed meanwhile, look again. */
int sl_entry_replace(struct sl_thread *t, struct sl_target *g, struct sl_entry *e,
                     struct sl_policy *to, enum sl_move how, uint64_t now);
/* Insert g's key under pol, inside an epoch section: 0 (*out the entry),
 * -ENOSPC (no room at max_keys, even after reaping), -EAGAIN (inserted
 * meanwhile, or pol is a default policy since replaced: look again) or
 * -ENOMEM.  pin: published pinned (sl_entry.pinned) for the caller's
 * decision.  exhaustive: room is sought in every shard, not a bounded scan. */
int sl_key_insert(struct sl_thread *t, struct sl_target *g, struct sl_policy *pol, uint64_t now,
                  bool pin, bool exhaustive, struct sl_entry **out);
/* 0, or the errno of a call's limiter/key arguments. */
static inline int sl_key_check(struct sluice *l, const void *key, size_t len)
{
    if (l == NULL || (key == NULL && len > 0))
        return -EINVAL;
    return len > l->max_key_len ? -ENAMETOOLONG : 0;
}

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
bool sl_entry_freeze_pol(struct sl_entry *e, const struct sl_policy *pol);
/* After a freeze, before sealing last_ns: true once no call on several
 * keys is between its test of the frozen word and its commits on e (wait:
 * for every live one; shm: a shared limiter's file, whose dead callers'
 * counts are cleared; false, not waiting, while one is). */
bool sl_entry_commits_done(struct sl_entry *e, bool wait, struct sl_shm *shm);
/* save: as for sl_last_seal (a shared limiter's shard, else NULL) */
bool sl_entry_freeze_fresh_pol(struct sl_entry *e, const struct sl_policy *pol, uint64_t now,
                               sl_aword *save);

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
void sl_shm_unpublish_untouched(struct sl_target *g);
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
