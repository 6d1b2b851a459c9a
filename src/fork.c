/*
 * fork(2) with limiters open.  A child gets a copy of every lock as it was
 * at the fork: one that another thread (a caller's, or the library's own
 * reaper) held then stays held in the child for ever, and the child's
 * first call that needs it never returns: a shared limiter's policy cache
 * lock, a private limiter's shard and entry allocator locks.  So every
 * limiter is listed here, and around a fork the forking thread takes all
 * their locks first (the parent's other threads finish what they were
 * doing under them, so the copy is whole) and both sides release them
 * after.  Lock order: the list, then per limiter its shards in index order
 * and its policy cache lock, then every entry allocator (arena.c keeps
 * them, a destroyed limiter's too, while its retired entries may still be
 * freed into it); calls hold one shard lock at a time (others only by
 * trylock), and take an allocator's innermost.
 *
 * Lock-free state of calls caught mid-flight is copied too.  A private
 * limiter's keys forget the acquire_all calls counted on them (a writer
 * would wait for their commits for ever) and the decisions that inserted
 * them: a walk of every key, in the child.  A sliding log's key held by
 * another thread is released by the child's first waiter (algo_log.c: the
 * holder is the process, numbered by fork).  A shared limiter needs
 * neither: its file already tells dead callers from live ones.
 *
 * The child has no reaper thread: a private limiter's copy is reaped only
 * by sluice_reap() calls in the child (a shared limiter's file, by every
 * process that reaps it).
 */
#include "shm.h"

static pthread_mutex_t sl_fork_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sluice *sl_fork_list; /* under sl_fork_lock */
static pthread_once_t sl_fork_once = PTHREAD_ONCE_INIT;

static void sl_fork_hold(struct sluice *l)
{
    for (unsigned i = 0; l->shards != NULL && i < l->nshards; i++)
        sl_shard_lock(&l->shards[i]);
    if (l->shm != NULL)
        pthread_mutex_lock(&l->shm->mu);
}

static void sl_fork_release(struct sluice *l)
{
    if (l->shm != NULL)
        pthread_mutex_unlock(&l->shm->mu);
    for (unsigned i = 0; l->shards != NULL && i < l->nshards; i++)
        sl_shard_unlock(&l->shards[i]);
}

static void sl_fork_prepare(void)
{
    pthread_mutex_lock(&sl_fork_lock);
    for (struct sluice *l = sl_fork_list; l != NULL; l = l->fork_next)
        sl_fork_hold(l);
    sl_arenas_hold(true); /* innermost: taken under shard locks, never before */
}

static void sl_fork_parent(void)
{
    sl_arenas_hold(false);
    for (struct sluice *l = sl_fork_list; l != NULL; l = l->fork_next)
        sl_fork_release(l);
    pthread_mutex_unlock(&sl_fork_lock);
}

/* The forking thread is the child's only thread, and held every lock. */
static void sl_fork_child(void)
{
    sl_arenas_hold(false);
    for (struct sluice *l = sl_fork_list; l != NULL; l = l->fork_next) {
        if (l->shards != NULL)
            sl_table_after_fork(l); /* O(keys): calls caught mid-flight */
        sl_fork_release(l);
        l->reaper_running = false; /* no such thread here: never joined */
    }
    pthread_mutex_unlock(&sl_fork_lock);
}

static void sl_fork_init(void)
{
    (void)pthread_atfork(sl_fork_prepare, sl_fork_parent, sl_fork_child);
}

void sl_fork_track(struct sluice *l)
{
    (void)pthread_once(&sl_fork_once, sl_fork_init);
    pthread_mutex_lock(&sl_fork_lock);
    l->fork_prev = NULL;
    l->fork_next = sl_fork_list;
    if (sl_fork_list != NULL)
        sl_fork_list->fork_prev = l;
    sl_fork_list = l;
    pthread_mutex_unlock(&sl_fork_lock);
}

void sl_fork_untrack(struct sluice *l)
{
    pthread_mutex_lock(&sl_fork_lock);
    if (l->fork_prev != NULL)
        l->fork_prev->fork_next = l->fork_next;
    else if (sl_fork_list == l)
        sl_fork_list = l->fork_next;
    if (l->fork_next != NULL)
        l->fork_next->fork_prev = l->fork_prev;
    l->fork_prev = l->fork_next = NULL;
    pthread_mutex_unlock(&sl_fork_lock);
}
