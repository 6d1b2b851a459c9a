/*
 * Shared limiters: the file layout and the interfaces between shm_file.c
 * (open, attach, validate, policies), shm_epoch.c (processes, the file's
 * epoch, the entry pool) and shm_table.c (the key table, decisions' lookups
 * and every writer).  See doc/DESIGN.md, "Shared limiters".
 *
 * Everything in the file is addressed by index or offset, never by
 * pointer: each process maps it at its own address.  Layout, in order:
 *   header | process records | shards | slot arrays (2 per shard) |
 *   override policies | entry states | entries
 * All sizes follow from the header's fingerprint, so a file is checked by
 * recomputing them (sl_shm_layout), never by trusting stored offsets.
 */
#ifndef SL_SHM_H
#define SL_SHM_H

#include <limits.h>

#include "internal.h"

#define SL_SHM_MAGIC UINT64_C(0x31484d5345434c53) /* "SLCESMH1" */
#define SL_SHM_LAYOUT 4u          /* 2: override policies; 3: sealed_last; 4: entry commit counts, windows */
#define SL_SHM_PROCS 1024u      /* processes attached at once, at most */
#define SL_SHM_TSLOTS 7u        /* counter slots owned by thread ids 0..6; one more shared */
#define SL_SHM_MIN_WORDS 8u     /* state words an entry holds at least */
#define SL_SHM_POL_WORDS ((sizeof(struct sluice_policy) + 7) / 8)
#define SL_SHM_NAME 64u
#define SL_SHM_OVR_MAX 4096u    /* overridden keys at most (fewer if max_keys is) */

/*
 * An entry's polref names its policy: a default generation (>= 1, below
 * 2^63), or an override, SL_SHM_OVR | serial << 32 | slot index.  The
 * serial (31 bits, never 0) makes each override's tag unique, so a slot
 * freed and taken again never reads as the override an old entry names.
 */
#define SL_SHM_OVR (UINT64_C(1) << 63)
#define SL_SHM_OVR_BUSY 1u      /* an override slot being written */
static inline bool sl_shm_is_ovr(uint64_t ref) { return (ref & SL_SHM_OVR) != 0; }

/* Entry states (one word each, apart from the entries): FREE, USED, or
 * LIMBO | epoch << 2: unpublished at that epoch, reusable two epochs on. */
#define SL_ST_FREE 0u
#define SL_ST_USED 1u
#define SL_ST_LIMBO 2u

/* Slot values: 0 empty, SL_TOMB a tombstone, else (hash bits above 32) |
 * (entry index + 2). */
#define SL_TOMB 1u
#define SL_IDX_MASK UINT64_C(0xffffffff)

/* One generation of the default policy, read by a seqlock: gen is 0 while
 * its words are written (by the holder of pol_lock). */
struct sl_shm_polslot {
    sl_aword gen;
    sl_aword words[SL_SHM_POL_WORDS];
};

/* One key's override policy.  tag: 0 free, SL_SHM_OVR_BUSY being written
 * (by a holder of the key's shard lock), else the override's tag; read by
 * seqlock on the tag. */
struct sl_shm_ovr {
    sl_aword tag;
    sl_aword words[SL_SHM_POL_WORDS];
};

struct sl_shm_hdr {
    /* immutable after creation, covered by check */
    uint64_t magic, layout, size;
    uint64_t max_keys, max_key_len, nshards, idle_ttl_ns, when_full, clock;
    uint64_t words;             /* state words per entry */
    uint64_t pool;              /* entries */
    uint64_t slots;             /* slots per array (a power of two) */
    uint64_t esize;             /* bytes per entry */
    uint64_t novr;              /* override policy slots: one per overridden key,
                                   and one per shard for a change in progress */
    uint64_t hkey[2];
    char name[SL_SHM_NAME];
    uint64_t create_pol[SL_SHM_POL_WORDS];
    uint64_t check;             /* FNV-1a of everything above */

    sl_aword pol_lock SL_ALIGNED; /* set_policy (sl_shm_word_lock) */
    sl_aword pol_gen;           /* the current generation (>= 1) */
    sl_aword migrated;          /* every entry is on this generation */
    sl_aword incarnation;       /* counts process-record claims */
    sl_aword procs_hi;          /* records ever claimed: scans stop there */
    struct sl_shm_polslot pol[2]; /* generation g in pol[g & 1] */

    sl_aword epoch SL_ALIGNED;
    sl_aword nkeys SL_ALIGNED;  /* live keys, reserved before insert */
    sl_aword inserted, reaped, full, reap_floor, alloc_cursor;
    sl_aword room_fruitless, room_quiet_until, reap_next;
    sl_aword repair;            /* a writer died holding a shard: reconcile */
    sl_aword ovr_serial;        /* override tags made (sl_shm_ovr_new) */
    sl_aword ovr_keys;          /* keys with an override, reserved before the change */
    sl_aword ovr_cursor;        /* where the next override slot search starts (a hint) */
};

/* A process attached to the file.  owner: pid | incarnation << 32, 0 free,
 * a claim word (sl_shm_claim_make) while a process claims or reclaims it.
 * cnt[p]: this process's sections begun at an epoch of parity p.  stat:
 * its decisions, counted as in-process (each of the first SL_SHM_TSLOTS
 * threads owns a slot: a plain load and store), never cleared: a record's
 * next owner adds to what its dead owner counted. */
struct sl_shm_proc {
    sl_aword owner;
    sl_aword start;             /* its start time (/proc/PID/stat), against pid reuse */
    sl_aword cnt[2];
    /* where the owner maps the file (0: not known, a file an older library
     * made): exec(2) keeps the pid and the start time but unmaps it */
    sl_aword base;
    struct sl_stat_slot stat[SL_SHM_TSLOTS + 1];
} SL_ALIGNED;

struct sl_shm_shard {
    sl_aword lock;              /* writers (sl_shm_word_lock) */
    sl_aword cur;               /* which of the two slot arrays readers use */
    sl_aword retired[2];        /* epoch each array stopped being current at;
                                   UINT64_MAX: not known (a writer died) */
    sl_aword live, used;        /* entries; entries + tombstones (under lock) */
    sl_aword reap_cursor;       /* (under lock) */
    sl_aword sealed_last;       /* last_ns of the entry the holder sealed
                                   (sl_last_seal), and 1 + its index (0:
                                   none, cleared on unlock): a dead
                                   holder's is given back when its lock is
                                   taken over (sl_shm_unseal_dead) */
    sl_aword sealed_idx;
} SL_ALIGNED;

struct sl_shm_layout {
    size_t procs, shards, slots, ovr, states, entries, size;
};

/* A process's handle (struct sluice.shm). */
/* A mapping's device and inode as /proc/PID/maps shows them. */
struct sl_maps_id {
    unsigned maj, mnr;
    unsigned long long ino;
};

struct sl_shm {
    unsigned char *base;
    size_t size;
    uint64_t dev, ino;          /* the file: another handle of it is the same limiter */
    /* the mapping as /proc/self/maps shows it, to find in other processes'
     * (sl_shm_record_dead); maps_known false: not found, no such test */
    struct sl_maps_id maps_id;
    bool maps_known;
    struct sl_shm_hdr *hdr;
    struct sl_shm_proc *procs;
    struct sl_shm_shard *shards;
    sl_aword *slots, *states;
    struct sl_shm_ovr *ovr;
    unsigned char *entries;
    uint64_t pool, nslots, words, esize, novr, ovr_max;
    unsigned shard_shift;
    /* this process's record: (fork generation << 32) | (index + 1), and
     * the record's owner word (shm_epoch.c) */
    _Atomic uint64_t me, owner;
    pthread_mutex_t mu;         /* the record claim and the policy cache */
    struct sl_holder holder;    /* sliding logs' writers: this process (algo_log.c) */
    _Atomic uint64_t log_stuck[SL_HOLDER_STUCK]; /* holder.stuck */
    /* compiled policies by generation (the current one is l->policy) */
    struct sl_policy *cache[4];
    unsigned cache_next;
    /* compiled overrides by slot, each checked against the entry's tag;
     * loaded lock-free, replaced under mu (the old one retired by ck) */
    _Atomic(struct sl_policy *) *ovr_cache;
};

/* shm_file.c */
int sl_shm_layout(const struct sl_shm_hdr *h, struct sl_shm_layout *out);

/* Sliding logs of this file's policies know their writers by process
 * (shm_epoch.c); every policy compiled for the file is bound to it. */
void sl_shm_holder_init(struct sl_shm *m);
static inline void sl_shm_policy_bind(struct sl_shm *m, struct sl_policy *p)
{
    for (unsigned i = 0; i < p->nlimits; i++)
        p->lim[i].holder = &m->holder;
}

/* shm_policy.c */
void sl_shm_policy_words(const struct sluice_policy *p, uint64_t *w);
/* Policy slot gen & 1: read by seqlock (false: another generation, or
 * being written); written under pol_lock or before the file is linked. */
bool sl_shm_polslot_read(struct sl_shm_hdr *h, uint64_t gen, struct sluice_policy *out);
void sl_shm_polslot_write(struct sl_shm_hdr *h, uint64_t gen, const struct sluice_policy *p);
/* Compile def for a file whose entries hold `words` state words (0: any):
 * no more words. */
int sl_shm_policy_check(const struct sluice_policy *def, uint64_t words, struct sl_policy **out);
/* The compiled policy an entry's polref names: a default generation or an
 * override (a reference is kept by the handle's caches; valid until the
 * ck section ends); NULL if the file no longer holds it (look the entry up
 * again) or it is corrupt. */
struct sl_policy *sl_shm_policy(struct sluice *l, uint64_t ref);
/* Store def in a free override slot (the caller holds the shard lock of
 * the key it is for: sl_shm_reconcile frees slots no entry names); its
 * tag, or 0 if every slot is taken. */
uint64_t sl_shm_ovr_new(struct sl_shm *m, const struct sluice_policy *def);
/* Free the slot of override tag (no published entry names it any more). */
void sl_shm_ovr_free(struct sl_shm *m, uint64_t tag);
/* Check p for this file and store it as generation gen (under pol_lock). */
int sl_shm_write_policy(struct sluice *l, uint64_t gen, const struct sluice_policy *p);
/* Make l->policy the file's current generation. */
void sl_shm_refresh(struct sluice *l);

/* shm_epoch.c */
int sl_shm_register(struct sluice *l);
void sl_shm_unregister(struct sluice *l);
/* Advance the file's epoch if no live process is in a section of the one
 * before; true if it moved.  Never waits for a section: a holder of a shard
 * lock must not, since a section may be waiting for that lock.  Only
 * callers holding no shard lock pass check_dead (its system calls find
 * dead processes whose sections stall the epoch). */
bool sl_shm_advance(struct sl_shm *m, bool check_dead);
/* An entry index for a writer holding a shard lock; UINT64_MAX if none is
 * free now (the caller retries after unlocking, or gives up). */
uint64_t sl_shm_alloc(struct sl_shm *m);
/* Give back an entry nobody can have seen (never published). */
void sl_shm_free_unseen(struct sl_shm *m, uint64_t idx);
/* Retire an entry unpublished just before (reused two epochs later). */
void sl_shm_retire(struct sl_shm *m, uint64_t idx);
/* A pin token for this process (sl_entry.pinned), and whether a pin found
 * on an entry still belongs to a live process. */
uint32_t sl_shm_pin_token(struct sluice *l);
bool sl_shm_pin_live(struct sl_shm *m, uint32_t pin);
bool sl_shm_proc_dead(uint64_t owner, uint64_t start);
/* The owner of record p (its word, as read) is gone: dead by pid and start
 * time (sl_shm_proc_dead), or no longer mapping the file where it did (it
 * called exec(2) while threads of it were inside calls). */
bool sl_shm_record_dead(const struct sl_shm *m, struct sl_shm_proc *p, uint64_t owner);
/* At attach, once mapped: this process's mapping of the file, as others
 * will look for it. */
void sl_shm_maps_self(struct sl_shm *m);
uint64_t sl_shm_self_start(void);
/* The word a record holds while process pid, started at `start`, claims
 * or reclaims it (shm_epoch.c says why). */
#define SL_SHM_CLAIM_BIT (UINT64_C(1) << 63)
#define SL_SHM_START_TAG(s) ((s) & UINT64_C(0x7fffffff))
static inline uint64_t sl_shm_claim_make(uint32_t pid, uint64_t start)
{
    return SL_SHM_CLAIM_BIT | (SL_SHM_START_TAG(start) << 32) | pid;
}

/* shm_table.c */
/*
 * The file's locks: a word holding its owner's token (sl_shm_pin_token), 0
 * when free.  A waiter that finds the owner's process dead takes the lock
 * over (returns 1: the section it interrupted may need repair).  Not
 * pthread robust mutexes: a token is judged by the same liveness test as
 * the epoch's records, needs nothing from the kernel's robust lists or
 * libc, and leaves nothing in the file that only libc can read.
 * wait false: -1 if taken by a live process.
 */
int sl_shm_word_lock(struct sluice *l, sl_aword *w, bool wait);
void sl_shm_word_unlock(sl_aword *w);

static inline struct sl_entry *sl_shm_entry(const struct sl_shm *m, uint64_t idx)
{
    return (struct sl_entry *)(void *)(m->entries + idx * m->esize);
}

static inline uint64_t sl_shm_idx(const struct sl_shm *m, const struct sl_entry *e)
{
    return (uint64_t)((const unsigned char *)e - m->entries) / m->esize;
}

static inline unsigned char *sl_shm_key(const struct sl_shm *m, struct sl_entry *e)
{
    return (unsigned char *)&e->w[m->words];
}

static inline struct sl_shm_shard *sl_shm_shard(struct sl_shm *m, uint64_t h)
{
    /* shard_shift is 1..64 (64: one shard): shifting by 1 and then the rest
     * never shifts by 64, which C leaves undefined, and needs no branch */
    return &m->shards[(h >> 1) >> (m->shard_shift - 1)];
}

static inline sl_aword *sl_shm_array(struct sl_shm *m, struct sl_shm_shard *s, uint64_t which)
{
    return m->slots + ((uint64_t)(s - m->shards) * 2 + (which & 1)) * m->nslots;
}

/* The calling thread's (id tid) counter slot in this process's record;
 * relaxed: inside a section, which registered this process. */
static inline struct sl_stat_slot *sl_shm_own_slot(struct sl_shm *m, unsigned tid)
{
    uint64_t me = atomic_load_explicit(&m->me, memory_order_relaxed);

    return &m->procs[((me & UINT32_MAX) - 1) % SL_SHM_PROCS].stat[sl_min64(tid, SL_SHM_TSLOTS)];
}

/* Add to a counter of that slot: its owner (tid < SL_SHM_TSLOTS) is its
 * only writer, a plain load and store; later threads share the last slot,
 * by atomic add. */
static inline void sl_shm_slot_add(sl_aword *c, unsigned tid, uint64_t delta)
{
    if (tid < SL_SHM_TSLOTS)
        sl_store_rlx(c, sl_load_rlx(c) + delta);
    else
        (void)atomic_fetch_add_explicit(c, delta, memory_order_relaxed);
}

/* An entry's index in the pool. */
static inline uint64_t sl_shm_entry_index(const struct sl_shm *m, const struct sl_entry *e)
{
    return (uint64_t)((const unsigned char *)e - m->entries) / m->esize;
}

/* The shard whose slot arrays hold slot. */
static inline struct sl_shm_shard *sl_shm_slot_shard(struct sl_shm *m, const sl_aword *slot)
{
    return &m->shards[(uint64_t)(slot - m->slots) / (2 * m->nslots)];
}

/* The entry a slot value names; NULL for empty, tombstone or out of range
 * (whatever the file holds). */
static inline struct sl_entry *sl_slot_entry(struct sl_shm *m, uint64_t v)
{
    uint64_t idx = (v & SL_IDX_MASK) - 2;

    return v > SL_TOMB && (v & SL_IDX_MASK) >= 2 && idx < m->pool ? sl_shm_entry(m, idx) : NULL;
}

/* shm_lock.c, for shm_table.c and shm_admin.c */
void sl_shm_lock(struct sluice *l, struct sl_shm_shard *s);
bool sl_shm_trylock(struct sluice *l, struct sl_shm_shard *s);
/* Release without the repair check (another shard lock is still held). */
void sl_shm_release(struct sl_shm_shard *s);
/* Release, then repair the file if a dead holder was found (sl_shm_reconcile)
 * once this thread holds no shard lock. */
void sl_shm_unlock(struct sluice *l, struct sl_shm_shard *s);
void sl_shm_reconcile(struct sluice *l);
/* Sleep us microseconds: waits for other processes, in no section and
 * holding no shard lock. */
void sl_shm_nap(long us);
/* Where a holder of s saves the last_ns it seals of e (sl_last_seal), for
 * the repair should it die holding s. */
sl_aword *sl_shm_seal_save(struct sl_shm *m, struct sl_shm_shard *s, const struct sl_entry *e);
/* shm_table.c */
struct sl_entry *sl_shm_lookup(struct sl_shm *m, struct sl_shm_shard *s, uint64_t h,
                               const void *key, size_t len, sl_aword **slot);
size_t sl_shm_reap_some(struct sluice *l, struct sl_shm_shard *s, uint64_t now,
                        uint64_t *budget, size_t max_remove);
int sl_shm_swap(struct sluice *l, sl_aword *slot, struct sl_entry *e,
                const struct sl_policy *from, const struct sl_policy *to, enum sl_move how,
                uint64_t now, uint32_t pin);
/* Publish a new key under pol in a locked shard (override_set): 0,
 * -ENOSPC (max_keys and nothing reapable, or the shard's slots all live)
 * or -ENOMEM (no free entry, or slot, now: unlock, let the epoch move,
 * try again). */
int sl_shm_add_locked(struct sluice *l, struct sl_shm_shard *s, uint64_t h, const void *key,
                      size_t len, const struct sl_policy *pol, uint64_t now);

#endif
