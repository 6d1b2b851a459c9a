/*
 * Shared limiters: the default policy by generation, and per-key override
 * policies.  The file holds two policy slots, each read by seqlock; every
 * process compiles the generations it meets (a small cache) and follows
 * the newest.  Overrides live in a fixed pool of slots, one per overridden
 * key, each read by seqlock on its tag; a process compiles each override
 * it meets once (a cache entry per slot, checked against the tag).  Below the
 * file's life cycle (shm_file.c) and above nothing shared, so the epoch,
 * the table and the whole-file operations can all read policies.
 */
#include <pthread.h>
#include <string.h>

#include "shm.h"

void sl_shm_policy_words(const struct sluice_policy *p, uint64_t *w)
{
    memset(w, 0, SL_SHM_POL_WORDS * sizeof(uint64_t));
    memcpy(w, p, sizeof(*p));
}

/* A policy stored in the file (a generation's slot, an override slot), by
 * seqlock on its tag word: false if the tag is not `want` before and after
 * the words are read (another policy, or being written). */
static bool sl_shm_seq_read(sl_aword *tag, uint64_t want, sl_aword *words,
                            struct sluice_policy *out)
{
    uint64_t w[SL_SHM_POL_WORDS];

    if (sl_load_acq(tag) != want)
        return false;
    /* acquire: each word before the second look (no fences: TSan) */
    for (size_t i = 0; i < SL_SHM_POL_WORDS; i++)
        w[i] = sl_load_acq(&words[i]);
    if (sl_load_rlx(tag) != want)
        return false;
    memcpy(out, w, sizeof(*out));
    return true;
}

bool sl_shm_polslot_read(struct sl_shm_hdr *h, uint64_t gen, struct sluice_policy *out)
{
    struct sl_shm_polslot *s = &h->pol[gen & 1];

    return gen != 0 && sl_shm_seq_read(&s->gen, gen, s->words, out);
}

/* Under pol_lock (or before the file is linked). */
void sl_shm_polslot_write(struct sl_shm_hdr *h, uint64_t gen, const struct sluice_policy *p)
{
    struct sl_shm_polslot *s = &h->pol[gen & 1];
    uint64_t w[SL_SHM_POL_WORDS];

    sl_shm_policy_words(p, w);
    sl_store_rlx(&s->gen, 0);
    /* release: a reader that sees any new word sees the 0 before it */
    for (size_t i = 0; i < SL_SHM_POL_WORDS; i++)
        sl_store_rel(&s->words[i], w[i]);
    sl_store_rel(&s->gen, gen);
}

/* The policies a shared limiter can hold: every algorithm, in the state
 * words every entry of the file has (a sliding log's writers are known by
 * process, so a killed one holds no key for long: sl_shm_policy_bind). */
int sl_shm_policy_check(const struct sluice_policy *def, uint64_t words,
                               struct sl_policy **out)
{
    struct sl_policy *p;
    int rc;

    if (def->nlimits == 0 || def->nlimits > SLUICE_MAX_LIMITS)
        return -EINVAL;
    if ((rc = sl_policy_new(def, false, &p)) < 0)
        return rc;
    if (words != 0 && p->nwords > words) {
        sl_policy_discard(p);
        return -EINVAL;
    }
    *out = p;
    return 0;
}

static bool sl_shm_ovr_read(struct sl_shm *m, uint64_t tag, struct sluice_policy *out)
{
    struct sl_shm_ovr *o = &m->ovr[(tag & UINT32_MAX) % m->novr];

    return sl_shm_seq_read(&o->tag, tag, o->words, out);
}

static struct sl_policy *sl_shm_ovr_policy(struct sluice *l, uint64_t tag)
{
    struct sl_shm *m = l->shm;
    uint64_t idx = tag & UINT32_MAX;
    struct sl_policy *p, *old;
    struct sluice_policy def;

    if (idx >= m->novr)
        return NULL; /* a corrupt file */
    /* acquire: the compiled policy published below */
    p = atomic_load_explicit(&m->ovr_cache[idx], memory_order_acquire);
    if (p != NULL && p->shm_ref == tag)
        return p;
    pthread_mutex_lock(&m->mu);
    old = atomic_load_explicit(&m->ovr_cache[idx], memory_order_relaxed);
    p = old != NULL && old->shm_ref == tag ? old : NULL;
    if (p == NULL && sl_shm_ovr_read(m, tag, &def) &&
        sl_shm_policy_check(&def, m->words, &p) == 0) {
        p->shm_ref = tag;
        p->is_override = true;
        sl_shm_policy_bind(m, p);
        atomic_store_explicit(&m->ovr_cache[idx], p, memory_order_release);
        if (old != NULL)
            sl_policy_unref(old); /* retired: callers hold ck sections */
    }
    pthread_mutex_unlock(&m->mu);
    return p;
}

uint64_t sl_shm_ovr_new(struct sl_shm *m, const struct sluice_policy *def)
{
    struct sl_shm_hdr *h = m->hdr;
    uint64_t w[SL_SHM_POL_WORDS], start = sl_load_rlx(&h->ovr_cursor) % m->novr;

    sl_shm_policy_words(def, w);
    for (uint64_t n = 0; n < m->novr; n++) {
        uint64_t i = (start + n) % m->novr, cur = 0, serial, tag;
        struct sl_shm_ovr *o = &m->ovr[i];
        if (sl_load_rlx(&o->tag) != 0 || !sl_cas_acqrel(&o->tag, &cur, SL_SHM_OVR_BUSY))
            continue;
        serial = (atomic_fetch_add_explicit(&h->ovr_serial, 1, memory_order_relaxed) + 1) &
                 ((SL_SHM_OVR - 1) >> 32);
        tag = SL_SHM_OVR | ((serial == 0 ? 1 : serial) << 32) | i;
        /* release: a reader that sees any new word sees BUSY before it */
        for (size_t k = 0; k < SL_SHM_POL_WORDS; k++)
            sl_store_rel(&o->words[k], w[k]);
        sl_store_rel(&o->tag, tag);
        sl_store_rlx(&h->ovr_cursor, i + 1); /* a hint */
        return tag;
    }
    return 0;
}

void sl_shm_ovr_free(struct sl_shm *m, uint64_t tag)
{
    uint64_t idx = tag & UINT32_MAX;

    /* CAS: only the slot still holding that override (never another's) */
    if (idx < m->novr)
        (void)sl_cas_acqrel(&m->ovr[idx].tag, &tag, 0);
}

struct sl_policy *sl_shm_policy(struct sluice *l, uint64_t gen)
{
    struct sl_shm *m = l->shm;
    struct sl_policy *cur = atomic_load_explicit(&l->policy, memory_order_acquire), *p = NULL;
    struct sluice_policy def;

    if (cur->shm_ref == gen)
        return cur;
    if (sl_shm_is_ovr(gen))
        return sl_shm_ovr_policy(l, gen);
    pthread_mutex_lock(&m->mu);
    for (unsigned i = 0; i < 4 && p == NULL; i++)
        if (m->cache[i] != NULL && m->cache[i]->shm_ref == gen)
            p = m->cache[i];
    if (p == NULL && sl_shm_polslot_read(m->hdr, gen, &def) &&
        sl_shm_policy_check(&def, m->words, &p) == 0) {
        p->shm_ref = gen;
        sl_shm_policy_bind(m, p);
        if (m->cache[m->cache_next] != NULL)
            sl_policy_unref(m->cache[m->cache_next]); /* retired: callers hold ck sections */
        m->cache[m->cache_next] = p;
        m->cache_next = (m->cache_next + 1) % 4;
    }
    pthread_mutex_unlock(&m->mu);
    return p;
}

void sl_shm_refresh(struct sluice *l)
{
    uint64_t gen = sl_load_acq(l->shm_gen);
    struct sl_policy *p = sl_shm_policy(l, gen), *old;

    if (p == NULL || p->shm_ref != gen)
        return; /* moved on meanwhile: the next section looks again */
    pthread_mutex_lock(&l->shm->mu);
    old = atomic_load_explicit(&l->policy, memory_order_relaxed);
    /* only forward: a slower refresher never puts back an older generation */
    if ((int64_t)(gen - old->shm_ref) > 0 && sl_policy_tryref(p)) {
        atomic_store_explicit(&l->policy, p, memory_order_release);
        sl_policy_unref(old);
    }
    pthread_mutex_unlock(&l->shm->mu);
}

int sl_shm_write_policy(struct sluice *l, uint64_t gen, const struct sluice_policy *p)
{
    struct sl_policy *pol;
    int rc = sl_shm_policy_check(p, l->shm->words, &pol);

    if (rc < 0)
        return rc;
    sl_policy_discard(pol);
    sl_shm_polslot_write(l->shm->hdr, gen, p);
    return 0;
}
