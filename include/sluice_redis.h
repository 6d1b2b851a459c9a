/*
 * sluice-redis: a global limit shared by many hosts, enforced in Redis with
 * GCRA (one Lua script, Redis's own TIME so hosts agree on the clock), with
 * a sluice limiter in front as the local first tier: a request the local
 * tier denies never reaches Redis.
 *
 * Optional add-on library (libsluice-redis, pkg-config sluice-redis, built
 * when hiredis is found); the core library's API is <sluice.h> alone.
 * doc/REDIS.md has the design, the figures and the operational notes.
 *
 * Exact arithmetic: Redis keeps the key's TAT as integers (microseconds of
 * Redis's clock plus a remainder), and the emission interval period/count as
 * an exact fraction, so no grant loses time to rounding.  Lua numbers are
 * doubles: a limit whose numbers cannot stay below 2^53 in the script is
 * refused with -EINVAL by sluice_redis_create().
 *
 * Lease mode (lease > 1): a host takes up to `lease` units of the global
 * limit in one round trip and spends them locally.  Units leased are
 * charged in Redis when taken, so the global count is never exceeded; but
 * they may be spent later than they were charged, so in any interval the
 * hosts together can admit up to hosts * lease units more than the global
 * GCRA alone would (the stated over-admission bound).  A host holds at most
 * `lease` unspent units per key (concurrent refills beyond that are dropped,
 * never over-admitted).  Leases expire lease_ttl_ns after they were taken
 * (a global denial of the key meanwhile does not extend them; a refill
 * taken while units remain restarts the time of all units held).
 *
 * A global denial comes with the time the key's TAT allows the units asked;
 * the same host then denies that key without asking Redis while the cost
 * asked could not pass either: until that time for the same cost, one
 * emission interval (period_ns / count) later per unit more, earlier per
 * unit less (other hosts can only push the TAT later), so repeated denials
 * stay in-process.  Units held in a lease are spent first.
 *
 * Concurrency: callers of one tier share its connections (`connections`,
 * default 2).  Calls that arrive while round trips are in flight go out
 * together as the next round trip, decided by one script call (one per
 * hash slot with `cluster`), so throughput grows with the number of
 * callers.  A tier belongs to the process that created it: its sockets,
 * locks and cached denials are not shared across fork(2).  A pre-forked
 * server creates one tier per worker, after the fork (a core limiter, by
 * contrast, may be used on both sides); a tier used by both a parent and
 * its child reads replies meant for the other process, and may admit on
 * them.
 *
 * Failures: Redis unreachable or slower than timeout_ns is an outage: the
 * call is decided by fail_open (ALLOW) or not (DENY), result.flags says so
 * (SLUICE_REDIS_F_FAILED_OPEN / _CLOSED), it is counted in the stats and
 * logged through log_fn (rate-limited).  No caller waits for Redis longer
 * than timeout_ns (plus an eighth), whatever other callers do; reconnection
 * is tried at most once per reconnect_ns per connection.  An error reply
 * from a reachable Redis (WRONGTYPE on the key, a script error, a SCRIPT
 * LOAD refused by an ACL, a renamed command, NOAUTH or LOADING) is not an
 * outage: it returns -EPROTO, is counted in error_replies and never admits.
 *
 * ABI note: struct sluice_redis_config and struct sluice_redis_stats have
 * grown at their ends (the fields after "appended:") while the library's
 * soname stayed libsluice-redis.so.1.  sluice_redis_config_init() and
 * sluice_redis_stats() write, and sluice_redis_create() reads, the whole
 * struct as this header declares it, so a program built against an older
 * header must be rebuilt: run against this library, those calls would
 * write and read past its smaller structs.
 *
 * Redis Cluster: set `cluster`; each script call then touches keys of one
 * slot only, so it runs on the node that owns that slot (redirections are
 * not followed: connect to it).  Put a hash tag in the key ("{user42}:api")
 * to choose the slot; the prefix must not contain '{' or '}'.
 */
#ifndef SLUICE_REDIS_H
#define SLUICE_REDIS_H

#include <sluice.h>

#if defined(SLUICE_REDIS_BUILDING) && defined(__GNUC__)
#define SLUICE_REDIS_API __attribute__((visibility("default")))
#else
#define SLUICE_REDIS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice_redis sluice_redis_t;

/* struct sluice_result.flags bits of this tier (bits 0-7 are the core's). */
#define SLUICE_REDIS_F_FAILED_OPEN 0x100u   /* Redis down or too slow: allowed by fail_open */
#define SLUICE_REDIS_F_FAILED_CLOSED 0x200u /* Redis down or too slow: denied, not a limit */
#define SLUICE_REDIS_F_LEASE 0x400u         /* admitted from this host's lease, no round trip */
#define SLUICE_REDIS_F_CACHED 0x800u        /* denied from the denial cache, no round trip */
#define SLUICE_REDIS_F_LOCAL 0x1000u        /* decided by the local first tier */

/* log_fn levels: syslog's numbers. */
#define SLUICE_REDIS_LOG_ERR 3
#define SLUICE_REDIS_LOG_WARNING 4
#define SLUICE_REDIS_LOG_NOTICE 5

struct sluice_redis_config {
    const char *host;           /* default "127.0.0.1" */
    int port;                   /* default 6379 */
    const char *prefix;         /* Redis key prefix; default "sluice:"; no '{' or '}' */
    uint64_t count, period_ns;  /* the global GCRA limit (required) */
    uint64_t burst;             /* 0: count */
    uint64_t lease;             /* units taken per round trip; <= 1: no leases */
    uint64_t lease_ttl_ns;      /* unspent leases expire; default period_ns */
    uint64_t timeout_ns;        /* longest wait for Redis of any call (+1/8); default 50 ms,
                                   at most one hour */
    uint64_t reconnect_ns;      /* between reconnection attempts; default 1 s */
    int fail_open;              /* Redis down: 1 allow, 0 deny (default) */
    sluice_t *local;            /* first tier, optional; not owned */
    /* appended: */
    /* Outages, error replies and recoveries, as one line without newline;
     * called from the deciding thread, never with a lock held.  Each kind
     * of message goes out at most once per log_interval_ns (default 10 s),
     * with the number held back since. */
    void (*log_fn)(void *log_ctx, int level, const char *msg);
    void *log_ctx;
    uint64_t log_interval_ns;
    /* Synchronous connections, each with one pipelined round trip in
     * flight at a time; default 2 (0: 2), at most 8. */
    unsigned connections;
    /* 1: Redis Cluster.  Concurrent calls are decided by one script call
     * per batch; in a cluster its keys must share a slot, so the batch is
     * split by slot (hash tags keep a user's keys together).  0 (default):
     * a single Redis, one script call per batch. */
    int cluster;
};

struct sluice_redis_stats {
    uint64_t requests, local_denied, redis_calls, redis_allowed, redis_denied;
    uint64_t lease_hits;        /* admitted from a lease, no round trip */
    uint64_t errors;            /* outages: Redis unreachable or too slow */
    uint64_t failed_open, failed_closed;
    uint64_t cached_denials;    /* denied without a round trip: Redis had said
                                   no until a time not reached yet */
    /* appended: */
    uint64_t error_replies;     /* Redis answered with an error: -EPROTO */
    uint64_t round_trips;       /* pipelines sent (each carries redis_calls / round_trips calls) */
};

/* Defaults; count and period_ns must be set after. */
SLUICE_REDIS_API void sluice_redis_config_init(struct sluice_redis_config *cfg);

/*
 * 0, or:
 *   -EINVAL  NULL argument, count, period_ns or timeout_ns 0, timeout_ns
 *            above one hour (3600 * 10^9 ns), NULL host or
 *            prefix, connections above 8, a prefix with '{' or '}' (it would take the hash tag
 *            away from the keys), or a limit the script cannot keep exact
 *            (1000 * count / gcd(period_ns, 1000 * count) or
 *            (2 * burst + 1) * period_ns / gcd(...) at 2^53 or more, or a
 *            burst window beyond 2^50 us);
 *   -ENOMEM.
 * Connects lazily: a Redis that is down at creation is tried again on use.
 */
SLUICE_REDIS_API int sluice_redis_create(const struct sluice_redis_config *cfg,
                                         sluice_redis_t **out);

/*
 * Free the tier.  Asynchronous calls still in flight complete first, with
 * -ECANCELED.  Must not race with other calls on the tier, nor be called
 * from within one of its callbacks.  NULL is a no-op.
 */
SLUICE_REDIS_API void sluice_redis_destroy(sluice_redis_t *t);

/*
 * Decide `cost` units for `key`: the local tier first (if any), then the
 * global limit (a lease, or one round trip shared with concurrent callers).
 * res (may be NULL) describes the local decision when it denied
 * (SLUICE_REDIS_F_LOCAL), else the global one (limit = count,
 * retry_after_ns from Redis on a denial), with the SLUICE_REDIS_F_* flags
 * that say how it was decided.  remaining is an estimate, and comes three
 * ways: after a round trip that admitted, what Redis reported plus the
 * units this call leased; from a lease hit (SLUICE_REDIS_F_LEASE, no round
 * trip), the units left in this host's lease only; after a denial or with
 * cost 0, what Redis reported alone (this host's lease not included).
 * cost 0 charges nothing, returns SLUICE_ALLOW and reports the key's state
 * (a round trip; in an outage it still returns SLUICE_ALLOW, with
 * remaining and retry_after_ns 0 and the flag fail_open would give,
 * SLUICE_REDIS_F_FAILED_OPEN or _CLOSED, counted as such in the stats).
 * Returns SLUICE_ALLOW, SLUICE_DENY (a limit, or an outage with fail_open 0:
 * see flags), or, charging nothing:
 *   -EINVAL       t NULL, or key NULL with len > 0;
 *   -E2BIG        cost above burst;
 *   -EPROTO       Redis answered with an error (never ALLOW);
 *   -ENOMEM;
 *   the local tier's errors (-ENAMETOOLONG, ...).
 * The local tier is checked read-only first (sluice_peek) and charged only
 * after the global limit admitted, so a global denial never spends local
 * capacity; a local charge that then loses a race to another thread denies
 * the request with the global unit spent (conservative, never over); res
 * then describes that local denial (SLUICE_REDIS_F_LOCAL, the local tier's
 * limit and retry_after_ns), and it counts in local_denied.
 * Waits for Redis at most timeout_ns plus an eighth of it, whatever other
 * callers do: one deadline (the call's start plus timeout_ns) bounds all of
 * its waits (connecting, every read of the reply, a NOSCRIPT reload, the
 * wait for the caller that sends its batch); the eighth is slack for
 * waking up.  An answer after the deadline is an outage, not a decision
 * (the units it charged in Redis, if any, stay charged: fewer admitted).
 */
SLUICE_REDIS_API int sluice_redis_acquire(sluice_redis_t *t, const void *key, size_t len,
                                          uint64_t cost, struct sluice_result *res);

/* Zeroes *out for NULL t. */
SLUICE_REDIS_API void sluice_redis_stats(sluice_redis_t *t, struct sluice_redis_stats *out);

/*
 * Asynchronous calls, for event-loop servers.  The tier gets its own
 * hiredis async connection, hooked into the application's loop by `attach`
 * (hiredis's adapters: redisLibeventAttach, redisLibevAttach, ...), and one
 * timer for its timeouts.  sluice_redis_attach_libevent() below does it for
 * libevent.  The async calls and the timer run on the loop's thread only;
 * sluice_redis_acquire() may still be used from other threads meanwhile.
 */
struct redisAsyncContext;

struct sluice_redis_loop {
    void *ctx; /* passed back to the hooks */
    /* Hook a new connection into the loop: 0, or a negative errno. */
    int (*attach)(void *ctx, struct redisAsyncContext *ac);
    /* Arm the tier's one timer to fire in delay_ns (replacing any earlier
     * arming; UINT64_MAX disarms); when it fires, call
     * sluice_redis_timer_fired(). */
    void (*timer)(void *ctx, uint64_t delay_ns);
    /* Optional: the tier is destroyed, ctx is no longer used. */
    void (*release)(void *ctx);
};

/*
 * Decision callback: rc is SLUICE_ALLOW, SLUICE_DENY, -EPROTO, the local
 * tier's errors, or -ECANCELED (the tier was destroyed first); res is valid
 * during the call only, and its flags say as for sluice_redis_acquire().
 */
typedef void (*sluice_redis_cb)(void *arg, int rc, const struct sluice_result *res);

/*
 * Use the loop for the asynchronous calls (once per tier; *loop is copied).
 * 0, -EINVAL (NULL t or loop, no attach or timer hook), -EBUSY (already
 * attached), -ENOMEM.
 */
SLUICE_REDIS_API int sluice_redis_attach(sluice_redis_t *t, const struct sluice_redis_loop *loop);

/* The timer armed through sluice_redis_loop.timer fired: time calls out. */
SLUICE_REDIS_API void sluice_redis_timer_fired(sluice_redis_t *t);

/*
 * As sluice_redis_acquire(), without ever blocking: cb(arg, rc, res) is
 * called exactly once, from the loop's thread, unless this returns a
 * negative errno.  Decisions made in-process (the local tier, a lease hit,
 * a cached denial, Redis known down with reconnection not yet due) call cb
 * before returning, and return 1; otherwise 0, and cb runs from the loop
 * when Redis answers, or when timeout_ns has passed (an outage: fail open
 * or closed, with the flag).
 * Errors, cb not called: -EINVAL (t or cb NULL, key NULL with len > 0),
 * -E2BIG (cost above burst), -ENOTCONN (not attached), -ENOMEM.
 */
SLUICE_REDIS_API int sluice_redis_acquire_async(sluice_redis_t *t, const void *key, size_t len,
                                                uint64_t cost, sluice_redis_cb cb, void *arg);

#ifdef __cplusplus
}
#endif

/*
 * libevent glue, header-only so that libsluice-redis does not depend on
 * libevent: include <hiredis/adapters/libevent.h> before this header, then
 *     sluice_redis_attach_libevent(t, base);
 * Returns as sluice_redis_attach().
 */
#if defined(__HIREDIS_LIBEVENT_H__) && !defined(SLUICE_REDIS_LIBEVENT_GLUE)
#define SLUICE_REDIS_LIBEVENT_GLUE
#include <errno.h>
#include <stdlib.h>

struct sluice_redis_libevent_ {
    struct event_base *base;
    struct event *timer;
    sluice_redis_t *t;
};

static void sluice_redis_libevent_fire_(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sluice_redis_timer_fired(((struct sluice_redis_libevent_ *)arg)->t);
}

static int sluice_redis_libevent_attach_(void *ctx, struct redisAsyncContext *ac)
{
    return redisLibeventAttach(ac, ((struct sluice_redis_libevent_ *)ctx)->base) == REDIS_OK
               ? 0
               : -ENOMEM;
}

static void sluice_redis_libevent_timer_(void *ctx, uint64_t delay_ns)
{
    struct sluice_redis_libevent_ *g = (struct sluice_redis_libevent_ *)ctx;
    struct timeval tv;

    if (delay_ns == UINT64_MAX) {
        evtimer_del(g->timer);
        return;
    }
    tv.tv_sec = (time_t)(delay_ns / 1000000000u);
    tv.tv_usec = (suseconds_t)(delay_ns % 1000000000u / 1000u + 1); /* never early */
    evtimer_add(g->timer, &tv);
}

static void sluice_redis_libevent_release_(void *ctx)
{
    struct sluice_redis_libevent_ *g = (struct sluice_redis_libevent_ *)ctx;

    event_free(g->timer);
    free(g);
}

static inline int sluice_redis_attach_libevent(sluice_redis_t *t, struct event_base *base)
{
    struct sluice_redis_libevent_ *g;
    struct sluice_redis_loop loop;
    int rc;

    if (t == NULL || base == NULL)
        return -EINVAL;
    if ((g = (struct sluice_redis_libevent_ *)calloc(1, sizeof(*g))) == NULL)
        return -ENOMEM;
    g->base = base;
    g->t = t;
    if ((g->timer = evtimer_new(base, sluice_redis_libevent_fire_, g)) == NULL) {
        free(g);
        return -ENOMEM;
    }
    loop.ctx = g;
    loop.attach = sluice_redis_libevent_attach_;
    loop.timer = sluice_redis_libevent_timer_;
    loop.release = sluice_redis_libevent_release_;
    if ((rc = sluice_redis_attach(t, &loop)) != 0)
        sluice_redis_libevent_release_(g);
    return rc;
}
#endif

#endif
