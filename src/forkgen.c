/*
 * The process's fork generation, counted in each child: state a process
 * took under one generation (a shared file's process record, a sliding
 * log's key held in-process) belongs to the parent, not to a child forked
 * meanwhile.  One counter for every such user, below all of them (fork.c,
 * which keeps locks whole across fork, sits above the table).
 */
#include "internal.h"

_Atomic uint32_t sl_fork_gen = 1;
static pthread_once_t sl_fork_gen_once = PTHREAD_ONCE_INIT;

static void sl_fork_gen_child(void)
{
    uint32_t g = atomic_load_explicit(&sl_fork_gen, memory_order_relaxed) + 1;

    /* relaxed: the child is single-threaded here; never 0 */
    atomic_store_explicit(&sl_fork_gen, g != 0 ? g : 1, memory_order_relaxed);
}

static void sl_fork_gen_init(void)
{
    (void)pthread_atfork(NULL, NULL, sl_fork_gen_child);
}

void sl_fork_watch(void)
{
    (void)pthread_once(&sl_fork_gen_once, sl_fork_gen_init);
}
