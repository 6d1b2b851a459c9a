/*
 * HTTP rate-limit response headers.
 *
 * IETF httpapi draft (RateLimit header fields, draft-ietf-httpapi-ratelimit-
 * headers, structured-field syntax):
 *     RateLimit-Policy: "<name>";q=<quota>;w=<window seconds>
 *     RateLimit: "<name>";r=<remaining>;t=<seconds until reset>
 * The de-facto X- set:
 *     X-RateLimit-Limit, -Remaining, -Used, -Reset (seconds until reset)
 * and on a denial Retry-After in whole seconds.  Seconds always round up, so
 * a client that waits what it is told is never early.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

struct sl_buf {
    char *p;
    size_t cap, len;
    bool overflow;
};

__attribute__((format(printf, 2, 3))) static void sl_buf_printf(struct sl_buf *b, const char *fmt,
                                                                ...)
{
    va_list ap;
    int n;

    if (b->overflow)
        return;
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len)
        b->overflow = true;
    else
        b->len += (size_t)n;
}

static uint64_t sl_ceil_seconds(uint64_t ns)
{
    return ns / 1000000000u + (ns % 1000000000u != 0);
}

int sluice_format_headers(sluice_t *l, const struct sluice_result *res, unsigned style, char *buf,
                          size_t cap)
{
    struct sl_buf b = {.p = buf, .cap = cap};
    uint64_t reset_s, used;

    if (l == NULL || res == NULL || (buf == NULL && cap > 0) ||
        (style & ~(SLUICE_HDR_IETF | SLUICE_HDR_X)) != 0)
        return -EINVAL;
    if (cap == 0)
        return -ENOSPC;
    buf[0] = '\0';
    reset_s = sl_ceil_seconds(res->reset_after_ns);
    used = res->limit - sl_min64(res->remaining, res->limit);
    if (style & SLUICE_HDR_IETF) {
        sl_buf_printf(&b, "RateLimit-Policy: \"%s\";q=%llu;w=%llu\r\n", l->name,
                      (unsigned long long)res->limit,
                      (unsigned long long)sl_ceil_seconds(res->period_ns));
        sl_buf_printf(&b, "RateLimit: \"%s\";r=%llu;t=%llu\r\n", l->name,
                      (unsigned long long)res->remaining, (unsigned long long)reset_s);
    }
    if (style & SLUICE_HDR_X) {
        sl_buf_printf(&b,
                      "X-RateLimit-Limit: %llu\r\nX-RateLimit-Remaining: %llu\r\n"
                      "X-RateLimit-Used: %llu\r\nX-RateLimit-Reset: %llu\r\n",
                      (unsigned long long)res->limit, (unsigned long long)res->remaining,
                      (unsigned long long)used, (unsigned long long)reset_s);
    }
    if (res->retry_after_ns > 0)
        sl_buf_printf(&b, "Retry-After: %llu\r\n",
                      (unsigned long long)sl_ceil_seconds(res->retry_after_ns));
    if (b.overflow) {
        buf[0] = '\0';
        return -ENOSPC;
    }
    return (int)b.len;
}
