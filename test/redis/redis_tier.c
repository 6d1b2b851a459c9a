/*
 * The Redis second tier against a real redis-server on a loopback port of
 * its own (temporary directory, started here, stopped by its pid):
 * the global bound across several hosts, leases and their stated bound,
 * the local tier keeping denials away from Redis, Redis killed mid-run
 * (fail open / fail closed within the timeout), and throughput with and
 * without leases (printed, not asserted).  Skips only if redis-server is
 * not installed.
 */
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "sluice_redis.h"

static int port;
static pid_t server;
static char dir[] = "/tmp/sluice-redis-XXXXXX";

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static int redis_ping(void)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;

    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    return ok;
}

/* Start redis-server: on `port` if it is set, else on a free one found by trying. */
static int redis_start(void)
{
    char portstr[16];
    int fixed = port != 0;

    fflush(stdout); /* the child must not flush our buffer again */
    for (int attempt = 0; attempt < (fixed ? 50 : 10); attempt++) {
        if (!fixed)
            port = 20000 + (int)(mono() % 30000);
        snprintf(portstr, sizeof(portstr), "%d", port);
        server = fork();
        if (server == 0) {
            freopen("/dev/null", "w", stdout);
            execlp("redis-server", "redis-server", "--port", portstr, "--bind", "127.0.0.1",
                   "--dir", dir, "--save", "", "--appendonly", "no", (char *)NULL);
            _exit(127);
        }
        for (int i = 0; i < 100; i++) {
            int st;
            if (redis_ping())
                return 0;
            if (waitpid(server, &st, WNOHANG) == server)
                break; /* port taken, or no redis-server: try again */
            usleep(20000);
        }
    }
    return -1;
}

static void redis_stop(void)
{
    if (server > 0) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
        server = 0;
    }
}

static sluice_redis_t *tier(uint64_t count, uint64_t period, uint64_t lease, int fail_open,
                            sluice_t *local)
{
    struct sluice_redis_config cfg;
    sluice_redis_t *t;

    sluice_redis_config_init(&cfg);
    cfg.port = port;
    cfg.count = count;
    cfg.period_ns = period;
    cfg.lease = lease;
    cfg.fail_open = fail_open;
    cfg.local = local;
    cfg.timeout_ns = 100000000;
    cfg.reconnect_ns = 100000000;
    if (sluice_redis_create(&cfg, &t) != 0)
        abort();
    return t;
}

/* Several hosts on one global key for `ms`: admitted within the bound. */
struct host {
    sluice_redis_t *t;
    uint64_t until, admitted;
    const char *key;
};

static void *host_main(void *arg)
{
    struct host *h = arg;

    while (mono() < h->until)
        h->admitted += sluice_redis_acquire(h->t, h->key, strlen(h->key), 1, NULL) == SLUICE_ALLOW;
    return NULL;
}

static void global_bound(uint64_t count, uint64_t period, uint64_t lease, const char *key)
{
    enum { HOSTS = 3 };
    struct host h[HOSTS];
    struct sluice_redis_stats st, sum = {0};
    uint64_t start = mono(), total = 0, elapsed, bound;

    for (int i = 0; i < HOSTS; i++)
        h[i] = (struct host){tier(count, period, lease, 0, NULL), start + NS_PER_S, 0, key};
    t_run_threads(HOSTS, host_main, h, sizeof(h[0]));
    elapsed = mono() - start;
    for (int i = 0; i < HOSTS; i++) {
        total += h[i].admitted;
        sluice_redis_stats(h[i].t, &st);
        sum.requests += st.requests;
        sum.redis_calls += st.redis_calls;
        sum.lease_hits += st.lease_hits;
        sum.cached_denials += st.cached_denials;
        sum.errors += st.errors;
        sluice_redis_destroy(h[i].t);
    }
    /* GCRA: burst + rate * elapsed, plus hosts * lease when leasing */
    bound = count + (uint64_t)((double)elapsed / (double)period * (double)count) + 1 +
            (lease > 1 ? HOSTS * lease : 0);
    CHECK(total <= bound);
    CHECK(total >= (sum.requests < count ? sum.requests : count)); /* the burst at least */
    CHECK_EQ(sum.errors, 0);
    /* round trips are saved when there is something to save: over the
     * limit denials stay in-process, and leases serve many admissions */
    if (lease > 1 || sum.requests > count)
        CHECK(sum.redis_calls * 2 < sum.requests);
    else
        CHECK_EQ(sum.redis_calls, sum.requests);
    printf("%d hosts, limit %llu per %.1f s, lease %llu: admitted %llu (bound %llu) of %llu "
           "requests in %.2f s; %llu round trips, %llu lease hits, %llu cached denials; "
           "%.0f decisions/s\n",
           HOSTS, (unsigned long long)count, (double)period / 1e9, (unsigned long long)lease,
           (unsigned long long)total, (unsigned long long)bound,
           (unsigned long long)sum.requests, (double)elapsed / 1e9,
           (unsigned long long)sum.redis_calls, (unsigned long long)sum.lease_hits,
           (unsigned long long)sum.cached_denials, (double)sum.requests / ((double)elapsed / 1e9));
}

/* The local tier denies first: those requests never reach Redis. */
static void local_first(void)
{
    struct sluice_config cfg;
    struct sluice_redis_stats st;
    sluice_t *local;
    sluice_redis_t *t;
    int allowed = 0;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 5, 10 * NS_PER_S);
    CHECK_EQ(sluice_create(&cfg, &local), 0);
    t = tier(1000, NS_PER_S, 0, 0, local);
    for (int i = 0; i < 100; i++)
        allowed += sluice_redis_acquire(t, "client-1", 8, 1, NULL) == SLUICE_ALLOW;
    sluice_redis_stats(t, &st);
    CHECK_EQ(allowed, 5);
    CHECK_EQ(st.local_denied, 95);
    CHECK_EQ(st.redis_calls, 5);
    printf("local first tier: 100 requests, %llu denied locally, %llu round trips\n",
           (unsigned long long)st.local_denied, (unsigned long long)st.redis_calls);
    sluice_redis_destroy(t);
    sluice_destroy(local);
}

/* A global denial says when to retry, and the wait is honoured. */
static void global_retry(void)
{
    sluice_redis_t *t = tier(2, NS_PER_S / 5, 0, 0, NULL); /* 10/s, burst 2 */
    struct sluice_result r;

    CHECK_EQ(sluice_redis_acquire(t, "retry", 5, 2, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_redis_acquire(t, "retry", 5, 1, &r), SLUICE_DENY);
    CHECK(r.retry_after_ns > 0 && r.retry_after_ns <= NS_PER_S / 10 + 1000000);
    usleep((useconds_t)(r.retry_after_ns / 1000) + 2000);
    CHECK_EQ(sluice_redis_acquire(t, "retry", 5, 1, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_redis_acquire(t, "retry", 5, 3, &r), -E2BIG);
    sluice_redis_destroy(t);
}

/* Redis dies: fail open allows, fail closed denies, both counted, and no
 * call waits much past the timeout (100 ms). */
static void redis_killed(void)
{
    sluice_redis_t *open_t = tier(1000000, NS_PER_S, 0, 1, NULL);
    sluice_redis_t *closed_t = tier(1000000, NS_PER_S, 0, 0, NULL);
    struct sluice_redis_stats so, sc;
    uint64_t slowest = 0;

    CHECK_EQ(sluice_redis_acquire(open_t, "k", 1, 1, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_redis_acquire(closed_t, "k", 1, 1, NULL), SLUICE_ALLOW);
    redis_stop();
    for (int i = 0; i < 20; i++) {
        uint64_t t0 = mono();
        CHECK_EQ(sluice_redis_acquire(open_t, "k", 1, 1, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_redis_acquire(closed_t, "k", 1, 1, NULL), SLUICE_DENY);
        slowest = mono() - t0 > slowest ? mono() - t0 : slowest;
    }
    sluice_redis_stats(open_t, &so);
    sluice_redis_stats(closed_t, &sc);
    CHECK_EQ(so.failed_open, 20);
    CHECK_EQ(sc.failed_closed, 20);
    CHECK(slowest < 10 * 100000000ull); /* generous: the point is "not forever" */
    printf("redis killed: 20 fail-open allowed, 20 fail-closed denied; slowest pair %.1f ms\n",
           (double)slowest / 1e6);
    /* it comes back: reconnection after reconnect_ns */
    if (redis_start() == 0) {
        int back = 0;
        for (int i = 0; i < 50 && !back; i++) {
            usleep(20000);
            back = sluice_redis_acquire(closed_t, "k", 1, 1, NULL) == SLUICE_ALLOW;
        }
        CHECK(back);
    }
    sluice_redis_destroy(open_t);
    sluice_redis_destroy(closed_t);
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        printf("redis-server is not installed: skipped (apt-get install redis-server)\n");
        return T_SKIP;
    }
    if (mkdtemp(dir) == NULL || redis_start() != 0) {
        fprintf(stderr, "could not start redis-server\n");
        return 1;
    }
    /* over the limit: the bound binds */
    global_bound(200, NS_PER_S / 2, 0, "global-a");
    global_bound(200, NS_PER_S / 2, 16, "global-b");
    /* under the limit: leases save round trips */
    global_bound(1000000, NS_PER_S, 0, "global-c");
    global_bound(1000000, NS_PER_S, 64, "global-d");
    local_first();
    global_retry();
    redis_killed();
    redis_stop();
    rmdir(dir);
    return t_done("redis_tier");
}
