/*
 * sluice-redis: the global GCRA tier in Redis, with leases, behind a local
 * sluice tier.  See include/sluice_redis.h and doc/REDIS.md.  This file:
 * the public synchronous calls, leases and the denial cache, the decision
 * shared with the async path, stats and logging (create and destroy are
 * life.c, above this file and async.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tier.h"

#define SR_API SLUICE_REDIS_API

/*
 * One message of a kind per log_interval_ns at most, with the count held
 * back since the last one, so an outage at 100,000 calls/s logs a line per
 * interval, not 100,000.
 */
void sr_log(struct sluice_redis *t, int kind, int level, const char *what)
{
    uint64_t now, next, held;
    char msg[256];

    if (t->cfg.log_fn == NULL)
        return;
    now = sr_now();
    next = atomic_load_explicit(&t->log_next[kind], memory_order_relaxed);
    if (now < next || !atomic_compare_exchange_strong_explicit(&t->log_next[kind], &next,
                                                               now + t->cfg.log_interval_ns,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed)) {
        atomic_fetch_add_explicit(&t->log_held[kind], 1, memory_order_relaxed);
        return;
    }
    held = atomic_exchange_explicit(&t->log_held[kind], 0, memory_order_relaxed);
    if (held > 0)
        snprintf(msg, sizeof(msg), "sluice-redis %s:%d: %s (%llu more since the last message)",
                 t->host, t->cfg.port, what, (unsigned long long)held);
    else
        snprintf(msg, sizeof(msg), "sluice-redis %s:%d: %s", t->host, t->cfg.port, what);
    t->cfg.log_fn(t->cfg.log_ctx, level, msg);
}

static size_t sr_bucket(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603u;

    while (len--)
        h = (h ^ *p++) * 1099511628211u;
    return (size_t)(h % SR_LEASE_BUCKETS);
}

/* k units of the global limit in ns (k * period_ns / count), rounded down
 * or up, at most UINT64_MAX. */
static uint64_t sr_units_ns(struct sluice_redis *t, uint64_t k, int up)
{
    __extension__ unsigned __int128 v = (unsigned __int128)k * t->cfg.period_ns;

    v = (v + (up ? t->cfg.count - 1 : 0)) / t->cfg.count;
    return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

/* Redis denied `need` units until `until`: when `cost` units could pass at
 * the earliest (other hosts can only push the key's TAT later; one unit
 * more or less moves it by the emission interval).  Rounded to the early
 * side: the cache denies only what Redis would deny. */
static uint64_t sr_deny_until(struct sluice_redis *t, const struct sr_lease *l, uint64_t cost)
{
    uint64_t d;

    if (cost >= l->deny_need) {
        d = sr_units_ns(t, cost - l->deny_need, 0);
        return l->deny_until > UINT64_MAX - d ? UINT64_MAX : l->deny_until + d;
    }
    d = sr_units_ns(t, l->deny_need - cost, 1);
    return l->deny_until > d ? l->deny_until - d : 0;
}

/*
 * 1: cost spent from this key's lease (units already charged in Redis),
 * *left what remains of it; -1: Redis denied this key `need` units until a
 * time from which `cost` units could not pass yet (other hosts can only
 * move its TAT later, so asking again would be denied too: the denial stays
 * in the process), *retry set; 0: ask Redis.
 */
static int sr_lease_spend(struct sluice_redis *t, const void *key, size_t len, uint64_t cost,
                          uint64_t *retry, uint64_t *left)
{
    size_t b = sr_bucket(key, len);
    uint64_t now = sr_now();
    int rc = 0;

    pthread_mutex_lock(&t->lease_lock[b % SR_LEASE_LOCKS]);
    for (struct sr_lease **pp = &t->leases[b], *l; (l = *pp) != NULL;) {
        if (l->expires <= now && l->deny_until <= now) { /* stale: drop it */
            *pp = l->next;
            free(l);
            continue;
        }
        if (l->len == len && memcmp(l->key, key, len) == 0) {
            uint64_t until;

            if (l->expires > now && l->units >= cost) {
                l->units -= cost;
                *left = l->units;
                rc = 1;
            } else if (l->deny_until > now && (until = sr_deny_until(t, l, cost)) > now) {
                *retry = until - now;
                rc = -1;
            }
            break;
        }
        pp = &l->next;
    }
    pthread_mutex_unlock(&t->lease_lock[b % SR_LEASE_LOCKS]);
    return rc;
}

/* Remember a lease of `units` more (at most `lease` held), or a denial of
 * `need` units until `deny_until`. */
static void sr_lease_keep(struct sluice_redis *t, const void *key, size_t len, uint64_t units,
                          uint64_t deny_until, uint64_t need)
{
    size_t b = sr_bucket(key, len);
    struct sr_lease **head = &t->leases[b], *l;
    uint64_t now = sr_now();

    pthread_mutex_lock(&t->lease_lock[b % SR_LEASE_LOCKS]);
    for (l = *head; l != NULL; l = l->next)
        if (l->len == len && memcmp(l->key, key, len) == 0)
            break;
    if (l == NULL) {
        if ((units == 0 && deny_until == 0) || (l = malloc(sizeof(*l) + len)) == NULL)
            goto out;
        l->len = len;
        memcpy(l->key, key, len);
        l->units = 0;
        l->expires = 0;
        l->next = *head;
        *head = l;
    }
    if (l->expires <= now)
        l->units = 0;
    /* Two threads that both missed may both have fetched a lease: keep at
     * most one lease's worth, so the hosts * lease bound holds (the rest
     * was charged in Redis and is dropped: fewer admitted, never more).
     * Only units just taken start a new time to live: a denial leaves the
     * lease's expiry as it was (it re-armed it, and leases outlived
     * lease_ttl_ns). */
    if (units > 0) {
        l->units = l->units + units > t->cfg.lease ? t->cfg.lease : l->units + units;
        l->expires = now + t->cfg.lease_ttl_ns;
    }
    l->deny_until = deny_until;
    l->deny_need = need;
out:
    pthread_mutex_unlock(&t->lease_lock[b % SR_LEASE_LOCKS]);
}

static void sr_fill(struct sluice_redis *t, struct sluice_result *res, uint64_t remaining,
                    uint64_t retry_ns, uint64_t reset_ns, unsigned flags)
{
    if (res == NULL)
        return;
    memset(res, 0, sizeof(*res));
    res->limit = t->cfg.count;
    res->period_ns = t->cfg.period_ns;
    res->remaining = remaining;
    res->retry_after_ns = retry_ns;
    res->reset_after_ns = reset_ns;
    res->flags = flags;
}

/* The local tier is charged only once the global tier admitted.  A charge
 * that lost a race with another thread since the peek denies, the global
 * unit staying spent, and *res then describes that local denial. */
static int sr_charge_local(struct sluice_redis *t, const void *key, size_t len, uint64_t cost,
                           struct sluice_result *res)
{
    struct sluice_result lres;
    int rc;

    if (t->cfg.local == NULL || cost == 0)
        return SLUICE_ALLOW;
    rc = sluice_acquire(t->cfg.local, key, len, cost, res != NULL ? &lres : NULL);
    if (rc == SLUICE_DENY) {
        atomic_fetch_add_explicit(&t->local_denied, 1, memory_order_relaxed);
        if (res != NULL) {
            *res = lres;
            res->flags |= SLUICE_REDIS_F_LOCAL;
        }
    }
    return rc;
}

/*
 * The in-process part of a decision: the local tier, the lease, the denial
 * cache.  *done = 1 and the decision returned, or *done = 0: ask Redis.
 */
int sr_precheck(struct sluice_redis *t, const void *key, size_t len, uint64_t cost,
                struct sluice_result *res, int *done)
{
    uint64_t retry = 0, left = 0;
    int rc;

    *done = 1;
    atomic_fetch_add_explicit(&t->requests, 1, memory_order_relaxed);
    if (t->cfg.local != NULL) {
        rc = sluice_peek_at(t->cfg.local, key, len, cost, sluice_now(t->cfg.local), res);
        if (rc != SLUICE_ALLOW) {
            if (rc == SLUICE_DENY) {
                atomic_fetch_add_explicit(&t->local_denied, 1, memory_order_relaxed);
                if (res != NULL)
                    res->flags |= SLUICE_REDIS_F_LOCAL;
            }
            return rc;
        }
    }
    if (cost > 0) {
        switch (sr_lease_spend(t, key, len, cost, &retry, &left)) {
        case 1:
            atomic_fetch_add_explicit(&t->lease_hits, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&t->redis_allowed, 1, memory_order_relaxed);
            sr_fill(t, res, left, 0, 0, SLUICE_REDIS_F_LEASE);
            return sr_charge_local(t, key, len, cost, res);
        case -1:
            atomic_fetch_add_explicit(&t->cached_denials, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&t->redis_denied, 1, memory_order_relaxed);
            sr_fill(t, res, 0, retry, 0, SLUICE_REDIS_F_CACHED);
            return SLUICE_DENY;
        }
    }
    *done = 0;
    return 0;
}

uint64_t sr_want(struct sluice_redis *t, uint64_t cost)
{
    if (cost == 0)
        return 0; /* report the state, charge nothing */
    return t->cfg.lease > cost ? t->cfg.lease : cost;
}

/* prefix + key in buf if it fits, else in malloc'd memory (NULL: ENOMEM). */
char *sr_full_key(struct sluice_redis *t, const void *key, size_t len, char *buf, size_t cap)
{
    char *k = t->plen + len <= cap ? buf : malloc(t->plen + len + 1);

    if (k != NULL) {
        memcpy(k, t->prefix, t->plen);
        if (len > 0)
            memcpy(k + t->plen, key, len);
    }
    return k;
}

int sr_finish(struct sluice_redis *t, const void *key, size_t len, uint64_t cost, int status,
              const struct sr_reply *rep, uint64_t asked, struct sluice_result *res)
{
    uint64_t leftover;

    if (status == SR_DOWN) {
        int open = t->cfg.fail_open;

        atomic_fetch_add_explicit(&t->errors, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(open ? &t->failed_open : &t->failed_closed, 1,
                                  memory_order_relaxed);
        atomic_store_explicit(&t->down, 1, memory_order_relaxed);
        sr_log(t, SR_LOG_OUTAGE, SLUICE_REDIS_LOG_ERR,
               open ? "Redis unreachable or too slow: failing open (requests allowed)"
                    : "Redis unreachable or too slow: failing closed (requests denied)");
        /* cost 0 charges nothing and allows, the flag tells of the outage */
        sr_fill(t, res, 0, open || cost == 0 ? 0 : t->cfg.reconnect_ns, 0,
                open ? SLUICE_REDIS_F_FAILED_OPEN : SLUICE_REDIS_F_FAILED_CLOSED);
        if (cost == 0)
            return SLUICE_ALLOW;
        return open ? sr_charge_local(t, key, len, cost, res) : SLUICE_DENY;
    }
    if (atomic_exchange_explicit(&t->down, 0, memory_order_relaxed))
        sr_log(t, SR_LOG_RECOVERY, SLUICE_REDIS_LOG_NOTICE, "Redis answers again");
    if (status == SR_ERROR) {
        atomic_fetch_add_explicit(&t->error_replies, 1, memory_order_relaxed);
        sr_log(t, SR_LOG_REPLY, SLUICE_REDIS_LOG_ERR,
               "Redis answered with an error (wrong type at a key? script error?): -EPROTO");
        sr_fill(t, res, 0, 0, 0, 0);
        return -EPROTO;
    }
    if (cost == 0) {
        sr_fill(t, res, rep->remaining, 0, rep->reset_ns, 0);
        return SLUICE_ALLOW;
    }
    if (rep->granted < cost) {
        atomic_fetch_add_explicit(&t->redis_denied, 1, memory_order_relaxed);
        /* Redis's wait counts from its TIME, read after the call was made
         * and before its reply came back: counted from the call, the cache
         * ends early rather than late, and denies only what Redis would */
        if (rep->retry_ns > 0)
            sr_lease_keep(t, key, len, 0, asked + rep->retry_ns, cost);
        sr_fill(t, res, rep->remaining, rep->retry_ns ? rep->retry_ns : 1, rep->reset_ns, 0);
        return SLUICE_DENY;
    }
    atomic_fetch_add_explicit(&t->redis_allowed, 1, memory_order_relaxed);
    leftover = rep->granted - cost;
    /* A lease's leftover kept, and in any case a cached denial dropped:
     * this grant moved the key's TAT past what the denial was told, so its
     * wait would be too short (it is asked again next time instead). */
    sr_lease_keep(t, key, len, t->cfg.lease > 1 ? leftover : 0, 0, 0);
    sr_fill(t, res, rep->remaining + leftover, 0, rep->reset_ns, 0);
    return sr_charge_local(t, key, len, cost, res);
}

SR_API int sluice_redis_acquire(sluice_redis_t *t, const void *key, size_t len, uint64_t cost,
                                struct sluice_result *res)
{
    struct sr_call call;
    char buf[256];
    int rc, done;

    if (t == NULL || (key == NULL && len > 0))
        return -EINVAL;
    if (cost > t->cfg.burst)
        return -E2BIG;
    rc = sr_precheck(t, key, len, cost, res, &done);
    if (done)
        return rc;
    memset(&call, 0, sizeof(call));
    call.rkey = sr_full_key(t, key, len, buf, sizeof(buf));
    if (call.rkey == NULL)
        return -ENOMEM;
    call.rlen = t->plen + len;
    call.want = sr_want(t, cost);
    call.need = cost;
    call.deadline = sr_now() + t->cfg.timeout_ns;
    rc = sr_pipe_call(t, &call);
    if (call.rkey != buf)
        free((char *)call.rkey);
    return sr_finish(t, key, len, cost, rc, &call.reply, call.deadline - t->cfg.timeout_ns, res);
}

SR_API void sluice_redis_stats(sluice_redis_t *t, struct sluice_redis_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (t == NULL)
        return;
#define SR_LOAD(f) out->f = atomic_load_explicit(&t->f, memory_order_relaxed)
    SR_LOAD(requests);
    SR_LOAD(local_denied);
    SR_LOAD(redis_calls);
    SR_LOAD(redis_allowed);
    SR_LOAD(redis_denied);
    SR_LOAD(lease_hits);
    SR_LOAD(cached_denials);
    SR_LOAD(errors);
    SR_LOAD(failed_open);
    SR_LOAD(failed_closed);
    SR_LOAD(error_replies);
    SR_LOAD(round_trips);
#undef SR_LOAD
}
