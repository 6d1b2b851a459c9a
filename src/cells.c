/*
 * The cell table's writers (cells.h has the layout and the rules).
 *
 * Why a migration publishes the new array before it copies: readers then
 * wait for one cell at most (the one being copied, frozen for a few
 * instructions), never for the whole shard; a copy made first and
 * published after would leave every charge landing meanwhile on the old
 * array, to be lost or carried by a second pass.  Why cells are frozen
 * before they are copied: a copy of a live cell is a second place the
 * same key can be charged, and the two together admit up to twice its
 * limit (test/cells.c plants exactly that and sees it).
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
    unsigned shift = cap <= SL_CELLS_SPREAD_MAX ? 6 : 5;
    size_t head = sizeof(struct sl_cells), cells = cap << shift;
    size_t bytes = head + cells + cap * sizeof(sl_actrl);
    struct sl_cells *t;

    /* a shard of 2^32 cells is 136 GiB: refused, never wrapped */
    if (cap > UINT32_MAX || (t = sl_alloc_aligned(acct, bytes)) == NULL)
        return NULL;
    memset(t, 0, bytes);
    t->cap = cap;
    t->stride_shift = shift;
    t->bytes = (bytes + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1);
    t->ctrl = (sl_actrl *)(void *)((char *)t + head + cells);
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

/* Publish a cell at the first empty word of h's probe: tombstones are
 * never reused (cells.h). */
static struct sl_cell *sl_cells_put(struct sl_cells *t, uint64_t h, size_t len, const uint64_t k[2],
                                    uint64_t state, uint64_t last)
{
    uint64_t i = sl_cells_home(t, h);
    struct sl_cell *c;

    SL_ASSERT(t->used < t->cap);
    while (atomic_load_explicit(&t->ctrl[i], memory_order_relaxed) != SL_CTRL_EMPTY)
        i = sl_cells_next(t, i);
    c = sl_cells_at(t, i);
    sl_store_rlx(&c->key[0], k[0]);
    sl_store_rlx(&c->key[1], k[1]);
    sl_store_rlx(&c->state, state);
    sl_store_rlx(&c->last, last);
    /* release: publishes the words above to a reader that reads the word */
    atomic_store_explicit(&t->ctrl[i], sl_ctrl_want(h, len), memory_order_release);
    t->used++;
    t->live++;
    return c;
}

struct sl_cell *sl_cells_insert(struct sl_cells *t, uint64_t h, const void *key, size_t len,
                                uint64_t state, uint64_t last)
{
    uint64_t k[2];

    sl_cell_key_pack(key, len, k);
    return sl_cells_put(t, h, len, k, state, last);
}

bool sl_cell_freeze(struct sl_cell *c, uint64_t was[2])
{
    was[0] = sl_load_rlx(&c->state);
    was[1] = sl_load_rlx(&c->last);
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
    SL_ASSERT(sl_load_rlx(&c->state) & SL_DEAD);
    /* release: a reader that sees the tombstone sees the freeze before it */
    atomic_store_explicit(&t->ctrl[sl_cells_index(t, c)], SL_CTRL_TOMB, memory_order_release);
    t->live--;
}

/* Cell j of old into t: frozen first, so that its charges stay in one
 * place; a cell frozen already belongs to a writer, and writers hold the
 * lock the migration holds: never seen here. */
static void sl_cells_copy(struct sl_cells *t, struct sl_cells *old, uint64_t j,
                          sl_cells_hash_fn *hash, void *ctx)
{
    struct sl_cell *from = sl_cells_at(old, j);
    size_t len = sl_ctrl_len(atomic_load_explicit(&old->ctrl[j], memory_order_relaxed));
    uint64_t was[2], k[2] = {sl_load_rlx(&from->key[0]), sl_load_rlx(&from->key[1])};
    bool frozen_here = sl_cell_freeze(from, was);

    SL_ASSERT(frozen_here);
    (void)frozen_here;
    (void)sl_cells_put(t, hash(ctx, k, len), len, k, was[0], was[1]);
}

int sl_cells_migrate(_Atomic(struct sl_cells *) *cur, sl_aword *acct, uint64_t cap,
                     sl_cells_hash_fn *hash, void *ctx)
{
    struct sl_cells *old = atomic_load_explicit(cur, memory_order_relaxed), *t;
    struct sl_thread *th = sl_thread_get();

    SL_ASSERT(th != NULL && sl_epoch_active(th));
    if (th == NULL || cap < old->live + 1 || (t = sl_cells_alloc(acct, cap)) == NULL)
        return -ENOMEM;
    t->owner = old->owner;
    /* relaxed: published with t by the release below */
    atomic_store_explicit(&t->prev, old, memory_order_relaxed);
    atomic_store_explicit(cur, t, memory_order_release);
    for (uint64_t j = 0; j < old->cap; j++)
        if (atomic_load_explicit(&old->ctrl[j], memory_order_relaxed) & SL_CTRL_LIVE)
            sl_cells_copy(t, old, j, hash, ctx);
    /* release: every copy above is in t before a reader stops looking in old */
    atomic_store_explicit(&t->prev, NULL, memory_order_release);
    sl_cells_retire(th, acct, old);
    return 0;
}

void sl_cells_retire(struct sl_thread *th, sl_aword *acct, struct sl_cells *t)
{
    sl_unaccount(acct, t->bytes);
    sl_retire_array(th, &t->retire, sl_cells_free_cb);
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
