/*
 * Baselines with the same GCRA arithmetic as sluice (TAT per key, integer
 * emission interval): a chained hash table behind one global mutex, or
 * behind `stripes` mutexes.  What a careful implementation without
 * lock-free machinery looks like.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

struct bnode {
    struct bnode *next;
    uint64_t tat;
    char key[KEY_LEN];
};

struct baseline {
    unsigned stripes;
    uint64_t nbuckets, T, tau;
    pthread_mutex_t *locks;
    struct bnode **buckets;
};

static uint64_t bhash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = UINT64_C(1469598103934665603);

    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * UINT64_C(1099511628211);
    return h ^ (h >> 29);
}

struct baseline *baseline_new(unsigned stripes, uint64_t nkeys, uint64_t count, uint64_t period)
{
    struct baseline *b = calloc(1, sizeof(*b));

    b->stripes = stripes;
    b->nbuckets = 1;
    while (b->nbuckets < nkeys * 2)
        b->nbuckets <<= 1;
    b->buckets = calloc(b->nbuckets, sizeof(*b->buckets));
    b->locks = malloc(stripes * sizeof(*b->locks));
    for (unsigned i = 0; i < stripes; i++)
        pthread_mutex_init(&b->locks[i], NULL);
    b->T = period / count;
    b->tau = b->T * count;
    return b;
}

int baseline_acquire(struct baseline *b, const void *key, size_t len, uint64_t now)
{
    uint64_t h = bhash(key, len), slot = h & (b->nbuckets - 1);
    pthread_mutex_t *lock = &b->locks[slot % b->stripes];
    struct bnode *n;
    int rc = SLUICE_DENY;

    pthread_mutex_lock(lock);
    for (n = b->buckets[slot]; n != NULL && memcmp(n->key, key, KEY_LEN) != 0; n = n->next)
        ;
    if (n == NULL) {
        n = calloc(1, sizeof(*n));
        memcpy(n->key, key, KEY_LEN);
        n->next = b->buckets[slot];
        b->buckets[slot] = n;
    }
    uint64_t base = n->tat > now ? n->tat : now;
    if (base + b->T - now <= b->tau) {
        n->tat = base + b->T;
        rc = SLUICE_ALLOW;
    }
    pthread_mutex_unlock(lock);
    return rc;
}

void baseline_free(struct baseline *b)
{
    for (uint64_t i = 0; i < b->nbuckets; i++)
        for (struct bnode *n = b->buckets[i], *next; n != NULL; n = next) {
            next = n->next;
            free(n);
        }
    for (unsigned i = 0; i < b->stripes; i++)
        pthread_mutex_destroy(&b->locks[i]);
    free(b->locks);
    free(b->buckets);
    free(b);
}
