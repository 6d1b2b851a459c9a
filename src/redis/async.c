/*
 * Asynchronous calls on the application's event loop: a hiredis async
 * connection of the tier's own, hooked in by the application's adapter,
 * and one timer.  Everything here runs on the loop's thread (hiredis's
 * async API is single-threaded), so the pending list needs no lock; the
 * leases and counters it shares with synchronous callers have their own.
 *
 * Timeouts: calls are pending in arrival order, so the first has the
 * earliest deadline and the one timer is armed for it.  When it passes,
 * Redis is too slow: the connection is freed, which makes hiredis answer
 * every pending call with no reply (an outage: fail open or closed), and
 * the next call reconnects once reconnect_ns allows.
 */
#include <errno.h>
#include <hiredis/async.h>
#include <stdlib.h>
#include <string.h>

#include "tier.h"

struct sr_areq {
    struct sr_areq *prev, *next;
    struct sluice_redis *t;
    uint64_t cost, deadline;
    sluice_redis_cb cb;
    void *arg;
    int retried; /* sent again as EVAL after NOSCRIPT */
    size_t len;  /* of the caller's key, at rkey + plen */
    char rkey[]; /* prefix + key */
};

struct sr_async {
    struct sluice_redis_loop loop;
    redisAsyncContext *ac;
    uint64_t next_connect;
    struct sr_areq *head, *tail; /* pending, by deadline */
    int destroying;
    int have_sha;
    char sha[41];
};

static void sr_aunlink(struct sr_async *a, struct sr_areq *q)
{
    *(q->prev ? &q->prev->next : &a->head) = q->next;
    *(q->next ? &q->next->prev : &a->tail) = q->prev;
}

static void sr_acomplete(struct sr_areq *q, int status, const struct sr_reply *rep)
{
    struct sluice_redis *t = q->t;
    struct sr_async *a = t->async;
    struct sluice_result res;
    int rc;

    sr_aunlink(a, q);
    memset(&res, 0, sizeof(res));
    if (a->destroying)
        rc = -ECANCELED;
    else
        rc = sr_finish(t, q->rkey + t->plen, q->len, q->cost, status, rep,
                       q->deadline - t->cfg.timeout_ns, &res);
    q->cb(q->arg, rc, &res);
    free(q);
}

static int sr_asend(struct sr_async *a, struct sr_areq *q);

static void sr_areply(redisAsyncContext *ac, void *reply, void *priv)
{
    struct sr_areq *q = priv;
    struct sr_async *a = q->t->async;
    redisReply *r = reply;
    struct sr_reply rep;

    memset(&rep, 0, sizeof(rep));
    if (r == NULL) { /* connection gone or freed on a timeout */
        sr_acomplete(q, SR_DOWN, &rep);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && !q->retried &&
        a->ac == ac) {
        /* Redis restarted or flushed its scripts: EVAL loads it again */
        q->retried = 1;
        a->have_sha = 0;
        if (sr_asend(a, q) == 0)
            return;
    }
    sr_acomplete(q, sr_parse_reply(r, 0, &rep), &rep);
}

static void sr_aloaded(redisAsyncContext *ac, void *reply, void *priv)
{
    struct sluice_redis *t = ac->data;
    redisReply *r = reply;

    (void)priv;
    if (r != NULL && r->type == REDIS_REPLY_STRING && r->len < (int)sizeof(t->async->sha) &&
        t->async->ac == ac) {
        memcpy(t->async->sha, r->str, (size_t)r->len + 1);
        t->async->have_sha = 1;
    }
}

static void sr_aconnected(const redisAsyncContext *ac, int status)
{
    struct sluice_redis *t = ac->data;

    /* on failure hiredis frees the context after this call */
    if (status != REDIS_OK && t->async->ac == ac)
        t->async->ac = NULL;
}

static void sr_adisconnected(const redisAsyncContext *ac, int status)
{
    struct sluice_redis *t = ac->data;

    (void)status;
    if (t->async->ac == ac)
        t->async->ac = NULL;
}

static int sr_aconnect(struct sluice_redis *t)
{
    struct sr_async *a = t->async;
    uint64_t now = sr_now();
    redisAsyncContext *ac;

    if (a->ac != NULL)
        return 0;
    if (now < a->next_connect)
        return -1;
    a->next_connect = now + t->cfg.reconnect_ns;
    ac = redisAsyncConnect(t->host, t->cfg.port);
    if (ac == NULL)
        return -1;
    ac->data = t;
    if (ac->err || a->loop.attach(a->loop.ctx, ac) != 0) {
        redisAsyncFree(ac);
        return -1;
    }
    redisAsyncSetConnectCallback(ac, sr_aconnected);
    redisAsyncSetDisconnectCallback(ac, sr_adisconnected);
    a->ac = ac;
    a->have_sha = 0;
    redisAsyncCommand(ac, sr_aloaded, NULL, "SCRIPT LOAD %s", sr_script);
    return 0;
}

static int sr_asend(struct sr_async *a, struct sr_areq *q)
{
    struct sluice_redis *t = q->t;
    unsigned long long want = sr_want(t, q->cost), need = q->cost;
    size_t rlen = t->plen + q->len;
    int rc;

    atomic_fetch_add_explicit(&t->redis_calls, 1, memory_order_relaxed);
    if (a->have_sha)
        rc = redisAsyncCommand(a->ac, sr_areply, q, "EVALSHA %s 1 %b %s %s %s %llu %llu", a->sha,
                               q->rkey, rlen, t->par.pbuf, t->par.qbuf, t->par.bbuf, want, need);
    else
        rc = redisAsyncCommand(a->ac, sr_areply, q, "EVAL %s 1 %b %s %s %s %llu %llu", sr_script,
                               q->rkey, rlen, t->par.pbuf, t->par.qbuf, t->par.bbuf, want, need);
    return rc == REDIS_OK ? 0 : -1;
}

SLUICE_REDIS_API int sluice_redis_attach(sluice_redis_t *t, const struct sluice_redis_loop *loop)
{
    if (t == NULL || loop == NULL || loop->attach == NULL || loop->timer == NULL)
        return -EINVAL;
    if (t->async != NULL)
        return -EBUSY;
    if ((t->async = calloc(1, sizeof(*t->async))) == NULL)
        return -ENOMEM;
    t->async->loop = *loop;
    return 0;
}

SLUICE_REDIS_API void sluice_redis_timer_fired(sluice_redis_t *t)
{
    struct sr_async *a;
    uint64_t now = sr_now();

    if (t == NULL || (a = t->async) == NULL)
        return;
    if (a->head != NULL && a->head->deadline <= now && a->ac != NULL) {
        redisAsyncContext *ac = a->ac;

        a->ac = NULL;
        redisAsyncFree(ac); /* answers every pending call: outages */
    }
    if (a->head != NULL)
        a->loop.timer(a->loop.ctx, a->head->deadline > now ? a->head->deadline - now : 0);
}

SLUICE_REDIS_API int sluice_redis_acquire_async(sluice_redis_t *t, const void *key, size_t len,
                                                uint64_t cost, sluice_redis_cb cb, void *arg)
{
    struct sluice_result res;
    struct sr_async *a;
    struct sr_areq *q;
    struct sr_reply rep;
    int rc, done;

    if (t == NULL || cb == NULL || (key == NULL && len > 0))
        return -EINVAL;
    if (cost > t->cfg.burst)
        return -E2BIG;
    if ((a = t->async) == NULL || a->destroying)
        return -ENOTCONN;
    if ((q = malloc(sizeof(*q) + t->plen + len)) == NULL)
        return -ENOMEM;
    memset(&res, 0, sizeof(res));
    rc = sr_precheck(t, key, len, cost, &res, &done);
    if (done) {
        free(q);
        cb(arg, rc, &res);
        return 1;
    }
    memset(q, 0, sizeof(*q));
    q->t = t;
    q->cost = cost;
    q->cb = cb;
    q->arg = arg;
    q->len = len;
    q->deadline = sr_now() + t->cfg.timeout_ns;
    memcpy(q->rkey, t->prefix, t->plen);
    if (len > 0)
        memcpy(q->rkey + t->plen, key, len);
    q->prev = a->tail;
    *(a->tail ? &a->tail->next : &a->head) = q;
    a->tail = q;
    if (sr_aconnect(t) != 0 || sr_asend(a, q) != 0) {
        memset(&rep, 0, sizeof(rep));
        sr_acomplete(q, SR_DOWN, &rep);
        return 1;
    }
    if (a->head == q)
        a->loop.timer(a->loop.ctx, t->cfg.timeout_ns);
    return 0;
}

void sr_async_destroy(struct sluice_redis *t)
{
    struct sr_async *a = t->async;

    if (a == NULL)
        return;
    a->destroying = 1; /* pending calls complete with -ECANCELED */
    if (a->ac != NULL) {
        redisAsyncContext *ac = a->ac;

        a->ac = NULL;
        redisAsyncFree(ac);
    }
    a->loop.timer(a->loop.ctx, UINT64_MAX);
    if (a->loop.release != NULL)
        a->loop.release(a->loop.ctx);
    free(a);
    t->async = NULL;
}
