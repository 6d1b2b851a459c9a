/* Prometheus text exposition of sluice_stats (placeholder, being written). */
#include <errno.h>
#include "internal.h"

SLUICE_API int sluice_format_prometheus(sluice_t *l, char *buf, size_t cap)
{
    (void)l; (void)buf; (void)cap;
    return -EINVAL;
}
