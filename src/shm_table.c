/*
 * Shared limiters: the key table in the file, and every writer.
 *
 * As in-process: per shard an open-addressing array of slots probed
 * lock-free, writers under the shard's lock.  Here the lock is a word
 * holding its owner's token (sl_shm_word_lock), a slot holds an entry's
 * index (hash bits above it), and the arrays cannot grow: each shard has
 * two of fixed size, and a rebuild (dropping tombstones) fills the one
 * readers do not use, once its grace period is over, and switches.
 *
 * A process killed inside a writer section is repaired after (shm_lock.c).
 * Deciders never take a lock except to wait for a writer that froze their
 * entry.
 */
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shm.h"

#define SL_ROOM_SCAN 1024u
#define SL_ROOM_REMOVE 16u

static uint64_t sl_slot_val(uint64_t h, uint64_t idx)
{
    return (h & ~SL_IDX_MASK) | (idx + 2);
}

static bool sl_key_is(struct sl_shm *m, struct sl_entry *e, const void *key, size_t len)
{
    return e->key_len == len && (len == 0 || memcmp(sl_shm_key(m, e), key, len) == 0);
}

/*
 * Lock-free lookup, inside a section of the file's epoch (or under the
 * shard lock).  seq_cst loads: see shm_epoch.c (plain loads on x86).
 * Bounded by the array's size whatever the file holds.
 */
struct sl_entry *sl_shm_lookup(struct sl_shm *m, struct sl_shm_shard *s, uint64_t h,
                               const void *key, size_t len, sl_aword **slot)
{
    sl_aword *a = sl_shm_array(m, s, atomic_load_explicit(&s->cur, memory_order_seq_cst));
    uint64_t mask = m->nslots - 1, i = h & mask;

    for (uint64_t n = 0; n < m->nslots; n++, i = (i + 1) & mask) {
        uint64_t v = atomic_load_explicit(&a[i], memory_order_seq_cst);
        struct sl_entry *e;
        if (v == 0)
            return NULL;
        if ((v >> 32) != (h >> 32) || (e = sl_slot_entry(m, v)) == NULL || !sl_key_is(m, e, key, len))
            continue;
        if (slot != NULL)
            *slot = &a[i];
        return e;
    }
    return NULL;
}

struct sl_entry *sl_shm_find(const struct sl_target *g)
{
    struct sl_shm *m = g->l->shm;

    return sl_shm_lookup(m, sl_shm_shard(m, g->h), g->h, g->key, g->len, NULL);
}

struct sl_policy *sl_shm_policy_of(struct sluice *l, const struct sl_entry *e)
{
    return sl_shm_policy(l, e->polref);
}

/* A state word of a shared entry as a successor id: 1 + its place in the
 * entries in words (below 2^53: a mapping is far smaller than 2^56 bytes),
 * tagged, so that a word a dead writer left unmarked is not read as one
 * (sl_entry_mark_moved).  The tag differs from the entry ids that 2.1.0
 * wrote in the same layout 4 (0x1A5B << 48), so neither version reads the
 * other's marks: such a charge stays spent. */
#define SL_SHM_WORD_BITS 53
#define SL_SHM_WORD_TAG (UINT64_C(0x2E7) << SL_SHM_WORD_BITS)
#define SL_SHM_WORD_TAG_MASK (UINT64_C(0x3FF) << SL_SHM_WORD_BITS)
uint64_t sl_shm_word_id(const struct sl_shm *m, const struct sl_entry *e)
{
    uint64_t at = (uint64_t)((const unsigned char *)e->w - m->entries) / sizeof(sl_aword);

    return SL_SHM_WORD_TAG | (at + 1);
}

sl_aword *sl_shm_word_of_id(struct sluice *l, uint64_t id, uint32_t nwords)
{
    struct sl_shm *m = l->shm;
    uint64_t at = (id & ~SL_SHM_WORD_TAG_MASK) - 1, byte, in;

    if ((id & SL_SHM_WORD_TAG_MASK) != SL_SHM_WORD_TAG || (id & ~SL_SHM_WORD_TAG_MASK) == 0)
        return NULL;
    /* only nwords state words of one entry of the pool (a corrupt file's
     * mark leads nowhere else) */
    byte = at * sizeof(sl_aword);
    in = byte % m->esize;
    if (byte / m->esize >= m->pool || in < offsetof(struct sl_entry, w) ||
        nwords > m->words ||
        in - offsetof(struct sl_entry, w) > (m->words - nwords) * sizeof(sl_aword))
        return NULL;
    return (sl_aword *)(void *)(m->entries + byte);
}

struct sl_entry *sl_shm_get_current(struct sl_target *g)
{
    struct sl_shm *m = g->l->shm;
    struct sl_entry *e = sl_shm_lookup(m, sl_shm_shard(m, g->h), g->h, g->key, g->len, NULL);
    struct sl_policy *cur = atomic_load_explicit(&g->l->policy, memory_order_acquire);

    if (e != NULL && sl_shm_is_ovr(e->polref))
        cur = sl_shm_policy(g->l, e->polref); /* NULL: replaced meanwhile */
    if (e == NULL || cur == NULL || e->polref != cur->shm_ref)
        return NULL;
    g->pol = cur;
    return e;
}

bool sl_shm_same_file(const struct sl_shm *a, const struct sl_shm *b)
{
    return a->dev == b->dev && a->ino == b->ino;
}

struct sl_policy *sl_shm_key_policy(struct sl_target *g)
{
    for (;;) {
        /* the default before and after the lookup, as sl_key_policy */
        struct sl_policy *cur = atomic_load_explicit(&g->l->policy, memory_order_acquire);
        struct sl_entry *e = sl_shm_find(g);
        struct sl_policy *pol =
            e != NULL && sl_shm_is_ovr(e->polref) ? sl_shm_policy(g->l, e->polref) : NULL;
        if (atomic_load_explicit(&g->l->policy, memory_order_acquire) == cur)
            return pol != NULL ? pol : cur;
    }
}

/* Whether a published entry is frozen, seen under its shard's lock: no
 * live writer leaves one so, only a dead one (or a corrupt file). */
static bool sl_shm_frozen(struct sluice *l, struct sl_entry *e)
{
    const struct sl_policy *pol = sl_shm_policy(l, e->polref);

    for (unsigned i = 0; pol != NULL && i < pol->nlimits; i++)
        if (sl_load_acq(&e->w[pol->lim[i].off]) & SL_DEAD)
            return true;
    return false;
}

void sl_shm_wait(struct sl_target *g, sl_aword *w, uint64_t *v)
{
    struct sl_shm *m = g->l->shm;
    struct sl_shm_shard *s = sl_shm_shard(m, g->h);
    struct sl_entry *e;

    sl_shm_lock(g->l, s);
    if (w != NULL)
        *v = sl_load_acq(w);
    /* still frozen (or its time sealed: a corrupt file's) with the lock
     * ours: have it thawed (sl_shm_unlock) */
    if ((e = sl_shm_lookup(m, s, g->h, g->key, g->len, NULL)) != NULL &&
        (sl_shm_frozen(g->l, e) || sl_load_acq(&e->last_ns) == SL_LAST_SEALED))
        sl_store_rel(&m->hdr->repair, 1);
    sl_shm_unlock(g->l, s);
}

/* A new entry's words and key (the entry is ours: allocated, unpublished). */
static struct sl_entry *sl_shm_init_entry(struct sluice *l, uint64_t idx, const void *key,
                                          size_t len, const struct sl_policy *pol, uint32_t pin)
{
    struct sl_shm *m = l->shm;
    struct sl_entry *e = sl_shm_entry(m, idx);

    memset(e, 0, sizeof(*e) + m->words * sizeof(sl_aword));
    e->key_len = (uint32_t)len;
    e->polref = pol->shm_ref;
    atomic_store_explicit(&e->pinned, pin, memory_order_relaxed);
    sl_store_rlx(&e->last_ns, sl_last_sane(sl_load_rlx(&m->hdr->reap_floor)));
    if (len != 0)
        memcpy(sl_shm_key(m, e), key, len);
    return e;
}

/* Rebuild a locked shard into its other array, dropping tombstones; false
 * if that array may still be read (its grace period is not over). */
static bool sl_shm_rehash(struct sluice *l, struct sl_shm_shard *s)
{
    struct sl_shm *m = l->shm;
    uint64_t old = sl_load_rlx(&s->cur) & 1, spare = old ^ 1, mask = m->nslots - 1, live = 0;
    uint64_t ret = sl_load_rlx(&s->retired[spare]);
    sl_aword *a = sl_shm_array(m, s, old), *b = sl_shm_array(m, s, spare);

    for (int i = 0; i < 2 && (ret == UINT64_MAX || ret + 2 > sl_load_acq(&m->hdr->epoch)); i++)
        (void)sl_shm_advance(m, false);
    if (ret == UINT64_MAX || ret + 2 > atomic_load_explicit(&m->hdr->epoch, memory_order_seq_cst))
        return false;
    for (uint64_t i = 0; i <= mask; i++)
        sl_store_rlx(&b[i], 0);
    for (uint64_t i = 0; i <= mask; i++) {
        uint64_t v = sl_load_rlx(&a[i]), h, j;
        struct sl_entry *e = sl_slot_entry(m, v);
        if (e == NULL)
            continue;
        h = sl_hash(&l->hkey, sl_shm_key(m, e), sl_min64(e->key_len, l->max_key_len));
        for (j = h & mask; sl_load_rlx(&b[j]) != 0; j = (j + 1) & mask)
            ;
        sl_store_rlx(&b[j], v);
        live++;
    }
    sl_store_rlx(&s->retired[old], UINT64_MAX); /* until known below (repair if we die) */
    atomic_store_explicit(&s->cur, spare, memory_order_seq_cst); /* publishes b's slots */
    sl_store_rlx(&s->retired[old],
                 atomic_fetch_add_explicit(&m->hdr->epoch, 0, memory_order_seq_cst));
    sl_store_rlx(&s->live, live);
    sl_store_rlx(&s->used, live);
    sl_store_rlx(&s->reap_cursor, 0);
    return true;
}

/* Publish entry idx for hash h in a locked shard; false if the shard has
 * no room (at most 7/8 of its slots used; rebuilt past 3/4). */
static bool sl_shm_place(struct sluice *l, struct sl_shm_shard *s, uint64_t h, uint64_t idx)
{
    struct sl_shm *m = l->shm;
    uint64_t mask = m->nslots - 1, used = sl_load_rlx(&s->used), i, v;
    sl_aword *a;

    if ((used + 1) * 4 > m->nslots * 3 && sl_shm_rehash(l, s))
        used = sl_load_rlx(&s->used);
    if ((used + 1) * 8 > m->nslots * 7)
        return false;
    a = sl_shm_array(m, s, sl_load_rlx(&s->cur));
    for (i = h & mask; (v = sl_load_rlx(&a[i])) > SL_TOMB; i = (i + 1) & mask)
        ;
    sl_store_rel(&a[i], sl_slot_val(h, idx)); /* publishes the entry */
    sl_store_rlx(&s->live, sl_load_rlx(&s->live) + 1);
    sl_store_rlx(&s->used, used + (v != SL_TOMB));
    return true;
}

/* Remove the entry e (laid out for pol) of slot *slot (frozen by us) from a
 * locked shard; unpublished, it is marked (sl_entry_mark_moved) before it
 * can be reused. */
static void sl_shm_remove(struct sl_shm *m, struct sl_shm_shard *s, sl_aword *slot,
                          struct sl_entry *e, const struct sl_policy *pol)
{
    uint64_t idx = (sl_load_rlx(slot) & SL_IDX_MASK) - 2;

    atomic_store_explicit(slot, SL_TOMB, memory_order_seq_cst); /* see sl_shm_retire */
    sl_entry_mark_moved(e, pol, NULL, 0, 0);
    sl_shm_retire(m, idx);
    sl_store_rlx(&s->live, sl_load_rlx(&s->live) - 1);
}

static bool sl_shm_idle(struct sluice *l, struct sl_shm_shard *s, struct sl_entry *e,
                        const struct sl_policy *pol, uint64_t now)
{
    uint32_t pin = atomic_load_explicit(&e->pinned, memory_order_acquire);
    uint64_t last;

    if (pol->is_override)
        return false; /* overridden keys are never reaped (sluice.h) */
    if (pin != 0) {
        if (sl_shm_pin_live(l->shm, pin))
            return false;
        /* its inserter died mid-decision: the pin is void */
        (void)atomic_compare_exchange_strong_explicit(&e->pinned, &pin, 0, memory_order_relaxed,
                                                      memory_order_relaxed);
    }
    /* idle at now, as sl_entry_freeze_if_idle: never a key admitted later */
    if ((sl_entry_last(e, &last) ? sl_sat_add(last, l->idle_ttl_ns) : l->idle_ttl_ns) > now)
        return false;
    return sl_entry_freeze_fresh_pol(e, pol, now, l->idle_ttl_ns, sl_shm_seal_save(l->shm, s, e),
                                     l->shm);
}

/* Reap idle keys of a locked shard (inside a ck section: policies). */
size_t sl_shm_reap_some(struct sluice *l, struct sl_shm_shard *s, uint64_t now,
                               uint64_t *budget, size_t max_remove)
{
    struct sl_shm *m = l->shm;
    sl_aword *a = sl_shm_array(m, s, sl_load_rlx(&s->cur));
    uint64_t mask = m->nslots - 1, j = sl_load_rlx(&s->reap_cursor) & mask, scanned = 0;
    size_t removed = 0;

    now = sl_reap_time(now); /* as in sl_table_reap_some */
    for (; scanned <= mask && scanned < *budget && removed < max_remove;
         scanned++, j = (j + 1) & mask) {
        struct sl_entry *e = sl_slot_entry(m, sl_load_rlx(&a[j]));
        struct sl_policy *pol = e != NULL ? sl_shm_policy(l, e->polref) : NULL;
        if (pol == NULL || !sl_shm_idle(l, s, e, pol, now))
            continue;
        sl_shm_remove(m, s, &a[j], e, pol);
        removed++;
    }
    sl_store_rlx(&s->reap_cursor, j);
    *budget -= scanned;
    if (removed != 0) {
        sl_time_raise(&m->hdr->reap_floor, now); /* as in sl_table_reap_some */
        sl_uncount(&m->hdr->nkeys, removed);
        sl_count(&m->hdr->reaped, removed);
    }
    return removed;
}

/* Reserve room for one more key (s locked by us): other shards only by
 * trylock, since waiting while holding s could deadlock. */
static bool sl_shm_reserve(struct sluice *l, struct sl_shm_shard *s, uint64_t now)
{
    struct sl_shm *m = l->shm;
    uint64_t n = sl_load_rlx(&m->hdr->nkeys), budget = SL_ROOM_SCAN;

    for (int pass = 0; pass < 2; pass++) {
        while (n < l->max_keys)
            if (atomic_compare_exchange_weak_explicit(&m->hdr->nkeys, &n, n + 1,
                                                      memory_order_relaxed, memory_order_relaxed))
                return true;
        if (pass == 1)
            break;
        /* own shard first, then the others in turn until one frees room
         * (then nkeys is read again: a room freed in s used to be missed) */
        size_t freed = sl_shm_reap_some(l, s, now, &budget, SL_ROOM_REMOVE);
        for (unsigned k = 1; freed == 0 && k < l->nshards && budget > 0; k++) {
            /* another shard in turn, never s (as sl_reap_for_room) */
            unsigned step = 1 + (unsigned)(atomic_fetch_add_explicit(&m->hdr->reap_next, 1,
                                                                     memory_order_relaxed) %
                                           (l->nshards - 1));
            struct sl_shm_shard *o = &m->shards[((unsigned)(s - m->shards) + step) &
                                                (l->nshards - 1)];
            if (!sl_shm_trylock(l, o))
                continue;
            freed = sl_shm_reap_some(l, o, now, &budget, SL_ROOM_REMOVE);
            sl_shm_release(o);
        }
        n = sl_load_rlx(&m->hdr->nkeys);
    }
    return false;
}

/* No room for g's key: max_keys, or its shard's slots all taken by live
 * keys; the limiter's when_full decides. */
static void sl_shm_full(struct sl_target *g, struct sl_policy *pol, uint64_t now)
{
    sl_count(&g->l->shm->hdr->full, 1);
    g->flags |= SLUICE_F_FULL;
    sl_target_use(g, NULL, pol, now);
}

/* Reserve, allocate, fill and publish a new key's entry in a locked shard:
 * the entry, or NULL with *why -ENOSPC (no room) or -ENOMEM (no free
 * entry or slot now: both come back after a grace period, which the
 * caller waits for holding no lock and, if it can, in no section); pin
 * is the entry's pin token (0: none). */
static struct sl_entry *sl_shm_add(struct sluice *l, struct sl_shm_shard *s, uint64_t h,
                                   const void *key, size_t len, const struct sl_policy *pol,
                                   uint64_t now, uint32_t pin, int *why)
{
    struct sl_shm *m = l->shm;
    struct sl_entry *e;
    uint64_t idx;

    *why = -ENOSPC;
    if (!sl_shm_reserve(l, s, now))
        return NULL;
    if ((idx = sl_shm_alloc(m)) == UINT64_MAX) {
        sl_uncount(&m->hdr->nkeys, 1);
        *why = -ENOMEM;
        return NULL;
    }
    e = sl_shm_init_entry(l, idx, key, len, pol, pin);
    if (!sl_shm_place(l, s, h, idx)) {
        sl_shm_free_unseen(m, idx);
        sl_uncount(&m->hdr->nkeys, 1);
        /* room once its tombstones are dropped: the rebuild waits for the
         * other array's grace period, as an entry for its own */
        if ((sl_load_rlx(&s->live) + 1) * 8 <= m->nslots * 7)
            *why = -ENOMEM;
        return NULL;
    }
    sl_count(&m->hdr->inserted, 1);
    return e;
}

int sl_shm_add_locked(struct sluice *l, struct sl_shm_shard *s, uint64_t h, const void *key,
                      size_t len, const struct sl_policy *pol, uint64_t now)
{
    int why;

    return sl_shm_add(l, s, h, key, len, pol, now, 0, &why) != NULL ? 0 : why;
}

static int sl_shm_insert(struct sl_target *g, struct sl_policy *pol, uint64_t now)
{
    struct sluice *l = g->l;
    struct sl_shm *m = l->shm;
    struct sl_shm_shard *s = sl_shm_shard(m, g->h);
    struct sl_entry *e;
    int rc = 0, why;

    sl_shm_lock(l, s);
    if (sl_shm_lookup(m, s, g->h, g->key, g->len, NULL) != NULL || sl_policy_stale(l, pol)) {
        rc = -EAGAIN;
    } else if ((e = sl_shm_add(l, s, g->h, g->key, g->len, pol, now, sl_shm_pin_token(l),
                               &why)) == NULL) {
        /* No free entry (or slot) now is not full: retired entries (or
         * the rebuild) wait for a grace period that this call's own
         * section holds back, or a dead process's section, which only an
         * advance made holding no shard lock asks about.  -ENOMEM:
         * sl_shm_resolve helps the epoch along, then ends the section and
         * waits (sl_shm_starved), as for a replace. */
        if (why == -ENOMEM)
            rc = -ENOMEM;
        else
            sl_shm_full(g, pol, now);
    } else {
        g->flags |= SLUICE_F_NEW_KEY;
        if (g->pinned != NULL) /* an earlier insert of this call, since replaced */
            atomic_store_explicit(&g->pinned->pinned, 0, memory_order_release);
        g->pinned = e;
        sl_target_use(g, e, pol, now);
    }
    sl_shm_unlock(l, s);
    return rc;
}

/* Swap the entry in *slot (e, under `from`) for a new one under `to`, its
 * state carried over or fresh, in a locked shard.  -EAGAIN if e is frozen
 * (a dead writer's: repaired on unlock), -ENOMEM if no entry is free,
 * -EBUSY if a call on several keys stays counted on e for 2 s, or a
 * sliding log's writer stays in its write for 2 s (a stopped process, or
 * a corrupt file): e is thawed, nothing changed.
 * pin: the new entry's (sl_entry.pinned), 0 but for the call that made e,
 * and 0 then too if a charge stands in e (another call's: the key stays). */
int sl_shm_swap(struct sluice *l, sl_aword *slot, struct sl_entry *e,
                const struct sl_policy *from, const struct sl_policy *to, enum sl_move how,
                uint64_t now, uint32_t pin)
{
    struct sl_shm *m = l->shm;
    uint64_t idx = sl_shm_alloc(m), v = sl_load_rlx(slot);
    struct sl_entry *ne;
    unsigned kept;
    int rc;

    if (idx == UINT64_MAX)
        return -ENOMEM;
    if ((rc = sl_entry_freeze_pol(e, from)) != 0) {
        sl_shm_free_unseen(m, idx);
        return rc; /* -EAGAIN, or -EBUSY: a stopped process in a sliding log's write */
    }
    if (!sl_entry_commits_done(e, true, m)) {
        sl_entry_thaw_pol(e, from); /* nothing sealed yet: as it was */
        sl_shm_free_unseen(m, idx);
        return -EBUSY;
    }
    if (pin != 0 && !sl_entry_frozen_untouched(e, from))
        pin = 0; /* charged by another call since it was made: it stands */
    /* the length as the file says, within what an entry holds: a corrupt
     * one (far above max_key_len) was copied as it was, past the entry */
    ne = sl_shm_init_entry(l, idx, sl_shm_key(m, e), sl_min64(e->key_len, l->max_key_len), to,
                           pin);
    kept = sl_entry_move_state(e, from, ne, to, NULL, how, now,
                               sl_shm_seal_save(m, sl_shm_slot_shard(m, slot), e));
    /* publishes ne (release), unpublishes e (seq_cst: sl_shm_retire) */
    atomic_store_explicit(slot, (v & ~SL_IDX_MASK) | (idx + 2), memory_order_seq_cst);
    sl_entry_mark_moved(e, from, to, kept, sl_shm_word_id(m, ne)); /* unpublished: never thawed now */
    sl_shm_retire(m, (v & SL_IDX_MASK) - 2);
    return 0;
}

static int sl_shm_replace(struct sl_target *g, struct sl_entry *e, struct sl_policy *from,
                          struct sl_policy *to, enum sl_move how, uint64_t now)
{
    struct sluice *l = g->l;
    struct sl_shm *m = l->shm;
    struct sl_shm_shard *s = sl_shm_shard(m, g->h);
    sl_aword *slot;
    int rc = -EAGAIN;

    sl_shm_lock(l, s);
    if (sl_shm_lookup(m, s, g->h, g->key, g->len, &slot) == e && !sl_policy_stale(l, to)) {
        /* the key this call made, moved before its decision: the pin goes
         * with it, so that a failure after the move still takes it back,
         * unless another call charged it first (sl_shm_swap) */
        bool ours = g->pinned == e;
        rc = sl_shm_swap(l, slot, e, from, to, how, now, ours ? sl_shm_pin_token(l) : 0);
        if (rc == 0 && ours) {
            struct sl_entry *ne = sl_shm_lookup(m, s, g->h, g->key, g->len, NULL);
            /* relaxed: written above under this shard lock */
            if (atomic_load_explicit(&ne->pinned, memory_order_relaxed) != 0)
                g->pinned = ne;
        }
    }
    sl_shm_unlock(l, s);
    return rc;
}

/* Bound on resolve rounds: each one that does not return saw the entry or
 * the policy change; only a corrupt file keeps that up. */
#define SL_RESOLVE_ROUNDS 1000
#define SL_STARVED_ROUNDS 16
#define SL_STARVED_WAITS 2000 /* about 2 s of naps at most */
#define SL_STARVED_NS (UINT64_C(2) * 1000000000) /* and 2 s in all, whatever the pool's size */

int sl_shm_resolve(struct sl_thread *t, struct sl_target *g, uint64_t cost, uint64_t now,
                   bool create)
{
    struct sluice *l = g->l;
    struct sl_shm *m = l->shm;

    unsigned starved = 0;

    (void)t;
    for (unsigned round = 0; round < SL_RESOLVE_ROUNDS; round++) {
        struct sl_entry *e;
        struct sl_policy *cur = atomic_load_explicit(&l->policy, memory_order_acquire), *pol;
        /* a charge under a replaced generation is taken back (stale) and
         * decided again: it must find the new one */
        if (cur->shm_ref != sl_load_acq(l->shm_gen)) {
            sl_shm_refresh(l);
            cur = atomic_load_explicit(&l->policy, memory_order_acquire);
        }
        e = sl_shm_lookup(m, sl_shm_shard(m, g->h), g->h, g->key, g->len, NULL);
        pol = e != NULL ? sl_shm_policy(l, e->polref) : NULL;
        int rc;

        /* the default still cur after the lookup, so both held at it (an
         * entry and a default of different moments: a cap the key never had) */
        if (sl_load_acq(l->shm_gen) != cur->shm_ref)
            continue;
        if (pol != NULL && pol->is_override && cost > pol->min_cap)
            return -E2BIG; /* the key's own policy, as in-process */
        if ((pol == NULL || !pol->is_override) && cost > cur->min_cap)
            return -E2BIG;
        if (e != NULL && pol != NULL && (pol->is_override || pol == cur)) {
            if (sl_target_use_present(g, e, pol, now, create))
                return 0;
            rc = sl_shm_replace(g, e, pol, pol, SL_MOVE_EXPIRED, now);
        } else if (e == NULL && !create) {
            if (sl_load_rlx(&m->hdr->nkeys) >= l->max_keys) /* as in-process */
                g->flags |= SLUICE_F_AT_MAX_KEYS;
            sl_target_use_absent(g, cur, now, sl_last_sane(sl_load_rlx(&m->hdr->reap_floor)));
            return 0;
        } else if (e != NULL && pol == NULL)
            rc = -EAGAIN; /* migrated meanwhile (its generation is gone): look again */
        else if (e != NULL && g->peek &&
                 (rc = sl_entry_view(g, e, pol, cur, cur, now)) != -EAGAIN) {
            /* a peek: its policy changed, read as migrated, nothing changed */
            if (rc != -EBUSY)
                return rc;
            uint64_t v;
            sl_shm_wait(g, NULL, &v); /* frozen: a writer is moving it; look again */
            rc = -EAGAIN;
        } else if (e != NULL)
            rc = sl_shm_replace(g, e, pol, cur, SL_MOVE_CARRY, now);
        else if ((rc = sl_shm_insert(g, cur, now)) == 0)
            return 0;
        if (rc == -ENOMEM) {
            /* No free entry: entries retired before this section began can
             * come back while it runs (it holds back only the second of the
             * two advances they need); after a few tries, end the section
             * and wait outside it (sl_shm_starved). */
            if (++starved == SL_STARVED_ROUNDS)
                return -EAGAIN;
            (void)sl_shm_advance(m, true);
            rc = -EAGAIN;
        }
        if (rc != -EAGAIN && rc != 0)
            return rc;
    }
    return -EPROTO;
}

bool sl_shm_starved(struct sl_target *g, size_t n, unsigned round, uint64_t *until)
{
    /* a time bound, not only a count: each round may scan the whole pool */
    if (round == 0)
        *until = sl_mono_ns() + SL_STARVED_NS;
    else if (round >= SL_STARVED_WAITS || (int64_t)(sl_mono_ns() - *until) > 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (g[i].l->shm != NULL && sl_shm_advance(g[i].l->shm, true))
            return true;
    if (round < 16)
        sched_yield();
    else
        sl_shm_nap(1000);
    return true;
}

bool sl_shm_unpublish_untouched(struct sl_target *g)
{
    struct sluice *l = g->l;
    struct sl_shm *m = l->shm;
    struct sl_shm_shard *s = sl_shm_shard(m, g->h);
    struct sl_entry *e = g->pinned;
    struct sl_policy *pol = sl_shm_policy(l, e->polref);
    sl_aword *slot;
    bool back = false;

    sl_shm_lock(l, s);
    if (pol != NULL && sl_shm_lookup(m, s, g->h, g->key, g->len, &slot) == e &&
        sl_entry_freeze_if_untouched(e, pol)) {
        sl_shm_remove(m, s, slot, e, pol);
        sl_uncount(&m->hdr->nkeys, 1);
        sl_uncount(&m->hdr->inserted, 1);
        back = true;
    }
    sl_shm_unlock(l, s);
    return back;
}
