/* Error texts and the version. */
#include <limits.h>
#include <string.h>

#include "internal.h"

#define SL_STR2(x) #x
#define SL_STR(x) SL_STR2(x)

const char *sluice_strerror(int rc)
{
    switch (rc) {
    case SLUICE_ALLOW:
        return "allowed";
    case SLUICE_DENY:
        return "denied: rate limit exceeded";
    case -EINVAL:
        return "invalid argument or policy";
    case -ENAMETOOLONG:
        return "key longer than max_key_len";
    case -E2BIG:
        return "cost larger than a limit can ever admit";
    case -ENOMEM:
        return "out of memory";
    case -ENOSPC:
        return "no space: too many keys or limits";
    case -ENOENT:
        return "no such key";
    case -EAGAIN:
        return "resource temporarily unavailable";
    case -EBUSY:
        return "busy: a stopped process's call holds the key (shared limiter)";
    case -ENOSYS:
        return "not implemented";
    default:
        return rc < 0 && rc != INT_MIN ? strerror(-rc) : "unknown result";
    }
}

const char *sluice_version(void)
{
    return SL_STR(SLUICE_VERSION_MAJOR) "." SL_STR(SLUICE_VERSION_MINOR) "." SL_STR(
        SLUICE_VERSION_PATCH);
}
