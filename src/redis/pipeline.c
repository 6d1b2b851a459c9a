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
 * Every caller's wait is bounded by its own deadline (now + timeout_ns, plus
 * at most an eighth of it, see sr_send): a queued call gives up at its
 * deadline and unlinks itself; a call in a batch waits for the leader,
 * whose socket timeout is the earliest deadline of the batch, and calls
 * queue in arrival order, so that is never later than any waiter's own
 * deadline.  Connecting is bounded the same way.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/time.h>
#include <time.h>

#include "tier.h"

static struct timeval sr_tv(uint64_t ns)
{
    if (ns < 1000)
        ns = 1000; /* a zero timeval would mean "no timeout" */
    return (struct timeval){.tv_sec = (time_t)(ns / 1000000000u),
                            .tv_usec = (suseconds_t)(ns % 1000000000u / 1000u)};
}

int sr_pipe_init(struct sr_pipe *pp, unsigned nconn)
{
    memset(pp, 0, sizeof(*pp));
    pp->tail = &pp->head;
    pp->nconn = nconn;
    return pthread_mutex_init(&pp->lock, NULL) == 0 ? 0 : -ENOMEM;
}

void sr_pipe_destroy(struct sr_pipe *pp)
{
    for (unsigned i = 0; i < pp->nconn; i++)
        if (pp->conn[i].c != NULL)
            redisFree(pp->conn[i].c);
    pthread_mutex_destroy(&pp->lock);
}

static void sr_drop(struct sr_conn *pp)
{
    redisFree(pp->c);
    pp->c = NULL;
}

/* Leader only.  A connection with the script loaded, within `deadline`. */
static int sr_connect(struct sluice_redis *t, struct sr_conn *pp, uint64_t deadline)
{
    uint64_t now = sr_now();
    struct timeval tv;
    redisReply *r;

    if (pp->c != NULL)
        return 0;
    if (now < pp->next_connect || now >= deadline)
        return -1;
    pp->next_connect = now + t->cfg.reconnect_ns;
    tv = sr_tv(deadline - now);
    pp->c = redisConnectWithTimeout(t->host, t->cfg.port, tv);
    if (pp->c == NULL || pp->c->err || redisSetTimeout(pp->c, tv) != REDIS_OK)
        goto fail;
    pp->tv_ns = deadline - now;
    r = redisCommand(pp->c, "SCRIPT LOAD %s", sr_script);
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len >= (int)sizeof(pp->sha)) {
        if (r != NULL)
            freeReplyObject(r);
        goto fail;
    }
    memcpy(pp->sha, r->str, (size_t)r->len + 1);
    freeReplyObject(r);
    return 0;
fail:
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
static size_t sr_group(struct sluice_redis *t, struct sr_call **b, size_t m, size_t *len)
{
    unsigned slot[SR_BATCH_MAX];
    size_t g = 0;

    if (!t->cfg.cluster) {
        len[0] = m;
        return 1;
    }
    for (size_t i = 0; i < m; i++) { /* insertion sort: m <= SR_BATCH_MAX, mostly short */
        struct sr_call *c = b[i];
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
static int sr_append(struct sluice_redis *t, struct sr_conn *pp, struct sr_call *const *g,
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

/* Leader only, no lock held: the calls of the batch as one pipeline (one
 * script call per group, see sr_group), and a second pipeline for those
 * that met NOSCRIPT (Redis restarted or flushed its scripts). */
static void sr_send(struct sluice_redis *t, struct sr_conn *pp, struct sr_call *const *batch,
                    size_t n)
{
    struct sr_call *b[SR_BATCH_MAX]; /* the calls still to answer */
    size_t glen[SR_BATCH_MAX], ng, m = 0, retry;
    uint64_t now = sr_now(), deadline = UINT64_MAX;

    for (size_t i = 0; i < n; i++) {
        batch[i]->status = SR_DOWN;
        if (batch[i]->deadline <= now)
            continue; /* its time is up: an outage for that caller */
        if (batch[i]->deadline < deadline)
            deadline = batch[i]->deadline;
        b[m++] = batch[i];
    }
    if (m == 0 || sr_connect(t, pp, deadline) != 0)
        return;
    now = sr_now();
    if (now >= deadline)
        goto broken;
    /* Each read waits at most the socket timeout: set it to what is left of
     * the batch's time, but skip the two system calls when the one set is
     * within an eighth of the timeout of that (the usual case), so a wait
     * may overrun its deadline by timeout_ns / 8 at most. */
    if (pp->tv_ns > deadline - now + t->cfg.timeout_ns / 8 ||
        pp->tv_ns + t->cfg.timeout_ns / 8 < deadline - now) {
        if (redisSetTimeout(pp->c, sr_tv(deadline - now)) != REDIS_OK)
            goto broken;
        pp->tv_ns = deadline - now;
    }
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

            if (redisGetReply(pp->c, (void **)&r) != REDIS_OK || r == NULL)
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
            redisReply *r = redisCommand(pp->c, "SCRIPT LOAD %s", sr_script);

            if (r == NULL)
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
    /* a sync context that timed out mid-pipeline is out of step: drop it */
    sr_drop(pp);
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
    struct sr_call *batch[SR_BATCH_MAX], *heir = NULL;
    struct sr_conn *conn;
    struct timespec until;
    size_t n = 0;
    int s;

    until.tv_sec = (time_t)(call->deadline / 1000000000u);
    until.tv_nsec = (long)(call->deadline % 1000000000u);
    call->next = NULL;
    call->lead = NULL;
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
        if (s == SR_QUEUED && sr_now() >= call->deadline) {
            pthread_mutex_lock(&pp->lock); /* the queue, and the state under it */
            if (atomic_load_explicit(&call->state, memory_order_relaxed) == SR_QUEUED) {
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
            pthread_mutex_unlock(&pp->lock);
            continue;
        }
        /* queued: until the deadline; taken: the leader's socket timeout is
         * the batch's earliest deadline, never later than ours */
        sr_sleep(&call->state, s, s == SR_QUEUED ? &until : NULL);
    }

    /* Leader: our call first, then everyone queued since. */
    conn = call->lead;
    batch[n++] = call;
    pthread_mutex_lock(&pp->lock);
    while (pp->head != NULL && n < SR_BATCH_MAX) {
        batch[n] = pp->head;
        atomic_store_explicit(&batch[n++]->state, SR_TAKEN, memory_order_relaxed);
        pp->head = pp->head->next;
    }
    if (pp->head == NULL)
        pp->tail = &pp->head;
    pthread_mutex_unlock(&pp->lock);
    sr_send(t, conn, batch, n);
    pthread_mutex_lock(&pp->lock);
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
    for (size_t i = 1; i < n; i++) {
        atomic_store_explicit(&batch[i]->state, SR_DONE, memory_order_release);
        sr_wake(&batch[i]->state); /* it may have returned already: harmless */
    }
    return call->status;
}
