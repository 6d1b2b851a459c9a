/*
 * sluice_redis_acquire_async() on a libevent loop against a real
 * redis-server: decisions through callbacks, in-process decisions called
 * back before returning, a stopped Redis timed out by the loop's timer
 * (fail closed, flagged), a killed Redis (fail open, flagged), and destroy
 * with calls in flight (each called back with -ECANCELED, nothing leaked).
 */
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>

#include "server.h"
#include "sluice_redis.h"

struct tally {
    int calls, allowed, denied, canceled, other;
    unsigned flags; /* OR of every result's flags */
    uint64_t last_at;
};

static void on_decision(void *arg, int rc, const struct sluice_result *res)
{
    struct tally *t = arg;

    t->calls++;
    t->allowed += rc == SLUICE_ALLOW;
    t->denied += rc == SLUICE_DENY;
    t->canceled += rc == -ECANCELED;
    t->other += rc != SLUICE_ALLOW && rc != SLUICE_DENY && rc != -ECANCELED;
    t->flags |= res->flags;
    t->last_at = mono();
}

static sluice_redis_t *tier(struct event_base *base, uint64_t count, int fail_open,
                            sluice_t *local, uint64_t timeout)
{
    struct sluice_redis_config cfg;
    sluice_redis_t *t;

    sluice_redis_config_init(&cfg);
    cfg.port = port;
    cfg.count = count;
    cfg.period_ns = 60 * NS_PER_S;
    cfg.fail_open = fail_open;
    cfg.local = local;
    cfg.timeout_ns = timeout;
    cfg.reconnect_ns = 10000000;
    if (sluice_redis_create(&cfg, &t) != 0 || sluice_redis_attach_libevent(t, base) != 0)
        abort();
    return t;
}

/* Run the loop until `want` callbacks came, or 2 s. */
static void run_until(struct event_base *base, struct tally *t, int want)
{
    uint64_t end = mono() + 2 * NS_PER_S * slow_factor();

    while (t->calls < want && mono() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(100);
}

static void decisions(struct event_base *base)
{
    sluice_redis_t *t = tier(base, 50, 0, NULL, NS_PER_S);
    struct tally ta = {0};
    int pending = 0;

    for (int i = 0; i < 100; i++)
        pending += sluice_redis_acquire_async(t, "async", 5, 1, on_decision, &ta) == 0;
    CHECK(pending > 0);
    run_until(base, &ta, 100);
    CHECK_EQ(ta.calls, 100);
    CHECK_EQ(ta.allowed, 50);
    CHECK_EQ(ta.denied, 50);
    CHECK_EQ(ta.flags & (SLUICE_REDIS_F_FAILED_OPEN | SLUICE_REDIS_F_FAILED_CLOSED), 0);
    /* now denied from the cache: called back before returning */
    memset(&ta, 0, sizeof(ta));
    CHECK_EQ(sluice_redis_acquire_async(t, "async", 5, 1, on_decision, &ta), 1);
    CHECK_EQ(ta.calls, 1);
    CHECK_EQ(ta.denied, 1);
    CHECK_EQ(ta.flags & SLUICE_REDIS_F_CACHED, SLUICE_REDIS_F_CACHED);
    CHECK_EQ(sluice_redis_acquire_async(t, "async", 5, 51, on_decision, &ta), -E2BIG);
    /* Redis forgot the script: loaded again (EVAL), not an error */
    {
        redisReply *rep = redis_cmd("SCRIPT FLUSH");

        if (rep)
            freeReplyObject(rep);
        memset(&ta, 0, sizeof(ta));
        for (int i = 0; i < 3; i++)
            sluice_redis_acquire_async(t, "flushed", 7, 1, on_decision, &ta);
        run_until(base, &ta, 3);
        CHECK_EQ(ta.allowed, 3);
    }
    CHECK_EQ(sluice_redis_acquire_async(t, "async", 5, 1, NULL, &ta), -EINVAL);
    sluice_redis_destroy(t);
}

static void local_first(struct event_base *base)
{
    struct sluice_config cfg;
    sluice_t *local;
    sluice_redis_t *t;
    struct tally ta = {0};

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 1, 60 * NS_PER_S);
    CHECK_EQ(sluice_create(&cfg, &local), 0);
    t = tier(base, 1000, 0, local, NS_PER_S);
    CHECK_EQ(sluice_redis_acquire_async(t, "l", 1, 1, on_decision, &ta), 0);
    run_until(base, &ta, 1);
    CHECK_EQ(ta.allowed, 1);
    CHECK_EQ(sluice_redis_acquire_async(t, "l", 1, 1, on_decision, &ta), 1);
    CHECK_EQ(ta.denied, 1);
    CHECK_EQ(ta.flags & SLUICE_REDIS_F_LOCAL, SLUICE_REDIS_F_LOCAL);
    sluice_redis_destroy(t);
    sluice_destroy(local);
}

/* Redis stopped: the loop's timer fails the calls closed within the timeout.
 * The bound is judged on the best of up to 5 rounds (the first on the
 * connection made before the stop, the others on new ones): a timer armed
 * late or not at all is late in every round, where a loaded machine runs
 * the loop late now and then. */
static void stopped(struct event_base *base)
{
    sluice_redis_t *t = tier(base, 1000, 0, NULL, 50000000);
    struct tally ta = {0};
    uint64_t t0, best = UINT64_MAX;
    int round;

    /* connect first, so the stop hits round trips, not the connection */
    CHECK_EQ(sluice_redis_acquire_async(t, "s", 1, 1, on_decision, &ta), 0);
    run_until(base, &ta, 1);
    CHECK_EQ(ta.allowed, 1);
    kill(server, SIGSTOP);
    for (round = 0; round < 5 && best > 2 * 50000000ull * slow_factor(); round++) {
        if (round > 0)
            usleep(20000); /* past reconnect_ns: a new connection */
        memset(&ta, 0, sizeof(ta));
        t0 = mono();
        for (int i = 0; i < 10; i++)
            CHECK_EQ(sluice_redis_acquire_async(t, "s", 1, 1, on_decision, &ta), 0);
        CHECK_EQ(ta.calls, 0);
        run_until(base, &ta, 10);
        CHECK_EQ(ta.denied, 10);
        CHECK_EQ(ta.flags & SLUICE_REDIS_F_FAILED_CLOSED, SLUICE_REDIS_F_FAILED_CLOSED);
        if (ta.calls == 10 && ta.last_at - t0 < best)
            best = ta.last_at - t0;
    }
    CHECK(best <= 2 * 50000000ull * slow_factor());
    printf("async, redis stopped: 10 calls failed closed after %.1f ms (timeout 50 ms, "
           "best of %d rounds)\n", (double)best / 1e6, round);
    /* destroy with calls in flight: each called back, -ECANCELED */
    memset(&ta, 0, sizeof(ta));
    usleep(20000); /* past reconnect_ns: the calls go to a new connection */
    for (int i = 0; i < 5; i++)
        CHECK_EQ(sluice_redis_acquire_async(t, "s", 1, 1, on_decision, &ta), 0);
    sluice_redis_destroy(t);
    CHECK_EQ(ta.calls, 5);
    CHECK_EQ(ta.canceled, 5);
    kill(server, SIGCONT);
}

/* Redis killed: fail open, flagged, decided at once while reconnection is not due. */
static void killed(struct event_base *base)
{
    sluice_redis_t *t = tier(base, 1000, 1, NULL, 50000000);
    struct tally ta = {0};

    redis_stop();
    for (int i = 0; i < 5; i++)
        sluice_redis_acquire_async(t, "k", 1, 1, on_decision, &ta);
    run_until(base, &ta, 5);
    CHECK_EQ(ta.allowed, 5);
    CHECK_EQ(ta.flags & SLUICE_REDIS_F_FAILED_OPEN, SLUICE_REDIS_F_FAILED_OPEN);
    sluice_redis_destroy(t);
}

int main(void)
{
    struct event_base *base;
    int rc = redis_setup();

    if (rc != 0)
        return rc;
    base = event_base_new();
    decisions(base);
    local_first(base);
    stopped(base);
    killed(base);
    event_base_free(base);
    redis_teardown();
    return t_done("redis_async");
}
