/*
 * Limiter life cycle: configuration, creation, destruction, stats (the
 * reaper it starts and stops is reaper.c; its clock is clock.c).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"


/* The counters of a shared limiter (in its file) or of threads past the
 * owned slots (internal.h, sl_stat_add); out of line, off the hot path. */
void sl_stat_add_shared(struct sluice *l, const struct sl_thread *t, bool allowed)
{
    struct sl_stat_slot *slot = &l->stat[SL_STAT_SLOTS];

    if (l->shm != NULL)
        sl_shm_stat(l, t, allowed); /* host-wide counters, in the file */
    else
        sl_count(allowed ? &slot->allowed : &slot->denied, 1);
}

void sluice_config_init(struct sluice_config *cfg)
{
    if (cfg == NULL)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_keys = (size_t)1 << 20;
    cfg->max_key_len = 256;
    cfg->when_full = SLUICE_FULL_DENY;
    cfg->clock = SLUICE_CLOCK_MONOTONIC;
    cfg->name = "default";
}

int sluice_create(const struct sluice_config *cfg, sluice_t **out)
{
    struct sl_policy *pol;
    struct sluice *l;
    sl_aword acct;
    int rc;

    if (cfg == NULL || out == NULL)
        return -EINVAL;
    rc = sl_config_check(cfg);
    if (rc < 0)
        return rc;
    rc = sl_policy_new(&cfg->policy, false, &pol);
    if (rc < 0)
        return rc;
    sl_policy_follow(pol, NULL);
    atomic_init(&acct, 0);
    l = sl_alloc_aligned(&acct, sizeof(*l));
    if (l == NULL) {
        sl_policy_discard(pol);
        return -ENOMEM;
    }
    memset(l, 0, sizeof(*l));
    atomic_init(&l->memory, sl_load_rlx(&acct));
    {
        uint64_t r[2];
        sl_random_bytes(r, sizeof(r));
        sl_hkey_set(&l->hkey, r[0], r[1]);
    }
    atomic_init(&l->policy, pol);
    l->max_keys = cfg->max_keys;
    l->max_key_len = cfg->max_key_len;
    l->idle_ttl_ns = cfg->idle_ttl_ns;
    l->when_full = cfg->when_full;
    l->clock = sl_clock_resolve(cfg->clock);
    l->clock_fn = cfg->clock_fn;
    l->clock_ctx = cfg->clock_ctx;
    l->reap_interval_ns = cfg->reap_interval_ns;
    {
        const char *name = cfg->name != NULL ? cfg->name : "default";
        size_t n = strlen(name) + 1;
        l->name = sl_alloc(&l->memory, n);
        if (l->name != NULL)
            memcpy(l->name, name, n);
    }
    l->arena = l->name == NULL ? NULL : sl_arena_new(&l->memory);
    rc = l->arena == NULL ? -ENOMEM : sl_table_init(l, sl_shard_count(cfg->shards));
    if (rc == 0)
        rc = sl_reaper_start(l);
    if (rc < 0) {
        if (l->shards != NULL)
            sl_table_destroy(l);
        if (l->arena != NULL)
            sl_arena_detach(l->arena);
        sl_policy_discard(pol);
        free(l->name);
        free(l);
        return rc;
    }
    sl_fork_track(l);
    *out = l;
    return 0;
}

void sluice_destroy(sluice_t *l)
{
    struct sl_thread *t;

    if (l == NULL)
        return;
    sl_fork_untrack(l);
    sl_reaper_stop(l);
    if (l->shm != NULL) {
        sl_shm_detach(l); /* this process leaves; the file stays */
        return;
    }
    t = sl_thread_get();
    /* Freeing entries drops policy references, which may retire policies:
     * inside a section, as ck wants of every retirement. */
    if (t != NULL)
        sl_epoch_begin(t);
    sl_table_destroy(l);
    sl_arena_detach(l->arena);
    sl_policy_unref(atomic_load_explicit(&l->policy, memory_order_relaxed));
    free(l->name);
    free(l);
    /* Return what this thread retired (policies, maps) now, not at exit. */
    if (t != NULL) {
        sl_epoch_end(t);
        sl_epoch_drain(t);
    }
}


void sluice_stats(sluice_t *l, struct sluice_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (l == NULL)
        return;
    if (l->shm != NULL) {
        sl_shm_stats(l, out);
        return;
    }
    for (unsigned i = 0; i <= SL_STAT_SLOTS; i++) {
        out->allowed += sl_load_rlx(&l->stat[i].allowed);
        out->denied += sl_load_rlx(&l->stat[i].denied);
    }
    out->keys = sl_load_rlx(&l->nkeys);
    out->inserted = sl_load_rlx(&l->inserted);
    out->reaped = sl_load_rlx(&l->reaped);
    out->full = sl_load_rlx(&l->full);
    out->memory_bytes = sl_load_rlx(&l->memory);
    out->clock = (uint64_t)l->clock;
}
