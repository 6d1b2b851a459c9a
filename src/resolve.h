/*
 * Resolving the keys of a decision (resolve.c): each found, inserted or
 * migrated under the policy in force, before any charge.  The general
 * path only: the fast path finds a present key itself (decide.c).  Used by
 * decide.c only.
 */
#ifndef SL_RESOLVE_H
#define SL_RESOLVE_H

#include "internal.h"

/* The decision that inserted g's entry is over (release: its charge and
 * last_ns are visible to a reaper that sees the pin gone). */
static inline void sl_target_unpin(struct sl_target *g)
{
    if (g->pinned != NULL)
        atomic_store_explicit(&g->pinned->pinned, 0, memory_order_release);
    g->pinned = NULL;
}

/* The policy g's key decides under now (its override, else the default),
 * and its entry in *ep (NULL if absent); a private limiter's key. */
struct sl_policy *sl_key_policy(struct sl_target *g, struct sl_entry **ep);
/* Find (or, if create, make) g's entry under the policy it should have
 * now; inside an epoch section.  -E2BIG if cost exceeds that policy's
 * least capacity, -ENOMEM; g->e NULL with SLUICE_F_FULL when full. */
int sl_target_resolve(struct sl_thread *t, struct sl_target *g, uint64_t cost, uint64_t now,
                      bool create);
/* g's entry was found frozen: wait for its writer (never long). */
void sl_target_wait(struct sl_target *g);
/* The same, returning *w read under the key's shard lock (w NULL: 0). */
uint64_t sl_target_settled(struct sl_target *g, sl_aword *w);
/* Take back the key g's call made (g->pinned), unless another call has
 * charged it since; true if it was.  A private limiter's retirement batch
 * goes with it (g->takeback NULL after). */
bool sl_target_take_back(struct sl_target *g);
/* Some key is untracked (full) under a fail-closed limiter: *which. */
bool sl_full_denies(const struct sl_target *g, size_t n, size_t *which);
/* -E2BIG if cost exceeds some key's least capacity, before anything is made. */
int sl_cost_check(struct sl_target *g, size_t n, uint64_t cost);
/* keys[] without repeats into g[] (orig[]: each one's index in keys[]). */
size_t sl_unique_keys(const struct sluice_key *keys, size_t n, struct sl_target *g,
                      unsigned *orig);

#endif
