/*
 * sluice-http apart from its event loop (http_server.c): HTTP/1.x request
 * heads and the responses (http_request.c), which do no I/O on a
 * connection and so can never block the loop; start-up (http_setup.c).
 */
#ifndef SLUICE_HTTP_H
#define SLUICE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice.h>

/* A request head (request line and header fields) must fit in this. */
#define HTTP_HEAD_MAX 8192
/* Bodies are read and thrown away, up to this size; larger ones get 413. */
#define HTTP_BODY_MAX 65536
/* Room for any response: the largest is /metrics (about 1.5 KiB). */
#define HTTP_OUT_MAX 8192

struct http_limiters {
    sluice_t *ip, *user;
};

struct http_request {
    bool head_only;      /* HEAD: the response has no body */
    bool metrics;        /* GET or HEAD /metrics */
    bool keep_alive;     /* the connection stays open after the response */
    bool expect_continue; /* Expect: 100-continue */
    int minor;           /* HTTP/1.<minor> */
    uint64_t body_len;   /* Content-Length */
    const char *user;    /* the X-User value (not NUL-terminated), or NULL */
    size_t user_len;
};

/*
 * Parse the head buf[0..len), which ends with the blank line.  Returns 0, or
 * the status to answer before closing the connection: 400 malformed, 413
 * body above HTTP_BODY_MAX, 501 a Transfer-Encoding, 505 not HTTP/1.x.
 * rq points into buf.
 */
int http_parse_head(const char *buf, size_t len, struct http_request *rq);

/*
 * Decide the request (/metrics is not charged) and write the whole response
 * into out[0..cap).  Returns its length; clears rq->keep_alive when the
 * response says the connection closes.
 */
size_t http_respond(struct http_request *rq, const char *ip, const struct http_limiters *lim,
                    char *out, size_t cap);

/* A response for an error status, with "Connection: close". */
size_t http_error(int status, char *out, size_t cap);

/* Read both policies of a limits file; on any error nothing is changed and
 * the result is -errno (-EINVAL for a malformed file). */
int http_load_limits(const char *path, struct sluice_policy *ip, struct sluice_policy *user);

/* A limiter with policy p named `name` (in its headers and metrics), reaped
 * by its own thread; NULL after printing why. */
sluice_t *http_make_limiter(const struct sluice_policy *p, const char *name);

/* A non-blocking listening socket on the IPv4 or IPv6 address; -1 after
 * printing why. */
int http_listen(const char *addr, long port);

/* Pre-fork mode (http_prefork.c): workers sharing limiters in files. */
struct http_prefork {
    int workers;
    int lfd;                 /* the listening socket, shared by the workers */
    const char *limits;      /* re-read on SIGHUP */
    char ip_path[256], user_path[256];
    /* a worker's life (in the child); returns its exit status */
    int (*worker)(int lfd, const struct http_prefork *pf, void *arg);
    void *arg;
};

/* Attach this process to both; 0 or -errno (after printing why). */
int http_shared_attach(const struct http_prefork *pf, struct http_limiters *lim);
/* Make the shared limiters (files PREFIX-ip and PREFIX-user; prefix NULL:
 * /dev/shm/sluice-http-PORT), bind, fork the workers and supervise them
 * until SIGTERM/SIGINT; returns the exit status. */
int http_prefork_main(const char *addr, long port, int workers, const char *prefix,
                      const char *limits, const struct sluice_policy *ip,
                      const struct sluice_policy *user,
                      int (*worker)(int lfd, const struct http_prefork *pf, void *arg), void *arg);

#endif
