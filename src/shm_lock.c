/*
 * Shared limiters: the shard locks, and the repair of what a writer killed
 * while holding one left behind.
 *
 * A shard's lock is a word holding its owner's token (sl_shm_word_lock).
 * A process killed inside a writer section leaves at worst: a counter off,
 * an allocated entry never published, a published entry frozen (its time
 * sealed), an array's retirement epoch unknown.  The next locker finds the
 * owner dead, takes the lock over and marks the file for repair; once it
 * holds no shard lock it repairs it (sl_shm_reconcile): with every shard
 * lock held no writer is half way, so the counters are recounted from the
 * slots, frozen published entries are thawed (a live writer never leaves
 * one), and allocated entries no slot refers to are retired.
 */
#include <stdlib.h>
#include <time.h>

#include "shm.h"

static _Thread_local unsigned sl_shm_depth; /* shard locks this thread holds */

/* Waiting for other processes' sections to end (never in one, never
 * holding a shard lock): sleep rather than spin, they may need our CPU. */
void sl_shm_nap(long us)
{
    struct timespec ts = {0, us * 1000};

    nanosleep(&ts, NULL);
}

/*
 * A dead holder may have sealed the last_ns of a published entry (its
 * freeze is thawed later, by the repair).  Give it back now, before this
 * holder seals anything and overwrites the saved value; only if it is
 * still published in this shard (only this shard's holder seals its
 * entries, so a sealed one here is the dead holder's).  Rare: a scan.
 */
static void sl_shm_unseal_dead(struct sl_shm *m, struct sl_shm_shard *s)
{
    uint64_t si = sl_load_rlx(&s->sealed_idx);
    struct sl_entry *e = si != 0 && si - 1 < m->pool ? sl_shm_entry(m, si - 1) : NULL;

    if (e != NULL && sl_load_acq(&e->last_ns) == SL_LAST_SEALED) {
        sl_aword *a = sl_shm_array(m, s, sl_load_rlx(&s->cur));
        for (uint64_t j = 0; j < m->nslots; j++)
            if (sl_slot_entry(m, sl_load_rlx(&a[j])) == e) {
                sl_last_unseal(&e->last_ns, sl_last_sane(sl_load_rlx(&s->sealed_last)));
                break;
            }
    }
    sl_store_rlx(&s->sealed_idx, 0);
}

static void sl_shm_locked(struct sl_shm *m, struct sl_shm_shard *s, int rc)
{
    /* rc 1: its holder died inside a writer section: usable at once,
     * repaired as soon as this thread holds no shard (sl_unlock) */
    if (rc == 1) {
        sl_shm_unseal_dead(m, s);
        sl_store_rel(&m->hdr->repair, 1);
    }
    sl_shm_depth++;
}

sl_aword *sl_shm_seal_save(struct sl_shm *m, struct sl_shm_shard *s, const struct sl_entry *e)
{
    sl_store_rlx(&s->sealed_idx, sl_shm_entry_index(m, e) + 1);
    return &s->sealed_last;
}

void sl_shm_lock(struct sluice *l, struct sl_shm_shard *s)
{
    sl_shm_locked(l->shm, s, sl_shm_word_lock(l, &s->lock, true));
}

bool sl_shm_trylock(struct sluice *l, struct sl_shm_shard *s)
{
    int rc = sl_shm_word_lock(l, &s->lock, false);

    if (rc < 0)
        return false;
    sl_shm_locked(l->shm, s, rc);
    return true;
}

void sl_shm_release(struct sl_shm_shard *s)
{
    sl_store_rlx(&s->sealed_idx, 0); /* whatever it sealed is settled */
    sl_shm_word_unlock(&s->lock);
    sl_shm_depth--;
}

void sl_shm_unlock(struct sluice *l, struct sl_shm_shard *s)
{
    sl_shm_release(s);
    if (sl_shm_depth == 0 && sl_load_acq(&l->shm->hdr->repair) != 0)
        sl_shm_reconcile(l);
}

/* Thaw a published entry a dead writer froze (every shard locked), its
 * last_ns first if the writer had sealed it (sl_last_unseal). */
static void sl_shm_thaw(struct sluice *l, struct sl_shm_shard *s, struct sl_entry *e)
{
    const struct sl_policy *pol = sl_shm_policy(l, e->polref);

    if (sl_load_acq(&e->last_ns) == SL_LAST_SEALED)
        sl_last_unseal(&e->last_ns, sl_last_sane(sl_load_rlx(&s->sealed_last)));

    if (pol != NULL)
        sl_entry_thaw_pol(e, pol);
}

void sl_shm_reconcile(struct sluice *l)
{
    struct sl_shm *m = l->shm;
    struct sl_thread *t = sl_thread_get();
    unsigned char *seen = calloc(m->pool / 8 + 1, 1);
    uint64_t *named = calloc(m->novr, sizeof(*named)); /* the tag an entry names, per slot */
    uint64_t keys = 0, ovr_keys = 0, ep;

    if (t != NULL)
        sl_epoch_begin(t);
    for (unsigned i = 0; i < l->nshards; i++)
        sl_shm_lock(l, &m->shards[i]);
    sl_store_rlx(&m->hdr->repair, 0);
    ep = atomic_load_explicit(&m->hdr->epoch, memory_order_seq_cst);
    for (unsigned i = 0; i < l->nshards; i++) {
        struct sl_shm_shard *s = &m->shards[i];
        sl_aword *a = sl_shm_array(m, s, sl_load_rlx(&s->cur));
        uint64_t live = 0, used = 0;
        for (unsigned k = 0; k < 2; k++)
            if (sl_load_rlx(&s->retired[k]) == UINT64_MAX)
                sl_store_rlx(&s->retired[k], ep);
        for (uint64_t j = 0; j < m->nslots; j++) {
            uint64_t v = sl_load_rlx(&a[j]), idx = (v & SL_IDX_MASK) - 2;
            struct sl_entry *e = sl_slot_entry(m, v);
            used += v != 0;
            if (e == NULL)
                continue;
            live++;
            if (seen != NULL)
                seen[idx / 8] |= (unsigned char)(1u << (idx % 8));
            if (named != NULL && sl_shm_is_ovr(e->polref) && (e->polref & UINT32_MAX) < m->novr)
                named[e->polref & UINT32_MAX] = e->polref;
            ovr_keys += sl_shm_is_ovr(e->polref);
            sl_shm_thaw(l, s, e);
        }
        sl_store_rlx(&s->live, live);
        sl_store_rlx(&s->used, used);
        keys += live;
    }
    sl_store_rlx(&m->hdr->nkeys, keys);
    sl_store_rlx(&m->hdr->ovr_keys, ovr_keys);
    for (uint64_t idx = 0; seen != NULL && idx < m->pool; idx++)
        if (!(seen[idx / 8] & (1u << (idx % 8))) && sl_load_acq(&m->states[idx]) == SL_ST_USED)
            sl_shm_retire(m, idx); /* allocated by a dead writer, never published */
    /* override slots only a dead writer's half-done set or clear holds
     * (allocated, or left behind, under a shard lock: none is half way) */
    for (uint64_t i = 0; named != NULL && i < m->novr; i++) {
        uint64_t tag = sl_load_acq(&m->ovr[i].tag);
        if (tag != 0 && tag != named[i])
            sl_store_rel(&m->ovr[i].tag, 0);
    }
    for (unsigned i = l->nshards; i-- > 0;)
        sl_shm_release(&m->shards[i]);
    if (t != NULL)
        sl_epoch_end(t);
    free(seen);
    free(named);
}
