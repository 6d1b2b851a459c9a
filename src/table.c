/*
 * The key table: 2^k shards, each a ck_hs in SPMC mode (one writer at a
 * time, any number of lock-free readers) behind a per-shard mutex that only
 * writers take.  ck_hs was chosen over a hand-made table: it is a tuned
 * open-addressing set whose readers never block, packs 16 hash bits into
 * each slot pointer so misses rarely touch an entry, and frees grown maps
 * through our ck_malloc, i.e. through the epoch.
 *
 * Entries are one cache-line-aligned allocation: header, state words, key.
 * Their policy pointer never changes: a policy change, an override or a
 * reset builds a new entry, freezes the old one (so no charge can land on
 * it), carries its state over and swaps it in.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SL_SHARD_INITIAL 64

_Static_assert(sizeof(unsigned long) >= sizeof(void *), "ck_hs seed carries a pointer");

/*
 * Slots hold tagged entry pointers: 15 bits of the key's hash above bit 48
 * (bit 63 says the tag is there).  ck_hs never dereferences what it stores
 * (only our callbacks do), and Debian's ck is built without its own pointer
 * packing, so without the tag every occupied slot of a probed cache line
 * would cost a cache miss on its entry.  With it, a lookup touches the slot
 * line and the matching entry only.  Pointers with any of the top 16 bits
 * set (not seen on Linux user space) are stored untagged and compared in full.
 */
#define SL_TAG_SHIFT 48
#define SL_TAG_FLAG (UINT64_C(1) << 63)

static uintptr_t sl_tag_of(uint64_t h)
{
    return (uintptr_t)(SL_TAG_FLAG | ((h >> 49) << SL_TAG_SHIFT));
}

static void *sl_slot_make(struct sl_entry *e, uint64_t h)
{
    uintptr_t p = (uintptr_t)e;

    return (void *)(p >> SL_TAG_SHIFT ? p : p | sl_tag_of(h));
}

static struct sl_entry *sl_slot_entry(const void *slot)
{
    uintptr_t v = (uintptr_t)slot;

    return (struct sl_entry *)(v & SL_TAG_FLAG ? v & ((UINT64_C(1) << SL_TAG_SHIFT) - 1) : v);
}

/* False when both tags are known and differ: certainly another key. */
static bool sl_tags_may_match(uintptr_t stored, uintptr_t tag)
{
    return !(stored & SL_TAG_FLAG) || (stored >> SL_TAG_SHIFT) == (tag >> SL_TAG_SHIFT);
}

static unsigned long sl_hs_hash(const void *slot, unsigned long seed)
{
    const struct sl_entry *e = sl_slot_entry(slot);

    return sl_hash((const struct sl_hkey *)seed, sl_entry_key(e), e->key_len);
}

static bool sl_key_equal(const struct sl_entry *e, const void *key, size_t len)
{
    SL_TSAN_ACQUIRE(e); /* every entry ck_hs shows us was published */
    return e->key_len == len && memcmp(sl_entry_key(e), key, len) == 0;
}

/* a is always a stored slot; b is a lookup probe, or a slot being put. */
static bool sl_hs_compare(const void *a, const void *b)
{
    uintptr_t stored = (uintptr_t)a, other = (uintptr_t)b;
    const struct sl_probe *p = b;
    const struct sl_entry *f;

    if (!(other & SL_TAG_FLAG) && p->tag == SL_PROBE_TAG) {
        if (!sl_tags_may_match(stored, sl_tag_of(p->hash)))
            return false;
        return sl_key_equal(sl_slot_entry(a), p->key, p->len);
    }
    if (!sl_tags_may_match(stored, other) && (other & SL_TAG_FLAG))
        return false;
    f = sl_slot_entry(b);
    return sl_key_equal(sl_slot_entry(a), sl_entry_key(f), f->key_len);
}

int sl_table_init(struct sluice *l, unsigned nshards)
{
    l->shards = sl_alloc_aligned(&l->memory, nshards * sizeof(*l->shards));
    if (l->shards == NULL)
        return -ENOMEM;
    l->nshards = nshards;
    l->shard_shift = 64 - sl_bits(nshards - 1);
    for (unsigned i = 0; i < nshards; i++) {
        struct sl_shard *s = &l->shards[i];
        memset(s, 0, sizeof(*s));
        s->owner = l;
        pthread_mutex_init(&s->lock, NULL);
        sl_ck_account_to(&l->memory);
        if (!ck_hs_init(&s->hs, CK_HS_MODE_DIRECT | CK_HS_MODE_SPMC | CK_HS_MODE_DELETE,
                        sl_hs_hash, sl_hs_compare, &sl_ck_allocator, SL_SHARD_INITIAL,
                        (unsigned long)&l->hkey)) {
            sl_ck_account_to(NULL);
            pthread_mutex_destroy(&s->lock);
            l->nshards = i;
            sl_table_destroy(l);
            return -ENOMEM;
        }
        sl_ck_account_to(NULL);
    }
    return 0;
}

/* Not concurrent with anything (sluice_destroy). */
void sl_table_destroy(struct sluice *l)
{
    for (unsigned i = 0; i < l->nshards; i++) {
        struct sl_shard *s = &l->shards[i];
        ck_hs_iterator_t it = CK_HS_ITERATOR_INITIALIZER;
        void *obj;

        while (ck_hs_next(&s->hs, &it, &obj))
            sl_entry_free(l->arena, sl_slot_entry(obj));
        sl_ck_account_to(&l->memory);
        ck_hs_destroy(&s->hs);
        sl_ck_account_to(NULL);
        pthread_mutex_destroy(&s->lock);
    }
    sl_free(&l->memory, l->shards, l->nshards * sizeof(*l->shards));
    l->shards = NULL;
}

struct sl_shard *sl_shard_of(struct sluice *l, uint64_t h)
{
    return &l->shards[l->shard_shift == 64 ? 0 : h >> l->shard_shift];
}

struct sl_entry *sl_table_get(struct sl_shard *s, uint64_t h, const void *key, size_t len)
{
    struct sl_probe probe = {.tag = SL_PROBE_TAG, .key = key, .len = len, .hash = h};
    struct sl_entry *e = sl_slot_entry(ck_hs_get(&s->hs, h, &probe));

    if (e != NULL)
        SL_TSAN_ACQUIRE(e);
    return e;
}

void sl_shard_lock(struct sl_shard *s)
{
    pthread_mutex_lock(&s->lock);
    sl_ck_account_to(&s->owner->memory);
}

void sl_shard_unlock(struct sl_shard *s)
{
    sl_ck_account_to(NULL);
    pthread_mutex_unlock(&s->lock);
}

int sl_table_insert_locked(struct sl_shard *s, uint64_t h, struct sl_entry *e)
{
    SL_TSAN_RELEASE(e);
    return ck_hs_put_unique(&s->hs, h, sl_slot_make(e, h)) ? 0 : -ENOMEM;
}

int sl_table_replace_locked(struct sl_shard *s, uint64_t h, struct sl_entry *old,
                            struct sl_entry *repl)
{
    void *prev = NULL;

    SL_TSAN_RELEASE(repl);
    if (!ck_hs_set(&s->hs, h, sl_slot_make(repl, h), &prev))
        return -ENOMEM;
    return sl_slot_entry(prev) == old ? 0 : -EINVAL;
}

/* ---- entries --------------------------------------------------------- */

size_t sl_entry_size(const struct sl_policy *pol, size_t len)
{
    return sizeof(struct sl_entry) + pol->nwords * sizeof(sl_aword) + len;
}

/* What the arena accounts per entry: nothing for slab blocks (the slab is
 * accounted), the padded size for large ones. */
size_t sl_entry_footprint(const struct sl_policy *pol, size_t len)
{
    size_t size = sl_entry_size(pol, len);

    if (sl_arena_class(size) >= 0)
        return 0;
    return (size + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1);
}

/* Takes a reference on pol; the words start fresh (all zero). */
int sl_entry_new(struct sluice *l, struct sl_policy *pol, const void *key, size_t len,
                 struct sl_entry **out)
{
    size_t size = sl_entry_size(pol, len);
    struct sl_entry *e;

    if (!sl_policy_tryref(pol))
        return -EAGAIN;
    e = sl_arena_alloc(l->arena, size);
    if (e == NULL) {
        sl_policy_unref(pol);
        return -ENOMEM;
    }
    memset(e, 0, size);
    e->key_len = (uint32_t)len;
    e->pol = pol;
    if (len != 0)
        memcpy((unsigned char *)&e->w[pol->nwords], key, len);
    *out = e;
    return 0;
}

void sl_entry_discard(struct sluice *l, struct sl_entry *e)
{
    sl_unaccount(&l->memory, sl_entry_footprint(e->pol, e->key_len));
    sl_entry_free(l->arena, e);
}

/* Unaccounted already (at retirement) or by the caller. */
void sl_entry_free(struct sl_arena *a, struct sl_entry *e)
{
    struct sl_policy *pol = e->pol;

    sl_arena_free(a, e, sl_entry_size(pol, e->key_len));
    sl_policy_unref(pol);
}

bool sl_entry_freeze(struct sl_entry *e)
{
    const struct sl_policy *pol = e->pol;

    if (sl_load_acq(&e->w[pol->lim[0].off]) & SL_DEAD)
        return false;
    for (unsigned i = 0; i < pol->nlimits; i++)
        pol->lim[i].ops->freeze(&e->w[pol->lim[i].off]);
    return true;
}

bool sl_entry_is_frozen(struct sl_entry *e)
{
    return (sl_load_acq(&e->w[e->pol->lim[0].off]) & SL_DEAD) != 0;
}

/*
 * Freeze limit by limit, each from a value that is fresh at `now`, by CAS:
 * a charge landing first makes the CAS fail.  On any failure the limits
 * frozen so far get their exact old values back (nobody else writes a
 * frozen word), and chargers that saw them frozen retry.
 */
bool sl_entry_freeze_if_idle(struct sl_entry *e, uint64_t now, uint64_t idle_ttl)
{
    const struct sl_policy *pol = e->pol;
    uint64_t old[SLUICE_MAX_LIMITS];
    unsigned i;

    if (pol->is_override)
        return false;
    if (idle_ttl != 0 && sl_sat_add(sl_load_rlx(&e->last_ns), idle_ttl) > now)
        return false;
    for (i = 0; i < pol->nlimits; i++) {
        const struct sl_lim *lim = &pol->lim[i];
        sl_aword *w = &e->w[lim->off];
        old[i] = sl_load_acq(w);
        if ((old[i] & SL_DEAD) || !lim->ops->is_fresh(lim, old[i], w, now) ||
            !sl_cas_acqrel(w, &old[i], old[i] | SL_DEAD))
            break;
    }
    if (i == pol->nlimits)
        return true;
    while (i-- > 0)
        sl_store_rel(&e->w[pol->lim[i].off], old[i]);
    return false;
}

/* Reap one shard (locked by the caller); at most `budget` removals. */
size_t sl_table_reap_shard(struct sl_shard *s, uint64_t now, uint64_t idle_ttl, size_t budget)
{
    struct sluice *l = s->owner;
    struct sl_thread *t = sl_thread_get();
    ck_hs_iterator_t it = CK_HS_ITERATOR_INITIALIZER;
    struct sl_limbo *batch = NULL;
    size_t removed = 0;
    void *obj;

    if (t == NULL)
        return 0;
    while (removed < budget && ck_hs_next(&s->hs, &it, &obj)) {
        struct sl_entry *e = sl_slot_entry(obj);
        if (batch == NULL || sl_limbo_full(batch)) {
            if (batch != NULL)
                sl_limbo_retire(t, batch);
            if ((batch = sl_limbo_new(l, 256)) == NULL)
                break; /* out of memory: reap the rest next time */
        }
        if (!sl_entry_freeze_if_idle(e, now, idle_ttl))
            continue;
        ck_hs_remove(&s->hs, sl_hs_hash(obj, (unsigned long)&l->hkey), obj);
        sl_unaccount(&l->memory, sl_entry_footprint(e->pol, e->key_len));
        sl_limbo_add(batch, e);
        removed++;
    }
    if (batch != NULL)
        sl_limbo_retire(t, batch);
    if (removed != 0) {
        sl_uncount(&l->nkeys, removed);
        sl_count(&l->reaped, removed);
    }
    return removed;
}
