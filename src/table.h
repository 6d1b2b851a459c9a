/*
 * The key table's slot arrays and its lock-free lookup, inline for the
 * hottest decision (decide.c); table.c has the rest and the why.
 *
 * Slot values: 0 empty, 1 tombstone, else (tag << 48) | entry address.
 */
#ifndef SL_TABLE_H
#define SL_TABLE_H

#include "internal.h"

#define SL_EMPTY 0u
#define SL_TOMB 1u
#define SL_TAG_SHIFT 48
#define SL_TAG_FLAG (UINT64_C(1) << 63)
#define SL_ADDR_MASK ((UINT64_C(1) << SL_TAG_SHIFT) - 1)

struct sl_slots {
    ck_epoch_entry_t retire;
    size_t bytes;               /* as accounted */
    uint64_t mask;              /* capacity - 1 */
    sl_aword slot[];
};

static inline uint64_t sl_tag_of(uint64_t h)
{
    return SL_TAG_FLAG | ((h >> 49) << SL_TAG_SHIFT);
}

static inline struct sl_entry *sl_slot_entry(uint64_t v)
{
    return (struct sl_entry *)(uintptr_t)(v & SL_TAG_FLAG ? v & SL_ADDR_MASK : v);
}

static inline bool sl_slot_may_hold(uint64_t v, uint64_t tag)
{
    return v > SL_TOMB && (!(v & SL_TAG_FLAG) || (v >> SL_TAG_SHIFT) == (tag >> SL_TAG_SHIFT));
}

static inline uint64_t sl_load64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, 8);
    return v;
}

static inline bool sl_key_equal(const struct sl_entry *e, const void *key, size_t len)
{
    const unsigned char *a = sl_entry_key(e), *b = key;

    if (e->key_len != len)
        return false;
    /* 8 to 16 bytes (IPv6 addresses, UUIDs, most tokens' prefixes): two
     * overlapping words, where glibc's memcmp reads a 32-byte vector that
     * may pull in the next entry's line */
    if (len >= 8 && len <= 16)
        return ((sl_load64(a) ^ sl_load64(b)) |
                (sl_load64(a + len - 8) ^ sl_load64(b + len - 8))) == 0;
    /* len 0: the empty key, whose pointer may be NULL (memcmp must not see it) */
    return len == 0 || memcmp(a, b, len) == 0;
}

/*
 * A lookup in two halves, so that a call on several keys overlaps their
 * misses with one probe each (acquire_all.c): sl_table_probe_start walks
 * from h's home to the first slot that may hold the key (its entry can be
 * prefetched then) or to the empty slot that ends the probe;
 * sl_table_probe_end compares keys from there on; sl_table_find, the
 * two in a row, is every lookup.
 */
struct sl_probe_at {
    struct sl_slots *t;
    uint64_t tag, i, v;         /* the slot reached and the value read there */
};

/* From slot p->i on, the first that may hold the key, or the empty slot. */
static inline __attribute__((always_inline)) void sl_table_probe_walk(struct sl_probe_at *p)
{
    while ((p->v = sl_load_acq(&p->t->slot[p->i])) != SL_EMPTY && !sl_slot_may_hold(p->v, p->tag))
        p->i = (p->i + 1) & p->t->mask;
}

static inline __attribute__((always_inline)) void
sl_table_probe_start(struct sl_shard *s, uint64_t h, struct sl_probe_at *p)
{
    /* acquire: the array's contents, and through its slots the entries,
     * were published before the pointer (and each slot) was stored */
    p->t = atomic_load_explicit(&s->slots, memory_order_acquire);
    p->tag = sl_tag_of(h);
    p->i = h & p->t->mask;
    sl_table_probe_walk(p);
}

/* The candidate's entry, or NULL where the probe already ended. */
static inline struct sl_entry *sl_table_probe_candidate(const struct sl_probe_at *p)
{
    return p->v != SL_EMPTY ? sl_slot_entry(p->v) : NULL;
}

static inline __attribute__((always_inline)) struct sl_entry *
sl_table_probe_end(struct sl_probe_at *p, const void *key, size_t len)
{
    while (p->v != SL_EMPTY) { /* a slot that may hold the key */
        struct sl_entry *e = sl_slot_entry(p->v);
        SL_TSAN_ACQUIRE(e);
        if (sl_key_equal(e, key, len))
            return e;
        p->i = (p->i + 1) & p->t->mask;
        sl_table_probe_walk(p);
    }
    return NULL;
}

/* always inline: a call and its frame were a tenth of a hot decision */
static inline __attribute__((always_inline)) struct sl_entry *
sl_table_find(struct sl_shard *s, uint64_t h, const void *key, size_t len)
{
    struct sl_probe_at p;

    sl_table_probe_start(s, h, &p);
    return sl_table_probe_end(&p, key, len);
}

/* Start loading the slot line a lookup of h reads first. */
static inline void sl_table_prefetch_home(struct sl_shard *s, uint64_t h)
{
    struct sl_slots *t = atomic_load_explicit(&s->slots, memory_order_acquire);

    __builtin_prefetch(&t->slot[h & t->mask]);
}

#endif
