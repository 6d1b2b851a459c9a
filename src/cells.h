/*
 * The cell table: the first stage of the one-line layout (doc/DESIGN.md,
 * "One line per decision").  A shard's short keys in one open-addressing
 * array of 32-byte cells, two to a cache line, each a whole key of up to
 * 16 bytes with its one state word and its time: a decision on such a key
 * reads one cell line and one control line (fetched at once), and writes
 * the cell by one 16-byte CAS.  A key costs 34 B / load in a large array
 * (66 in a small one, sl_cells_at) instead of table.c's 8-byte slot plus
 * 64-byte entry.  Longer keys, larger states,
 * stacked limits and overrides stay entries (table.c).
 *
 * Not yet the limiter's table: the limiter still decides through table.c.
 * This stage is the structure and its concurrency, validated on its own
 * (test/cells.c) and measured against the floor (sluice-bench's targets),
 * before the decision paths move onto it.
 *
 * The rules every user keeps:
 *   - Readers never lock.  They load the shard's array (acquire), probe it,
 *     and, if it is being migrated from an older one (prev), probe that
 *     too.  A control word goes empty -> live -> tombstone and never back
 *     within one array: a reader holding a cell pointer never finds
 *     another key there (so removed cells are not reused until the array
 *     itself is retired; they count as used and a migration drops them).
 *   - A cell's state and last change together by one 16-byte CAS
 *     (sl_cell_commit).  A writer freezes a cell by the same CAS setting
 *     SL_DEAD in state, before it copies or removes the cell; a charge
 *     racing it either lands first (the writer carries it) or fails.
 *   - Writers (insert, remove, migrate) hold the shard's lock and are in
 *     an epoch section; what they unpublish goes to the epoch.
 *
 * Needs cmpxchg16b (sl_cas_pair_usable); where it is missing the limiter
 * keeps table.c.
 */
#ifndef SL_CELLS_H
#define SL_CELLS_H

#include "internal.h"

#define SL_CELL_KEY_MAX 16u

/*
 * A cell's control word, in an array beside the cells (cells.h's top):
 * 0 empty, 1 a tombstone, else SL_CTRL_LIVE | key length << 10 | 10 bits
 * of the hash.  A probe walks control words (32 to a line) and reads a
 * cell only where its word matches; the line of the cell is fetched
 * together with the control word's (both addresses follow from the home,
 * none from a load), so a lookup waits for one miss, as the floor's tag
 * and state arrays do.
 */
#define SL_CTRL_EMPTY 0u
#define SL_CTRL_TOMB 1u
#define SL_CTRL_LIVE 0x8000u

/*
 * state and last are the pair one 16-byte CAS writes: a decision's charge
 * and its exact time together (last as entry.h's last_ns: 1 + the time, 0
 * none), one locked instruction.  A coarser time would not do: a key moved
 * to an entry (a policy change, an override) must carry the exact time of
 * its latest admission, or a window boundary within the lost precision
 * could be crossed twice (two windows' worth admitted where a serial
 * order gives one).
 */
struct sl_cell {
    sl_aword state;  /* the limit's word; SL_DEAD once frozen */
    sl_aword last;
    sl_aword key[2]; /* the key, zero-padded */
} __attribute__((aligned(32)));
_Static_assert(sizeof(struct sl_cell) == 32, "two cells to a cache line in a large array");

typedef _Atomic uint16_t sl_actrl;

struct sl_cells {
    ck_epoch_entry_t retire;
    /* While a migration copies into this array: the array it copies from,
     * which readers probe after this one (release by the migrating writer,
     * acquire by readers).  NULL otherwise. */
    _Atomic(struct sl_cells *) prev;
    uint64_t cap;   /* cells; any number (homes by multiply-shift, not a mask) */
    uint64_t used;  /* writers': cells not empty (live and tombstones) */
    uint64_t live;  /* writers': live cells */
    size_t bytes;   /* as accounted */
    sl_actrl *ctrl; /* cap words, after the cells in the same block */
    void *owner;    /* the user's (the limiter: the policy every cell is under), kept by migrations */
    unsigned stride_shift; /* log2 of a cell's place: 6 in a small array, else 5 (sl_cells_at) */
    struct sl_cell cell[] __attribute__((aligned(64)));
};

/*
 * Cell i of t.  An array of up to SL_CELLS_SPREAD_MAX cells gives each
 * cell a line of its own, a larger one packs two to a line.  A small
 * table stays in both cores' caches, so two threads admitting on keys
 * that share a line took it from each other on nearly every admission
 * (the 10^3 split row: 1.59x where the machine's CAS scales 1.96x); a
 * large one misses on the line anyway, and halving its memory matters
 * (48 B a key at 2^20 keys).
 */
#define SL_CELLS_SPREAD_MAX 1024u
static inline struct sl_cell *sl_cells_at(const struct sl_cells *t, uint64_t i)
{
    return (struct sl_cell *)(void *)((char *)(uintptr_t)t->cell + (i << t->stride_shift));
}

static inline uint64_t sl_cells_index(const struct sl_cells *t, const struct sl_cell *c)
{
    return (uint64_t)((const char *)c - (const char *)t->cell) >> t->stride_shift;
}

/* The hash of a cell's key, for a migration (the table does not hold the
 * hash key). */
typedef uint64_t sl_cells_hash_fn(void *ctx, const void *key, size_t len);

static inline uint16_t sl_ctrl_want(uint64_t h, size_t len)
{
    return (uint16_t)(SL_CTRL_LIVE | (unsigned)len << 10 | (unsigned)((h >> 32) & 0x3ffu));
}

static inline unsigned sl_ctrl_len(uint16_t cw)
{
    return (cw >> 10) & 31u;
}

/* A key of up to 16 bytes as the two words a cell compares: its bytes,
 * zero-padded.  On a little-endian CPU from at most four loads, the last
 * of each pair overlapping and shifted (a memcpy of a variable length is
 * a call); elsewhere by memcpy. */
static inline void sl_cell_key_pack(const void *key, size_t len, uint64_t k[2])
{
    const unsigned char *p = key;

    SL_ASSERT(len <= SL_CELL_KEY_MAX);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (len >= 8) {
        uint64_t hi = 0;
        memcpy(&k[0], p, 8);
        if (len > 8) {
            memcpy(&hi, p + len - 8, 8);
            hi >>= 8 * (16 - len);
        }
        k[1] = hi;
        return;
    }
    k[1] = 0;
    if (len >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + len - 4, 4);
        k[0] = lo | ((uint64_t)hi >> (8 * (8 - len))) << 32;
        return;
    }
    k[0] = 0;
    for (size_t i = 0; i < len; i++)
        k[0] |= (uint64_t)p[i] << (8 * i);
#else
    unsigned char b[16] = {0};

    if (len != 0)
        memcpy(b, p, len);
    memcpy(k, b, 16);
#endif
}

/* A shard's home for h: multiply-shift on h's low 32 bits (its top bits
 * chose the shard), so any capacity works and none is rounded up to a
 * power of two (what keeps 2^20 keys near 45 B each, not 68). */
static inline uint64_t sl_cells_home(const struct sl_cells *t, uint64_t h)
{
    return ((h & UINT32_MAX) * t->cap) >> 32;
}

static inline uint64_t sl_cells_next(const struct sl_cells *t, uint64_t i)
{
    return i + 1 < t->cap ? i + 1 : 0;
}

/* Start loading the lines a lookup of h reads first: its home's control
 * word and cell (a hint: the array may be replaced meanwhile). */
static inline void sl_cells_prefetch(_Atomic(struct sl_cells *) *cur, uint64_t h)
{
    /* acquire: as sl_cells_lookup_in's */
    struct sl_cells *t = atomic_load_explicit(cur, memory_order_acquire);

    if (t != NULL) {
        uint64_t i = sl_cells_home(t, h);
        __builtin_prefetch(&t->ctrl[i]);
        __builtin_prefetch(sl_cells_at(t, i));
    }
}

/* h's cell in one array, or NULL at the end of its probe.  Acquire on the
 * control word: the cell's words were written before it. */
static inline __attribute__((always_inline)) struct sl_cell *
sl_cells_probe(struct sl_cells *t, uint64_t h, const uint64_t k[2], uint16_t want)
{
    uint64_t i = sl_cells_home(t, h);

    /* left: a full array of tombstones still ends (a migration leaves a
     * quarter empty; this is the bound, not the common case) */
    for (uint64_t left = t->cap; left != 0; left--, i = sl_cells_next(t, i)) {
        uint16_t cw = atomic_load_explicit(&t->ctrl[i], memory_order_acquire);
        struct sl_cell *c = sl_cells_at(t, i);
        if (cw == SL_CTRL_EMPTY)
            return NULL;
        if (cw == want && sl_load_rlx(&c->key[0]) == k[0] && sl_load_rlx(&c->key[1]) == k[1])
            return c;
    }
    return NULL;
}

/*
 * The key's cell in the shard's arrays (*cur, then the array it is being
 * migrated from), or NULL if it was absent at some instant of the call.
 * The cell found may be frozen (its state has SL_DEAD: being migrated or
 * removed): the caller then waits for the shard's writer (its lock) and
 * looks again.  k: the key packed (sl_cell_key_pack).  In an epoch section.
 * *in: the array the cell is in (not set when NULL is returned).
 */
static inline __attribute__((always_inline)) struct sl_cell *
sl_cells_lookup_in(_Atomic(struct sl_cells *) *cur, uint64_t h, const uint64_t k[2], size_t len,
                   struct sl_cells **in)
{
    /* acquire: the array's cells were written before it was published */
    struct sl_cells *t = atomic_load_explicit(cur, memory_order_acquire), *prev;
    uint16_t want = sl_ctrl_want(h, len);
    struct sl_cell *c;

    if (t == NULL)
        return NULL;
    /* prev before t's probe, never after: read after, it could be NULL
     * for a migration that copied the key into t behind the probe, and a
     * present key was missed (test/cells.c saw it).  Read before: NULL
     * means every copy into t is visible (acquire; the writer's release);
     * otherwise a key not found in t is still in prev, frozen at worst
     * (copied cells stay there until prev is retired). */
    prev = atomic_load_explicit(&t->prev, memory_order_acquire);
    if ((c = sl_cells_probe(t, h, k, want)) != NULL || prev == NULL) {
        *in = t;
        return c;
    }
    SL_TEST_CELLS_MISSED();
    *in = prev;
    return sl_cells_probe(prev, h, k, want);
}

/* sl_cells_lookup_in, for callers that need not know the array. */
static inline __attribute__((always_inline)) struct sl_cell *
sl_cells_lookup(_Atomic(struct sl_cells *) *cur, uint64_t h, const uint64_t k[2], size_t len)
{
    struct sl_cells *in;

    return sl_cells_lookup_in(cur, h, k, len, &in);
}

/* The time word a charge decided at `at` leaves beside its state: at,
 * unless the key's latest time (seen_last) is later (modular). */
static inline uint64_t sl_cell_last_after(uint64_t seen_last, uint64_t at)
{
    uint64_t enc = sl_last_encode(at);

    return seen_last == 0 || (int64_t)(enc - seen_last) > 0 ? enc : seen_last;
}

/*
 * A decision's write on a cell: from seen (state and last as read,
 * updated to what the cell held on failure) to next_state, with last
 * raised to `at` (never lowered, in modular order, as sl_last_commit).
 * False if anything changed between (another charge, a freeze: seen says
 * which).  Release and acquire.
 */
static inline bool sl_cell_commit(struct sl_cell *c, uint64_t seen[2], uint64_t next_state,
                                  uint64_t at)
{
    uint64_t next[2] = {next_state, sl_cell_last_after(seen[1], at)};

    return sl_cas_pair_acqrel(&c->state, seen, next);
}

/* ---- writers: the shard's lock held, in an epoch section (cells.c) ---- */

/* An empty array for `live` keys; NULL out of memory.  Accounted to acct. */
struct sl_cells *sl_cells_new(sl_aword *acct, uint64_t live);
/* Not concurrent with anything: the array and nothing it points to. */
void sl_cells_free(sl_aword *acct, struct sl_cells *t);
/* An array unpublished in this epoch section: freed once no reader holds it. */
void sl_cells_retire(struct sl_thread *th, sl_aword *acct, struct sl_cells *t);

/* Make room for one more key in *cur, migrating to a larger array (or one
 * without tombstones) if 3/4 of its cells are used.  0 or -ENOMEM. */
int sl_cells_reserve(_Atomic(struct sl_cells *) *cur, sl_aword *acct, sl_cells_hash_fn *hash,
                     void *ctx);

/* Insert an absent key (the caller has looked under the lock), after
 * sl_cells_reserve: its state and last words as given.  The cell, published. */
struct sl_cell *sl_cells_insert(struct sl_cells *t, uint64_t h, const void *key, size_t len,
                                uint64_t state, uint64_t last);

/* Freeze a cell: its state and last as they were (*was), false if it was
 * frozen already.  No charge lands on it after this. */
bool sl_cell_freeze(struct sl_cell *c, uint64_t was[2]);

/* Remove a frozen cell of t: a tombstone until the array is retired. */
void sl_cells_remove(struct sl_cells *t, struct sl_cell *c);

/*
 * Move every live cell of *cur into a new array of cap cells: the new
 * array is published first (readers probe it, then the old one), and
 * each cell is frozen, then copied, so that its charges are in one
 * place at every instant.  The old array goes to the epoch.  0, or
 * -ENOMEM with nothing changed.
 */
int sl_cells_migrate(_Atomic(struct sl_cells *) *cur, sl_aword *acct, uint64_t cap,
                     sl_cells_hash_fn *hash, void *ctx);

/* The capacity a migration chooses for `live` keys: 3/5 full after it,
 * growing to 3/4 before the next. */
uint64_t sl_cells_cap_for(uint64_t live);

#endif
