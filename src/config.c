/*
 * Checks of a limiter's configuration, shared by sluice_create and
 * sluice_open_shared (below both: limiter.c and shm_file.c call it).
 */
#include <unistd.h>

#include "internal.h"

#define SL_MAX_SHARDS 4096u
#define SL_MAX_KEY_LEN (UINT64_C(1) << 30)

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
unsigned sl_shard_count(unsigned asked)
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
