/*
 * sluice_acquire_batch: each request decided exactly as sluice_acquire_at
 * would decide it, in order, by the same paths (the lean path of
 * acquire.c for a private limiter's request without a result, then
 * decide.c's fast and general paths for what it declines), with the
 * cache misses of consecutive requests overlapped by three prefetch
 * stages.  While request i is decided:
 *
 *   i + SL_BATCH_KEY    its key bytes are fetched (the caller's memory:
 *                       a miss of its own at 2^20 keys, which hashing
 *                       would otherwise wait for);
 *   i + SL_BATCH_AHEAD  its key is hashed and its slot line fetched;
 *   i + SL_BATCH_ENTRY  its slot line, arrived by then, names the entry
 *                       to fetch.
 *
 * One epoch section per SL_BATCH_SECTION requests: a section held for a
 * whole batch of any length would stop every thread's reclamation
 * meanwhile.  The ring's targets stay valid across the break: they hold
 * the key, hash and shard, not entries (a fetched entry is only a hint).
 */
#include "cells.h"
#include "internal.h"
#include "table.h"

#define SL_BATCH_KEY 12
#define SL_BATCH_AHEAD 8 /* the ring's size */
#define SL_BATCH_ENTRY 4
#define SL_BATCH_SECTION 256

_Static_assert(SL_BATCH_ENTRY < SL_BATCH_AHEAD && SL_BATCH_AHEAD < SL_BATCH_KEY,
               "each stage after the one before");

static void sl_batch_fetch_key(struct sluice *l, const struct sluice_req *q)
{
    /* a hint: the key is checked (its pointer and length) before any use */
    if (q->key != NULL && q->len > 0 && q->len <= l->max_key_len)
        __builtin_prefetch(q->key);
}

static void sl_batch_prepare(struct sluice *l, const struct sluice_req *q, struct sl_target *g)
{
    g->s = NULL;
    if (sl_key_check(l, q->key, q->len) != 0)
        return; /* decided (refused) without a lookup */
    sl_target_init(g, l, q->key, q->len);
    if (g->s == NULL)
        return;
    /* a short key: likely in a cell, else in an entry (both lines) */
    if (l->shm == NULL && q->len <= SL_CELL_KEY_MAX && l->cells_on)
        sl_cells_prefetch(&g->s->cells, g->h);
    sl_table_prefetch(g->s, g->h);
}

static void sl_batch_fetch_entry(const struct sl_target *g)
{
    if (g->s != NULL)
        sl_table_prefetch_entry(g->s, g->h);
}

/* Request q, prepared as g, decided as sluice_acquire_at decides it, in
 * the caller's epoch section (and shared file's, *shm: left and entered
 * again around the general path, which may wait for the file's epoch). */
static int sl_batch_decide(struct sl_thread *t, struct sluice *l, const struct sluice_req *q,
                           struct sl_target *g, uint64_t now, struct sluice_result *r,
                           unsigned *shm)
{
    struct sluice_key k = {.limiter = l, .key = q->key, .len = q->len};
    int rc = sl_key_check(l, q->key, q->len);

    if (rc != 0)
        return rc;
    if (l->shm == NULL && r == NULL) {
        rc = sl_acquire_lean_hashed(t, l, q->key, q->len, q->cost, now, g->s, g->h);
        if (rc != -EAGAIN)
            return rc;
    }
    rc = sl_acquire_fast(t, g, q->cost, now, r);
    if (rc != -EAGAIN)
        return rc;
    if (l->shm != NULL)
        sl_shm_leave(l, *shm);
    rc = sl_acquire_all_general(&k, 1, q->cost, now, r); /* nests the section */
    if (l->shm != NULL)
        *shm = sl_shm_enter(l);
    return rc;
}

int sluice_acquire_batch(sluice_t *l, const struct sluice_req *reqs, size_t n, uint64_t now_ns,
                         int *rcs, struct sluice_result *res)
{
    struct sl_target ring[SL_BATCH_AHEAD];
    struct sl_thread *t;
    unsigned shm = 0;

    if (l == NULL || (n > 0 && (reqs == NULL || rcs == NULL)))
        return -EINVAL;
    if (n == 0)
        return 0;
    if ((t = sl_thread_get()) == NULL) {
        for (size_t i = 0; i < n; i++)
            rcs[i] = -ENOMEM;
        return 0;
    }
    sl_epoch_begin(t);
    if (l->shm != NULL)
        shm = sl_shm_enter(l);
    for (size_t i = SL_BATCH_AHEAD; i < n && i < SL_BATCH_KEY; i++)
        sl_batch_fetch_key(l, &reqs[i]);
    for (size_t i = 0; i < n && i < SL_BATCH_AHEAD; i++)
        sl_batch_prepare(l, &reqs[i], &ring[i]);
    for (size_t i = 0; i < n && i < SL_BATCH_ENTRY; i++)
        sl_batch_fetch_entry(&ring[i]);
    for (size_t i = 0; i < n; i++) {
        rcs[i] = sl_batch_decide(t, l, &reqs[i], &ring[i % SL_BATCH_AHEAD], now_ns,
                                 res != NULL ? &res[i] : NULL, &shm);
        if (i % SL_BATCH_SECTION == SL_BATCH_SECTION - 1) {
            if (l->shm != NULL)
                sl_shm_leave(l, shm);
            sl_epoch_end(t); /* let reclamation move on */
            sl_epoch_begin(t);
            if (l->shm != NULL)
                shm = sl_shm_enter(l);
        }
        if (i + SL_BATCH_KEY < n)
            sl_batch_fetch_key(l, &reqs[i + SL_BATCH_KEY]);
        if (i + SL_BATCH_AHEAD < n)
            sl_batch_prepare(l, &reqs[i + SL_BATCH_AHEAD], &ring[i % SL_BATCH_AHEAD]);
        if (i + SL_BATCH_ENTRY < n)
            sl_batch_fetch_entry(&ring[(i + SL_BATCH_ENTRY) % SL_BATCH_AHEAD]);
    }
    if (l->shm != NULL)
        sl_shm_leave(l, shm);
    sl_epoch_end(t);
    return 0;
}
