/*
 * Shared limiters: creating, checking and attaching the file, and the
 * default policy by generation.
 *
 * A file is built whole under no name (O_TMPFILE, or a temporary name) and
 * then linked at its path, so an attacher never sees a half-made one and
 * two creators race only on link(2): exactly one wins.  Attaching trusts
 * nothing it has not checked: magic, layout version, a checksum of the
 * immutable header, every size recomputed from the configuration and
 * compared with the file's, the current policy compiled.  Anything else
 * in the file (slots, entry states, counters) is bounds-checked where it
 * is used, so a corrupt file fails calls, never crashes or hangs them.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm.h"

#define SL_SHM_MAX_KEYS (UINT64_C(1) << 31)
#define SL_SHM_MAX_WORDS (UINT64_C(1) << 20)

/* sluice.h and sluice_open_shared(3) state the size of an override */
_Static_assert(sizeof(struct sl_shm_ovr) == 464, "an override slot is documented as 464 bytes");

static uint64_t sl_fnv(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = UINT64_C(0xcbf29ce484222325);

    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * UINT64_C(0x100000001b3);
    return h;
}

static uint64_t sl_hdr_check(const struct sl_shm_hdr *h)
{
    return sl_fnv(h, offsetof(struct sl_shm_hdr, check));
}

static uint64_t sl_isqrt(uint64_t v)
{
    uint64_t r = 0;

    while ((r + 1) * (r + 1) <= v)
        r++;
    return r;
}

/* Derived sizes: entries for max_keys plus room for the retired ones
 * waiting for their grace period; per shard, two arrays (readers probe the
 * current one while a writer rebuilds the other) of twice the keys a shard
 * gets with high probability (random hash key: mean plus 4 sigma); one
 * override policy per key up to SL_SHM_OVR_MAX (a slot is as large as a
 * struct sluice_policy: every key overridden at 2^20 keys would need
 * 464 MiB), and one per shard: a key's new override is written before its
 * old one is freed, under the shard lock, so changing an override never
 * fails for want of a slot. */
static void sl_derive(uint64_t max_keys, uint64_t max_key_len, uint64_t nshards, uint64_t words,
                      uint64_t *pool, uint64_t *slots, uint64_t *esize, uint64_t *novr)
{
    uint64_t per = (max_keys + nshards - 1) / nshards, want = 2 * (per + 4 * sl_isqrt(per) + 16);

    *pool = 2 * max_keys + 64;
    *novr = sl_min64(max_keys, SL_SHM_OVR_MAX) + nshards;
    *slots = 64;
    while (*slots < want)
        *slots <<= 1;
    *esize = (sizeof(struct sl_entry) + words * sizeof(sl_aword) + max_key_len + SL_CACHELINE - 1) &
             ~(uint64_t)(SL_CACHELINE - 1);
}

static size_t sl_up(size_t v) { return (v + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1); }

int sl_shm_layout(const struct sl_shm_hdr *h, struct sl_shm_layout *o)
{
    uint64_t pool, slots, esize, novr;
    sl_u128 end;

    if (h->max_keys == 0 || h->max_keys > SL_SHM_MAX_KEYS || h->max_key_len == 0 ||
        h->max_key_len > (UINT64_C(1) << 30) || h->nshards == 0 || h->nshards > 4096 ||
        (h->nshards & (h->nshards - 1)) != 0 || h->words < SL_SHM_MIN_WORDS ||
        h->words > SL_SHM_MAX_WORDS || h->when_full > SLUICE_FULL_ALLOW ||
        h->clock > SLUICE_CLOCK_TSC)
        return -EPROTO;
    sl_derive(h->max_keys, h->max_key_len, h->nshards, h->words, &pool, &slots, &esize, &novr);
    if (h->pool != pool || h->slots != slots || h->esize != esize || h->novr != novr)
        return -EPROTO;
    o->procs = sl_up(sizeof(struct sl_shm_hdr));
    o->shards = o->procs + SL_SHM_PROCS * sizeof(struct sl_shm_proc);
    o->slots = o->shards + h->nshards * sizeof(struct sl_shm_shard);
    o->ovr = sl_up(o->slots + h->nshards * 2 * slots * sizeof(sl_aword));
    o->states = sl_up(o->ovr + novr * sizeof(struct sl_shm_ovr));
    o->entries = sl_up(o->states + pool * sizeof(sl_aword));
    end = (sl_u128)o->entries + (sl_u128)pool * esize;
    if (end > (sl_u128)(SIZE_MAX / 2))
        return -EPROTO;
    o->size = (size_t)end;
    return 0;
}

/* Fill a new file (private until linked). */
static int sl_shm_init(unsigned char *base, const struct sl_shm_hdr *proto,
                       const struct sl_shm_layout *lay, const struct sluice_policy *pol)
{
    struct sl_shm_hdr *h = (struct sl_shm_hdr *)(void *)base;

    (void)lay; /* ftruncate zeroed the rest: every lock free, every slot empty */
    memcpy(h, proto, offsetof(struct sl_shm_hdr, check));
    sl_shm_polslot_write(h, 1, pol);
    sl_store_rlx(&h->pol_gen, 1);
    sl_store_rlx(&h->migrated, 1);
    sl_store_rlx(&h->epoch, 2);
    h->check = sl_hdr_check(h);
    return 0;
}

static int sl_shm_create(const char *path, const struct sluice_config *cfg, int *fd_out)
{
    struct sl_shm_hdr proto;
    struct sl_shm_layout lay;
    struct sl_policy *pol;
    char tmp[4096], proc[64];
    const char *name = cfg->name != NULL ? cfg->name : "default";
    unsigned char *base;
    int fd, rc;
    bool named = false;

    if ((rc = sl_shm_policy_check(&cfg->policy, 0, &pol)) < 0)
        return rc;
    memset(&proto, 0, sizeof(proto));
    proto.magic = SL_SHM_MAGIC;
    proto.layout = SL_SHM_LAYOUT;
    proto.max_keys = cfg->max_keys;
    proto.max_key_len = cfg->max_key_len;
    proto.nshards = sl_shard_count(cfg->shards);
    proto.idle_ttl_ns = cfg->idle_ttl_ns;
    proto.when_full = (uint64_t)cfg->when_full;
    proto.clock = (uint64_t)cfg->clock;
    proto.words = sl_max64(pol->nwords, SL_SHM_MIN_WORDS);
    sl_policy_discard(pol);
    sl_derive(proto.max_keys, proto.max_key_len, proto.nshards, proto.words, &proto.pool,
              &proto.slots, &proto.esize, &proto.novr);
    sl_random_bytes(proto.hkey, sizeof(proto.hkey));
    if (strlen(name) >= SL_SHM_NAME || cfg->max_keys > SL_SHM_MAX_KEYS)
        return -EINVAL;
    strcpy(proto.name, name);
    sl_shm_policy_words(&cfg->policy, proto.create_pol);
    if (sl_shm_layout(&proto, &lay) < 0)
        return -EINVAL; /* nothing mappable */
    proto.size = lay.size;

    /* Made under no name, then linked: nobody sees it half made. */
    {
        size_t n = strlen(path);
        const char *slash = strrchr(path, '/');
        if (n + 16 > sizeof(tmp))
            return -EINVAL;
        if (slash == NULL)
            strcpy(tmp, ".");
        else if (slash == path)
            strcpy(tmp, "/");
        else
            snprintf(tmp, sizeof(tmp), "%.*s", (int)(slash - path), path);
    }
    fd = open(tmp, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
        if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
            return -errno;
        named = true;
    }
    rc = fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)lay.size) != 0 ? -errno : 0;
    if (rc == -ENOSPC || rc == -EFBIG)
        rc = -ENOMEM;
    if (rc == 0) {
        base = mmap(NULL, lay.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) {
            rc = -ENOMEM;
        } else {
            rc = sl_shm_init(base, &proto, &lay, &cfg->policy);
            munmap(base, lay.size);
        }
    }
    if (rc == 0 && named)
        rc = link(tmp, path) != 0 ? -errno : 0;
    else if (rc == 0) {
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        rc = linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0 ? -errno : 0;
    }
    if (named)
        unlink(tmp);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return 0;
}

/* Same policy: compared compiled (defaults filled in), limit by limit. */
static bool sl_same_policy(const struct sluice_policy *a, const struct sluice_policy *b)
{
    struct sl_policy *pa, *pb;
    bool same = false;

    if (sl_policy_new(a, false, &pa) < 0)
        return false;
    if (sl_policy_new(b, false, &pb) == 0) {
        same = pa->nlimits == pb->nlimits;
        for (unsigned i = 0; same && i < pa->nlimits; i++) {
            const struct sluice_limit *x = &pa->lim[i].def, *y = &pb->lim[i].def;
            same = x->algo == y->algo && x->count == y->count && x->period_ns == y->period_ns &&
                   x->burst == y->burst && x->precision_ns == y->precision_ns;
        }
        sl_policy_discard(pb);
    }
    sl_policy_discard(pa);
    return same;
}

/* Check the mapped header; 0 or -EPROTO. */
static int sl_shm_check(struct sl_shm_hdr *h, size_t size, struct sl_shm_layout *lay)
{
    struct sluice_policy def;
    struct sl_policy *p;

    if (size < sizeof(*h) || h->magic != SL_SHM_MAGIC || h->layout != SL_SHM_LAYOUT ||
        h->check != sl_hdr_check(h) || h->size != size || sl_shm_layout(h, lay) < 0 ||
        lay->size != size || memchr(h->name, '\0', SL_SHM_NAME) == NULL)
        return -EPROTO;
    memcpy(&def, h->create_pol, sizeof(def));
    if (sl_shm_policy_check(&def, h->words, &p) < 0)
        return -EPROTO;
    sl_policy_discard(p);
    return 0;
}

static int sl_shm_attach(int fd, const struct sluice_config *cfg, struct sluice **out)
{
    struct sl_shm_layout lay;
    struct sl_shm_hdr *h;
    struct sl_shm *m;
    struct sluice *l;
    struct sluice_policy def;
    struct sl_policy *pol = NULL;
    struct stat st;
    unsigned char *base;
    sl_aword acct;
    int rc;

    if (fstat(fd, &st) != 0)
        return -errno;
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(struct sl_shm_hdr))
        return -EPROTO;
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return errno == EACCES ? -EACCES : -ENOMEM;
    h = (struct sl_shm_hdr *)(void *)base;
    rc = sl_shm_check(h, (size_t)st.st_size, &lay);
    if (rc == 0 && cfg != NULL) {
        memcpy(&def, h->create_pol, sizeof(def));
        if (cfg->max_keys != h->max_keys || cfg->max_key_len != h->max_key_len ||
            !sl_same_policy(&cfg->policy, &def))
            rc = -EEXIST;
    }
    if (rc == 0 && h->clock == SLUICE_CLOCK_CUSTOM && (cfg == NULL || cfg->clock_fn == NULL))
        rc = -EINVAL; /* each process brings its own clock_fn */
    if (rc == 0) {
        /* The current generation's slot is rewritten only two generations
         * on: a read that fails while pol_gen moves raced set_policy (look
         * again); one that fails while pol_gen stays is a corrupt file. */
        uint64_t gen, tries = 0;
        bool read;
        do {
            gen = sl_load_acq(&h->pol_gen);
            read = sl_shm_polslot_read(h, gen, &def);
        } while (!read && gen != sl_load_acq(&h->pol_gen) && ++tries < 100000);
        rc = read && sl_shm_policy_check(&def, h->words, &pol) == 0 ? 0 : -EPROTO;
        if (rc == 0)
            pol->shm_ref = gen;
    }
    atomic_init(&acct, 0);
    l = rc == 0 ? sl_alloc_aligned(&acct, sizeof(*l)) : NULL;
    m = l != NULL ? calloc(1, sizeof(*m)) : NULL;
    if (m != NULL && (m->ovr_cache = calloc(h->novr, sizeof(m->ovr_cache[0]))) == NULL) {
        free(m);
        m = NULL;
    }
    if (m == NULL) {
        if (pol != NULL)
            sl_policy_discard(pol);
        free(l);
        munmap(base, (size_t)st.st_size);
        return rc < 0 ? rc : -ENOMEM;
    }
    memset(l, 0, sizeof(*l));
    m->base = base;
    m->size = (size_t)st.st_size;
    m->dev = (uint64_t)st.st_dev;
    m->ino = (uint64_t)st.st_ino;
    m->hdr = h;
    m->procs = (struct sl_shm_proc *)(void *)(base + lay.procs);
    m->shards = (struct sl_shm_shard *)(void *)(base + lay.shards);
    m->slots = (sl_aword *)(void *)(base + lay.slots);
    m->states = (sl_aword *)(void *)(base + lay.states);
    m->ovr = (struct sl_shm_ovr *)(void *)(base + lay.ovr);
    m->novr = h->novr;
    m->ovr_max = sl_min64(h->max_keys, SL_SHM_OVR_MAX);
    m->entries = base + lay.entries;
    m->pool = h->pool;
    m->nslots = h->slots;
    m->words = h->words;
    m->esize = h->esize;
    m->shard_shift = 64 - sl_bits(h->nshards - 1);
    pthread_mutex_init(&m->mu, NULL);
    sl_shm_holder_init(m);
    sl_shm_maps_self(m);
    sl_shm_policy_bind(m, pol);
    l->shm = m;
    l->shm_gen = &h->pol_gen;
    sl_hkey_set(&l->hkey, h->hkey[0], h->hkey[1]);
    atomic_init(&l->policy, pol);
    atomic_init(&l->memory, m->size);
    l->max_keys = h->max_keys;
    l->max_key_len = h->max_key_len;
    l->idle_ttl_ns = h->idle_ttl_ns;
    l->when_full = (enum sluice_when_full)h->when_full;
    l->clock = sl_clock_resolve((enum sluice_clock)h->clock);
    l->nshards = (unsigned)h->nshards;
    l->shard_shift = m->shard_shift;
    if (cfg != NULL) {
        l->clock_fn = cfg->clock_fn;
        l->clock_ctx = cfg->clock_ctx;
        l->reap_interval_ns = cfg->reap_interval_ns;
    }
    l->name = strdup(h->name);
    rc = l->name == NULL ? -ENOMEM : sl_shm_register(l);
    if (rc == 0 && (rc = sl_reaper_start(l)) < 0)
        sl_shm_unregister(l);
    if (rc < 0) {
        l->reaper_running = false;
        sl_shm_detach(l);
        return rc;
    }
    sl_fork_track(l);
    *out = l;
    return 0;
}

int sluice_open_shared(const char *path, const struct sluice_config *cfg, unsigned flags,
                       sluice_t **out)
{
    bool create = flags & SLUICE_SHARED_CREATE, excl = flags & SLUICE_SHARED_EXCL;
    int rc = -ENOENT;

    if (path == NULL || out == NULL || (flags & ~3u) != 0 || (excl && !create) ||
        (create && cfg == NULL))
        return -EINVAL;
    if (cfg != NULL && (rc = sl_config_check(cfg)) < 0)
        return rc;
    if (cfg != NULL) {
        struct sl_policy *p;
        if ((rc = sl_shm_policy_check(&cfg->policy, 0, &p)) < 0)
            return rc;
        sl_policy_discard(p);
        if (cfg->max_keys > SL_SHM_MAX_KEYS ||
            strlen(cfg->name != NULL ? cfg->name : "default") >= SL_SHM_NAME)
            return -EINVAL;
    }
    /* Attach, or create and attach; a creator that loses the race to
     * another attaches to the winner's file (unless excl). */
    for (int tries = 0; tries < 8; tries++) {
        int fd = -1;
        if (!excl) {
            fd = open(path, O_RDWR | O_CLOEXEC);
            rc = fd < 0 ? -errno : 0;
        }
        if (excl || (rc == -ENOENT && create)) {
            struct stat st;
            rc = sl_shm_create(path, cfg, &fd);
            /* lost the race to another creator: attach to its file; but a
             * dangling symbolic link stays: never created through (as
             * open(2) with O_CREAT | O_EXCL) */
            if (rc == -EEXIST && !excl && !(lstat(path, &st) == 0 && S_ISLNK(st.st_mode) &&
                                             stat(path, &st) != 0 && errno == ENOENT))
                continue;
        }
        if (rc < 0)
            return rc == -EPERM ? -EACCES : rc;
        rc = sl_shm_attach(fd, cfg, out);
        close(fd); /* the mapping stays */
        return rc;
    }
    return rc;
}

int sluice_unlink_shared(const char *path)
{
    if (path == NULL)
        return -EINVAL;
    return unlink(path) != 0 ? -errno : 0;
}

void sl_shm_detach(struct sluice *l)
{
    struct sl_shm *m = l->shm;
    struct sl_thread *t = sl_thread_get();
    struct sl_policy *pol = atomic_load_explicit(&l->policy, memory_order_relaxed);

    sl_shm_unregister(l);
    if (t != NULL)
        sl_epoch_begin(t); /* policies are retired inside a section (ck) */
    for (unsigned i = 0; i < 4; i++)
        if (m->cache[i] != NULL)
            sl_policy_unref(m->cache[i]);
    for (uint64_t i = 0; i < m->novr; i++) {
        struct sl_policy *p = atomic_load_explicit(&m->ovr_cache[i], memory_order_relaxed);
        if (p != NULL)
            sl_policy_unref(p);
    }
    free(m->ovr_cache);
    if (pol != NULL)
        sl_policy_unref(pol);
    pthread_mutex_destroy(&m->mu);
    munmap(m->base, m->size);
    free(m);
    free(l->name);
    free(l);
    if (t != NULL) {
        sl_epoch_end(t);
        sl_epoch_drain(t);
    }
}
