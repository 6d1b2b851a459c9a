/*
 * sluice-redis: the tier's life cycle.  Above tier.c and async.c: destroy
 * ends the async path, whose calls use tier.c's decision, so neither of
 * those two files calls the other's way.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tier.h"

#define SR_API SLUICE_REDIS_API

SR_API void sluice_redis_config_init(struct sluice_redis_config *cfg)
{
    if (cfg == NULL)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->host = "127.0.0.1";
    cfg->port = 6379;
    cfg->prefix = "sluice:";
    cfg->timeout_ns = 50000000u;
    cfg->reconnect_ns = 1000000000u;
    cfg->log_interval_ns = 10000000000u;
    cfg->connections = 2;
}

SR_API int sluice_redis_create(const struct sluice_redis_config *cfg, sluice_redis_t **out)
{
    struct sluice_redis *t;
    uint64_t burst;

    if (cfg == NULL || out == NULL || cfg->count == 0 || cfg->period_ns == 0 ||
        cfg->timeout_ns == 0 || cfg->timeout_ns > SR_TIMEOUT_MAX || cfg->host == NULL || cfg->prefix == NULL ||
        strpbrk(cfg->prefix, "{}") != NULL || cfg->connections > SR_CONNS_MAX)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->cfg = *cfg;
    burst = cfg->burst ? cfg->burst : cfg->count;
    if (sr_params_init(&t->par, cfg->count, cfg->period_ns, burst) != 0) {
        free(t);
        return -EINVAL;
    }
    t->cfg.burst = burst;
    t->cfg.lease_ttl_ns = cfg->lease_ttl_ns ? cfg->lease_ttl_ns : cfg->period_ns;
    t->cfg.reconnect_ns = cfg->reconnect_ns ? cfg->reconnect_ns : 1000000000u;
    t->cfg.log_interval_ns = cfg->log_interval_ns ? cfg->log_interval_ns : 10000000000u;
    /* a lease beyond the burst could never be granted whole */
    if (t->cfg.lease > burst)
        t->cfg.lease = burst;
    t->host = strdup(cfg->host);
    t->prefix = strdup(cfg->prefix);
    t->plen = strlen(cfg->prefix);
    if (t->host == NULL || t->prefix == NULL || sr_pipe_init(&t->pipe, cfg->connections ? cfg->connections : 2) != 0) {
        free(t->host);
        free(t->prefix);
        free(t);
        return -ENOMEM;
    }
    for (size_t i = 0; i < SR_LEASE_LOCKS; i++)
        pthread_mutex_init(&t->lease_lock[i], NULL);
    *out = t;
    return 0;
}

SR_API void sluice_redis_destroy(sluice_redis_t *t)
{
    if (t == NULL)
        return;
    sr_async_destroy(t);
    for (size_t i = 0; i < SR_LEASE_BUCKETS; i++)
        for (struct sr_lease *l = t->leases[i], *next; l != NULL; l = next) {
            next = l->next;
            free(l);
        }
    for (size_t i = 0; i < SR_LEASE_LOCKS; i++)
        pthread_mutex_destroy(&t->lease_lock[i]);
    sr_pipe_destroy(&t->pipe);
    free(t->host);
    free(t->prefix);
    free(t);
}
