/*
 * sluice-http: a small HTTP server limiting every request by client IP and
 * by the X-User header together (sluice_acquire_all), with a per-second and
 * a daily limit each, answering 429 with Retry-After, RateLimit-Policy /
 * RateLimit and X-RateLimit-* headers.  SIGHUP re-reads the limits file and
 * applies it with sluice_set_policy: no restart, state kept.  GET /metrics
 * answers both limiters' counters in the Prometheus text format.
 *
 *   sluice-http [-p PORT] [-f LIMITS] [-a ADDRESS] [-t SECONDS] [-c CONNS]
 *               [-C CONNS_PER_IP] [-w WORKERS] [-s SHARED_PREFIX]
 *
 * One thread, non-blocking sockets, one epoll loop, so no client can hold
 * the others up:
 *   - a request (head and body) must arrive whole within -t seconds (default
 *     5) of the connection's accept or of the previous response, however it
 *     trickles in: a slow client is answered 408 and closed;
 *   - a response must be taken within -t seconds; a closing connection
 *     lingers at most that long;
 *   - heads above 8 KiB get 431, bodies above 64 KiB get 413, then close;
 *   - at most -c connections (default 1024), -C of them (default 128) from
 *     one address; past that a new connection gets 503 and is closed;
 *   - each wakeup does a bounded amount of reading for one connection.
 * Connections are kept alive (HTTP/1.1 default, HTTP/1.0 on request), and
 * pipelined requests are answered in order.
 *
 * -w N forks N worker processes that share the listening socket and two
 * limiters in files (-s PREFIX, default /dev/shm/sluice-http-PORT, then
 * -ip and -user): the limits hold across all workers, SIGHUP to the parent
 * reloads them for every worker, a worker that dies is replaced
 * (http_prefork.c).
 *
 * LIMITS, one limit per line ("#" starts a comment):
 *   ip   gcra  10   1s
 *   ip   fixed 1000 1d
 *   user gcra  5    1s
 *   user fixed 500  1d
 * algorithms: gcra fixed sliding log approx; periods: N followed by ms s m h d;
 * a gcra line may end with "burst N" (default: the count).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http.h"

enum { READ_BUDGET = 4, ACCEPT_BUDGET = 64, ACCEPT_PAUSE_MS = 100 };

enum cstate {
    C_HEAD,   /* reading a request head */
    C_BODY,   /* discarding the request body; the response is ready */
    C_WRITE,  /* sending the response */
    C_LINGER, /* write side shut: reading until the client closes */
};

struct conn {
    struct conn *prev, *next; /* in deadline order */
    uint64_t deadline;        /* ms of CLOCK_MONOTONIC */
    int fd;
    enum cstate st;
    uint32_t events;          /* registered with epoll */
    bool close_after;         /* close once the response is sent */
    struct sockaddr_storage peer;
    char ip[INET6_ADDRSTRLEN];
    size_t in_len, scan;      /* scan: where the search for the blank line resumes */
    uint64_t body_left;
    size_t out_len, out_off;
    char in[HTTP_HEAD_MAX];
    char out[HTTP_OUT_MAX];
};

struct server {
    int ep, lfd, sfd;
    const char *path;
    struct http_limiters lim;
    uint64_t now, timeout_ms, accept_resume;
    bool accept_paused, quit;
    size_t nconns, max_conns, max_per_ip;
    /* pre-fork workers reap the shared limiters themselves (no threads) */
    uint64_t reap_every_ms, reap_at;
    /* Every deadline is now + timeout_ms with a clock that never goes back,
     * so appending keeps the list sorted: the next expiry is its head. */
    struct conn *head, *tail;
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        perror("clock_gettime");
        exit(1);
    }
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void list_unlink(struct server *s, struct conn *c)
{
    if (c->prev == NULL && s->head != c)
        return; /* not on the list yet (a new connection) */
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        s->tail = c->prev;
    c->prev = c->next = NULL;
}

/* Start a new timeout for the connection's current phase. */
static void conn_arm(struct server *s, struct conn *c)
{
    list_unlink(s, c);
    c->deadline = s->now + s->timeout_ms;
    c->prev = s->tail;
    if (s->tail != NULL)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
}

static void conn_close(struct server *s, struct conn *c)
{
    list_unlink(s, c);
    /* close() drops the epoll registration too: the fd is never dup'ed */
    if (close(c->fd) != 0)
        perror("close");
    free(c);
    s->nconns--;
}

/* Register interest in `events` only; false: the connection was closed. */
static bool conn_want(struct server *s, struct conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};

    if (c->events == events)
        return true;
    if (epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
        perror("epoll_ctl");
        conn_close(s, c);
        return false;
    }
    c->events = events;
    return true;
}

/* The answer to a head that has fully arrived (in[0..head_len)). */
static void conn_request(struct server *s, struct conn *c, size_t head_len)
{
    struct http_request rq;
    int status = http_parse_head(c->in, head_len, &rq);
    size_t body_here;

    if (status != 0) {
        c->out_len = http_error(status, c->out, sizeof(c->out));
        c->close_after = true;
        c->in_len = 0;
        c->st = C_WRITE;
        return;
    }
    /* A client waiting for "100 Continue" gets the final answer at once
     * and the connection closes, so the body never needs reading. */
    if (rq.expect_continue && rq.body_len > c->in_len - head_len)
        rq.keep_alive = false;
    c->out_len = http_respond(&rq, c->ip, &s->lim, c->out, sizeof(c->out));
    c->close_after = !rq.keep_alive;
    body_here = c->in_len - head_len < rq.body_len ? c->in_len - head_len : (size_t)rq.body_len;
    c->body_left = c->close_after ? 0 : rq.body_len - body_here;
    /* keep what follows, a pipelined request, at the front */
    memmove(c->in, c->in + head_len + body_here, c->in_len - head_len - body_here);
    c->in_len -= head_len + body_here;
    c->scan = 0;
    if (c->close_after)
        c->in_len = 0;
    c->st = c->body_left > 0 ? C_BODY : C_WRITE;
}

/* The end of the head in in[], searched once per byte however it arrives. */
static size_t head_end(struct conn *c)
{
    for (size_t i = c->scan; i + 4 <= c->in_len; i++)
        if (memcmp(c->in + i, "\r\n\r\n", 4) == 0)
            return i + 4;
    c->scan = c->in_len >= 3 ? c->in_len - 3 : 0;
    return 0;
}

/*
 * recv() into buf for a connection: the bytes read, or 0 when the caller must
 * return and wait for epoll (the connection is closed on EOF or error, and
 * must not be touched then).  Every read counts against the wakeup's budget.
 */
static ssize_t conn_recv(struct server *s, struct conn *c, void *buf, size_t len, int *reads)
{
    ssize_t n;

    if ((*reads)++ >= READ_BUDGET) { /* level-triggered: epoll reports it again */
        conn_want(s, c, EPOLLIN);
        return 0;
    }
    do
        n = recv(c->fd, buf, len, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        return n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        conn_want(s, c, EPOLLIN);
        return 0;
    }
    if (n < 0 && errno != ECONNRESET)
        perror("recv");
    conn_close(s, c);
    return 0;
}

/* Move the connection on as far as its socket allows, then return. */
static void conn_run(struct server *s, struct conn *c)
{
    char scratch[4096];
    int reads = 0;
    ssize_t n;

    for (;;) {
        switch (c->st) {
        case C_HEAD: {
            size_t end = head_end(c);
            if (end > 0) {
                conn_request(s, c, end);
                if (c->st == C_WRITE)
                    conn_arm(s, c); /* the response has its own time to drain */
                continue;
            }
            if (c->in_len == sizeof(c->in)) {
                c->out_len = http_error(431, c->out, sizeof(c->out));
                c->close_after = true;
                c->in_len = 0;
                c->st = C_WRITE;
                conn_arm(s, c);
                continue;
            }
            n = conn_recv(s, c, c->in + c->in_len, sizeof(c->in) - c->in_len, &reads);
            if (n == 0)
                return;
            c->in_len += (size_t)n;
            break;
        }
        case C_BODY:
            if (c->body_left == 0) {
                c->st = C_WRITE;
                conn_arm(s, c);
                continue;
            }
            n = conn_recv(s, c, scratch,
                          c->body_left < sizeof(scratch) ? c->body_left : sizeof(scratch),
                          &reads);
            if (n == 0)
                return;
            c->body_left -= (uint64_t)n;
            break;
        case C_WRITE:
            if (c->out_off == c->out_len) {
                c->out_off = c->out_len = 0;
                if (c->close_after) {
                    /* Closing now could reset the connection (unread bytes
                     * of the client's) and destroy the response in flight:
                     * send FIN, wait for the client's. */
                    if (shutdown(c->fd, SHUT_WR) != 0) {
                        conn_close(s, c);
                        return;
                    }
                    c->st = C_LINGER;
                } else {
                    c->st = C_HEAD;
                }
                conn_arm(s, c);
                continue;
            }
            do
                n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
            while (n < 0 && errno == EINTR);
            if (n > 0) {
                c->out_off += (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                conn_want(s, c, EPOLLOUT);
                return;
            }
            if (n < 0 && errno != EPIPE && errno != ECONNRESET)
                perror("send");
            conn_close(s, c);
            return;
        case C_LINGER:
            n = conn_recv(s, c, scratch, sizeof(scratch), &reads);
            if (n == 0)
                return;
            break;
        }
    }
}

/* The phase took too long: whatever it was, the connection goes. */
static void conn_expire(struct server *s, struct conn *c)
{
    if ((c->st == C_HEAD && c->in_len > 0) || c->st == C_BODY) {
        /* best effort: the client may not be reading either */
        char out[256];
        size_t n = http_error(408, out, sizeof(out));
        if (send(c->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
            errno != EWOULDBLOCK && errno != EPIPE && errno != ECONNRESET)
            perror("send");
    }
    conn_close(s, c);
}

static bool same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Turn a connection away at once: 503, best effort, no waiting. */
static void refuse(int fd)
{
    char out[256];
    size_t n = http_error(503, out, sizeof(out));

    if (send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
        errno != EWOULDBLOCK && errno != EPIPE && errno != ECONNRESET)
        perror("send");
    if (close(fd) != 0)
        perror("close");
}

static void set_listening(struct server *s, bool on)
{
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = &s->lfd};

    if (epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &ev) != 0) {
        perror("epoll_ctl");
        exit(1);
    }
    s->accept_paused = !on;
}

static void on_accept(struct server *s)
{
    for (int i = 0; i < ACCEPT_BUDGET; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(s->lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        size_t same = 0;

        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Level-triggered, the pending connection would wake the
                 * loop at once, forever: stop listening for a moment. */
                perror("accept4");
                set_listening(s, false);
                s->accept_resume = s->now + ACCEPT_PAUSE_MS;
                return;
            }
            /* EINTR, or the connection failed before it was accepted */
            continue;
        }
        for (struct conn *o = s->head; o != NULL && same < s->max_per_ip; o = o->next)
            same += same_address(&o->peer, &peer);
        if (s->nconns >= s->max_conns || same >= s->max_per_ip) {
            refuse(fd);
            continue;
        }
        struct conn *c = malloc(sizeof(*c));
        if (c == NULL) {
            refuse(fd);
            continue;
        }
        memset(c, 0, offsetof(struct conn, in)); /* the buffers need no zeroing */
        c->fd = fd;
        c->peer = peer;
        c->events = EPOLLIN;
        if (peer.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&peer)->sin6_addr, c->ip, sizeof(c->ip));
        else
            inet_ntop(AF_INET, &((struct sockaddr_in *)&peer)->sin_addr, c->ip, sizeof(c->ip));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            perror("epoll_ctl");
            refuse(fd);
            free(c);
            continue;
        }
        s->nconns++;
        conn_arm(s, c);
    }
}

static void reload(struct server *s)
{
    struct sluice_policy ip, user;
    int rc = http_load_limits(s->path, &ip, &user);

    if (rc == 0)
        rc = sluice_set_policy(s->lim.ip, &ip);
    if (rc == 0)
        rc = sluice_set_policy(s->lim.user, &user);
    fprintf(stderr, "sluice-http: reload %s: %s\n", s->path, rc ? sluice_strerror(rc) : "ok");
}

static void on_signal(struct server *s)
{
    struct signalfd_siginfo si;
    ssize_t n;

    while ((n = read(s->sfd, &si, sizeof(si))) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP)
            reload(s);
        else
            s->quit = true;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        perror("read signalfd");
        exit(1);
    }
}

static bool parse_num(const char *s, double min, double max, double *out)
{
    char *end;

    errno = 0;
    *out = strtod(s, &end);
    return end != s && *end == '\0' && errno == 0 && *out >= min && *out <= max;
}

/* Wait for the next event, the next deadline, or the end of an accept pause. */
static int next_wait(const struct server *s)
{
    uint64_t until = UINT64_MAX;

    if (s->head != NULL)
        until = s->head->deadline;
    if (s->accept_paused && s->accept_resume < until)
        until = s->accept_resume;
    if (s->reap_every_ms != 0 && s->reap_at < until)
        until = s->reap_at;
    if (until == UINT64_MAX)
        return -1;
    return until <= s->now ? 0 : until - s->now > INT_MAX ? INT_MAX : (int)(until - s->now);
}

static int serve(struct server *s)
{
    struct epoll_event evs[64];

    while (!s->quit) {
        int n = epoll_wait(s->ep, evs, 64, next_wait(s));

        if (n < 0 && errno != EINTR) {
            perror("epoll_wait");
            return 1;
        }
        s->now = now_ms();
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->lfd)
                on_accept(s);
            else if (p == &s->sfd)
                on_signal(s);
            else
                conn_run(s, p); /* closes only itself: the other events stay valid */
        }
        /* the phases run after the events above: no freed conn is touched */
        while (s->head != NULL && s->head->deadline <= s->now)
            conn_expire(s, s->head);
        if (s->accept_paused && s->accept_resume <= s->now)
            set_listening(s, true);
        if (s->reap_every_ms != 0 && s->reap_at <= s->now) {
            (void)sluice_reap(s->lim.ip, sluice_now(s->lim.ip));
            (void)sluice_reap(s->lim.user, sluice_now(s->lim.user));
            s->reap_at = s->now + s->reap_every_ms;
        }
    }
    return 0;
}

/*
 * The limiters and the listening socket are set: take the signals in sigs
 * through a signalfd, and serve until SIGTERM or SIGINT.
 */
static int run(struct server *s, const sigset_t *sigs, bool worker)
{
    /* Pre-fork workers all wait on the one socket and all wake; one
     * accepts.  (EPOLLEXCLUSIVE wakes one, and hands nearly every
     * connection to the same worker.) */
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &s->lfd};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &s->sfd};
    int rc = 1;

    if ((s->sfd = signalfd(-1, sigs, SFD_NONBLOCK | SFD_CLOEXEC)) < 0 ||
        (s->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        perror("signalfd/epoll_create1");
        goto out;
    }
    if (epoll_ctl(s->ep, EPOLL_CTL_ADD, s->lfd, &lev) != 0 ||
        epoll_ctl(s->ep, EPOLL_CTL_ADD, s->sfd, &sev) != 0) {
        perror("epoll_ctl");
        goto out;
    }
    s->now = now_ms();
    s->reap_at = s->now + s->reap_every_ms;
    rc = serve(s);
    if (!worker)
        fprintf(stderr, "sluice-http: stopping, %zu connection(s) closed\n", s->nconns);
out:
    while (s->head != NULL)
        conn_close(s, s->head);
    if (s->sfd >= 0)
        close(s->sfd);
    if (s->ep >= 0)
        close(s->ep);
    return rc;
}

/* A pre-fork worker: attach to the shared limiters and serve; proto holds
 * the options. */
static int worker_main(int lfd, const struct http_prefork *pf, void *proto)
{
    struct server s = *(const struct server *)proto;
    sigset_t sigs;
    int rc;

    /* SIGHUP is the supervisor's: it reloads the shared limiters for all */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (signal(SIGHUP, SIG_IGN) == SIG_ERR || pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0)
        return 1;
    if (http_shared_attach(pf, &s.lim) != 0)
        return 1;
    s.lfd = lfd;
    s.reap_every_ms = 1000;
    rc = run(&s, &sigs, true);
    sluice_destroy(s.lim.ip);
    sluice_destroy(s.lim.user);
    close(lfd);
    return rc;
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [-p PORT] [-f LIMITS] [-a ADDRESS] [-t SECONDS] [-c CONNS] "
                    "[-C CONNS_PER_IP] [-w WORKERS] [-s SHARED_PREFIX]\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1", *prefix = NULL;
    struct server s = {.path = "limits.conf", .timeout_ms = 5000, .max_conns = 1024,
                       .max_per_ip = 128, .ep = -1, .lfd = -1, .sfd = -1};
    struct sluice_policy ip_pol, user_pol;
    struct rlimit rl;
    double port = 8080, v, workers = 0;
    sigset_t sigs;
    int opt, rc;

    while ((opt = getopt(argc, argv, "p:f:a:t:c:C:w:s:")) != -1) {
        if (opt == 'p' && parse_num(optarg, 0, 65535, &port))
            port = (long)port;
        else if (opt == 'f')
            s.path = optarg;
        else if (opt == 'a')
            addr = optarg;
        else if (opt == 't' && parse_num(optarg, 0.001, 86400, &v))
            s.timeout_ms = (uint64_t)(v * 1000);
        else if (opt == 'c' && parse_num(optarg, 1, 1e6, &v))
            s.max_conns = (size_t)v;
        else if (opt == 'C' && parse_num(optarg, 1, 1e6, &v))
            s.max_per_ip = (size_t)v;
        else if (opt == 'w' && parse_num(optarg, 0, 256, &workers))
            workers = (int)workers;
        else if (opt == 's')
            prefix = optarg;
        else
            return usage(argv[0]);
    }
    /* leave descriptors for the listener, epoll, signalfd and stdio */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        s.max_conns + 16 > rl.rlim_cur) {
        s.max_conns = rl.rlim_cur > 32 ? (size_t)rl.rlim_cur - 16 : 16;
        fprintf(stderr, "sluice-http: at most %zu connections (RLIMIT_NOFILE)\n", s.max_conns);
    }
    if ((rc = http_load_limits(s.path, &ip_pol, &user_pol)) != 0) {
        fprintf(stderr, "%s: %s\n", s.path, sluice_strerror(rc));
        return 1;
    }
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        return 1;
    if (workers > 0)
        return http_prefork_main(addr, (long)port, (int)workers, prefix, s.path, &ip_pol,
                                 &user_pol, worker_main, &s);
    /* Blocked before the limiters start their reaper threads, which inherit
     * the mask: the signals then arrive only through the signalfd. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0) {
        fprintf(stderr, "sluice-http: cannot block signals\n");
        return 1;
    }
    s.lim.ip = http_make_limiter(&ip_pol, "ip");
    s.lim.user = http_make_limiter(&user_pol, "user");
    rc = 1;
    if (s.lim.ip != NULL && s.lim.user != NULL && (s.lfd = http_listen(addr, (long)port)) >= 0) {
        fprintf(stderr, "sluice-http: listening on %s:%ld, limits from %s, timeout %.3f s\n",
                addr, (long)port, s.path, (double)s.timeout_ms / 1000);
        rc = run(&s, &sigs, false);
        close(s.lfd);
    }
    sluice_destroy(s.lim.ip);
    sluice_destroy(s.lim.user);
    return rc;
}
