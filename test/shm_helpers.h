/*
 * Helpers of the tests that reach into a shared limiter's file (src/shm.h)
 * to leave on purpose what a killed or stopped process would.
 */
#ifndef SL_TEST_SHM_HELPERS_H
#define SL_TEST_SHM_HELPERS_H

#include "helpers.h"
#include "shm.h"

/* The published entry of key in l's file, or NULL. */
static inline struct sl_entry *t_shm_find(sluice_t *l, const char *key)
{
    struct sl_shm *m = l->shm;

    for (uint64_t i = 0; i < m->pool; i++) {
        struct sl_entry *e = sl_shm_entry(m, i);
        if (atomic_load(&m->states[i]) == SL_ST_USED && e->key_len == strlen(key) &&
            memcmp(sl_shm_key(m, e), key, e->key_len) == 0)
            return e;
    }
    return NULL;
}

#endif
