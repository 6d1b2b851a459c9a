/*
 * Internals of libsluice-redis shared by its files: tier.c (the public
 * calls, leases and the denial cache, stats, logging), script.c (the Lua
 * GCRA and its exact integer parameters), pipeline.c (the synchronous
 * connection shared by concurrent callers) and async.c (hiredis's async
 * API on the application's event loop).
 */
#ifndef SLUICE_REDIS_TIER_H
#define SLUICE_REDIS_TIER_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sluice_redis.h"

#define SR_LEASE_BUCKETS 1024
#define SR_LEASE_LOCKS 64 /* stripes: a lease hit takes one short lock */
#define SR_BATCH_MAX 256  /* calls in one pipelined round trip at most */
#define SR_CONNS_MAX 8
/* timeout_ns at most: an hour, so a deadline (now + timeout_ns) never wraps */
#define SR_TIMEOUT_MAX (UINT64_C(3600) * 1000000000u)

/* The script's integer parameters: T = p/q us per unit, tau = burst * T. */
struct sr_params {
    uint64_t p, q, burst;
    char pbuf[24], qbuf[24], bbuf[24]; /* as sent */
};

/* What Redis answered for one call. */
struct sr_reply {
    uint64_t granted;   /* units charged; 0 with need > 0 is a denial */
    uint64_t retry_ns;  /* on a denial: when `need` units could pass */
    uint64_t remaining; /* units admissible now after this call */
    uint64_t reset_ns;  /* until the key is fully replenished */
};

/* Outcome of one call to Redis, beyond the reply itself. */
enum {
    SR_OK = 0,
    SR_DOWN = -1,  /* unreachable, timed out, or reconnection not yet due */
    SR_ERROR = -2, /* Redis answered with an error, or a reply of another shape */
};

/* One synchronous caller's request, on its stack, queued for a round trip. */
enum { SR_QUEUED, SR_TAKEN, SR_LEAD, SR_DONE };
struct sr_call {
    struct sr_call *next;
    const char *rkey; /* prefix + key */
    size_t rlen;
    uint64_t want, need, deadline;
    struct sr_reply reply;
    int status;           /* SR_OK, SR_DOWN, SR_ERROR; valid once SR_DONE */
    struct sr_conn *lead; /* the connection handed over with SR_LEAD */
    struct sr_call **slot; /* while SR_TAKEN: the leader's pointer to us (under the lock) */
    /* SR_QUEUED -> SR_TAKEN (in a leader's batch) -> SR_DONE, or
     * SR_QUEUED -> SR_LEAD (send the next batch); at its deadline a caller
     * gives up, under the queue's lock: unlinked if SR_QUEUED, and if
     * SR_TAKEN its slot in the leader's batch cleared (the leader works on
     * its own copy of the request and delivers only to slots still set).
     * The caller sleeps on it (a futex).  Release stores of SR_LEAD and
     * SR_DONE publish lead, status and reply to the caller's acquire load. */
    _Atomic int state;
};

/* A call of a batch as its leader keeps it: the request copied (its caller
 * may give up and return meanwhile), and the answer. */
struct sr_req {
    const char *rkey;
    size_t rlen, koff; /* the key at kbuf + koff */
    uint64_t want, need, deadline;
    struct sr_reply reply;
    int status;
};

/* One synchronous connection; all but `busy` belong to its leader.  The
 * socket is non-blocking: every wait is a ppoll() bounded by a deadline. */
struct sr_conn {
    int busy;              /* a leader owns it (under sr_pipe.lock) */
    redisContext *c;
    uint64_t next_connect;
    char sha[41];          /* of sr_script as loaded */
    struct sr_req *req;    /* SR_BATCH_MAX: the batch being sent */
    struct sr_call **taken; /* SR_BATCH_MAX: their callers, NULL once gone (under the lock) */
    char *kbuf;            /* the batch's keys */
    size_t kcap;
};

/* The synchronous connections: a leader per connection does the I/O of a
 * batch while later callers queue up for the next one. */
struct sr_pipe {
    pthread_mutex_t lock;  /* the queue and the busy flags; never held during I/O */
    struct sr_call *head, **tail;
    unsigned nconn;
    struct sr_conn conn[SR_CONNS_MAX];
};

struct sr_lease {
    struct sr_lease *next;
    uint64_t units, expires;
    uint64_t deny_until; /* Redis said no to deny_need units until then */
    uint64_t deny_need;
    size_t len;
    char key[];
};

struct sr_async;

struct sluice_redis {
    struct sluice_redis_config cfg;
    char *host, *prefix;
    size_t plen;
    struct sr_params par;
    struct sr_pipe pipe;
    struct sr_async *async;        /* NULL until sluice_redis_attach */
    pthread_mutex_t lease_lock[SR_LEASE_LOCKS];
    struct sr_lease *leases[SR_LEASE_BUCKETS];
    /* Counters only: relaxed everywhere, nothing is ordered by them. */
    _Atomic uint64_t requests, local_denied, redis_calls, redis_allowed, redis_denied, lease_hits,
        cached_denials, errors, failed_open, failed_closed, error_replies, round_trips;
    /* Logging: the next time a message of each kind may go out, and how
     * many were held back meanwhile (relaxed: a lost race only changes
     * which thread logs). */
    _Atomic uint64_t log_next[3], log_held[3];
    _Atomic int down; /* last call found Redis unreachable (relaxed: a hint for logging) */
};

extern const char sr_script[];

uint64_t sr_now(void);
int sr_params_init(struct sr_params *par, uint64_t count, uint64_t period_ns, uint64_t burst);
int sr_parse_reply(const redisReply *r, size_t i, struct sr_reply *out);

int sr_pipe_init(struct sr_pipe *pp, unsigned nconn);
void sr_pipe_destroy(struct sr_pipe *pp);
int sr_pipe_call(struct sluice_redis *t, struct sr_call *call);

void sr_async_destroy(struct sluice_redis *t);

/* Shared by the sync and async paths of tier.c and async.c. */
enum { SR_LOG_OUTAGE = 0, SR_LOG_REPLY = 1, SR_LOG_RECOVERY = 2 };
void sr_log(struct sluice_redis *t, int kind, int level, const char *what);
int sr_precheck(struct sluice_redis *t, const void *key, size_t len, uint64_t cost,
                struct sluice_result *res, int *done);
/* Turn what Redis said (status, rep) into the decision; asked: when the
 * call was made (before Redis read its TIME), the time a denial's wait
 * counts from. */
int sr_finish(struct sluice_redis *t, const void *key, size_t len, uint64_t cost, int status,
              const struct sr_reply *rep, uint64_t asked, struct sluice_result *res);
char *sr_full_key(struct sluice_redis *t, const void *key, size_t len, char *buf, size_t cap);
uint64_t sr_want(struct sluice_redis *t, uint64_t cost);

#endif
