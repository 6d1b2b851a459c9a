/*
 * Processes whose main thread has exited (pthread_exit from main) while
 * their other threads go on deciding.  /proc/PID/stat then shows the
 * process as a zombie and /proc/PID/maps lists nothing, so other processes
 * took it for dead: they took its shard lock over mid-insert and reclaimed
 * its record, and one key was made twice (an outside reviewer: 16 to 33 of
 * 60,000 keys admitted twice under a limit of one).  A zombie with
 * threads is alive, and a process whose maps list nothing is not known to
 * be gone.  Two such processes walk the same fresh keys, one unit each at
 * a limit of one per 1000 s: every key is admitted once, never twice.
 * Usage: shared_leader_exit [scale]   (exit 77 without /dev/shm)
 */
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "helpers.h"

#define NPROC 2

static char path[128];
static atomic_int *admits, *errors;
static int nkeys;

static void *walk(void *arg)
{
    sluice_t *l = NULL;
    char k[32];

    (void)arg;
    if (sluice_open_shared(path, NULL, 0, &l) != 0)
        _exit(2);
    for (int i = 0; i < nkeys; i++) {
        int n = snprintf(k, sizeof(k), "key-%d", i);
        int rc = sluice_acquire_at(l, k, (size_t)n, 1, NS_PER_S + (uint64_t)i, NULL);
        if (rc == SLUICE_ALLOW)
            atomic_fetch_add(&admits[i], 1);
        else if (rc < 0)
            atomic_fetch_add(errors, 1);
    }
    _exit(0);
}

int main(int argc, char **argv)
{
    struct sluice_config cfg;
    long twice = 0;
    int st;

    nkeys = (int)(30000 * t_scale(argc, argv)) + 1000;
    t_shm_path(path, sizeof(path), "leader-exit");
    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 1, 1000 * NS_PER_S);
    cfg.max_keys = (uint64_t)nkeys + 1024;
    cfg.shards = 1; /* every insert meets the other process's lock */
    sluice_destroy(t_open_shared(path, &cfg, SLUICE_SHARED_CREATE));
    admits = mmap(NULL, (size_t)nkeys * sizeof(*admits), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    errors = mmap(NULL, sizeof(*errors), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                  0);
    CHECK(admits != MAP_FAILED && errors != MAP_FAILED);
    fflush(stdout);
    fflush(stderr);
    for (int p = 0; p < NPROC; p++)
        if (fork() == 0) {
            pthread_t t;
            pthread_create(&t, NULL, walk, NULL);
            pthread_exit(NULL); /* the process lives on in t */
        }
    for (int p = 0; p < NPROC; p++)
        CHECK(wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int i = 0; i < nkeys; i++)
        twice += atomic_load(&admits[i]) > 1;
    CHECK_EQ(twice, 0);
    CHECK_EQ(atomic_load(errors), 0);
    printf("shared_leader_exit: %d keys, %ld admitted more than once\n", nkeys, twice);
    (void)sluice_unlink_shared(path);
    return t_done("shared_leader_exit");
}
