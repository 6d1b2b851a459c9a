/*
 * Every synchronous call's wait is bounded by one deadline, its start plus
 * timeout_ns, whatever the server or the other callers do, and a reply that
 * comes after it is an outage (flagged), not a decision.  Against a fake
 * Redis of the test's own (a forked child on a loopback port, one grandchild
 * per connection, all killed with the test) that answers slowly in chosen
 * ways:
 *   - drip: the reply one byte every 20 ms (each read is quick, the whole
 *     call is not), alone and with callers batched behind a leader;
 *   - noscript: NOSCRIPT, SCRIPT LOAD and EVALSHA again, each answered
 *     30 ms late (three reads each within the 50 ms timeout);
 *   - late: the reply 13 ms after the request, timeout 10 ms (a socket
 *     timeout was rounded up to the kernel's tick, and that reply admitted);
 *   - stall: a leader whose thread is held up (a signal handler sleeping
 *     1 s) while a caller of its batch waits: that caller gives up at its
 *     own deadline, counted once, and the connection serves later calls;
 *   - deny_late: a denial answered 40 ms late, whose cached wait must
 *     count from the call, not from the reply.
 * Needs no redis-server.  Bounded: every fake server dies within 60 s.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "helpers.h"
#include "sluice_redis.h"

enum mode { DRIP, NOSCRIPT, LATE, STALL, DENY_LATE };

static int fport;
static pid_t fake;
static int report[2]; /* STALL: the fake server writes the second batch's keys here */

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static uint64_t slow_factor(void)
{
    return t_scale(1, NULL) < 1.0 ? 4 : 1;
}

/* The fake server's input: RESP arrays of bulk strings. */
static char ibuf[1 << 16];
static size_t ilen;

struct cmd {
    int argc;
    const char *argv[600];
    size_t len[600];
};

/* One whole command at the start of ibuf: its size, or 0 if incomplete. */
static size_t parse(struct cmd *c)
{
    char *p = ibuf, *end = ibuf + ilen, *nl;
    long n;

    if (ilen == 0 || *p != '*' || (nl = memchr(p, '\n', ilen)) == NULL)
        return 0;
    n = strtol(p + 1, NULL, 10);
    p = nl + 1;
    c->argc = 0;
    for (long i = 0; i < n; i++) {
        long l;

        if (p >= end || *p != '$' || (nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
            return 0;
        l = strtol(p + 1, NULL, 10);
        p = nl + 1;
        if (end - p < l + 2)
            return 0;
        if (c->argc < 600) {
            c->argv[c->argc] = p;
            c->len[c->argc++] = (size_t)l;
        }
        p += l + 2;
    }
    return (size_t)(p - ibuf);
}

static int next_cmd(int fd, struct cmd *c, size_t *used)
{
    for (;;) {
        ssize_t r;

        if ((*used = parse(c)) > 0)
            return 0;
        if (ilen == sizeof(ibuf) || (r = read(fd, ibuf + ilen, sizeof(ibuf) - ilen)) <= 0)
            return -1;
        ilen += (size_t)r;
    }
}

static void put(int fd, const char *s, size_t n)
{
    if (write(fd, s, n) < 0) {
        /* the client gave up and closed: fine */
    }
}

static void answer(int fd, long nkeys, int drip)
{
    char rep[8192];
    size_t n = (size_t)snprintf(rep, sizeof(rep), "*%ld\r\n", 4 * nkeys);

    for (long i = 0; i < nkeys && n + 20 < sizeof(rep); i++)
        n += (size_t)snprintf(rep + n, sizeof(rep) - n, ":1\r\n:0\r\n:5\r\n:0\r\n");
    if (!drip) {
        put(fd, rep, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        put(fd, rep + i, 1);
        usleep(20000);
    }
}

static void serve(int fd, enum mode mode)
{
    static const char sha[] = "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";
    int loads = 0, evals = 0, noscripted = 0;
    struct cmd c;
    size_t used;

    while (next_cmd(fd, &c, &used) == 0) {
        if (c.argc >= 1 && c.len[0] == 6 && memcmp(c.argv[0], "SCRIPT", 6) == 0) {
            if (loads++ > 0 && mode == NOSCRIPT)
                usleep(30000);
            put(fd, sha, sizeof(sha) - 1);
        } else if (c.argc >= 3 && c.len[0] == 7 && memcmp(c.argv[0], "EVALSHA", 7) == 0) {
            long nkeys = strtol(c.argv[2], NULL, 10);

            evals++;
            switch (mode) {
            case DRIP:
                answer(fd, nkeys, 1);
                break;
            case NOSCRIPT:
                usleep(30000);
                if (noscripted++ % 2 == 0) { /* as if flushed before each call */
                    static const char ns[] = "-NOSCRIPT No matching script.\r\n";
                    put(fd, ns, sizeof(ns) - 1);
                } else {
                    answer(fd, nkeys, 0);
                }
                break;
            case LATE:
                usleep(13000);
                answer(fd, nkeys, 0);
                break;
            case DENY_LATE: { /* nothing granted, retry after 500 ms, 40 ms late */
                static const char deny[] = "*4\r\n:0\r\n:500000\r\n:0\r\n:1000000\r\n";
                usleep(40000);
                put(fd, deny, sizeof(deny) - 1);
                break;
            }
            case STALL:
                if (evals == 1) {
                    usleep(100000);
                    answer(fd, nkeys, 0);
                } else { /* tell the test which keys, then never answer */
                    char line[256];
                    int l = snprintf(line, sizeof(line), "%ld %.*s\n", nkeys,
                                     (int)c.len[3], c.argv[3]);
                    put(report[1], line, (size_t)l);
                }
                break;
            }
        } else {
            put(fd, "-ERR unknown\r\n", 14);
        }
        memmove(ibuf, ibuf + used, ilen - used);
        ilen -= used;
    }
    close(fd);
    _exit(0);
}

/* A fake Redis on a free loopback port, answering as `mode` says. */
static void fake_start(enum mode mode)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 16) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        perror("fake server");
        exit(1);
    }
    fport = ntohs(a.sin_port);
    fflush(stdout);
    fflush(stderr);
    fake = fork();
    if (fake == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGCHLD, SIG_IGN); /* no zombies */
        alarm(60);                /* bounded whatever happens */
        for (;;) {
            int c = accept(ls, NULL, NULL);

            if (c < 0)
                _exit(0);
            if (fork() == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(ls);
                serve(c, mode);
            }
            close(c);
        }
    }
    close(ls);
}

static void fake_stop(void)
{
    kill(fake, SIGKILL);
    waitpid(fake, NULL, 0);
}

static sluice_redis_t *tier_to_fake(uint64_t timeout, unsigned conns)
{
    struct sluice_redis_config cfg;
    sluice_redis_t *t;

    sluice_redis_config_init(&cfg);
    cfg.port = fport;
    cfg.count = 1000;
    cfg.period_ns = NS_PER_S;
    cfg.timeout_ns = timeout;
    cfg.reconnect_ns = 1000000; /* reconnect at every call */
    cfg.connections = conns;
    if (sluice_redis_create(&cfg, &t) != 0)
        abort();
    return t;
}

/* How many times a scenario runs at most until every wait in one run is
 * within the bound.  A wait that the deadline does not bound (the whole
 * drip, 390 ms; a leader's stall, 1 s) is long in every run, where a
 * loaded machine that wakes a caller late does so now and then: the bound
 * is judged on the best run, and each run's decisions on their own. */
enum { RUNS = 5 };

/* A late answer is an outage (checked), within the bound (returned;
 * generous slack: the point is "not the whole drip"). */
static int check_outage(const char *what, int rc, const struct sluice_result *r, uint64_t waited,
                        uint64_t timeout)
{
    CHECK_EQ(rc, SLUICE_DENY);
    CHECK_EQ(r->flags & SLUICE_REDIS_F_FAILED_CLOSED, SLUICE_REDIS_F_FAILED_CLOSED);
    if (rc != SLUICE_DENY || !(r->flags & SLUICE_REDIS_F_FAILED_CLOSED))
        fprintf(stderr, "%s: rc %d flags 0x%x after %.1f ms (timeout %.1f ms): not an outage\n",
                what, rc, r->flags, (double)waited / 1e6, (double)timeout / 1e6);
    /* the bound itself only where the machine's time is the test's own:
     * sanitizer runs (scaled down) share it with slower builds */
    return slow_factor() > 1 || waited <= timeout + timeout / 8 + 60000000;
}

/* The best run's longest wait was within the bound. */
static void check_bounded(const char *what, int within, int runs, uint64_t worst, uint64_t timeout)
{
    CHECK(within);
    if (!within)
        fprintf(stderr, "%s: a wait past %.1f ms in each of %d runs (the best run's longest: "
                "%.1f ms)\n", what, (double)(timeout + timeout / 8 + 60000000) / 1e6, runs,
                (double)worst / 1e6);
}

/* One call that must be an outage; returns its wait, *within cleared if
 * that is past the bound. */
static uint64_t timed_outage(sluice_redis_t *t, const char *what, const char *key,
                             uint64_t timeout, int *within)
{
    struct sluice_result r;
    uint64_t t0 = mono();
    int rc = sluice_redis_acquire(t, key, strlen(key), 1, &r);
    uint64_t w = mono() - t0;

    *within &= check_outage(what, rc, &r, w, timeout);
    return w;
}

struct caller {
    sluice_redis_t *t;
    const char *key;
    pthread_t self;
    int rc;
    struct sluice_result res;
    uint64_t waited;
};

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    uint64_t t0 = mono();

    c->rc = sluice_redis_acquire(c->t, c->key, strlen(c->key), 1, &c->res);
    c->waited = mono() - t0;
    return NULL;
}

/* The reply dripped a byte per 20 ms: one caller, then four at once on one
 * connection (three of them behind the leader). */
static void drip(void)
{
    const uint64_t timeout = 50000000;
    sluice_redis_t *t;
    struct caller c[4];
    uint64_t worst = 0;
    int run, within = 0;

    fake_start(DRIP);
    t = tier_to_fake(timeout, 1);
    for (run = 0; run < RUNS && !within; run++) {
        within = 1;
        worst = 0;
        for (int i = 0; i < 2; i++) {
            uint64_t w = timed_outage(t, "drip", "drip", timeout, &within);
            worst = w > worst ? w : worst;
        }
        for (int i = 0; i < 4; i++)
            c[i] = (struct caller){.t = t, .key = "drip"};
        t_run_threads(4, caller_main, c, sizeof(c[0]));
        for (int i = 0; i < 4; i++) {
            within &= check_outage("drip, 4 callers", c[i].rc, &c[i].res, c[i].waited, timeout);
            worst = c[i].waited > worst ? c[i].waited : worst;
        }
    }
    check_bounded("drip", within, run, worst, timeout);
    printf("drip: a byte per 20 ms, timeout 50 ms: 6 calls, longest wait %.1f ms (run %d)\n",
           (double)worst / 1e6, run);
    sluice_redis_destroy(t);
    fake_stop();
}

/* NOSCRIPT, SCRIPT LOAD, EVALSHA: three reads of 30 ms each, one deadline. */
static void noscript(void)
{
    const uint64_t timeout = 50000000;
    sluice_redis_t *t;
    uint64_t worst = 0;
    int run, within = 0;

    fake_start(NOSCRIPT);
    t = tier_to_fake(timeout, 1);
    for (run = 0; run < RUNS && !within; run++) {
        within = 1;
        worst = 0;
        for (int i = 0; i < 3; i++) {
            uint64_t w = timed_outage(t, "noscript", "ns", timeout, &within);
            worst = w > worst ? w : worst;
            usleep(2000);
        }
    }
    check_bounded("noscript", within, run, worst, timeout);
    printf("noscript: three 30 ms reads, timeout 50 ms: 3 calls, longest wait %.1f ms (run %d)\n",
           (double)worst / 1e6, run);
    sluice_redis_destroy(t);
    fake_stop();
}

/* The reply 3 ms after a 10 ms timeout: an outage every time.  A caller
 * woken more than 3 ms after its deadline finds the reply there and may
 * take it, which a loaded machine does now and then, so 4 of 20 are
 * tolerated; the rounded-up timeout this guards admitted all of them. */
static void late(void)
{
    const uint64_t timeout = 10000000;
    sluice_redis_t *t;
    struct sluice_result r;
    int admitted = 0;

    fake_start(LATE);
    t = tier_to_fake(timeout, 1);
    for (int i = 0; i < 20; i++) {
        int rc = sluice_redis_acquire(t, "late", 4, 1, &r);

        admitted += rc == SLUICE_ALLOW && !(r.flags & SLUICE_REDIS_F_FAILED_OPEN);
        usleep(5000); /* the fake server is done with the last connection */
    }
    CHECK(admitted <= 4);
    printf("late: replies 13 ms after the request, timeout 10 ms: %d of 20 admitted\n",
           admitted);
    sluice_redis_destroy(t);
    fake_stop();
}

static void stall_handler(int sig)
{
    struct timespec ts = {1, 0};

    (void)sig;
    nanosleep(&ts, NULL);
}

/* X leads alone (answered at 100 ms); Y and Z queue meanwhile, and go out
 * together with the first of them leading; that leader's thread is held up
 * 1 s by a signal.  The other waits no longer than its own deadline.  One
 * run: 1 if the follower's wait was within the bound, *designed set if the
 * two went out together (the wait is then in *waited). */
static const uint64_t stall_timeout = 300000000;

static int stall_once(int *designed, uint64_t *waited)
{
    const uint64_t timeout = stall_timeout;
    struct sigaction sa;
    sluice_redis_t *t;
    struct caller c[3];
    struct sluice_redis_stats st;
    struct sluice_result r;
    struct pollfd p;
    char line[256] = "";
    long nkeys = 0;
    int lead = -1, rc, within = 0;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = stall_handler; /* no SA_RESTART */
    sigaction(SIGUSR1, &sa, NULL);
    if (pipe(report) != 0)
        abort();
    fake_start(STALL);
    t = tier_to_fake(timeout, 1);
    c[0] = (struct caller){.t = t, .key = "x"};
    c[1] = (struct caller){.t = t, .key = "y"};
    c[2] = (struct caller){.t = t, .key = "z"};
    for (int i = 0; i < 3; i++) {
        pthread_create(&c[i].self, NULL, caller_main, &c[i]);
        usleep(25000);
    }
    p = (struct pollfd){.fd = report[0], .events = POLLIN};
    if (poll(&p, 1, 3000) == 1) {
        ssize_t n = read(report[0], line, sizeof(line) - 1);

        line[n > 0 ? n : 0] = '\0';
        nkeys = strtol(line, NULL, 10);
    }
    if (nkeys == 2)
        lead = strstr(line, "sluice:y") != NULL ? 1 : 2;
    if (lead > 0)
        pthread_kill(c[lead].self, SIGUSR1);
    for (int i = 0; i < 3; i++)
        pthread_join(c[i].self, NULL);
    CHECK_EQ(c[0].rc, SLUICE_ALLOW);
    *designed = lead > 0;
    if (lead < 0) {
        printf("stall: the two callers did not go out together (\"%s\"): not checked\n", line);
    } else {
        struct caller *f = &c[3 - lead];

        within = check_outage("follower of a stalled leader", f->rc, &f->res, f->waited, timeout);
        *waited = f->waited;
        CHECK_EQ(c[lead].rc, SLUICE_DENY);
        sluice_redis_stats(t, &st);
        CHECK_EQ(st.errors, 2); /* each outage counted once */
        CHECK_EQ(st.failed_closed, 2);
        CHECK_EQ(st.redis_allowed, 1);
        printf("stall: leader held up 1 s, its follower gave up after %.1f ms (timeout %.0f ms)\n",
               (double)f->waited / 1e6, (double)timeout / 1e6);
    }
    /* the connection was not left out of step: the next call is answered
     * (on a new connection, whose first call the fake server answers;
     * when the two callers went out apart, the last of them took that one
     * and the fake server answers nothing more on it) */
    if (lead > 0) {
        rc = sluice_redis_acquire(t, "after", 5, 1, &r);
        CHECK_EQ(rc, SLUICE_ALLOW);
        CHECK_EQ(r.flags & 0xff00u, 0);
    }
    sluice_redis_destroy(t);
    fake_stop();
    close(report[0]);
    close(report[1]);
    return within;
}

static void stall(void)
{
    int designed = 0, judged = 0, within = 0, runs = 0;
    uint64_t waited = 0;

    while (runs < RUNS && !within) {
        within = stall_once(&designed, &waited);
        judged += designed;
        runs++;
    }
    if (judged > 0)
        check_bounded("stall", within, judged, waited, stall_timeout);
}

/*
 * A denial's wait counts from Redis's TIME, which it read after the call was
 * made: the cached denial must end that long after the call, not after the
 * reply came back.  Counted from the reply, a reply 40 ms late kept the key
 * denied 40 ms past the time Redis would have admitted it (an outside
 * tester saw the cache deny what Redis then allowed in 10 of 10 rounds).
 */
static void late_denial(void)
{
    uint64_t timeout = NS_PER_S * slow_factor(), t0, t1;
    struct sluice_redis_stats st;
    struct sluice_result r;
    sluice_redis_t *t;

    fake_start(DENY_LATE);
    t = tier_to_fake(timeout, 1);
    t0 = mono();
    CHECK_EQ(sluice_redis_acquire(t, "ld", 2, 1, &r), SLUICE_DENY);
    t1 = mono();
    CHECK_EQ(r.retry_after_ns, 500000000);
    CHECK(t1 - t0 >= 40000000);
    /* from the cache: the call was made at t0 or later, before the server
     * read it 40 ms before t1, so what it keeps ends by t1 + 460 ms */
    CHECK_EQ(sluice_redis_acquire(t, "ld", 2, 1, &r), SLUICE_DENY);
    CHECK_EQ(r.flags & SLUICE_REDIS_F_CACHED, SLUICE_REDIS_F_CACHED);
    CHECK(r.retry_after_ns <= 460000000);
    sluice_redis_stats(t, &st);
    CHECK_EQ(st.cached_denials, 1);
    printf("late denial: 500 ms told %.1f ms late, cached for %.1f ms more\n",
           (double)(t1 - t0) / 1e6, (double)r.retry_after_ns / 1e6);
    sluice_redis_destroy(t);
    fake_stop();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* writes to a fake server that hung up */
    drip();
    noscript();
    late();
    stall();
    late_denial();
    return t_done("redis_deadline");
}
