/*
 * sluice-redis: the global GCRA tier in Redis, with leases, behind a local
 * sluice tier.  See include/sluice_redis.h.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice_redis.h"

#define SR_API __attribute__((visibility("default")))
#define SR_LEASE_BUCKETS 1024

/*
 * GCRA in microseconds of Redis's own clock (TIME), so every host agrees.
 * ARGV: T (us per unit), tau (us), units wanted, units needed at least.
 * Returns {units granted, retry after in us (as a string)}; grants between
 * `needed` and `wanted`, or nothing.
 */
static const char sr_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local T, tau = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local want, need = tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local tat = tonumber(redis.call('GET', KEYS[1])) or now\n"
    "if tat < now then tat = now end\n"
    "local k = math.floor((tau - (tat - now)) / T + 1e-9)\n"
    "if k > want then k = want end\n"
    "if k < need then return {0, tostring(math.ceil(tat + need * T - tau - now))} end\n"
    "tat = tat + k * T\n"
    "redis.call('SET', KEYS[1], tostring(tat), 'PX', math.ceil((tat - now) / 1000) + 1)\n"
    "return {k, '0'}\n";

struct sr_lease {
    struct sr_lease *next;
    uint64_t units, expires;
    uint64_t deny_until;        /* Redis said no until then: no need to ask */
    size_t len;
    char key[];
};

struct sluice_redis {
    struct sluice_redis_config cfg;
    char *host, *prefix;
    double T_us, tau_us;
    pthread_mutex_t lock;       /* the connection and the leases */
    redisContext *c;
    uint64_t next_connect;
    char sha[64];
    struct sr_lease *leases[SR_LEASE_BUCKETS];
    _Atomic uint64_t requests, local_denied, redis_calls, redis_allowed, redis_denied, lease_hits,
        cached_denials, errors, failed_open, failed_closed;
};

static uint64_t sr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct timeval sr_tv(uint64_t ns)
{
    return (struct timeval){.tv_sec = (time_t)(ns / 1000000000u),
                            .tv_usec = (suseconds_t)(ns % 1000000000u / 1000u)};
}

SR_API void sluice_redis_config_init(struct sluice_redis_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->host = "127.0.0.1";
    cfg->port = 6379;
    cfg->prefix = "sluice:";
    cfg->timeout_ns = 50000000u;
    cfg->reconnect_ns = 1000000000u;
}

SR_API int sluice_redis_create(const struct sluice_redis_config *cfg, sluice_redis_t **out)
{
    struct sluice_redis *t;

    if (cfg == NULL || out == NULL || cfg->count == 0 || cfg->period_ns == 0 ||
        cfg->timeout_ns == 0 || cfg->host == NULL || cfg->prefix == NULL)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->cfg = *cfg;
    t->host = strdup(cfg->host);
    t->prefix = strdup(cfg->prefix);
    if (t->host == NULL || t->prefix == NULL) {
        sluice_redis_destroy(t);
        return -ENOMEM;
    }
    t->cfg.burst = cfg->burst ? cfg->burst : cfg->count;
    t->cfg.lease_ttl_ns = cfg->lease_ttl_ns ? cfg->lease_ttl_ns : cfg->period_ns;
    t->cfg.reconnect_ns = cfg->reconnect_ns ? cfg->reconnect_ns : 1000000000u;
    t->T_us = (double)cfg->period_ns / 1000.0 / (double)cfg->count;
    t->tau_us = t->T_us * (double)t->cfg.burst;
    pthread_mutex_init(&t->lock, NULL);
    *out = t;
    return 0;
}

SR_API void sluice_redis_destroy(sluice_redis_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < SR_LEASE_BUCKETS; i++)
        for (struct sr_lease *l = t->leases[i], *next; l != NULL; l = next) {
            next = l->next;
            free(l);
        }
    if (t->c != NULL)
        redisFree(t->c);
    pthread_mutex_destroy(&t->lock);
    free(t->host);
    free(t->prefix);
    free(t);
}

/* Locked.  A usable connection with the script loaded, or NULL. */
static redisContext *sr_connection(struct sluice_redis *t)
{
    struct timeval tv = sr_tv(t->cfg.timeout_ns);
    redisReply *r;
    uint64_t now = sr_now();

    if (t->c != NULL)
        return t->c;
    if (now < t->next_connect)
        return NULL;
    t->next_connect = now + t->cfg.reconnect_ns;
    t->c = redisConnectWithTimeout(t->host, t->cfg.port, tv);
    if (t->c == NULL || t->c->err || redisSetTimeout(t->c, tv) != REDIS_OK)
        goto fail;
    r = redisCommand(t->c, "SCRIPT LOAD %s", sr_script);
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len >= (int)sizeof(t->sha)) {
        freeReplyObject(r);
        goto fail;
    }
    memcpy(t->sha, r->str, (size_t)r->len + 1);
    freeReplyObject(r);
    return t->c;
fail:
    if (t->c != NULL)
        redisFree(t->c);
    t->c = NULL;
    return NULL;
}

/* Locked.  Ask for [need, want] units; returns units granted (0: denied,
 * *retry_ns set) or -1 when Redis could not answer. */
static int64_t sr_take(struct sluice_redis *t, const void *key, size_t len, uint64_t want,
                       uint64_t need, uint64_t *retry_ns)
{
    size_t plen = strlen(t->prefix);
    char *rkey = malloc(plen + len + 1), tbuf[64], taubuf[64];
    redisContext *c = sr_connection(t);
    redisReply *r = NULL;
    int64_t granted = -1;

    if (rkey == NULL || c == NULL) {
        free(rkey);
        return -1;
    }
    memcpy(rkey, t->prefix, plen);
    memcpy(rkey + plen, key, len);
    snprintf(tbuf, sizeof(tbuf), "%.6f", t->T_us);
    snprintf(taubuf, sizeof(taubuf), "%.6f", t->tau_us);
    for (int attempt = 0; attempt < 2; attempt++) {
        atomic_fetch_add(&t->redis_calls, 1);
        r = redisCommand(c, "EVALSHA %s 1 %b %s %s %llu %llu", t->sha, rkey, plen + len, tbuf,
                         taubuf, (unsigned long long)want, (unsigned long long)need);
        if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
            /* Redis restarted or flushed its scripts: load again, once */
            freeReplyObject(r);
            r = redisCommand(c, "SCRIPT LOAD %s", sr_script);
            if (r != NULL && r->type == REDIS_REPLY_STRING && r->len < (int)sizeof(t->sha))
                memcpy(t->sha, r->str, (size_t)r->len + 1);
            freeReplyObject(r);
            r = NULL;
            continue;
        }
        break;
    }
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER) {
        granted = r->element[0]->integer;
        if (granted == 0 && r->element[1]->type == REDIS_REPLY_STRING)
            *retry_ns = strtoull(r->element[1]->str, NULL, 10) * 1000u;
    }
    if (r == NULL || c->err) { /* timed out or gone: drop the connection */
        redisFree(t->c);
        t->c = NULL;
    }
    freeReplyObject(r);
    free(rkey);
    return granted;
}

static size_t sr_bucket(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603u;

    while (len--)
        h = (h ^ *p++) * 1099511628211u;
    return (size_t)(h % SR_LEASE_BUCKETS);
}

/*
 * Locked.  1: cost spent from this key's lease; -1: Redis denied this key
 * until a time not yet reached (other hosts can only move its TAT later, so
 * asking again would be denied too: the denial stays in the process);
 * 0: ask Redis.
 */
static int sr_lease_spend(struct sluice_redis *t, const void *key, size_t len, uint64_t cost,
                          uint64_t *retry)
{
    uint64_t now = sr_now();

    for (struct sr_lease **pp = &t->leases[sr_bucket(key, len)], *l; (l = *pp) != NULL;) {
        if (l->expires <= now && l->deny_until <= now) { /* stale: drop it */
            *pp = l->next;
            free(l);
            continue;
        }
        if (l->len == len && memcmp(l->key, key, len) == 0) {
            if (l->deny_until > now) {
                *retry = l->deny_until - now;
                return -1;
            }
            if (l->expires > now && l->units >= cost) {
                l->units -= cost;
                return 1;
            }
            return 0;
        }
        pp = &l->next;
    }
    return 0;
}

/* Locked.  Remember a lease of `units`, or a denial until `deny_until`. */
static void sr_lease_keep(struct sluice_redis *t, const void *key, size_t len, uint64_t units,
                          uint64_t deny_until)
{
    struct sr_lease **head = &t->leases[sr_bucket(key, len)], *l;

    for (l = *head; l != NULL; l = l->next)
        if (l->len == len && memcmp(l->key, key, len) == 0)
            break;
    if (l == NULL) {
        if ((units == 0 && deny_until == 0) || (l = malloc(sizeof(*l) + len)) == NULL)
            return;
        l->len = len;
        memcpy(l->key, key, len);
        l->next = *head;
        *head = l;
    }
    l->units = units;
    l->expires = sr_now() + t->cfg.lease_ttl_ns;
    l->deny_until = deny_until;
}

static void sr_fill(struct sluice_redis *t, struct sluice_result *res, uint64_t remaining,
                    uint64_t retry_ns)
{
    if (res == NULL)
        return;
    memset(res, 0, sizeof(*res));
    res->limit = t->cfg.count;
    res->period_ns = t->cfg.period_ns;
    res->remaining = remaining;
    res->retry_after_ns = retry_ns;
}

SR_API int sluice_redis_acquire(sluice_redis_t *t, const void *key, size_t len, uint64_t cost,
                                struct sluice_result *res)
{
    uint64_t retry = 0, want, leftover = 0;
    int64_t granted;
    int rc;

    if (t == NULL || (key == NULL && len > 0))
        return -EINVAL;
    if (cost > t->cfg.burst)
        return -E2BIG;
    atomic_fetch_add(&t->requests, 1);
    if (t->cfg.local != NULL) {
        rc = sluice_peek_at(t->cfg.local, key, len, cost, sluice_now(t->cfg.local), res);
        if (rc != SLUICE_ALLOW) {
            if (rc == SLUICE_DENY)
                atomic_fetch_add(&t->local_denied, 1);
            return rc;
        }
    }
    pthread_mutex_lock(&t->lock);
    switch (sr_lease_spend(t, key, len, cost, &retry)) {
    case 1:
        atomic_fetch_add(&t->lease_hits, 1);
        granted = (int64_t)cost;
        break;
    case -1:
        atomic_fetch_add(&t->cached_denials, 1);
        granted = 0;
        break;
    default:
        want = t->cfg.lease > cost ? t->cfg.lease : cost;
        granted = sr_take(t, key, len, want, cost, &retry);
        if (granted > 0) {
            leftover = (uint64_t)granted - cost;
            if (t->cfg.lease > 1)
                sr_lease_keep(t, key, len, leftover, 0);
        } else if (granted == 0 && retry > 0) {
            sr_lease_keep(t, key, len, 0, sr_now() + retry);
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (granted < 0) {
        atomic_fetch_add(&t->errors, 1);
        atomic_fetch_add(t->cfg.fail_open ? &t->failed_open : &t->failed_closed, 1);
        sr_fill(t, res, 0, t->cfg.fail_open ? 0 : t->cfg.reconnect_ns);
        if (!t->cfg.fail_open)
            return SLUICE_DENY;
    } else if (granted == 0) {
        atomic_fetch_add(&t->redis_denied, 1);
        sr_fill(t, res, 0, retry ? retry : 1);
        return SLUICE_DENY;
    } else {
        atomic_fetch_add(&t->redis_allowed, 1);
        sr_fill(t, res, leftover, 0);
    }
    if (t->cfg.local != NULL) {
        rc = sluice_acquire(t->cfg.local, key, len, cost, NULL);
        if (rc != SLUICE_ALLOW)
            return rc; /* lost a local race: deny, the global unit stays spent */
    }
    return SLUICE_ALLOW;
}

SR_API void sluice_redis_stats(sluice_redis_t *t, struct sluice_redis_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (t == NULL)
        return;
    out->requests = atomic_load(&t->requests);
    out->local_denied = atomic_load(&t->local_denied);
    out->redis_calls = atomic_load(&t->redis_calls);
    out->redis_allowed = atomic_load(&t->redis_allowed);
    out->redis_denied = atomic_load(&t->redis_denied);
    out->lease_hits = atomic_load(&t->lease_hits);
    out->cached_denials = atomic_load(&t->cached_denials);
    out->errors = atomic_load(&t->errors);
    out->failed_open = atomic_load(&t->failed_open);
    out->failed_closed = atomic_load(&t->failed_closed);
}
