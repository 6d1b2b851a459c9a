/*
 * The synchronous connections, shared by concurrent callers by combining:
 * a caller that finds a connection idle becomes its leader, takes every
 * queued call (its own first), sends them as one script call (one per hash
 * slot with cfg.cluster) and reads the reply with no lock held; calls
 * arriving while every connection is busy queue up, and a leader that is
 * done hands its connection to the first of them, which sends the next
 * batch.  Two connections keep Redis busy while one leader wakes its
 * callers and hands over.  One caller alone pays one round trip as before;
 * n callers share round trips and script calls.
 *
 * Every caller's wait is bounded by one deadline, its call's start plus
 * timeout_ns, for everything it waits on.  The leader's socket is
 * non-blocking and each of its waits (connecting aside, see sr_connect) is a
 * ppoll() for the time left until the batch's deadline, the earliest of its
 * calls' (its own: calls queue in arrival order): a reply that dribbles in,
 * or a NOSCRIPT that takes three round trips, ends at that deadline, not a
 * socket timeout per read.  ppoll() takes a timespec, so a small timeout is
 * not rounded up to the kernel's tick as SO_RCVTIMEO is.  A queued call and
 * a call in a leader's batch sleep until their own deadline at most, and
 * then give up (an outage): the leader works on its own copy of each
 * request, reads the whole reply whatever became of its callers (the
 * connection stays in step), and delivers only to those still waiting.
 * A caller handed the lead after its deadline passes it on at once.
 */
#include <errno.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include "tier.h"

int sr_pipe_init(struct sr_pipe *pp, unsigned nconn)
{
    memset(pp, 0, sizeof(*pp));
    pp->tail = &pp->head;
    pp->nconn = nconn;
    if (pthread_mutex_init(&pp->lock, NULL) != 0)
        return -ENOMEM;
    for (unsigned i = 0; i < nconn; i++) {
        pp->conn[i].req = malloc(SR_BATCH_MAX * sizeof(*pp->conn[i].req));
        pp->conn[i].taken = malloc(SR_BATCH_MAX * sizeof(*pp->conn[i].taken));
        if (pp->conn[i].req == NULL || pp->conn[i].taken == NULL) {
            sr_pipe_destroy(pp); /* the others are NULL: free(NULL) */
            return -ENOMEM;
        }
    }
    return 0;
}

void sr_pipe_destroy(struct sr_pipe *pp)
{
    for (unsigned i = 0; i < pp->nconn; i++) {
        if (pp->conn[i].c != NULL)
            redisFree(pp->conn[i].c);
        free(pp->conn[i].req);
        free(pp->conn[i].taken);
        free(pp->conn[i].kbuf);
    }
    pthread_mutex_destroy(&pp->lock);
}

static void sr_drop(struct sr_conn *pp)
{
    redisFree(pp->c);
    pp->c = NULL;
}

/* Wait until fd is ready for `ev` (or in error: the I/O that follows says
 * which), until `deadline` at most: 1 ready, 0 the deadline passed, -1 a
 * failure of ppoll itself. */
static int sr_poll(int fd, short ev, uint64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = ev};
        uint64_t now = sr_now(), left;
        struct timespec ts;
        int r;

        if (now >= deadline)
            return 0;
        left = deadline - now;
        ts.tv_sec = (time_t)(left / 1000000000u);
        ts.tv_nsec = (long)(left % 1000000000u);
        r = ppoll(&p, 1, &ts, NULL);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
        /* timed out or interrupted: the clock decides */
    }
}

/* Send what is appended and read one reply, by `deadline`: 0 and *out, or
 * -1 (timed out, or the connection failed: it is out of step, drop it). */
static int sr_reply(redisContext *c, uint64_t deadline, redisReply **out)
{
    void *r = NULL;
    int done = 0;

    for (;;) {
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return -1;
        if (done)
            break;
        if (sr_poll(c->fd, POLLOUT, deadline) <= 0)
            return -1;
    }
    for (;;) {
        if (redisGetReplyFromReader(c, &r) != REDIS_OK)
            return -1;
        if (r != NULL) {
            *out = r;
            return 0;
        }
        if (sr_poll(c->fd, POLLIN, deadline) <= 0 || redisBufferRead(c) != REDIS_OK)
            return -1;
    }
}

/* A TCP connection to Redis, made within `deadline`: connected without
 * blocking and waited for here, to the nanosecond (hiredis's own connect
 * timeout polls in whole milliseconds, rounded up: an outside tester saw
 * calls with a 100 us timeout wait 1.1 ms on a listener that never
 * accepted).  Non-blocking from then on: hiredis leaves the waiting to us. */
static redisContext *sr_dial(struct sluice_redis *t, uint64_t deadline)
{
    redisContext *c = redisConnectNonBlock(t->host, t->cfg.port);
    int err = 0;
    socklen_t elen = sizeof(err);

    if (c == NULL || c->err || sr_poll(c->fd, POLLOUT, deadline) <= 0 ||
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    /* hiredis 1.x sets TCP_NODELAY only on its blocking path: without it a
     * pipeline's last segment can wait out Redis's delayed ACK (40 ms),
     * an outage against a healthy Redis */
    (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
    c->flags &= ~REDIS_BLOCK;
    return c;
}

/* Leader only.  A connection with the script loaded, within `deadline`.  A
 * Redis that answers SCRIPT LOAD with an error (the command renamed away,
 * an ACL, NOAUTH, LOADING) is reachable, not an outage: the connection is kept without a script, so each script call
 * meets NOSCRIPT, loads again and gets the error as its reply (SR_ERROR,
 * never failing open); dropped, the calls until the next connection
 * would have been outages, and failed open. */
static int sr_connect(struct sluice_redis *t, struct sr_conn *pp, uint64_t deadline)
{
    uint64_t now = sr_now();
    redisReply *r = NULL;

    if (pp->c != NULL)
        return 0;
    if (now < pp->next_connect || now >= deadline)
        return -1;
    pp->next_connect = now + t->cfg.reconnect_ns;
    if ((pp->c = sr_dial(t, deadline)) == NULL)
        return -1;
    if (redisAppendCommand(pp->c, "SCRIPT LOAD %s", sr_script) != REDIS_OK ||
        sr_reply(pp->c, deadline, &r) != 0)
        goto fail;
    if (r->type == REDIS_REPLY_STRING && r->len < (int)sizeof(pp->sha))
        memcpy(pp->sha, r->str, (size_t)r->len + 1);
    else if (r->type == REDIS_REPLY_ERROR)
        pp->sha[0] = '\0'; /* no script: every EVALSHA meets NOSCRIPT */
    else
        goto fail; /* not Redis as we know it */
    freeReplyObject(r);
    return 0;
fail:
    if (r != NULL)
        freeReplyObject(r);
    if (pp->c != NULL)
        sr_drop(pp);
    return -1;
}

static int sr_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag, if it has
 * a non-empty one, else of the whole key. */
static unsigned sr_slot(const char *k, size_t len)
{
    size_t s = 0, e;
    uint16_t crc = 0;

    while (s < len && k[s] != '{')
        s++;
    for (e = s + 1; e < len && k[e] != '}'; e++)
        ;
    if (e < len && e > s + 1) {
        k += s + 1;
        len = e - s - 1;
    }
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)k[i] << 8);
        for (int j = 0; j < 8; j++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc & 16383u;
}

/* Order b[0..m) so that calls whose keys share a slot are adjacent, and
 * write in len[] the sizes of the groups that go out as one script call:
 * the whole batch, or with cfg.cluster one group per slot.  Returns the
 * number of groups. */
static size_t sr_group(struct sluice_redis *t, struct sr_req **b, size_t m, size_t *len)
{
    unsigned slot[SR_BATCH_MAX];
    size_t g = 0;

    if (!t->cfg.cluster) {
        len[0] = m;
        return 1;
    }
    for (size_t i = 0; i < m; i++) { /* insertion sort: m <= SR_BATCH_MAX, mostly short */
        struct sr_req *c = b[i];
        unsigned sl = sr_slot(c->rkey, c->rlen);
        size_t j = i;

        for (; j > 0 && slot[j - 1] > sl; j--) {
            slot[j] = slot[j - 1];
            b[j] = b[j - 1];
        }
        slot[j] = sl;
        b[j] = c;
    }
    for (size_t i = 0; i < m; i++) {
        if (i == 0 || slot[i] != slot[i - 1])
            len[g++] = 0;
        len[g - 1]++;
    }
    return g;
}

/* One EVALSHA for the n calls of g[]. */
static int sr_append(struct sluice_redis *t, struct sr_conn *pp, struct sr_req *const *g,
                     size_t n)
{
    const char *argv[6 + 3 * SR_BATCH_MAX];
    size_t lens[6 + 3 * SR_BATCH_MAX], a = 0;
    char nums[1 + 2 * SR_BATCH_MAX][24];

#define SR_ARG(p, l) (argv[a] = (p), lens[a++] = (l))
#define SR_NUM(i, v) (snprintf(nums[i], sizeof(nums[i]), "%llu", (unsigned long long)(v)), \
                      SR_ARG(nums[i], strlen(nums[i])))
    SR_ARG("EVALSHA", 7);
    SR_ARG(pp->sha, strlen(pp->sha));
    SR_NUM(0, n);
    for (size_t i = 0; i < n; i++)
        SR_ARG(g[i]->rkey, g[i]->rlen);
    SR_ARG(t->par.pbuf, strlen(t->par.pbuf));
    SR_ARG(t->par.qbuf, strlen(t->par.qbuf));
    SR_ARG(t->par.bbuf, strlen(t->par.bbuf));
    for (size_t i = 0; i < n; i++) {
        SR_NUM(1 + 2 * i, g[i]->want);
        SR_NUM(2 + 2 * i, g[i]->need);
    }
#undef SR_NUM
#undef SR_ARG
    return redisAppendCommandArgv(pp->c, (int)a, argv, lens);
}

/* Leader only, no lock held: the n calls of pp->req as one pipeline (one
 * script call per group, see sr_group), and a second pipeline for those
 * that met NOSCRIPT (Redis restarted or flushed its scripts), all by the
 * batch's earliest deadline. */
static void sr_send(struct sluice_redis *t, struct sr_conn *pp, size_t n)
{
    struct sr_req *b[SR_BATCH_MAX]; /* the calls still to answer */
    size_t glen[SR_BATCH_MAX], ng, m = 0, retry;
    uint64_t now = sr_now(), deadline = UINT64_MAX;

    for (size_t i = 0; i < n; i++) {
        pp->req[i].status = SR_DOWN;
        if (pp->req[i].deadline <= now)
            continue; /* its time is up: an outage for that caller */
        if (pp->req[i].deadline < deadline)
            deadline = pp->req[i].deadline;
        b[m++] = &pp->req[i];
    }
    if (m == 0 || sr_connect(t, pp, deadline) != 0)
        return;
    for (int attempt = 0; attempt < 2 && m > 0; attempt++) {
        ng = sr_group(t, b, m, glen);
        for (size_t i = 0, at = 0; i < ng; at += glen[i++])
            if (sr_append(t, pp, b + at, glen[i]) != REDIS_OK)
                goto broken;
        atomic_fetch_add_explicit(&t->round_trips, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->redis_calls, m, memory_order_relaxed);
        retry = 0;
        for (size_t i = 0, at = 0; i < ng; at += glen[i++]) {
            redisReply *r;

            if (sr_reply(pp->c, deadline, &r) != 0)
                goto broken; /* timed out or gone: these and the rest are outages */
            for (size_t j = 0; j < glen[i]; j++) {
                if (sr_noscript(r) && attempt == 0)
                    b[retry++] = b[at + j]; /* retry <= at + j: no overwrite */
                else
                    b[at + j]->status = sr_parse_reply(r, j, &b[at + j]->reply);
            }
            freeReplyObject(r);
        }
        m = retry;
        if (m > 0) {
            redisReply *r;

            if (redisAppendCommand(pp->c, "SCRIPT LOAD %s", sr_script) != REDIS_OK ||
                sr_reply(pp->c, deadline, &r) != 0)
                goto broken;
            if (r->type == REDIS_REPLY_STRING && r->len < (int)sizeof(pp->sha))
                memcpy(pp->sha, r->str, (size_t)r->len + 1);
            else
                for (size_t i = 0; i < m; i++)
                    b[i]->status = SR_ERROR;
            freeReplyObject(r);
        }
    }
    return;
broken:
    /* a context that timed out mid-pipeline is out of step: drop it */
    for (size_t i = 0; i < m; i++)
        b[i]->status = SR_DOWN;
    sr_drop(pp);
}

/* Under the lock: copy call c as request i of pp's batch.  -1 (out of
 * memory for its key): leave it for the next batch. */
static int sr_take(struct sr_conn *pp, struct sr_call *c, size_t i, size_t *kused)
{
    struct sr_req *q = &pp->req[i];

    if (*kused + c->rlen > pp->kcap) {
        size_t cap = pp->kcap ? pp->kcap : 4096;
        char *k;

        while (cap < *kused + c->rlen)
            cap *= 2;
        if ((k = realloc(pp->kbuf, cap)) == NULL)
            return -1;
        pp->kbuf = k;
        pp->kcap = cap;
    }
    memcpy(pp->kbuf + *kused, c->rkey, c->rlen);
    q->koff = *kused;
    q->rlen = c->rlen;
    q->want = c->want;
    q->need = c->need;
    q->deadline = c->deadline;
    *kused += c->rlen;
    pp->taken[i] = c;
    c->slot = &pp->taken[i];
    return 0;
}

/*
 * Callers sleep on their call's state word with the futex system call, not
 * on a condition variable: a leader wakes each caller of its batch after
 * releasing the queue's lock, so the woken callers do not pile up on that
 * lock one after another (with a condition variable signalled under the
 * lock, that convoy cost a context switch per caller per round trip).
 * Waking an address whose caller has already returned is harmless: a
 * futex wake only names an address, and every sleeper re-checks its state.
 */
static void sr_sleep(_Atomic int *state, int seen, const struct timespec *until)
{
    /* FUTEX_WAIT_BITSET: an absolute CLOCK_MONOTONIC deadline (or none) */
    syscall(SYS_futex, (int *)state, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, seen, until, NULL,
            FUTEX_BITSET_MATCH_ANY);
}

static void sr_wake(_Atomic int *state)
{
    syscall(SYS_futex, (int *)state, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
}

/* Queue `call` and return its status once answered, or SR_DOWN at its
 * deadline at the latest. */
int sr_pipe_call(struct sluice_redis *t, struct sr_call *call)
{
    struct sr_pipe *pp = &t->pipe;
    struct sr_call *wake[SR_BATCH_MAX], *heir = NULL;
    struct sr_conn *conn;
    struct timespec until;
    size_t n = 0, nw = 0, kused = 0;
    int s, status;

    until.tv_sec = (time_t)(call->deadline / 1000000000u);
    until.tv_nsec = (long)(call->deadline % 1000000000u);
    call->next = NULL;
    call->lead = NULL;
    call->slot = NULL;
    call->status = SR_DOWN;
    atomic_init(&call->state, SR_QUEUED);

    pthread_mutex_lock(&pp->lock);
    /* A connection is idle only while nobody queues (a leader that is done
     * hands its connection to the first in line), so a caller either leads
     * at once or queues.  A leader is never in the queue: no other leader
     * can pick it as its heir too. */
    for (unsigned i = 0; i < pp->nconn && pp->head == NULL; i++)
        if (!pp->conn[i].busy) {
            pp->conn[i].busy = 1;
            call->lead = &pp->conn[i];
            atomic_store_explicit(&call->state, SR_LEAD, memory_order_relaxed); /* our own */
            break;
        }
    if (call->lead == NULL) {
        *pp->tail = call;
        pp->tail = &call->next;
    }
    pthread_mutex_unlock(&pp->lock);

    while ((s = atomic_load_explicit(&call->state, memory_order_acquire)) != SR_LEAD) {
        if (s == SR_DONE)
            return call->status;
        if (sr_now() >= call->deadline) {
            pthread_mutex_lock(&pp->lock); /* the queue, the slots, the state under it */
            s = atomic_load_explicit(&call->state, memory_order_relaxed);
            if (s == SR_QUEUED) {
                /* still queued at the deadline: leave the queue, an outage */
                struct sr_call **pc = &pp->head;

                while (*pc != call)
                    pc = &(*pc)->next;
                *pc = call->next;
                if (pp->tail == &call->next)
                    pp->tail = pc;
                pthread_mutex_unlock(&pp->lock);
                return SR_DOWN;
            }
            if (s == SR_TAKEN) {
                /* in a batch not answered yet: the leader answers the others
                 * and drops ours (it works on a copy), an outage */
                *call->slot = NULL;
                pthread_mutex_unlock(&pp->lock);
                return SR_DOWN;
            }
            pthread_mutex_unlock(&pp->lock);
            continue; /* answered, or made leader, meanwhile */
        }
        sr_sleep(&call->state, s, &until);
    }

    /* Leader: our call first, then everyone queued since, unless our own
     * time is up (then the connection goes on to the next in line at once:
     * leading a batch would keep us past our deadline). */
    conn = call->lead;
    pthread_mutex_lock(&pp->lock);
    if (sr_now() < call->deadline && sr_take(conn, call, n, &kused) == 0) {
        n++;
        while (pp->head != NULL && n < SR_BATCH_MAX && sr_take(conn, pp->head, n, &kused) == 0) {
            atomic_store_explicit(&pp->head->state, SR_TAKEN, memory_order_relaxed);
            pp->head = pp->head->next;
            n++;
        }
        if (pp->head == NULL)
            pp->tail = &pp->head;
    }
    pthread_mutex_unlock(&pp->lock);
    for (size_t i = 0; i < n; i++) /* kbuf is final now */
        conn->req[i].rkey = conn->kbuf + conn->req[i].koff;
    if (n > 0)
        sr_send(t, conn, n);
    pthread_mutex_lock(&pp->lock);
    status = n > 0 ? conn->req[0].status : SR_DOWN;
    if (n > 0)
        call->reply = conn->req[0].reply;
    for (size_t i = 1; i < n; i++) {
        struct sr_call *c = conn->taken[i];

        if (c == NULL)
            continue; /* gave up at its deadline: its answer is dropped */
        c->status = conn->req[i].status;
        c->reply = conn->req[i].reply;
        atomic_store_explicit(&c->state, SR_DONE, memory_order_release);
        wake[nw++] = c;
    }
    if (pp->head != NULL) { /* hand the connection to the next in line */
        heir = pp->head;
        pp->head = heir->next;
        if (pp->head == NULL)
            pp->tail = &pp->head;
        heir->lead = conn;
        atomic_store_explicit(&heir->state, SR_LEAD, memory_order_release);
    } else {
        conn->busy = 0;
    }
    pthread_mutex_unlock(&pp->lock);
    if (heir != NULL)
        sr_wake(&heir->state);
    for (size_t i = 0; i < nw; i++)
        sr_wake(&wake[i]->state); /* it may have returned already: harmless */
    return status;
}
