/*
 * sluice-redis: a global limit shared by many hosts, enforced in Redis with
 * GCRA (one Lua script, Redis's own TIME so hosts agree on the clock), with
 * a sluice limiter in front as the local first tier: a request the local
 * tier denies never reaches Redis.
 *
 * Optional add-on library (libsluice-redis, built when hiredis is found);
 * the core library's API is <sluice.h> alone.
 *
 * Lease mode (lease > 1): a host takes up to `lease` units of the global
 * limit in one round trip and spends them locally.  Units leased are
 * charged in Redis when taken, so the global count is never exceeded; but
 * they may be spent later than they were charged, so in any interval the
 * hosts together can admit up to hosts * lease units more than the global
 * GCRA alone would (the stated over-admission bound).  Leases expire after
 * lease_ttl_ns unspent.
 *
 * A global denial comes with the time the key's TAT allows the next unit;
 * until then the same host denies that key without asking Redis (other
 * hosts can only push the TAT later), so repeated denials stay in-process.
 *
 * Redis unreachable or slower than timeout_ns: the call is decided by
 * fail_open (allow) or not (deny), counted in the stats, and never blocks
 * longer than the timeout; reconnection is tried at most once per
 * reconnect_ns.  Calls on one tier are serialized on its connection.
 */
#ifndef SLUICE_REDIS_H
#define SLUICE_REDIS_H

#include <sluice.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice_redis sluice_redis_t;

struct sluice_redis_config {
    const char *host;           /* default "127.0.0.1" */
    int port;                   /* default 6379 */
    const char *prefix;         /* Redis key prefix; default "sluice:" */
    uint64_t count, period_ns;  /* the global GCRA limit (required) */
    uint64_t burst;             /* 0: count */
    uint64_t lease;             /* units taken per round trip; <= 1: no leases */
    uint64_t lease_ttl_ns;      /* unspent leases expire; default period_ns */
    uint64_t timeout_ns;        /* per round trip; default 50 ms */
    uint64_t reconnect_ns;      /* between reconnection attempts; default 1 s */
    int fail_open;              /* Redis down: 1 allow, 0 deny (default) */
    sluice_t *local;            /* first tier, optional; not owned */
};

struct sluice_redis_stats {
    uint64_t requests, local_denied, redis_calls, redis_allowed, redis_denied;
    uint64_t lease_hits;        /* admitted from a lease, no round trip */
    uint64_t errors, failed_open, failed_closed;
    uint64_t cached_denials;    /* denied without a round trip: Redis had said
                                   no until a time not reached yet */
};

/* Defaults; count and period_ns must be set after. */
void sluice_redis_config_init(struct sluice_redis_config *cfg);

/* 0, -EINVAL (bad config), -ENOMEM.  Connects lazily: a Redis that is down
 * at creation is tried again on use. */
int sluice_redis_create(const struct sluice_redis_config *cfg, sluice_redis_t **out);
void sluice_redis_destroy(sluice_redis_t *t);

/*
 * Decide `cost` units for `key`: the local tier first (if any), then the
 * global limit (a lease, or one round trip).  res (may be NULL) describes
 * the local decision when it denied, else the global one (limit = count,
 * retry_after_ns from Redis on a denial).
 * Returns SLUICE_ALLOW, SLUICE_DENY, or a negative errno as sluice_acquire.
 * The local tier is checked read-only first (sluice_peek) and charged only
 * after the global limit admitted, so a global denial never spends local
 * capacity; a local charge that then loses a race to another thread denies
 * the request with the global unit spent (conservative, never over).
 */
int sluice_redis_acquire(sluice_redis_t *t, const void *key, size_t len, uint64_t cost,
                         struct sluice_result *res);

void sluice_redis_stats(sluice_redis_t *t, struct sluice_redis_stats *out);

#ifdef __cplusplus
}
#endif

#endif
