/*
 * Entries, their time word, and the key table (entry.c, table.c).
 * Part of the internal interfaces: included by internal.h, after the base
 * definitions it uses (sl_aword, SL_DEAD, SL_ASSERT), never on its own.
 */
#ifndef SL_ENTRY_H
#define SL_ENTRY_H
#ifndef SL_INTERNAL_H
#error "include internal.h"
#endif
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
/* w[0] and w[1] 16-byte aligned in a cache-line-aligned entry: the pair
 * one CAS charges (sl_cas_pair_acqrel) */
_Static_assert(offsetof(struct sl_entry, w) % 16 == 0, "w[0..1] must be 16-byte aligned");

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
/* The latest time the word keeps exactly. */
#define SL_LAST_EXACT (UINT64_MAX - 2)
static inline uint64_t sl_last_encode(uint64_t t)
{
    return t >= SL_LAST_EXACT ? UINT64_MAX - 1 : t + 1;
}

/* A reap at now reaps as at this time: the floor it leaves (new keys are
 * decided no earlier, sl_table_insert_locked) must not read back earlier
 * than the time its keys were found idle at, or a key reaped at 2^64 - 1
 * was made again at 2^64 - 3 and admitted there a second time (a
 * reviewer: 3 admitted where 2 may, fixed window of 1 per 2 ns). */
static inline uint64_t sl_reap_time(uint64_t now)
{
    return now < SL_LAST_EXACT ? now : SL_LAST_EXACT;
}

/* The latest time a decoded last_ns may stand for: where it bounds the
 * times of the units it covers from above (sliding_carry), the three
 * latest times, all read back as SL_LAST_EXACT, stand for UINT64_MAX. */
static inline uint64_t sl_last_upper(uint64_t last)
{
    return last < SL_LAST_EXACT ? last : UINT64_MAX;
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

/*
 * sl_decide_time by branches, never a conditional move, for the lean
 * paths: a call is nearly always at or after its key's latest admission,
 * so the predicted branches let the decision run at `now` while the
 * entry's line (lastw) is still on its way.  As a data dependence, the
 * time waited on that miss, and at 2^20 keys the whole stacked decision
 * with it (doc/BENCHMARKS.md, sixteenth round).  Each test is its own
 * branch, the fewest instructions on lastw before it: one combined test
 * cost about 20% there.  Each branch is taken on every case where
 * sl_decide_time might not return now, and then returns what it returns.
 */
static inline uint64_t sl_decide_time_predicted(uint64_t lastw, const struct sl_policy *pol,
                                                uint64_t now)
{
    uint64_t last = lastw - 1;

    if (__builtin_expect(lastw != 0 && (int64_t)(now - last) < 0, 0)) {
        __asm__ volatile(""); /* a side effect: no conditional move */
        return sl_decide_time(lastw, pol, now);
    }
    /* pol->absolute is read while the line is on its way */
    if (__builtin_expect(pol->absolute && lastw != 0 && now < last, 0)) {
        __asm__ volatile("");
        return sl_decide_time(lastw, pol, now);
    }
    return now;
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
struct sl_cells;

struct sl_shard {
    _Atomic(struct sl_slots *) slots; /* the current array; readers load it */
    /* The shard's short keys under a single GCRA limit, whole in cells
     * (cells.h, table_cells.c); NULL until the first.  A key is in one of
     * the two: a cell, or an entry in slots. */
    _Atomic(struct sl_cells *) cells;
    uint64_t cells_cursor;      /* where the next bounded reap of cells starts (under lock) */
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
     * and leaving it (sl_commits_count in charge.c; sl_shm_window_live) */
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

    bool cells_on;              /* short keys may live in cells (private, cmpxchg16b) */
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
    /* shard_shift is 1..64 (64: one shard): shifting by 1 and then the rest
     * never shifts by 64, which C leaves undefined, and needs no branch */
    return &l->shards[(h >> 1) >> (l->shard_shift - 1)];
}
/* Lock-free lookup; call inside an epoch section. */
/* The key's entry, or NULL if it has none.  A key in a cell is moved to an
 * entry first (table_cells.c): the general paths work on entries only.
 * _locked: the shard's lock held. */
struct sl_entry *sl_table_get(struct sl_shard *s, uint64_t h, const void *key, size_t len);
struct sl_entry *sl_table_get_locked(struct sl_shard *s, uint64_t h, const void *key, size_t len);
/* Entries only, cells not looked at (table.c). */
struct sl_entry *sl_table_get_entry(struct sl_shard *s, uint64_t h, const void *key, size_t len);
/* The shard's current slot array, as bytes: tests of what a decision writes. */
void sl_table_span(struct sl_shard *s, const void **base, size_t *bytes);
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
/* Frozen e holds no charge: every control word SL_DEAD alone, every other
 * word 0 (entry.c). */
bool sl_entry_frozen_untouched(struct sl_entry *e, const struct sl_policy *pol);
/* How the replacement of a frozen entry starts: fresh (a reset), with the
 * state carried (a policy change, an override), or fresh if the key is
 * still idle beyond its range once frozen, else carried (sl_idle_beyond). */
/*
 * A peek at a key whose policy changed (from, the entry's, to the one in
 * force, to; cur the default in force): g decided on what the migration an
 * acquire makes first (SL_MOVE_CARRY) would carry, without that migration,
 * so that the peek changes nothing: the entry's words copied, carried into
 * words of g's own (g->view) and read at the key's latest admission, as
 * the replacement would be.  0; -EBUSY if the entry is frozen (a writer
 * is moving it: wait, look again); -EAGAIN if it has a sliding log, whose
 * words only its lock reads whole (the caller migrates it, as an acquire
 * would); -ENOMEM.
 */
struct sl_target;
int sl_entry_view(struct sl_target *g, struct sl_entry *e, const struct sl_policy *from,
                  struct sl_policy *to, const struct sl_policy *cur, uint64_t now);
/* The same from state words w and a time word *lastp of any holder (a
 * cell's, table_cells.c). */
int sl_state_view(struct sl_target *g, sl_aword *w, sl_aword *lastp, const struct sl_policy *from,
                  struct sl_policy *to, const struct sl_policy *cur, uint64_t now);
void sl_entry_view_free(struct sl_target *g);
enum sl_move { SL_MOVE_FRESH, SL_MOVE_CARRY, SL_MOVE_EXPIRED };
/* Start ne (laid out for `to`) from the frozen e (laid out for `from`),
 * once the calls counted on e are done (sl_entry_commits_done): its state
 * words as `how` says and its last_ns; cur: the default in force
 * (sl_policy_carry); now: the caller's time; save: as for sl_last_seal.
 * Returns the set of e's limits whose state went to ne (bit j: limit j). */
unsigned sl_entry_move_state(struct sl_entry *e, const struct sl_policy *from,
                             struct sl_entry *ne, const struct sl_policy *to,
                             const struct sl_policy *cur, enum sl_move how, uint64_t now,
                             sl_aword *save);
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
/* Take back the key this failing or denied call inserted, if nobody has
 * charged it since (shard lock taken here, inside an epoch section); batch is retired
 * either way.  true: taken back. */
struct sl_limbo;
bool sl_table_unpublish_untouched(struct sl_shard *s, uint64_t h, struct sl_entry *e,
                              struct sl_limbo *batch);

#endif
