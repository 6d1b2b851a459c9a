/*
 * The cell table: the first stage of the one-line layout (doc/DESIGN.md,
 * "One line per decision").  A shard's keys in one open-addressing array
 * of 32-byte cells, two to a cache line.  A cell holds either a whole key
 * of up to 16 bytes with its one state word (inline: a decision reads and
 * writes that one line, and a key costs 32 B / load instead of today's
 * 8-byte slot plus 64-byte entry), or the address of an entry for
 * everything else (indirect: longer keys, stacked limits, overrides).
 *
 * Not yet the limiter's table: the limiter still decides through table.c.
 * This stage is the structure and its concurrency, validated on its own
 * (test/cells.c) and measured against the floor (sluice-bench's targets),
 * before the decision paths move onto it.
 *
 * The rules every user keeps:
 *   - Readers never lock.  They load the shard's array (acquire), probe it,
 *     and, if it is being migrated from an older one (prev), probe that
 *     too.  A cell's kind goes EMPTY -> INLINE or INDIRECT -> TOMB and never
 *     back within one array: a reader holding a cell pointer never finds
 *     another key there (so removed cells are not reused until the array
 *     itself is retired; they count as used and a migration drops them).
 *   - An inline cell's state and meta words change together by one 16-byte
 *     CAS (sl_cell_commit): a decision's charge and its coarse time at
 *     once, one locked instruction.  A writer freezes a cell by the same
 *     CAS setting SL_DEAD in state; a charge racing it either lands first
 *     (the writer carries it) or fails.
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

enum sl_cell_kind { SL_CELL_EMPTY = 0, SL_CELL_INLINE = 1, SL_CELL_INDIRECT = 2, SL_CELL_TOMB = 3 };

/*
 * meta: kind (2 bits) | key length (5) | policy generation (24) | spare (1)
 * | coarse time of the latest admission (32: 1 + t >> SL_CELL_LAST_SHIFT,
 * 0 none; modulo 2^32 units, about 52 days at 2^20 ns a unit).
 */
#define SL_META_KIND_MASK UINT64_C(3)
#define SL_META_LEN_SHIFT 2
#define SL_META_GEN_SHIFT 7
#define SL_META_GEN_MASK ((UINT64_C(1) << 24) - 1)
#define SL_META_LAST_SHIFT 32
#define SL_CELL_LAST_SHIFT 20

struct sl_cell {
    sl_aword state;  /* inline: the limit's word, SL_DEAD once frozen; indirect: entry address */
    sl_aword meta;   /* with state, the pair one CAS writes */
    sl_aword key[2]; /* inline: the key, zero-padded; indirect: key[0] the key's hash */
} __attribute__((aligned(32)));
_Static_assert(sizeof(struct sl_cell) == 32, "two cells to a cache line");

struct sl_cells {
    ck_epoch_entry_t retire;
    /* While a migration copies into this array: the array it copies from,
     * which readers probe after this one (release by the migrating writer,
     * acquire by readers).  NULL otherwise. */
    _Atomic(struct sl_cells *) prev;
    uint64_t cap;   /* cells; any number (homes by multiply-shift, not a mask) */
    uint64_t used;  /* writers': cells not empty (live and tombstones) */
    uint64_t live;  /* writers': inline and indirect cells */
    size_t bytes;   /* as accounted */
    struct sl_cell cell[];
};

/* The hash of an inline cell's key, for a migration (the table does not
 * hold the hash key). */
typedef uint64_t sl_cells_hash_fn(void *ctx, const void *key, size_t len);

static inline uint64_t sl_meta_kind(uint64_t m) { return m & SL_META_KIND_MASK; }
static inline unsigned sl_meta_len(uint64_t m) { return (unsigned)(m >> SL_META_LEN_SHIFT) & 31u; }
static inline uint32_t sl_meta_gen(uint64_t m)
{
    return (uint32_t)((m >> SL_META_GEN_SHIFT) & SL_META_GEN_MASK);
}

static inline uint64_t sl_meta_make(enum sl_cell_kind kind, unsigned len, uint32_t gen)
{
    return (uint64_t)kind | (uint64_t)len << SL_META_LEN_SHIFT |
           ((uint64_t)gen & SL_META_GEN_MASK) << SL_META_GEN_SHIFT;
}

/* The coarse time meta carries for t (never 0: 0 is "none"). */
static inline uint64_t sl_meta_last_unit(uint64_t t)
{
    uint32_t u = (uint32_t)(t >> SL_CELL_LAST_SHIFT) + 1;

    return u != 0 ? u : 1;
}

/* meta with its coarse time raised to t's, in modular order (never lowered). */
static inline uint64_t sl_meta_with_last(uint64_t m, uint64_t t)
{
    uint32_t was = (uint32_t)(m >> SL_META_LAST_SHIFT), u = (uint32_t)sl_meta_last_unit(t);

    if (was != 0 && (int32_t)(u - was) <= 0)
        return m;
    return (m & ((UINT64_C(1) << SL_META_LAST_SHIFT) - 1)) | (uint64_t)u << SL_META_LAST_SHIFT;
}

/* A key of up to 16 bytes as the two words an inline cell compares. */
static inline void sl_cell_key_pack(const void *key, size_t len, uint64_t k[2])
{
    unsigned char b[16] = {0};

    SL_ASSERT(len <= SL_CELL_KEY_MAX);
    if (len != 0)
        memcpy(b, key, len);
    memcpy(k, b, 16);
}

/* A shard's home for h: multiply-shift on h's low 32 bits (its top bits
 * chose the shard), so any capacity works and none is rounded up to a
 * power of two (what keeps 2^20 keys near 43 B each, not 64). */
static inline uint64_t sl_cells_home(const struct sl_cells *t, uint64_t h)
{
    return ((h & UINT32_MAX) * t->cap) >> 32;
}

static inline uint64_t sl_cells_next(const struct sl_cells *t, uint64_t i)
{
    return i + 1 < t->cap ? i + 1 : 0;
}

/*
 * A probe of one array: from h's home to the empty cell that ends it,
 * stopping at each candidate (an inline cell holding the key, or an
 * indirect one whose hash is h: the caller compares the entry's key).
 * *meta is the candidate's meta as read (acquire: the cell's other words
 * were written before it).  NULL at the end of the probe.
 */
struct sl_cells_probe {
    struct sl_cells *t;
    uint64_t i, left; /* the next cell to read; cells not yet read */
};

static inline void sl_cells_probe_start(struct sl_cells_probe *p, struct sl_cells *t, uint64_t h)
{
    p->t = t;
    p->i = sl_cells_home(t, h);
    p->left = t->cap;
}

static inline __attribute__((always_inline)) struct sl_cell *
sl_cells_probe_next(struct sl_cells_probe *p, uint64_t h, const uint64_t k[2], unsigned len,
                    uint64_t *meta)
{
    /* left: a full array of tombstones still ends (migrations keep a
     * quarter empty; this is the bound, not the common case) */
    for (; p->left != 0; p->left--) {
        struct sl_cell *c = &p->t->cell[p->i];
        uint64_t m = sl_load_acq(&c->meta);
        p->i = sl_cells_next(p->t, p->i);
        switch (sl_meta_kind(m)) {
        case SL_CELL_EMPTY:
            return NULL;
        case SL_CELL_INLINE:
            if (sl_meta_len(m) == len && sl_load_rlx(&c->key[0]) == k[0] &&
                sl_load_rlx(&c->key[1]) == k[1]) {
                p->left--;
                *meta = m;
                return c;
            }
            break;
        case SL_CELL_INDIRECT:
            if (sl_load_rlx(&c->key[0]) == h) {
                p->left--;
                *meta = m;
                return c;
            }
            break;
        default: /* a tombstone: probe on */
            break;
        }
    }
    return NULL;
}

/* Does an indirect candidate's entry hold the key? */
typedef bool sl_cells_match_fn(void *ctx, uintptr_t entry);

/*
 * The key's cell in the shard's arrays (*cur, then the array it is being
 * migrated from), or NULL if it was absent at some instant of the call.  The cell found may be frozen (its state has
 * SL_DEAD: being migrated, removed or converted): the caller then waits
 * for the shard's writer (its lock) and looks again.  k, len: the packed
 * key if len <= 16 (inline cells are compared with it); match: for
 * indirect candidates (NULL: none can hold the key).  In an epoch section.
 */
static inline __attribute__((always_inline)) struct sl_cell *
sl_cells_lookup(_Atomic(struct sl_cells *) *cur, uint64_t h, const uint64_t k[2], unsigned len,
                sl_cells_match_fn *match, void *ctx, uint64_t *meta)
{
    /* acquire: the array's cells were written before it was published */
    struct sl_cells *t = atomic_load_explicit(cur, memory_order_acquire), *prev;

    /* prev before t's probe, never after: read after, it could be NULL
     * for a migration that copied the key into t behind the probe, and a
     * present key was missed (test/cells.c saw it).  Read before: NULL
     * means every copy into t is visible (acquire; the writer's release);
     * otherwise a key not found in t is still in prev, frozen at worst
     * (copied cells stay there until prev is retired). */
    prev = atomic_load_explicit(&t->prev, memory_order_acquire);
    for (int round = 0; round < 2 && t != NULL; round++) {
        struct sl_cells_probe p;
        struct sl_cell *c;
        sl_cells_probe_start(&p, t, h);
        while ((c = sl_cells_probe_next(&p, h, k, len, meta)) != NULL) {
            if (sl_meta_kind(*meta) == SL_CELL_INLINE)
                return c;
            if (match != NULL && match(ctx, (uintptr_t)sl_load_rlx(&c->state)))
                return c;
        }
        t = prev;
        prev = NULL;
    }
    return NULL;
}

/*
 * A decision's write on an inline cell: from seen (state and meta as
 * read, updated to what the cell held on failure) to next_state, with
 * meta's coarse time raised to now's.  False if anything changed between
 * (another charge, a freeze: seen says which).  Release and acquire.
 */
static inline bool sl_cell_commit(struct sl_cell *c, uint64_t seen[2], uint64_t next_state,
                                  uint64_t now)
{
    uint64_t next[2] = {next_state, sl_meta_with_last(seen[1], now)};

    return sl_cas_pair_acqrel(&c->state, seen, next);
}

/* ---- writers: the shard's lock held, in an epoch section (cells.c) ---- */

/* An empty array for `live` keys; NULL out of memory.  Accounted to acct. */
struct sl_cells *sl_cells_new(sl_aword *acct, uint64_t live);
/* Not concurrent with anything: the array and nothing it points to. */
void sl_cells_free(sl_aword *acct, struct sl_cells *t);

/* Make room for one more key in *cur, migrating to a larger array (or one
 * without tombstones) if 3/4 of its cells are used.  0 or -ENOMEM. */
int sl_cells_reserve(_Atomic(struct sl_cells *) *cur, sl_aword *acct, sl_cells_hash_fn *hash,
                     void *ctx);

/* Insert an absent key (the caller has looked under the lock), after
 * sl_cells_reserve.  The cell, published. */
struct sl_cell *sl_cells_insert_inline(struct sl_cells *t, uint64_t h, const void *key,
                                       unsigned len, uint64_t state, uint32_t gen);
struct sl_cell *sl_cells_insert_indirect(struct sl_cells *t, uint64_t h, uintptr_t entry);

/* Freeze an inline cell: its state and meta as they were (*was), false if
 * it was frozen already.  No charge lands on it after this. */
bool sl_cell_freeze(struct sl_cell *c, uint64_t was[2]);

/* Remove a frozen inline cell or an indirect one: a tombstone until the
 * array is retired. */
void sl_cells_remove(struct sl_cells *t, struct sl_cell *c);

/*
 * Move every live cell of *cur into a new array of cap cells: the new
 * array is published first (readers probe it, then the old one), and
 * each inline cell is frozen, then copied, so that its charges are in one
 * place at every instant.  The old array goes to the epoch.  0, or
 * -ENOMEM with nothing changed.
 */
int sl_cells_migrate(_Atomic(struct sl_cells *) *cur, sl_aword *acct, uint64_t cap,
                     sl_cells_hash_fn *hash, void *ctx);

/* The capacity a migration chooses for `live` keys: 3/5 full after it,
 * growing to 3/4 before the next. */
uint64_t sl_cells_cap_for(uint64_t live);

#endif
