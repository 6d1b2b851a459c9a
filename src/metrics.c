/*
 * Prometheus text exposition (format 0.0.4) of sluice_stats():
 *
 *     # HELP sluice_allowed_total Requests admitted.
 *     # TYPE sluice_allowed_total counter
 *     sluice_allowed_total{name="api"} 42
 *
 * one such group per metric, in a fixed order, so that a caller exposing
 * several limiters can merge the outputs family by family (a scrape must
 * not repeat a family's HELP/TYPE lines, and each family's samples must be
 * contiguous).
 */
#include <limits.h>
#include <string.h>

#include "internal.h"

struct sl_out {
    char *p;
    size_t cap; /* room for the text and its NUL */
    size_t len;
    bool overflow;
};

static void sl_out_bytes(struct sl_out *o, const char *s, size_t n)
{
    /* `len + n < cap`, written so that it cannot wrap: the NUL must fit too */
    if (o->overflow || n >= o->cap - o->len) {
        o->overflow = true;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void sl_out_str(struct sl_out *o, const char *s) { sl_out_bytes(o, s, strlen(s)); }

static void sl_out_u64(struct sl_out *o, uint64_t v)
{
    char tmp[20]; /* UINT64_MAX has 20 digits */
    size_t i = sizeof(tmp);

    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    sl_out_bytes(o, tmp + i, sizeof(tmp) - i);
}

/* A label value: the spec escapes exactly backslash, double quote and line
 * feed; every other byte (UTF-8 included) goes through unchanged. */
static void sl_out_label_value(struct sl_out *o, const char *s)
{
    while (*s != '\0') {
        size_t run = strcspn(s, "\\\"\n");
        sl_out_bytes(o, s, run);
        s += run;
        if (*s == '\0')
            break;
        sl_out_str(o, *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : "\\n");
        s++;
    }
}

SLUICE_API int sluice_format_prometheus(sluice_t *l, char *buf, size_t cap)
{
    struct sluice_stats st;
    struct sl_out o = {.p = buf};
    const struct {
        const char *name, *type, *help;
    } m[] = {
        {"sluice_allowed_total", "counter", "Requests admitted."},
        {"sluice_denied_total", "counter", "Requests denied."},
        {"sluice_inserted_total", "counter", "Keys created."},
        {"sluice_reaped_total", "counter", "Idle keys removed."},
        {"sluice_full_total", "counter",
         "Requests decided untracked by when_full because max_keys keys were live."},
        {"sluice_keys", "gauge", "Live keys."},
        {"sluice_memory_bytes", "gauge", "Bytes held by the limiter, tables and keys included."},
    };

    if (l == NULL || (buf == NULL && cap > 0))
        return -EINVAL;
    if (cap == 0)
        return -ENOSPC;
    /* The return value is an int: text longer than INT_MAX counts as not
     * fitting, whatever cap says. */
    o.cap = cap > (size_t)INT_MAX ? (size_t)INT_MAX + 1 : cap;

    /* One snapshot, so the lines of a scrape agree with each other. */
    sluice_stats(l, &st);
    uint64_t v[] = {st.allowed, st.denied, st.inserted, st.reaped,
                    st.full,    st.keys,   st.memory_bytes};
    _Static_assert(sizeof(v) / sizeof(v[0]) == sizeof(m) / sizeof(m[0]), "one value per metric");

    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]) && !o.overflow; i++) {
        sl_out_str(&o, "# HELP ");
        sl_out_str(&o, m[i].name);
        sl_out_str(&o, " ");
        sl_out_str(&o, m[i].help);
        sl_out_str(&o, "\n# TYPE ");
        sl_out_str(&o, m[i].name);
        sl_out_str(&o, " ");
        sl_out_str(&o, m[i].type);
        sl_out_str(&o, "\n");
        sl_out_str(&o, m[i].name);
        sl_out_str(&o, "{name=\"");
        sl_out_label_value(&o, l->name);
        sl_out_str(&o, "\"} ");
        sl_out_u64(&o, v[i]);
        sl_out_str(&o, "\n");
    }
    if (o.overflow) {
        buf[0] = '\0';
        return -ENOSPC;
    }
    buf[o.len] = '\0';
    return (int)o.len;
}
