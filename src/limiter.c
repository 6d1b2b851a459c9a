/*
 * Limiter life cycle: configuration, creation, destruction, stats (the
 * reaper it starts and stops is reaper.c; its clock is clock.c).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define SL_MAX_SHARDS 4096u
#define SL_MAX_KEY_LEN (UINT64_C(1) << 30)

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

int sl_config_check(const struct sluice_config *cfg)
{
    if (!sl_zero(cfg->reserved, 8) || !sl_policy_reserved_zero(&cfg->policy))
        return -EINVAL;
    if (cfg->max_keys == 0 || cfg->max_key_len == 0 || cfg->max_key_len > SL_MAX_KEY_LEN)
        return -EINVAL;
    if ((unsigned)cfg->when_full > SLUICE_FULL_ALLOW || (unsigned)cfg->clock > SLUICE_CLOCK_TSC)
        return -EINVAL;
    if (cfg->clock == SLUICE_CLOCK_CUSTOM && cfg->clock_fn == NULL)
        return -EINVAL;
    if (cfg->shards > SL_MAX_SHARDS)
        return -EINVAL;
    /* The name goes into a structured-field string: printable ASCII, no
     * quote or backslash, so it never needs escaping. */
    for (const char *c = cfg->name; c != NULL && *c != '\0'; c++)
        if (*c < 0x20 || *c > 0x7e || *c == '"' || *c == '\\')
            return -EINVAL;
    return 0;
}

/* Enough shards that writers on different keys rarely meet: 4 per CPU. */
static unsigned sl_shard_count(unsigned asked)
{
    unsigned n = asked;

    if (n == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus > 0 ? (unsigned)cpus * 4u : 8u;
        if (n < 8)
            n = 8;
    }
    if (n > SL_MAX_SHARDS)
        n = SL_MAX_SHARDS;
    return 1u << sl_bits(n - 1); /* next power of two */
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
    atomic_init(&acct, 0);
    l = sl_alloc_aligned(&acct, sizeof(*l));
    if (l == NULL) {
        sl_policy_discard(pol);
        return -ENOMEM;
    }
    memset(l, 0, sizeof(*l));
    atomic_init(&l->memory, sl_load_rlx(&acct));
    sl_random_bytes(&l->hkey, sizeof(l->hkey));
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
    *out = l;
    return 0;
}

void sluice_destroy(sluice_t *l)
{
    struct sl_thread *t;

    if (l == NULL)
        return;
    sl_reaper_stop(l);
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
