/*
 * Attaching to a shared limiter's file (sluice_open_shared) of any content:
 * the input is the file image (the corpus holds valid images to mutate).
 * Attach returns 0 or -EPROTO (-EINVAL for a custom-clock file), never
 * crashes or hangs; an attached file answers lock-free reads (peek, stats)
 * with a decision or an error, and override changes (writers under the
 * shard locks) with success or an error (-EBUSY after 2 s where a call
 * that looks alive holds the key: shared_repair's test_corrupt_window;
 * not a seed here, as every mutation of it would take seconds), and
 * detaches.  The image lives in a memfd
 * opened by its /proc/self/fd path, so runs leave nothing behind.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    sluice_t *l = NULL;
    struct sluice_stats st;
    int fd = memfd_create("sluice-fuzz", MFD_CLOEXEC), rc;

    if (fd < 0)
        return 0;
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    rc = sluice_open_shared(path, NULL, 0, &l);
    if (rc != 0 && rc != -EPROTO && rc != -EINVAL && rc != -ENOMEM)
        abort();
    if (rc == 0) {
        static const char *keys[] = {"", "a", "key-1", "client-42"};
        for (unsigned i = 0; i < 4; i++) {
            int d = sluice_peek_at(l, keys[i], __builtin_strlen(keys[i]), 1, 1000000000, NULL);
            if (d != SLUICE_ALLOW && d != SLUICE_DENY && d != -EPROTO && d != -E2BIG)
                abort();
        }
        {
            /* the override calls, on whatever the file holds: an error or
             * a change, never a crash or a hang */
            struct sluice_policy p = {0};
            sluice_policy_add(&p, SLUICE_FIXED_WINDOW, 3, 1000000000);
            for (unsigned i = 1; i < 3; i++) {
                rc = sluice_override_set(l, keys[i], __builtin_strlen(keys[i]), &p);
                if (rc != 0 && rc != -EPROTO && rc != -ENOSPC && rc != -ENOMEM && rc != -EINVAL &&
                    rc != -ENAMETOOLONG && rc != -EBUSY)
                    abort();
                rc = sluice_override_clear(l, keys[i], __builtin_strlen(keys[i]));
                if (rc != 0 && rc != -EPROTO && rc != -ENOENT && rc != -ENOMEM &&
                    rc != -ENAMETOOLONG && rc != -EBUSY)
                    abort();
            }
        }
        sluice_stats(l, &st);
        sluice_destroy(l);
    }
    close(fd);
    return 0;
}
