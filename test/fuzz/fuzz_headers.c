/*
 * Header formatting: any result, style and capacity either fits, with a NUL
 * inside cap and only header lines, or fails cleanly; never a byte past cap
 * (the buffer is exactly cap bytes on the heap, so ASan sees an overflow).
 */
#include <errno.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sluice_t *l;
    struct fz f = {data, size};
    struct sluice_result r;
    unsigned style;
    size_t cap;
    char *buf;
    int rc;

    if (l == NULL) {
        struct sluice_config cfg;
        sluice_config_init(&cfg);
        sluice_policy_add(&cfg.policy, SLUICE_GCRA, 10, 1000000000);
        cfg.name = "fuzz";
        if (sluice_create(&cfg, &l) != 0)
            abort();
    }
    r.limit = fz_num(&f);
    r.remaining = fz_num(&f);
    r.retry_after_ns = fz_num(&f);
    r.reset_after_ns = fz_num(&f);
    r.period_ns = fz_num(&f);
    r.limit_index = fz_u8(&f);
    r.flags = fz_u8(&f);
    r.key_index = 0;
    style = fz_u8(&f) % 5;
    cap = (size_t)fz_u64(&f, 2) % 600;
    buf = malloc(cap ? cap : 1);
    rc = sluice_format_headers(l, &r, style, cap ? buf : NULL, cap);
    if (style > 3) {
        FZ_CHECK(rc == -EINVAL);
    } else if (cap == 0) {
        FZ_CHECK(rc == -ENOSPC || rc == -EINVAL);
    } else if (rc >= 0) {
        FZ_CHECK((size_t)rc < cap && buf[rc] == '\0' && strlen(buf) == (size_t)rc);
        for (int i = 0; i < rc; i++)
            FZ_CHECK(buf[i] == '\r' ? buf[i + 1] == '\n' : buf[i] >= 0x20 || buf[i] == '\n');
        FZ_CHECK(rc == 0 || (buf[rc - 2] == '\r' && buf[rc - 1] == '\n'));
        FZ_CHECK((strstr(buf, "Retry-After: ") != NULL) == (r.retry_after_ns > 0));
    } else {
        FZ_CHECK(rc == -ENOSPC && buf[0] == '\0');
    }
    free(buf);
    return 0;
}
