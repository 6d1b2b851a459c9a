/*
 * Keys in cells, the limiter's side (table_cells.c): for insert.c, the
 * reaper and the lean decision.
 */
#ifndef SL_TABLE_CELLS_H
#define SL_TABLE_CELLS_H

#include "cells.h"

/* The limiter's hash of a key (ctx: the limiter), for migrations. */
uint64_t sl_cells_hash(void *ctx, const void *key, size_t len);

/* The shard's lock held: is the key in a cell? */
bool sl_cell_present_locked(struct sl_shard *s, uint64_t h, const void *key, size_t len);

/* sl_table_get_locked, telling why a key it had to move from a cell has
 * no entry: 0 (*out the entry or NULL: absent) or -ENOMEM (the key is in
 * its cell still). */
int sl_table_get_locked_err(struct sl_shard *s, uint64_t h, const void *key, size_t len,
                            struct sl_entry **out);

/* A new key into a cell under pol (a single GCRA limit, the default in
 * force), the lock held and the key absent and counted: 0, -EAGAIN (the
 * shard's cells hold keys under an older policy: make an entry) or
 * -ENOMEM. */
int sl_cells_insert_locked(struct sl_shard *s, uint64_t h, const void *key, size_t len,
                           struct sl_policy *pol);

/* Take back a key a call made in a cell and then could not decide there
 * (a racing set_policy): removed if no charge stands in it, so that the
 * general path makes the key itself and takes it back should it fail.
 * true if removed. */
bool sl_cell_take_back(struct sl_shard *s, uint64_t h, const void *key, size_t len);

/* A peek of g's key if it is in a cell: decided on a view of the cell
 * (sl_state_view: read as under the default in force, nothing written,
 * the key left in its cell).  0 viewed, -ENOENT (not in a cell: look for
 * an entry), -EBUSY (frozen: a writer is moving it; wait, look again) or
 * -ENOMEM. */
int sl_cell_view(struct sl_target *g, uint64_t now);

/* Reap entries and cells of a locked shard, in an epoch section, as
 * sl_table_reap_some and sl_table_reap_shard do entries. */
size_t sl_shard_reap_some(struct sl_shard *s, uint64_t now, uint64_t idle_ttl, uint64_t *budget,
                          size_t max_remove);
size_t sl_shard_reap(struct sl_shard *s, uint64_t now, uint64_t idle_ttl);

#endif
