/*
 * Shared limiters: what acts on the whole file (shm_table.c does the keys):
 * host-wide counters, reaping, policy changes by generation, and the
 * administration of single keys: resets and overrides.
 */
#include <stdlib.h>

#include "shm.h"

void sl_shm_stat(struct sluice *l, const struct sl_thread *t, bool allowed)
{
    struct sl_stat_slot *slot = sl_shm_own_slot(l->shm, t->id);

    sl_shm_slot_add(allowed ? &slot->allowed : &slot->denied, t->id, 1);
}

void sl_shm_stats(struct sluice *l, struct sluice_stats *out)
{
    struct sl_shm_hdr *h = l->shm->hdr;
    uint64_t hi = sl_min64(sl_load_acq(&h->procs_hi), SL_SHM_PROCS);

    for (uint64_t i = 0; i < hi; i++)
        for (unsigned k = 0; k <= SL_SHM_TSLOTS; k++) {
            out->allowed += sl_load_rlx(&l->shm->procs[i].stat[k].allowed);
            out->denied += sl_load_rlx(&l->shm->procs[i].stat[k].denied);
        }
    out->keys = sl_load_rlx(&h->nkeys);
    out->inserted = sl_load_rlx(&h->inserted);
    out->reaped = sl_load_rlx(&h->reaped);
    out->full = sl_load_rlx(&h->full);
    out->memory_bytes = l->shm->size;
    out->clock = (uint64_t)l->clock;
}

size_t sl_shm_reap(struct sluice *l, uint64_t now)
{
    struct sl_shm *m = l->shm;
    struct sl_thread *t = sl_thread_get();
    size_t removed = 0;

    if (t == NULL)
        return 0;
    for (unsigned i = 0; i < l->nshards; i++) {
        uint64_t all = UINT64_MAX;
        sl_epoch_begin(t);
        sl_shm_lock(l, &m->shards[i]);
        sl_store_rlx(&m->shards[i].reap_cursor, 0);
        removed += sl_shm_reap_some(l, &m->shards[i], now, &all, SIZE_MAX);
        sl_shm_unlock(l, &m->shards[i]);
        sl_epoch_end(t);
    }
    (void)sl_shm_advance(m, true); /* reaped entries become reusable sooner */
    (void)sl_shm_advance(m, true);
    return removed;
}

/* Move every entry of a locked shard to generation gen (set_policy): 0,
 * or the error of the first entry that could not move now. */
static int sl_shm_migrate_shard(struct sluice *l, struct sl_shm_shard *s, struct sl_policy *to,
                                uint64_t now)
{
    struct sl_shm *m = l->shm;
    sl_aword *a = sl_shm_array(m, s, sl_load_rlx(&s->cur));

    for (uint64_t i = 0; i < m->nslots; i++) {
        struct sl_entry *e = sl_slot_entry(m, sl_load_rlx(&a[i]));
        struct sl_policy *from;
        /* overridden keys keep their own policy (as in-process) */
        if (e == NULL || e->polref == to->shm_ref || sl_shm_is_ovr(e->polref) ||
            (from = sl_shm_policy(l, e->polref)) == NULL)
            continue;
        /* -ENOMEM: no free entry now; -EAGAIN: frozen by a writer that
         * died (thawed once we unlock): both, unlock and come back, never
         * leaving an entry behind (the next change overwrites its policy) */
        int rc = sl_shm_swap(l, &a[i], e, from, to, SL_MOVE_CARRY, now, 0);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* How long one shard's move is retried: a free entry or a dead writer's
 * repair comes within a few tries; an entry that stays frozen for 2 s is a
 * corrupt file's (two slots naming one entry). */
#define SL_MIGRATE_NS (UINT64_C(2) * 1000000000u)

/* 0 once every key is under generation gen; else -ENOMEM (no free entry)
 * or -EPROTO (an entry that never thaws), the move left for the next
 * set_policy to finish and decisions to do key by key meanwhile. */
static int sl_shm_migrate_all(struct sluice *l, uint64_t gen, uint64_t now)
{
    struct sl_shm *m = l->shm;
    struct sl_policy *to = sl_shm_policy(l, gen);
    uint64_t since = 0; /* when the shard being moved first failed */

    if (to == NULL) { /* unreadable (corrupt), or no memory to compile it */
        struct sluice_policy def;
        return sl_shm_polslot_read(m->hdr, gen, &def) ? -ENOMEM : -EPROTO;
    }
    for (unsigned i = 0; i < l->nshards; i++) {
        int rc;
        sl_shm_lock(l, &m->shards[i]);
        rc = sl_shm_migrate_shard(l, &m->shards[i], to, now);
        sl_shm_unlock(l, &m->shards[i]);
        if (rc == 0) {
            since = 0;
            continue;
        }
        if (rc == -EBUSY)
            return rc; /* waited 2 s for a stopped call already */
        if (since == 0)
            since = sl_mono_ns();
        else if (sl_mono_ns() - since > SL_MIGRATE_NS)
            return rc == -ENOMEM ? -ENOMEM : -EPROTO;
        /* Wait for grace periods holding no shard lock (sections may be
         * waiting for it) and in no section: pol_lock only, which no
         * section ever waits for. */
        if (!sl_shm_advance(m, true) || sl_mono_ns() - since > 1000000)
            sl_shm_nap(100);
        i--;
    }
    sl_store_rel(&m->hdr->migrated, gen);
    return 0;
}

/*
 * The file keeps two generations of the default policy.  Every entry is
 * moved to the new one before set_policy returns, so an entry is never
 * more than one generation behind; a set_policy that finds the previous
 * one's move unfinished (its caller died) finishes it first.
 */
int sl_shm_set_policy(struct sluice *l, const struct sluice_policy *p)
{
    struct sl_shm *m = l->shm;
    struct sl_thread *t = sl_thread_get();
    uint64_t gen, now = sluice_now(l);
    int rc;

    if (t == NULL)
        return -ENOMEM;
    (void)sl_shm_word_lock(l, &m->hdr->pol_lock, true); /* a dead holder's work is redone below */
    sl_epoch_begin(t);
    gen = sl_load_acq(&m->hdr->pol_gen);
    rc = sl_load_acq(&m->hdr->migrated) != gen ? sl_shm_migrate_all(l, gen, now) : 0;
    if (rc == 0)
        rc = sl_shm_write_policy(l, gen + 1, p);
    if (rc == 0) {
        sl_store_rel(&m->hdr->pol_gen, gen + 1);
        sl_shm_refresh(l);
        rc = sl_shm_migrate_all(l, gen + 1, now);
    }
    sl_epoch_end(t);
    sl_shm_word_unlock(&m->hdr->pol_lock);
    return rc;
}

/* Tries of a key's change that finds no free entry (or its entry frozen by
 * a dead writer) before it gives up with -ENOMEM; between tries the epoch
 * is helped along holding no lock, about 2 s at most. */
#define SL_ADMIN_TRIES 2000

enum sl_admin_op { SL_RESET, SL_OVR_SET, SL_OVR_CLEAR };

/* One more key with an override, if fewer than the bound have one (CAS:
 * the count never reads above it; relaxed: sl_shm_reconcile recounts it
 * with every shard locked, the only other writer). */
static bool sl_shm_ovr_take(struct sl_shm *m)
{
    uint64_t n = sl_load_rlx(&m->hdr->ovr_keys);

    while (n < m->ovr_max)
        if (atomic_compare_exchange_weak_explicit(&m->hdr->ovr_keys, &n, n + 1,
                                                  memory_order_relaxed, memory_order_relaxed))
            return true;
    return false;
}

/*
 * One change of one key under its shard lock.  reset: a fresh state under
 * the key's policy (its override kept); set: the key (made if absent)
 * under a new override `def`, state carried over; clear: back to the
 * default, state carried over.  An override's slot is taken and freed
 * under the same lock, so a dead writer's half-done change leaves a slot
 * no entry names, which sl_shm_reconcile frees.
 */
static int sl_shm_admin_locked(struct sluice *l, struct sl_shm_shard *s, uint64_t h,
                               const void *key, size_t len, enum sl_admin_op op,
                               const struct sluice_policy *def, struct sl_policy *ovr,
                               uint64_t now)
{
    struct sl_shm *m = l->shm;
    struct sl_policy *cur = atomic_load_explicit(&l->policy, memory_order_acquire);
    struct sl_policy *from = NULL, *to;
    struct sl_entry *e;
    sl_aword *slot;
    int rc;

    e = sl_shm_lookup(m, s, h, key, len, &slot);
    if (e != NULL && (from = sl_shm_policy(l, e->polref)) == NULL)
        return -EPROTO; /* under the lock nobody changes it: the file is corrupt */
    if (e == NULL && op != SL_OVR_SET)
        return -ENOENT;
    if (op == SL_OVR_CLEAR && !from->is_override)
        return -ENOENT;
    /* a default generation replaced since it was read: set_policy may have
     * moved this shard already, and keys are never two generations behind */
    if (sl_policy_stale(l, cur))
        return -ESTALE; /* refresh and try again */
    if (op == SL_RESET)
        return sl_shm_swap(l, slot, e, from, from->is_override ? from : cur, SL_MOVE_FRESH,
                           now, 0);
    to = cur;
    if (op == SL_OVR_SET) {
        /* a key that gains an override counts against the bound first */
        bool gains = from == NULL || !from->is_override;
        if (gains && !sl_shm_ovr_take(m))
            return -ENOSPC; /* min(max_keys, 4096) keys have one (sluice.h) */
        if ((ovr->shm_ref = sl_shm_ovr_new(m, def)) == 0) {
            /* only while a dead writer's slots await the repair */
            if (gains)
                sl_uncount(&m->hdr->ovr_keys, 1);
            return -ENOSPC;
        }
        to = ovr;
    }
    rc = e == NULL ? sl_shm_add_locked(l, s, h, key, len, to,
                                       sl_admin_reap_time(sl_load_rlx(&m->hdr->reap_floor)))
                   : sl_shm_swap(l, slot, e, from, to, SL_MOVE_CARRY, now, 0);
    if (rc != 0 && op == SL_OVR_SET) {
        sl_shm_ovr_free(m, to->shm_ref);
        if (from == NULL || !from->is_override)
            sl_uncount(&m->hdr->ovr_keys, 1);
    } else if (rc == 0 && from != NULL && from->is_override) {
        sl_shm_ovr_free(m, from->shm_ref); /* no entry names it now */
        if (op == SL_OVR_CLEAR)
            sl_uncount(&m->hdr->ovr_keys, 1);
    }
    return rc;
}

static int sl_shm_admin(struct sluice *l, const void *key, size_t len, enum sl_admin_op op,
                        const struct sluice_policy *def)
{
    struct sl_shm *m = l->shm;
    struct sl_thread *t = sl_thread_get();
    uint64_t h = sl_hash(&l->hkey, key, len), now = sluice_now(l);
    struct sl_shm_shard *s = sl_shm_shard(m, h);
    struct sl_policy *ovr = NULL;
    int rc = -EAGAIN;

    if (t == NULL)
        return -ENOMEM;
    /* checked and compiled before any lock: refused policies take nothing */
    if (op == SL_OVR_SET && (rc = sl_shm_policy_check(def, m->words, &ovr)) < 0)
        return rc;
    rc = -EAGAIN; /* not tried yet */
    sl_epoch_begin(t);
    if (ovr != NULL) {
        ovr->is_override = true;
        sl_shm_policy_bind(m, ovr);
    }
    for (unsigned tries = 0; rc == -EAGAIN || rc == -ENOMEM || rc == -ESTALE; tries++) {
        if (tries == SL_ADMIN_TRIES) {
            rc = -ENOMEM;
            break;
        }
        if (tries > 0) { /* no lock held and in no file section: wait here */
            if (rc == -ENOMEM && !sl_shm_advance(m, true))
                sl_shm_nap(tries < 16 ? 10 : 1000);
            else if (rc != -ENOMEM && tries > 16)
                sl_shm_nap(1000);
        }
        sl_shm_refresh(l);
        sl_shm_lock(l, s);
        rc = sl_shm_admin_locked(l, s, h, key, len, op, def, ovr, now);
        /* -EAGAIN with the lock ours: a dead writer's frozen entry (or a
         * corrupt file); have the file repaired (on unlock) */
        if (rc == -EAGAIN)
            sl_store_rel(&m->hdr->repair, 1);
        sl_shm_unlock(l, s);
    }
    if (ovr != NULL)
        sl_policy_discard(ovr); /* deciders compile their own from the file */
    sl_epoch_end(t);
    return rc;
}

int sl_shm_reset(struct sluice *l, const void *key, size_t len)
{
    return sl_shm_admin(l, key, len, SL_RESET, NULL);
}

int sl_shm_override_set(struct sluice *l, const void *key, size_t len,
                        const struct sluice_policy *p)
{
    return sl_shm_admin(l, key, len, SL_OVR_SET, p);
}

int sl_shm_override_clear(struct sluice *l, const void *key, size_t len)
{
    return sl_shm_admin(l, key, len, SL_OVR_CLEAR, NULL);
}
