/*
 * The cell table's writers (cells.h has the layout and the rules).
 *
 * Why a migration publishes the new array before it copies: readers then
 * wait for one cell at most (the one being copied, frozen for a few
 * instructions), never for the whole shard; a copy made first and
 * published after would leave every charge landing meanwhile on the old
 * array, to be lost or carried by a second pass.  Why inline cells are
 * frozen before they are copied: a copy of a live cell is a second place
 * the same key can be charged, and the two together admit up to twice
 * its limit (test/cells.c plants exactly that and sees it).
 */
#include <stdlib.h>
#include <string.h>

#include "cells.h"

#define SL_CELLS_MIN 32u

uint64_t sl_cells_cap_for(uint64_t live)
{
    uint64_t cap = live + live * 2 / 3 + 1; /* 3/5 full */

    return cap < SL_CELLS_MIN ? SL_CELLS_MIN : cap;
}

static struct sl_cells *sl_cells_alloc(sl_aword *acct, uint64_t cap)
{
    size_t bytes = sizeof(struct sl_cells) + cap * sizeof(struct sl_cell);
    struct sl_cells *t;

    if (cap > UINT32_MAX || (t = sl_alloc_aligned(acct, bytes)) == NULL)
        return NULL; /* a shard of 2^32 cells is 128 GiB: refused, not wrapped */
    memset(t, 0, bytes);
    t->cap = cap;
    t->bytes = (bytes + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1);
    atomic_init(&t->prev, NULL);
    return t;
}

struct sl_cells *sl_cells_new(sl_aword *acct, uint64_t live)
{
    return sl_cells_alloc(acct, sl_cells_cap_for(live));
}

void sl_cells_free(sl_aword *acct, struct sl_cells *t)
{
    sl_free(acct, t, t->bytes);
}

static void sl_cells_free_cb(ck_epoch_entry_t *e)
{
    free(e); /* retire is the first member; unaccounted when retired */
}

/* The first empty cell of h's probe: tombstones are never reused (cells.h). */
static struct sl_cell *sl_cells_place(struct sl_cells *t, uint64_t h)
{
    uint64_t i = sl_cells_home(t, h);

    SL_ASSERT(t->used < t->cap);
    while (sl_meta_kind(sl_load_rlx(&t->cell[i].meta)) != SL_CELL_EMPTY)
        i = sl_cells_next(t, i);
    t->used++;
    t->live++;
    return &t->cell[i];
}

struct sl_cell *sl_cells_insert_inline(struct sl_cells *t, uint64_t h, const void *key,
                                       unsigned len, uint64_t state, uint32_t gen)
{
    struct sl_cell *c = sl_cells_place(t, h);
    uint64_t k[2];

    sl_cell_key_pack(key, len, k);
    sl_store_rlx(&c->key[0], k[0]);
    sl_store_rlx(&c->key[1], k[1]);
    sl_store_rlx(&c->state, state);
    /* release: publishes the words above to a reader that reads the kind */
    sl_store_rel(&c->meta, sl_meta_make(SL_CELL_INLINE, len, gen));
    return c;
}

struct sl_cell *sl_cells_insert_indirect(struct sl_cells *t, uint64_t h, uintptr_t entry)
{
    struct sl_cell *c = sl_cells_place(t, h);

    sl_store_rlx(&c->key[0], h);
    sl_store_rlx(&c->state, (uint64_t)entry);
    SL_TSAN_RELEASE((void *)entry);
    sl_store_rel(&c->meta, sl_meta_make(SL_CELL_INDIRECT, 0, 0)); /* as above */
    return c;
}

bool sl_cell_freeze(struct sl_cell *c, uint64_t was[2])
{
    was[0] = sl_load_rlx(&c->state);
    was[1] = sl_load_rlx(&c->meta);
    for (;;) {
        uint64_t next[2] = {was[0] | SL_DEAD, was[1]};
        if (was[0] & SL_DEAD)
            return false;
        if (sl_cas_pair_acqrel(&c->state, was, next))
            return true;
    }
}

void sl_cells_remove(struct sl_cells *t, struct sl_cell *c)
{
    uint64_t m = sl_load_rlx(&c->meta);

    SL_ASSERT(sl_meta_kind(m) == SL_CELL_INDIRECT ||
              (sl_meta_kind(m) == SL_CELL_INLINE && (sl_load_rlx(&c->state) & SL_DEAD)));
    /* release: a reader that sees the tombstone sees the freeze before it */
    sl_store_rel(&c->meta, (m & ~SL_META_KIND_MASK) | SL_CELL_TOMB);
    t->live--;
}

/* One live cell of the old array into t (not yet holding its key). */
static void sl_cells_copy(struct sl_cells *t, struct sl_cell *from, sl_cells_hash_fn *hash,
                          void *ctx)
{
    uint64_t m = sl_load_rlx(&from->meta), was[2], k[2];
    struct sl_cell *c;

    if (sl_meta_kind(m) == SL_CELL_INDIRECT) {
        (void)sl_cells_insert_indirect(t, sl_load_rlx(&from->key[0]),
                                       (uintptr_t)sl_load_rlx(&from->state));
        return;
    }
    /* inline: frozen first, so that its charges stay in one place; a cell
     * frozen already belongs to a writer, and writers hold the lock the
     * migration holds: not seen here */
    bool frozen_here = sl_cell_freeze(from, was);
    SL_ASSERT(frozen_here);
    (void)frozen_here;
    k[0] = sl_load_rlx(&from->key[0]);
    k[1] = sl_load_rlx(&from->key[1]);
    c = sl_cells_place(t, hash(ctx, k, sl_meta_len(was[1])));
    sl_store_rlx(&c->key[0], k[0]);
    sl_store_rlx(&c->key[1], k[1]);
    sl_store_rlx(&c->state, was[0]);
    sl_store_rel(&c->meta, was[1]); /* kind INLINE, its time and generation kept */
}

int sl_cells_migrate(_Atomic(struct sl_cells *) *cur, sl_aword *acct, uint64_t cap,
                     sl_cells_hash_fn *hash, void *ctx)
{
    struct sl_cells *old = atomic_load_explicit(cur, memory_order_relaxed), *t;
    struct sl_thread *th = sl_thread_get();

    SL_ASSERT(th != NULL && sl_epoch_active(th));
    if (th == NULL || cap < old->live + 1 || (t = sl_cells_alloc(acct, cap)) == NULL)
        return -ENOMEM;
    /* relaxed: published with t by the release below */
    atomic_store_explicit(&t->prev, old, memory_order_relaxed);
    atomic_store_explicit(cur, t, memory_order_release);
    for (uint64_t j = 0; j < old->cap; j++) {
        uint64_t kind = sl_meta_kind(sl_load_rlx(&old->cell[j].meta));
        if (kind == SL_CELL_INLINE || kind == SL_CELL_INDIRECT)
            sl_cells_copy(t, &old->cell[j], hash, ctx);
    }
    /* release: every copy above is in t before a reader stops looking in old */
    atomic_store_explicit(&t->prev, NULL, memory_order_release);
    sl_unaccount(acct, old->bytes);
    sl_retire(th, &old->retire, sl_cells_free_cb);
    return 0;
}

int sl_cells_reserve(_Atomic(struct sl_cells *) *cur, sl_aword *acct, sl_cells_hash_fn *hash,
                     void *ctx)
{
    struct sl_cells *t = atomic_load_explicit(cur, memory_order_relaxed);

    /* at most 3/4 used (live or tombstones): probes stay short and end */
    if ((t->used + 1) * 4 <= t->cap * 3)
        return 0;
    return sl_cells_migrate(cur, acct, sl_cells_cap_for(t->live + 1), hash, ctx);
}
