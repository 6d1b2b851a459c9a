/*
 * The entry allocator's runs (src/arena.c): each thread's new entries come
 * from a run of its own, so that no 128-byte pair of lines (what this
 * machine's CPUs fetch together) holds the entries of keys two threads
 * made.  Without it, two threads admitting on distinct keys made in turn
 * took each other's lines on every write and decided at half the speed
 * of one.  Checked here: blocks of two thread slots never share a pair,
 * whatever the order of the calls and the sizes; blocks never overlap;
 * freed blocks are reused before any run is carved from (memory follows
 * what is live, also with keys of two sizes churning); slots past the
 * last share one run; and, through the library, the entries of keys made
 * in turn by two threads of one limiter keep apart.
 */
#include <sched.h>
#include <stdatomic.h>

#include "helpers.h"

#include "table.h"

#define PAIR 128u
#define N 3000

struct block {
    uintptr_t at;
    size_t bytes;
    unsigned owner;
};

static int by_address(const void *a, const void *b)
{
    const struct block *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Sorted by address: no overlap, every block line-aligned, and no pair of
 * lines touched by blocks of two owners. */
static void check_apart(struct block *b, size_t n)
{
    qsort(b, n, sizeof(*b), by_address);
    for (size_t i = 0; i < n; i++) {
        CHECK(b[i].at % SL_CACHELINE == 0);
        if (i == 0)
            continue;
        CHECK(b[i - 1].at + b[i - 1].bytes <= b[i].at);
        if (b[i - 1].owner != b[i].owner)
            CHECK((b[i - 1].at + b[i - 1].bytes - 1) / PAIR != b[i].at / PAIR);
    }
}

static size_t size_of(uint64_t *rng)
{
    return 16 + (size_t)(t_rand(rng) % 240); /* every class, 1 to 4 lines */
}

static void t_two_slots(uint64_t *rng)
{
    static struct block b[N];
    sl_aword acct = 0;
    struct sl_arena *a = sl_arena_new(&acct);
    uint64_t after_first;

    CHECK(a != NULL);
    for (size_t i = 0; i < N; i++) {
        /* the two slots' calls in a random order */
        b[i].owner = (unsigned)(t_rand(rng) & 1);
        b[i].bytes = size_of(rng);
        b[i].at = (uintptr_t)sl_arena_alloc(a, b[i].bytes, b[i].owner);
        CHECK(b[i].at != 0);
        memset((void *)b[i].at, 0xa5, b[i].bytes); /* ASan: all of it is ours */
        b[i].bytes = (b[i].bytes + SL_CACHELINE - 1) & ~(size_t)(SL_CACHELINE - 1);
    }
    check_apart(b, N);
    after_first = sl_load_rlx(&acct);
    /* the same sizes again, dealt to the slots anew: every block comes
     * from what was freed, none from a new slab */
    for (size_t i = 0; i < N; i++)
        sl_arena_free(a, (void *)b[i].at, b[i].bytes);
    for (size_t i = 0; i < N; i++) {
        b[i].owner = (unsigned)(t_rand(rng) & 1);
        b[i].at = (uintptr_t)sl_arena_alloc(a, b[i].bytes, b[i].owner);
        CHECK(b[i].at != 0);
    }
    CHECK_U64(sl_load_rlx(&acct), after_first);
    for (size_t i = 0; i < N; i++)
        sl_arena_free(a, (void *)b[i].at, b[i].bytes);
    sl_arena_detach(a);
}

/* Thread ids past the runs share the last one; many slots, one block each,
 * cost no more than one run per slot. */
static void t_many_slots(void)
{
    static struct block b[4 * SL_ARENA_RUNS];
    sl_aword acct = 0;
    struct sl_arena *a = sl_arena_new(&acct);
    size_t n = 0;

    CHECK(a != NULL);
    for (unsigned id = 0; id < 4 * SL_ARENA_RUNS; id++, n++) {
        b[n] = (struct block){(uintptr_t)sl_arena_alloc(a, 64, id), 64,
                              id < SL_ARENA_RUNS - 1 ? id : SL_ARENA_RUNS - 1};
        CHECK(b[n].at != 0);
    }
    CHECK(sl_load_rlx(&acct) <= 2 * 256 * 1024 + 4096); /* 65 runs of 4 KiB: two slabs, and the arena */
    for (size_t i = 0; i < n; i++)
        sl_arena_free(a, (void *)b[i].at, b[i].bytes);
    check_apart(b, n);
    sl_arena_detach(a);
}

/* Keys of one size kept while another size's come and go: freed blocks
 * are reused before a run is carved from, so memory follows what is
 * live.  (With the run carved from first, each kept block took a run of
 * its own: 32 to 63 times the live bytes.) */
static void t_churn_bound(void)
{
    enum { KEPT = 10000, CHURN = 8 };
    static void *kept[KEPT];
    void *churn[CHURN];
    sl_aword acct = 0;
    struct sl_arena *a = sl_arena_new(&acct);
    uint64_t live = KEPT * 64 + CHURN * 192;

    CHECK(a != NULL);
    for (int i = 0; i < KEPT; i++) {
        kept[i] = sl_arena_alloc(a, 64, 0);
        CHECK(kept[i] != NULL);
        for (int c = 0; c < CHURN; c++)
            CHECK((churn[c] = sl_arena_alloc(a, 150, 0)) != NULL);
        for (int c = 0; c < CHURN; c++)
            sl_arena_free(a, churn[c], 150);
    }
    /* live bytes, a run per slot, a slab of rounding and the arena */
    CHECK(sl_load_rlx(&acct) <= live + SL_ARENA_RUNS * 4096 + 256 * 1024 + 4096);
    for (int i = 0; i < KEPT; i++)
        sl_arena_free(a, kept[i], 64);
    sl_arena_detach(a);
}

/* Through the library: keys made by two threads of one limiter, in turn
 * key by key, both threads alive throughout (distinct thread ids). */
#define KEYS 401 /* odd: the two threads' keys do not end on a pair by chance */
static sluice_t *lim;
static pthread_barrier_t both;
static _Atomic unsigned turn;
static unsigned ids[2];

static void key_of(unsigned i, char k[16])
{
    memset(k, 'k', 16);
    memcpy(k, &i, sizeof(i));
}

static void *make_keys(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    char k[16];

    pthread_barrier_wait(&both);
    for (unsigned i = t; i < KEYS; i += 2) { /* the two threads' keys alternate */
        while (atomic_load(&turn) != i)
            sched_yield();
        key_of(i, k);
        CHECK(sluice_acquire_at(lim, k, sizeof(k), 1, 1, NULL) == SLUICE_ALLOW);
        atomic_store(&turn, i + 1);
    }
    ids[t] = sl_thread_get()->id;
    pthread_barrier_wait(&both); /* neither exits (and gives its id away) first */
    return NULL;
}

static void t_keys_of_two_threads(void)
{
    static struct block b[KEYS];
    struct sluice_config cfg;
    struct sl_thread *th;
    pthread_t tid[2];
    char k[16];

    sluice_config_init(&cfg);
    CHECK_EQ(sluice_policy_add(&cfg.policy, SLUICE_GCRA, 10, NS_PER_S), 0);
    /* entries, this test's subject: short keys of one GCRA limit would
     * live in cells (src/table_cells.c), placed by their hash */
    sl_cells_enabled = false;
    CHECK_EQ(sluice_create(&cfg, &lim), 0);
    sl_cells_enabled = true;
    pthread_barrier_init(&both, NULL, 2);
    for (uintptr_t t = 0; t < 2; t++)
        CHECK_EQ(pthread_create(&tid[t], NULL, make_keys, (void *)t), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&both);
    CHECK(ids[0] != ids[1]);
    th = sl_thread_get();
    CHECK(th != NULL);
    sl_epoch_begin(th);
    for (unsigned i = 0; i < KEYS; i++) {
        uint64_t h;
        key_of(i, k);
        h = sl_hash(&lim->hkey, k, sizeof(k));
        b[i].at = (uintptr_t)sl_table_get(sl_shard_of(lim, h), h, k, sizeof(k));
        b[i].bytes = SL_CACHELINE; /* a GCRA entry with a 16-byte key */
        b[i].owner = i & 1;
        CHECK(b[i].at != 0);
    }
    sl_epoch_end(th);
    check_apart(b, KEYS);
    sluice_destroy(lim);
}

/* Usage: arena [SEED] (default: time-seeded, printed to replay). */
int main(int argc, char **argv)
{
    uint64_t rng = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);

    printf("arena: seed %" PRIu64 "\n", rng);

    t_two_slots(&rng);
    t_many_slots();
    t_churn_bound();
    t_keys_of_two_threads();
    return t_done("arena");
}
