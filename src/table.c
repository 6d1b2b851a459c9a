/*
 * The key table: 2^k shards, each an open-addressing array of tagged entry
 * pointers with linear probing.  Readers never lock: they load the shard's
 * array (acquire) and probe until an empty slot.  Writers (insert, replace,
 * remove, rehash) hold the shard's mutex.  A rehash builds a new array and
 * publishes it; the old one goes to the epoch, so a reader still probing it
 * stays safe, and finds it unchanged (writers only touch the current array).
 *
 * Why not ck_hs: Debian's libck is built without ck_hs's pointer packing,
 * so each occupied slot of a probed line costs a miss on its entry, and its
 * general probe (probe bounds, SPMC generations) costs about 200
 * instructions per lookup, more than the whole rest of a decision.  Here a
 * slot carries 15 hash bits above bit 48: a lookup reads the slot line and
 * the matching entry only.
 *
 * Slot values: 0 empty, 1 tombstone, else (tag << 48) | entry address.
 */
#include <stdlib.h>
#include <string.h>

#include "cells.h"
#include "table.h"

#define SL_SLOTS_MIN 64u

bool sl_cells_enabled = true;

/* Addresses with any of the top 16 bits set (not seen in Linux user space)
 * are stored untagged and compared in full. */
static uint64_t sl_slot_make(const struct sl_entry *e, uint64_t h)
{
    uint64_t p = (uint64_t)(uintptr_t)e;

    return p >> SL_TAG_SHIFT ? p : p | sl_tag_of(h);
}

static struct sl_slots *sl_slots_new(struct sluice *l, uint64_t capacity)
{
    size_t bytes = sizeof(struct sl_slots) + capacity * sizeof(sl_aword);
    struct sl_slots *t = sl_alloc_aligned(&l->memory, bytes);

    if (t == NULL)
        return NULL;
    memset(t, 0, bytes);
    t->bytes = (bytes + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1);
    t->mask = capacity - 1;
    return t;
}

static void sl_slots_free_cb(ck_epoch_entry_t *e)
{
    free(e); /* retire is the first member */
}

int sl_table_init(struct sluice *l, unsigned nshards)
{
    l->shards = sl_alloc_aligned(&l->memory, nshards * sizeof(*l->shards));
    if (l->shards == NULL)
        return -ENOMEM;
    memset(l->shards, 0, nshards * sizeof(*l->shards));
    l->nshards = nshards;
    l->shard_shift = 64 - sl_bits(nshards - 1);
    l->cells_on = sl_cells_enabled && sl_cas_pair_usable();
    for (unsigned i = 0; i < nshards; i++) {
        struct sl_shard *s = &l->shards[i];
        struct sl_slots *t = sl_slots_new(l, SL_SLOTS_MIN);
        s->owner = l;
        pthread_mutex_init(&s->lock, NULL);
        if (t == NULL) {
            pthread_mutex_destroy(&s->lock);
            l->nshards = i;
            sl_table_destroy(l);
            return -ENOMEM;
        }
        atomic_init(&s->slots, t);
    }
    return 0;
}

/* In a forked child, still single-threaded (fork.c): every published key
 * forgets the calls counted on it (their threads are not in the child: a
 * writer would wait for their commits for ever, holding the shard lock)
 * and the decision that inserted it (it could never be reaped). */
void sl_table_after_fork(struct sluice *l)
{
    for (unsigned i = 0; i < l->nshards; i++) {
        struct sl_slots *t = atomic_load_explicit(&l->shards[i].slots, memory_order_relaxed);
        for (uint64_t j = 0; j <= t->mask; j++) {
            uint64_t v = sl_load_rlx(&t->slot[j]);
            if (v <= SL_TOMB)
                continue;
            /* relaxed: no other thread exists here */
            atomic_store_explicit(&sl_slot_entry(v)->committing, 0, memory_order_relaxed);
            atomic_store_explicit(&sl_slot_entry(v)->pinned, 0, memory_order_relaxed);
        }
    }
}

/* Not concurrent with anything (sluice_destroy). */
void sl_table_destroy(struct sluice *l)
{
    for (unsigned i = 0; i < l->nshards; i++) {
        struct sl_shard *s = &l->shards[i];
        struct sl_slots *t = atomic_load_explicit(&s->slots, memory_order_relaxed);

        struct sl_cells *c = atomic_load_explicit(&s->cells, memory_order_relaxed);

        for (uint64_t j = 0; j <= t->mask; j++) {
            uint64_t v = sl_load_rlx(&t->slot[j]);
            if (v > SL_TOMB)
                sl_entry_free(l->arena, sl_slot_entry(v));
        }
        sl_free(&l->memory, t, t->bytes);
        if (c != NULL) {
            sl_policy_unref(c->owner);
            sl_cells_free(&l->memory, c);
        }
        pthread_mutex_destroy(&s->lock);
    }
    sl_free(&l->memory, l->shards, l->nshards * sizeof(*l->shards));
    l->shards = NULL;
}

struct sl_entry *sl_table_get_entry(struct sl_shard *s, uint64_t h, const void *key, size_t len)
{
    return sl_table_find(s, h, key, len);
}

/* The shard's current slot array as bytes (test/footprint.c compares it
 * around a decision: a lookup writes nothing there). */
void sl_table_span(struct sl_shard *s, const void **base, size_t *bytes)
{
    struct sl_slots *t = atomic_load_explicit(&s->slots, memory_order_acquire);

    *base = t;
    *bytes = sizeof(*t) + (t->mask + 1) * sizeof(t->slot[0]);
}

void sl_table_prefetch(struct sl_shard *s, uint64_t h)
{
    sl_table_prefetch_home(s, h); /* table.h's, for callers outside it */
}

void sl_table_prefetch_entry(struct sl_shard *s, uint64_t h)
{
    struct sl_slots *t = atomic_load_explicit(&s->slots, memory_order_acquire);
    uint64_t tag = sl_tag_of(h), i = h & t->mask, v;

    /* a few slots at most: a long probe is rare, and this is only a hint */
    for (unsigned n = 0; n < 4 && (v = sl_load_rlx(&t->slot[i])) != SL_EMPTY; n++) {
        if (sl_slot_may_hold(v, tag)) {
            __builtin_prefetch(sl_slot_entry(v));
            return;
        }
        i = (i + 1) & t->mask;
    }
}

#ifdef SL_DEBUG_CHECKS
static _Thread_local char sl_self_token; /* its address names the thread */

bool sl_shard_held(struct sl_shard *s)
{
    return atomic_load_explicit(&s->holder, memory_order_relaxed) == &sl_self_token;
}

static void sl_shard_hold(struct sl_shard *s, bool hold)
{
    /* relaxed: only ever compared by the holding thread itself */
    atomic_store_explicit(&s->holder, hold ? &sl_self_token : NULL, memory_order_relaxed);
}
#else
static void sl_shard_hold(struct sl_shard *s, bool hold)
{
    (void)s;
    (void)hold;
}
#endif

void sl_shard_lock(struct sl_shard *s)
{
    pthread_mutex_lock(&s->lock);
    sl_shard_hold(s, true);
}

bool sl_shard_trylock(struct sl_shard *s)
{
    if (pthread_mutex_trylock(&s->lock) != 0)
        return false;
    sl_shard_hold(s, true);
    return true;
}

void sl_shard_unlock(struct sl_shard *s)
{
    SL_ASSERT(sl_shard_held(s));
    sl_shard_hold(s, false);
    pthread_mutex_unlock(&s->lock);
}

/* Writers: the index of e's slot in the current array. */
static uint64_t sl_slot_find(struct sl_slots *t, uint64_t h, const struct sl_entry *e)
{
    uint64_t i = h & t->mask;

    while (sl_slot_entry(sl_load_rlx(&t->slot[i])) != e || sl_load_rlx(&t->slot[i]) <= SL_TOMB)
        i = (i + 1) & t->mask;
    return i;
}

/* Place e in t (private or locked), at the first free slot of its probe. */
static void sl_slot_place(struct sl_slots *t, uint64_t h, const struct sl_entry *e, bool *reused)
{
    uint64_t i = h & t->mask;

    while (sl_load_rlx(&t->slot[i]) > SL_TOMB)
        i = (i + 1) & t->mask;
    *reused = sl_load_rlx(&t->slot[i]) == SL_TOMB;
    SL_TSAN_RELEASE(e);
    sl_store_rel(&t->slot[i], sl_slot_make(e, h)); /* publishes the entry */
}

/*
 * Rebuild the shard's array for `live` entries at most half full, dropping
 * tombstones, and publish it; the old array goes to the epoch.
 */
static int sl_rehash_locked(struct sl_shard *s, uint64_t live)
{
    struct sluice *l = s->owner;
    struct sl_slots *old = atomic_load_explicit(&s->slots, memory_order_relaxed), *t;
    struct sl_thread *th = sl_thread_get();
    uint64_t cap = SL_SLOTS_MIN;
    bool reused;

    SL_ASSERT(sl_shard_held(s));
    while (cap < 2 * (live + 1))
        cap <<= 1;
    if (th == NULL || (t = sl_slots_new(l, cap)) == NULL)
        return -ENOMEM;
    for (uint64_t j = 0; j <= old->mask; j++) {
        uint64_t v = sl_load_rlx(&old->slot[j]);
        if (v > SL_TOMB) {
            struct sl_entry *e = sl_slot_entry(v);
            sl_slot_place(t, sl_hash(&l->hkey, sl_entry_key(e), e->key_len), e, &reused);
        }
    }
    s->used = s->live;
    s->reap_cursor = 0;
    atomic_store_explicit(&s->slots, t, memory_order_release);
    sl_unaccount(&l->memory, old->bytes);
    sl_retire_array(th, &old->retire, sl_slots_free_cb);
    return 0;
}

int sl_table_insert_locked(struct sl_shard *s, uint64_t h, struct sl_entry *e)
{
    struct sl_slots *t = atomic_load_explicit(&s->slots, memory_order_relaxed);
    bool reused;

    SL_ASSERT(sl_shard_held(s) && sl_epoch_active(sl_thread_get()));
    SL_ASSERT(!(sl_load_rlx(&e->w[e->pol->lim[0].off]) & SL_DEAD)); /* a live entry */
    /* at most 3/4 of the slots used (live or tombstones): probes stay short
     * and every probe meets an empty slot */
    if ((s->used + 1) * 4 > (t->mask + 1) * 3) {
        if (sl_rehash_locked(s, s->live + 1) != 0)
            return -ENOMEM;
        t = atomic_load_explicit(&s->slots, memory_order_relaxed);
    }
    /* A new key is decided no earlier than the latest reap (see
     * sl_table_reap_some), read here under the shard lock: a reap that
     * removed this key from this shard raised it before unlocking. */
    /* (An entry made from a cell, table_cells.c, is no new key: it keeps
     * the time of its latest admission, raised by nothing.) */
    if (sl_load_rlx(&e->last_ns) == 0)
        sl_store_rlx(&e->last_ns, sl_load_rlx(&s->owner->reap_floor));
    sl_slot_place(t, h, e, &reused);
    s->live++;
    s->used += !reused;
    return 0;
}

int sl_table_replace_locked(struct sl_shard *s, uint64_t h, struct sl_entry *old,
                            struct sl_entry *repl)
{
    struct sl_slots *t = atomic_load_explicit(&s->slots, memory_order_relaxed);

    SL_ASSERT(sl_shard_held(s));
    /* the old entry is frozen (no charge can land on it), the new one live */
    SL_ASSERT((sl_load_rlx(&old->w[old->pol->lim[0].off]) & SL_DEAD) &&
              !(sl_load_rlx(&repl->w[repl->pol->lim[0].off]) & SL_DEAD));
    SL_TSAN_RELEASE(repl);
    sl_store_rel(&t->slot[sl_slot_find(t, h, old)], sl_slot_make(repl, h));
    return 0;
}

/* Entries a reap scan loads ahead of the one it decides: enough misses in
 * flight to cover DRAM latency, few enough not to evict what is still to
 * be read (callgrind and the bench's reap part chose 16). */
#define SL_REAP_AHEAD 16

static void sl_reap_prefetch(struct sl_slots *t, uint64_t j)
{
    uint64_t v = sl_load_rlx(&t->slot[j]);

    if (v > SL_TOMB)
        __builtin_prefetch(sl_slot_entry(v), 1); /* for writing: freezing CASes it */
}

/*
 * Scan up to *budget slots of a locked shard from its cursor (wrapping,
 * once round at most), removing idle keys until max_remove are gone; the
 * slots scanned are taken from *budget.  The cursor makes repeated
 * bounded scans (the insert path of a full table) cover the whole shard in
 * turn instead of re-reading its first slots.
 */
size_t sl_table_reap_some(struct sl_shard *s, uint64_t now, uint64_t idle_ttl, uint64_t *budget,
                          size_t max_remove)
{
    uint64_t max_scan = *budget;
    struct sluice *l = s->owner;
    struct sl_thread *th = sl_thread_get();
    struct sl_slots *t = atomic_load_explicit(&s->slots, memory_order_relaxed);
    struct sl_limbo *batch = NULL;
    uint64_t j = s->reap_cursor & t->mask, scanned = 0, unacct = 0;
    size_t removed = 0;

    if (th == NULL)
        return 0;
    now = sl_reap_time(now);
    /* ck: memory unpublished here is retired in this same section */
    SL_ASSERT(sl_shard_held(s) && sl_epoch_active(th));
    for (uint64_t k = 1; k <= SL_REAP_AHEAD && k <= t->mask && k < max_scan; k++)
        sl_reap_prefetch(t, (j + k) & t->mask);
    for (; scanned <= t->mask && scanned < max_scan && removed < max_remove;
         scanned++, j = (j + 1) & t->mask) {
        uint64_t v = sl_load_rlx(&t->slot[j]);
        struct sl_entry *e = sl_slot_entry(v);
        /* the slot array is read in order, the entries at random: start
         * loading the entry SL_REAP_AHEAD slots on, so that the misses of
         * consecutive entries overlap instead of adding up */
        sl_reap_prefetch(t, (j + SL_REAP_AHEAD + 1) & t->mask);
        if (v <= SL_TOMB)
            continue;
        if (batch == NULL || sl_limbo_full(batch)) {
            if (batch != NULL)
                sl_limbo_retire(th, batch);
            if ((batch = sl_limbo_new(l, 256)) == NULL)
                break; /* out of memory: reap the rest next time */
        }
        if (!sl_entry_freeze_if_idle(e, now, idle_ttl))
            continue;
        sl_store_rel(&t->slot[j], SL_TOMB);
        sl_entry_mark_moved(e, e->pol, NULL, 0, 0);
        unacct += sl_entry_footprint(e->pol, e->key_len);
        sl_limbo_add(batch, e);
        removed++;
    }
    if (unacct != 0) /* one locked operation per scan, not per entry */
        sl_unaccount(&l->memory, unacct);
    s->reap_cursor = j;
    *budget -= scanned;
    if (batch != NULL)
        sl_limbo_retire(th, batch);
    if (removed != 0) {
        /* The removed keys were fresh at now; a request for one of them
         * stamped earlier (an out-of-order clock) now makes a new key, which
         * must not read as fresh at that earlier time: new keys start at
         * the latest reap time (sl_entry_new), as if observed then. */
        sl_time_raise(&l->reap_floor, now);
        s->live -= removed;
        sl_uncount(&l->nkeys, removed);
        sl_count(&l->reaped, removed);
        /* give memory back once the shard is mostly empty */
        if (t->mask + 1 > SL_SLOTS_MIN && s->live * 8 < t->mask + 1)
            (void)sl_rehash_locked(s, s->live);
    }
    return removed;
}

bool sl_table_unpublish_untouched(struct sl_shard *s, uint64_t h, struct sl_entry *e,
                                  struct sl_limbo *batch)
{
    struct sluice *l = s->owner;
    struct sl_thread *th = sl_thread_get(); /* the caller's, made already */
    struct sl_slots *t;
    bool back = false;

    sl_shard_lock(s);
    t = atomic_load_explicit(&s->slots, memory_order_relaxed);
    if (sl_table_get_entry(s, h, sl_entry_key(e), e->key_len) == e &&
        sl_entry_freeze_if_untouched(e, e->pol)) {
        sl_store_rel(&t->slot[sl_slot_find(t, h, e)], SL_TOMB);
        sl_entry_mark_moved(e, e->pol, NULL, 0, 0);
        sl_unaccount(&l->memory, sl_entry_footprint(e->pol, e->key_len));
        sl_limbo_add(batch, e);
        s->live--;
        sl_uncount(&l->nkeys, 1);
        sl_uncount(&l->inserted, 1);
        back = true;
    }
    sl_shard_unlock(s);
    sl_limbo_retire(th, batch);
    return back;
}

size_t sl_table_reap_shard(struct sl_shard *s, uint64_t now, uint64_t idle_ttl)
{
    uint64_t all = UINT64_MAX;

    s->reap_cursor = 0;
    return sl_table_reap_some(s, now, idle_ttl, &all, SIZE_MAX);
}
