/*
 * The cell table (src/cells.c) on its own, against the two things its
 * rules exist for, while a writer migrates it, inserts and removes keys
 * as fast as it can:
 *
 *   - No charge is lost or doubled.  Every charged key allows K charges,
 *     ever (a count that never refills: any charge that lands on a copy
 *     the table no longer holds shows up as one more admission).  Deciders
 *     charge until every key is spent; each key must have admitted exactly
 *     K, and its cell must read K.
 *   - A lookup finds what is present and only that.  Victim keys come
 *     and go; a lookup made while one was present
 *     throughout (its version odd and unchanged around the lookup) must
 *     find it, and one made while it was absent throughout must not.
 *
 * Usage: cells [scale [threads]].  Under TSan the suite runs it too.
 */
#include <sched.h>
#include <stdatomic.h>

#include "helpers.h"

#include "cells.h"

#define K 24u            /* charges each key allows, ever */
#define NK 3000u         /* charged keys, all inline */
#define NV 512u          /* victims, inserted and removed by the writer */
#define MAX_THREADS 16u

struct victim_entry {
    unsigned len;
    unsigned char key[16];
};

static _Atomic(struct sl_cells *) table;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static sl_aword accounted;
static struct sl_hkey hkey;

static unsigned char keys[NK][16];
static unsigned key_len[NK];
static _Atomic unsigned admitted[NK];
static _Atomic unsigned spent_keys;

static struct victim_entry victims[NV];
/* A seqlock's count: odd while the writer changes the victim, and (v / 2)
 * odd once it is present. */
static _Atomic unsigned victim_version[NV];

static _Atomic unsigned lookup_errors, migrations, migrations_charging, writer_done, charges;
static uint64_t decider_budget;

static uint64_t hash_of(void *ctx, const void *key, size_t len)
{
    (void)ctx;
    return sl_hash(&hkey, key, len);
}

/* The cell of a key, as a reader finds it. */
static struct sl_cell *find(const unsigned char *key, unsigned len)
{
    uint64_t k[2];

    sl_cell_key_pack(key, len, k);
    return sl_cells_lookup(&table, hash_of(NULL, key, len), k, len);
}

/* The slow path of a decider: under the lock, make the key if absent. */
static void make_key(unsigned i)
{
    pthread_mutex_lock(&table_lock);
    if (find(keys[i], key_len[i]) == NULL) {
        CHECK_EQ(sl_cells_reserve(&table, &accounted, hash_of, NULL), 0);
        (void)sl_cells_insert(atomic_load_explicit(&table, memory_order_relaxed),
                              hash_of(NULL, keys[i], key_len[i]), keys[i], key_len[i], 0, 0);
    }
    pthread_mutex_unlock(&table_lock);
}

/* One charge on key i if it has one left: true when it is spent. */
static bool charge(unsigned i, uint64_t now, unsigned burst)
{
    uint64_t seen[2];
    struct sl_cell *c = find(keys[i], key_len[i]);

    if (c == NULL) {
        make_key(i);
        return false;
    }
    seen[0] = sl_load_acq(&c->state);
    seen[1] = sl_load_rlx(&c->last);
    for (;;) {
        if (seen[0] & SL_DEAD) {
            /* frozen or gone: the writer's; wait for it as the limiter does */
            pthread_mutex_lock(&table_lock);
            pthread_mutex_unlock(&table_lock);
            return false;
        }
        if (seen[0] >= K)
            return true;
        if (sl_cell_commit(c, seen, seen[0] + 1, now)) {
            atomic_fetch_add_explicit(&charges, 1, memory_order_relaxed);
            if (atomic_fetch_add_explicit(&admitted[i], 1, memory_order_relaxed) + 1 == K)
                atomic_fetch_add_explicit(&spent_keys, 1, memory_order_relaxed);
            /* a burst on the cell found, as a hot key's calls come: the
             * longer a decider keeps a cell, the likelier a migration
             * copies it meanwhile */
            if (burst-- == 0)
                return false;
            seen[0]++;
            seen[1] = sl_last_encode(now);
        }
    }
}

/* A lookup of victim v, judged by its versions around it. */
static void look_at_victim(unsigned v)
{
    unsigned before = atomic_load_explicit(&victim_version[v], memory_order_acquire), after;
    struct victim_entry *e = &victims[v];
    struct sl_cell *c = find(e->key, e->len);

    /* an RMW that releases: the lookup's loads come before it (a fence
     * would do, but ThreadSanitizer does not follow fences) */
    after = atomic_fetch_add_explicit(&victim_version[v], 0, memory_order_acq_rel);
    if (before != after || (before & 1))
        return; /* inserted or removed meanwhile: either answer is right */
    if (((before >> 1) & 1) != (c != NULL)) {
        if (atomic_fetch_add_explicit(&lookup_errors, 1, memory_order_relaxed) < 5)
            fprintf(stderr, "victim %u: %s while %s throughout\n", v, c != NULL ? "found" : "missed",
                    (before >> 1) & 1 ? "present" : "absent");
    }
}

static void *decider_main(void *arg)
{
    uint64_t rng = (uintptr_t)arg * 7919 + 1, now = 0;
    struct sl_thread *t = sl_thread_get();

    for (uint64_t n = 0; n < decider_budget; n++) {
        if (atomic_load_explicit(&spent_keys, memory_order_relaxed) == NK &&
            atomic_load_explicit(&writer_done, memory_order_acquire))
            break;
        uint64_t r = t_rand(&rng);
        sl_epoch_begin(t);
        /* charges paced by migrations (512 of them at least while keys
         * are charged, however the threads are scheduled) */
        if (r % 4 == 0 || atomic_load_explicit(&charges, memory_order_relaxed) >=
                              (atomic_load_explicit(&migrations, memory_order_relaxed) + 1) *
                                  (NK * K / 512))
            look_at_victim((unsigned)(r >> 8) % NV);
        else
            (void)charge((unsigned)(r >> 8) % NK, now += 1000, (unsigned)(r >> 40) % 4);
        sl_epoch_end(t);
    }
    sl_epoch_drain(t);
    return NULL;
}

static void victim_insert(unsigned v)
{
    struct victim_entry *e = &victims[v];
    uint64_t h = hash_of(NULL, e->key, e->len);
    struct sl_cells *t;

    CHECK_EQ(sl_cells_reserve(&table, &accounted, hash_of, NULL), 0);
    /* acquire: the cell's change comes after the odd count (seqlock) */
    atomic_fetch_add_explicit(&victim_version[v], 1, memory_order_acq_rel);
    t = atomic_load_explicit(&table, memory_order_relaxed);
    (void)sl_cells_insert(t, h, e->key, e->len, 0, 0);
    atomic_fetch_add_explicit(&victim_version[v], 1, memory_order_release);
}

static void victim_remove(unsigned v)
{
    struct victim_entry *e = &victims[v];
    uint64_t was[2];
    struct sl_cell *c = find(e->key, e->len);

    CHECK(c != NULL);
    if (c == NULL)
        return;
    atomic_fetch_add_explicit(&victim_version[v], 1, memory_order_acq_rel); /* as in victim_insert */
    CHECK(sl_cell_freeze(c, was));
    sl_cells_remove(atomic_load_explicit(&table, memory_order_relaxed), c);
    atomic_fetch_add_explicit(&victim_version[v], 1, memory_order_release);
}

static void *writer_main(void *arg)
{
    uint64_t rng = 12345, rounds = *(uint64_t *)arg;
    struct sl_thread *t = sl_thread_get();

    /* on until every key is spent: migrations race the charges throughout */
    for (uint64_t n = 0; n < rounds || (atomic_load_explicit(&spent_keys, memory_order_relaxed) < NK &&
                                         n < 100 * rounds);
         n++) {
        uint64_t r = t_rand(&rng);
        sl_epoch_begin(t);
        pthread_mutex_lock(&table_lock);
        if (r % 4 == 0) {
            /* a migration of its own: larger, smaller or the same size */
            struct sl_cells *cur = atomic_load_explicit(&table, memory_order_relaxed);
            uint64_t cap = sl_cells_cap_for(cur->live + (r >> 8) % 200);
            if (sl_cells_migrate(&table, &accounted, cap, hash_of, NULL) == 0) {
                atomic_fetch_add_explicit(&migrations, 1, memory_order_relaxed);
                if (atomic_load_explicit(&spent_keys, memory_order_relaxed) < NK)
                    atomic_fetch_add_explicit(&migrations_charging, 1, memory_order_relaxed);
            }
        } else {
            for (unsigned j = 0; j < 8; j++) {
                unsigned v = (unsigned)(t_rand(&rng) % NV);
                if (atomic_load_explicit(&victim_version[v], memory_order_relaxed) & 2)
                    victim_remove(v);
                else
                    victim_insert(v);
            }
        }
        pthread_mutex_unlock(&table_lock);
        sl_epoch_end(t);
    }
    atomic_store_explicit(&writer_done, 1, memory_order_release);
    sl_epoch_drain(t);
    return NULL;
}

#ifdef SL_DEBUG_CHECKS
/* src/internal.h: a lookup that missed the current array stalls, now and
 * then, before it turns to `prev`, until the writer has finished the
 * migration under way (or for a bounded while); a lookup that read prev
 * only after its probe then misses present victims in most runs (it was
 * seen in 1 of 20 without). */
static void stall_after_miss(void)
{
    static _Thread_local unsigned n;
    unsigned m = atomic_load_explicit(&migrations, memory_order_relaxed);

    if (++n % 4 != 0)
        return;
    for (unsigned i = 0; i < 2000 && atomic_load_explicit(&migrations, memory_order_relaxed) == m &&
                         !atomic_load_explicit(&writer_done, memory_order_relaxed);
         i++)
        sched_yield();
}
#endif

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);
    unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
    uint64_t rounds = (uint64_t)(20000 * scale) + 200;
    static uint64_t w_rounds;
    pthread_t th[MAX_THREADS];

    if (!sl_cas_pair_usable()) {
        printf("cells: no cmpxchg16b here, skipped\n");
        return T_SKIP;
    }
    if (threads < 1 || threads > MAX_THREADS)
        threads = 2;
    sl_hkey_set(&hkey, 0x1234, 0x5678);
    for (unsigned i = 0; i < NK; i++) {
        key_len[i] = 1 + i % 16;
        /* unique: i / 16 < 256 tells apart the keys of one length */
        keys[i][0] = (unsigned char)(i / 16);
        for (unsigned b = 1; b < key_len[i]; b++)
            keys[i][b] = (unsigned char)(b * 31 + 7);
    }
    for (unsigned v = 0; v < NV; v++) {
        victims[v].len = 1 + v % 16;
        /* unique, and apart from the charged keys (whose first byte is below 0xc0) */
        memset(victims[v].key, 0x5a, sizeof(victims[v].key));
        if (victims[v].len == 1) {
            victims[v].key[0] = (unsigned char)(0xc0 + v / 16);
        } else {
            victims[v].key[0] = (unsigned char)(0xe0 | v >> 8);
            victims[v].key[1] = (unsigned char)v;
        }
    }
    atomic_init(&table, sl_cells_new(&accounted, 0));
#ifdef SL_DEBUG_CHECKS
    atomic_store(&sl_test_cells_missed, stall_after_miss);
#endif
    decider_budget = (uint64_t)(4e6 * (scale < 1 ? 1 : scale)) + NK * K * 40;

    w_rounds = rounds;
    if (pthread_create(&th[0], NULL, writer_main, &w_rounds) != 0)
        return 1;
    for (unsigned i = 1; i <= threads; i++)
        if (pthread_create(&th[i], NULL, decider_main, (void *)(uintptr_t)i) != 0)
            return 1;
    for (unsigned i = 0; i <= threads; i++)
        pthread_join(th[i], NULL);

    /* every key spent, exactly: no charge lost (fewer) nor doubled (more) */
    unsigned over = 0, under = 0;
    for (unsigned i = 0; i < NK; i++) {
        unsigned a = atomic_load(&admitted[i]);
        struct sl_cell *c;
        over += a > K;
        under += a < K;
        if (a > K && over <= 5)
            fprintf(stderr, "key %u admitted %u of %u\n", i, a, K);
        c = find(keys[i], key_len[i]);
        CHECK(c != NULL);
        if (c != NULL)
            CHECK_U64(sl_load_rlx(&c->state), (uint64_t)a);
    }
    CHECK_EQ(over, 0u);
    CHECK_EQ(under, 0u);
    CHECK_EQ(atomic_load(&lookup_errors), 0u);
    /* the table holds what is present, no more */
    {
        struct sl_cells *t = atomic_load(&table);
        uint64_t present = 0;
        for (unsigned v = 0; v < NV; v++)
            present += (atomic_load(&victim_version[v]) >> 1) & 1;
        CHECK_U64(t->live, NK + present);
        CHECK(atomic_load_explicit(&t->prev, memory_order_relaxed) == NULL);
        printf("cells: %u keys x %u charges, %u migrations (%u while keys were charged), "
               "%u deciders; %" PRIu64 " cells, %" PRIu64 " live\n",
               NK, K, atomic_load(&migrations), atomic_load(&migrations_charging), threads, t->cap,
               t->live);
        /* a test that raced nothing would pass whatever the table did */
        CHECK(atomic_load(&migrations_charging) >= 511);
        sl_cells_free(&accounted, t);
    }
    CHECK_U64(sl_load_rlx(&accounted), 0);
    return t_done("cells");
}
