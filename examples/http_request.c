/*
 * Request heads and responses of sluice-http (see http.h).
 * The parser is strict (RFC 9112): anything it does not understand closes
 * the connection, because guessing where a request ends is how request
 * smuggling starts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http.h"

/* ---- request heads ---------------------------------------------------- */

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static size_t token_len(const char *s, const char *end)
{
    size_t n = 0;

    while (s + n < end && is_tchar((unsigned char)s[n]))
        n++;
    return n;
}

static bool eq_nocase(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

/* Does the comma-separated list v[0..n) hold the token `want`? */
static bool list_has(const char *v, size_t n, const char *want)
{
    const char *end = v + n;

    while (v < end) {
        const char *comma = memchr(v, ',', (size_t)(end - v));
        const char *e = comma != NULL ? comma : end;
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        const char *t = e;
        while (t > v && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if (eq_nocase(v, (size_t)(t - v), want))
            return true;
        v = e + (comma != NULL);
    }
    return false;
}

static int parse_request_line(const char *p, const char *eol, struct http_request *rq)
{
    size_t n = token_len(p, eol);
    const char *target, *sp;

    if (n == 0 || p + n >= eol || p[n] != ' ')
        return 400;
    rq->head_only = n == 4 && memcmp(p, "HEAD", 4) == 0;
    bool get_or_head = rq->head_only || (n == 3 && memcmp(p, "GET", 3) == 0);
    target = p + n + 1;
    sp = memchr(target, ' ', (size_t)(eol - target));
    if (sp == NULL || sp == target)
        return 400;
    for (const char *c = target; c < sp; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f)
            return 400;
    size_t path_len = strcspn(target, "? "); /* stops at sp at the latest */
    rq->metrics = get_or_head && path_len == 8 && memcmp(target, "/metrics", 8) == 0;
    sp++;
    if (eol - sp != 8 || memcmp(sp, "HTTP/", 5) != 0 || sp[6] != '.' || sp[5] < '0' ||
        sp[5] > '9' || sp[7] < '0' || sp[7] > '9')
        return 400;
    if (sp[5] != '1')
        return 505;
    rq->minor = sp[7] - '0';
    rq->keep_alive = rq->minor >= 1; /* the default of HTTP/1.1 and later */
    return 0;
}

int http_parse_head(const char *buf, size_t len, struct http_request *rq)
{
    const char *end = buf + len, *p = buf, *eol;
    bool have_len = false, conn_close = false, conn_keep = false;
    int rc;

    memset(rq, 0, sizeof(*rq));
    /* RFC 9112 2.2: ignore at least one empty line before the request line */
    if (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
        p += 2;
    eol = memchr(p, '\r', (size_t)(end - p));
    if (eol == NULL || eol + 1 >= end || eol[1] != '\n')
        return 400;
    if ((rc = parse_request_line(p, eol, rq)) != 0)
        return rc;
    for (p = eol + 2; p < end; p = eol + 2) {
        eol = memchr(p, '\r', (size_t)(end - p));
        if (eol == NULL || eol + 1 >= end || eol[1] != '\n')
            return 400; /* a bare CR */
        if (eol == p)
            break; /* the blank line */
        size_t n = token_len(p, eol);
        /* no space before the colon, no obsolete line folding (RFC 9112 5) */
        if (n == 0 || p[n] != ':')
            return 400;
        const char *v = p + n + 1, *ve = eol;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (const char *c = v; c < ve; c++)
            if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
                return 400;
        size_t vn = (size_t)(ve - v);
        if (eq_nocase(p, n, "Content-Length")) {
            uint64_t cl = 0;
            if (vn == 0 || vn > 18 || strspn(v, "0123456789") < vn)
                return 400;
            for (size_t i = 0; i < vn; i++)
                cl = cl * 10 + (uint64_t)(v[i] - '0');
            /* repeated with another value: which one frames the body? */
            if (have_len && cl != rq->body_len)
                return 400;
            have_len = true;
            rq->body_len = cl;
        } else if (eq_nocase(p, n, "Transfer-Encoding")) {
            return 501; /* chunked bodies are not read here */
        } else if (eq_nocase(p, n, "Connection")) {
            conn_close |= list_has(v, vn, "close");
            conn_keep |= list_has(v, vn, "keep-alive");
        } else if (eq_nocase(p, n, "Expect")) {
            rq->expect_continue = eq_nocase(v, vn, "100-continue");
        } else if (eq_nocase(p, n, "X-User")) {
            /* two identities: the client would pick which one is limited */
            if (rq->user != NULL)
                return 400;
            rq->user = vn > 0 ? v : NULL;
            rq->user_len = vn;
        }
    }
    if (rq->body_len > HTTP_BODY_MAX)
        return 413;
    if (conn_close)
        rq->keep_alive = false;
    else if (conn_keep)
        rq->keep_alive = true;
    return 0;
}

/* ---- responses -------------------------------------------------------- */

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Internal Server Error";
    }
}

static size_t response(char *out, size_t cap, int status, const char *ctype, const char *extra,
                       const char *body, size_t body_len, bool send_body, const char *conn)
{
    int n = snprintf(out, cap,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
                     status, reason(status), ctype, body_len, conn, extra);

    if (n < 0 || (size_t)n >= cap || (send_body && body_len > cap - (size_t)n))
        return 0;
    if (send_body) {
        memcpy(out + n, body, body_len);
        n += (int)body_len;
    }
    return (size_t)n;
}

size_t http_error(int status, char *out, size_t cap)
{
    char body[64];
    int n = snprintf(body, sizeof(body), "%s\n", reason(status));

    return response(out, cap, status, "text/plain", "", body, (size_t)n, true,
                    "Connection: close\r\n");
}

/*
 * Both limiters' text in one exposition: a scrape may hold each family's
 * HELP and TYPE lines once, with its samples together, so the second
 * limiter's sample of each family goes right after the first's.  Both
 * texts list the same families in the same order (sluice_format_prometheus).
 */
static int metrics_body(const struct http_limiters *lim, char *out, size_t cap)
{
    char a[2048], b[2048];
    const char *pa = a, *pb = b;
    size_t len = 0;

    if (sluice_format_prometheus(lim->ip, a, sizeof(a)) < 0 ||
        sluice_format_prometheus(lim->user, b, sizeof(b)) < 0)
        return -ENOSPC;
    while (*pa != '\0') {
        size_t n = strcspn(pa, "\n") + 1;
        bool sample = *pa != '#';
        if (len + n >= cap)
            return -ENOSPC;
        memcpy(out + len, pa, n);
        len += n;
        pa += n;
        if (!sample)
            continue;
        while (*pb == '#')
            pb += strcspn(pb, "\n") + 1;
        n = strcspn(pb, "\n");
        if (n == 0)
            return -EPROTO; /* the texts disagree: never with one library */
        if (len + n + 1 >= cap)
            return -ENOSPC;
        memcpy(out + len, pb, n + 1);
        len += n + 1;
        pb += n + 1;
    }
    out[len] = '\0';
    return (int)len;
}

size_t http_respond(struct http_request *rq, const char *ip, const struct http_limiters *lim,
                    char *out, size_t cap)
{
    struct sluice_key keys[2] = {{lim->ip, ip, strlen(ip)}, {0}};
    struct sluice_result res;
    char hdrs[1024], body[4096];
    const char *conn = !rq->keep_alive ? "Connection: close\r\n"
                       : rq->minor == 0 ? "Connection: keep-alive\r\n"
                                        : "";
    size_t nkeys = 1, n;
    int rc, status;

    if (rq->metrics) {
        /* not charged: a scrape must neither spend nor be refused a client's quota */
        rc = metrics_body(lim, body, sizeof(body));
        n = rc < 0 ? 0
                   : response(out, cap, 200, "text/plain; version=0.0.4; charset=utf-8", "",
                              body, (size_t)rc, !rq->head_only, conn);
        goto done;
    }
    if (rq->user != NULL)
        keys[nkeys++] = (struct sluice_key){lim->user, rq->user, rq->user_len};
    rc = sluice_acquire_all(keys, nkeys, 1, sluice_now(lim->ip), &res);
    status = rc == SLUICE_ALLOW ? 200 : rc == SLUICE_DENY ? 429 : rc == -ENAMETOOLONG ? 431 : 500;
    if (rc < 0 || sluice_format_headers(res.key_index ? lim->user : lim->ip, &res,
                                        SLUICE_HDR_IETF | SLUICE_HDR_X, hdrs, sizeof(hdrs)) < 0)
        hdrs[0] = '\0';
    const char *text = status == 200 ? "ok\n" : status == 429 ? "rate limited\n"
                       : status == 431 ? "X-User too long\n" : "error\n";
    n = response(out, cap, status, "text/plain", hdrs, text, strlen(text), !rq->head_only, conn);
done:
    if (n > 0)
        return n;
    rq->keep_alive = false;
    return http_error(500, out, cap);
}
