/*
 * Shared limiters, opening and attaching: argument errors, EXCL races
 * between processes (exactly one creator wins), creation races (all end up
 * on one file), mismatched configurations (-EEXIST), foreign, empty,
 * truncated and corrupted files (-EPROTO; a key's length corrupted after
 * creation: no crash), the file mode, policy changes
 * seen by attached and late processes, unlink with handles open, and
 * attach/detach churn from many processes, some of which die without
 * detaching (their process records must come back), one file opened twice
 * by one process (one limiter: a key named through both handles is one
 * key).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"

#define S NS_PER_S
static const uint64_t T = UINT64_C(5000) * NS_PER_S;

static void cfg_fixed(struct sluice_config *cfg, uint64_t count)
{
    sluice_config_init(cfg);
    cfg->policy.nlimits = 1;
    cfg->policy.limits[0] =
        (struct sluice_limit){.algo = SLUICE_FIXED_WINDOW, .count = count, .period_ns = S};
    cfg->max_keys = 256;
    cfg->max_key_len = 64;
}

static int open_rc(const char *path, const struct sluice_config *cfg, unsigned flags)
{
    sluice_t *l = NULL;
    int rc = sluice_open_shared(path, cfg, flags, &l);

    if (rc == 0)
        sluice_destroy(l);
    return rc;
}

/* Units key admits at time T from now on. */
static uint64_t drain(sluice_t *l, const char *key)
{
    uint64_t n = 0;

    while (sluice_acquire_at(l, key, strlen(key), 1, T, NULL) == SLUICE_ALLOW)
        n++;
    return n;
}

static void test_errors(const char *path)
{
    struct sluice_config cfg;
    sluice_t *l = NULL;

    cfg_fixed(&cfg, 10);
    CHECK_EQ(sluice_open_shared(NULL, &cfg, SLUICE_SHARED_CREATE, &l), -EINVAL);
    CHECK_EQ(sluice_open_shared(path, &cfg, SLUICE_SHARED_CREATE, NULL), -EINVAL);
    CHECK_EQ(sluice_open_shared(path, &cfg, SLUICE_SHARED_EXCL, &l), -EINVAL);
    CHECK_EQ(sluice_open_shared(path, &cfg, 4, &l), -EINVAL);
    CHECK_EQ(sluice_open_shared(path, NULL, SLUICE_SHARED_CREATE, &l), -EINVAL);
    CHECK_EQ(sluice_open_shared(path, NULL, 0, &l), -ENOENT);
    CHECK_EQ(sluice_open_shared(path, &cfg, 0, &l), -ENOENT);
    cfg.name = "a-name-of-sixty-four-bytes-is-too-long-for-a-shared-limiter-file";
    CHECK_EQ(sluice_open_shared(path, &cfg, SLUICE_SHARED_CREATE, &l), -EINVAL);
    cfg_fixed(&cfg, 10);
    cfg.max_keys = 0;
    CHECK_EQ(sluice_open_shared(path, &cfg, SLUICE_SHARED_CREATE, &l), -EINVAL);
    CHECK_EQ(sluice_unlink_shared(path), -ENOENT);
    CHECK_EQ(sluice_unlink_shared(NULL), -EINVAL);
    CHECK(access(path, F_OK) != 0); /* nothing was made */
    {
        /* a dangling symbolic link is never created through (as open(2)
         * with O_CREAT | O_EXCL): -EEXIST at once, not after 8 files made
         * and thrown away; the link and its target stay as they were */
        char target[300];
        snprintf(target, sizeof(target), "%s.absent", path);
        CHECK(symlink(target, path) == 0);
        cfg_fixed(&cfg, 10);
        CHECK_EQ(open_rc(path, &cfg, SLUICE_SHARED_CREATE), -EEXIST);
        CHECK(access(target, F_OK) != 0);
        CHECK_EQ(unlink(path), 0);
    }
}

static void test_excl_race(const char *path)
{
    enum { N = 8 };
    struct sluice_config cfg;
    _Atomic int *go = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pids[N];
    int wins = 0, exists = 0;

    cfg_fixed(&cfg, 100);
    for (int round = 0; round < 2; round++) {
        bool excl = round == 0;
        atomic_store(go, 0);
        for (int i = 0; i < N; i++) {
            if ((pids[i] = fork()) == 0) {
                sluice_t *l = NULL;
                int rc;
                while (atomic_load(go) == 0)
                    ;
                rc = sluice_open_shared(
                    path, &cfg, SLUICE_SHARED_CREATE | (excl ? SLUICE_SHARED_EXCL : 0), &l);
                if (rc == 0) {
                    rc = sluice_acquire_at(l, "k", 1, 1, T, NULL);
                    sluice_destroy(l);
                    _exit(rc == SLUICE_ALLOW ? 0 : 3);
                }
                _exit(rc == -EEXIST ? 1 : 2);
            }
        }
        atomic_store(go, 1);
        wins = exists = 0;
        for (int i = 0; i < N; i++) {
            int st;
            waitpid(pids[i], &st, 0);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) <= 1);
            wins += WIFEXITED(st) && WEXITSTATUS(st) == 0;
            exists += WIFEXITED(st) && WEXITSTATUS(st) == 1;
        }
        if (excl) {
            CHECK_EQ(wins, 1);
            CHECK_EQ(exists, N - 1);
        } else {
            CHECK_EQ(wins, N);
        }
        {
            /* every winner decided on the one file */
            sluice_t *l = t_open_shared(path, NULL, 0);
            struct sluice_stats st;
            sluice_stats(l, &st);
            CHECK_U64(st.keys, 1);
            CHECK_U64(st.allowed, (uint64_t)wins);
            sluice_destroy(l);
        }
        CHECK_EQ(sluice_unlink_shared(path), 0);
    }
    munmap((void *)go, 4096);
}

static void test_mismatch(const char *path)
{
    struct sluice_config cfg, other;
    struct stat st;
    mode_t old = umask(0);
    sluice_t *l;

    cfg_fixed(&cfg, 10);
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    umask(old);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_EQ(open_rc(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL), -EEXIST);
    CHECK_EQ(open_rc(path, &cfg, 0), 0);
    CHECK_EQ(open_rc(path, &cfg, SLUICE_SHARED_CREATE), 0);
    CHECK_EQ(open_rc(path, NULL, 0), 0);
    other = cfg;
    other.max_keys = 257;
    CHECK_EQ(open_rc(path, &other, 0), -EEXIST);
    other = cfg;
    other.max_key_len = 65;
    CHECK_EQ(open_rc(path, &other, SLUICE_SHARED_CREATE), -EEXIST);
    cfg_fixed(&other, 11);
    CHECK_EQ(open_rc(path, &other, 0), -EEXIST);
    other = cfg;
    other.policy.limits[0].algo = SLUICE_GCRA;
    CHECK_EQ(open_rc(path, &other, 0), -EEXIST);
    other = cfg;
    other.idle_ttl_ns = 5 * S; /* not compared: the file's own is used */
    CHECK_EQ(open_rc(path, &other, 0), 0);
    /* destroy detaches, deletes nothing */
    CHECK_EQ(sluice_acquire_at(l, "x", 1, 1, T, NULL), SLUICE_ALLOW);
    sluice_destroy(l);
    l = t_open_shared(path, NULL, 0);
    CHECK_U64(drain(l, "x"), 9);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

static size_t read_file(const char *path, unsigned char **out)
{
    FILE *f = fopen(path, "rb");
    size_t n;

    fseek(f, 0, SEEK_END);
    n = (size_t)ftell(f);
    rewind(f);
    *out = malloc(n);
    CHECK(fread(*out, 1, n, f) == n);
    fclose(f);
    return n;
}

static void write_file(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

    CHECK(fd >= 0 && write(fd, buf, n) == (ssize_t)n);
    close(fd);
}

static void test_bad_files(const char *path)
{
    struct sluice_config cfg;
    unsigned char *img, *copy;
    size_t n;
    sluice_t *l;
    char junk[8192];

    cfg_fixed(&cfg, 10);
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, T, NULL), SLUICE_ALLOW);
    sluice_destroy(l);
    n = read_file(path, &img);
    copy = malloc(n);

    write_file(path, "", 0);
    CHECK_EQ(open_rc(path, NULL, 0), -EPROTO);
    memset(junk, 'x', sizeof(junk));
    write_file(path, junk, sizeof(junk));
    CHECK_EQ(open_rc(path, NULL, 0), -EPROTO);
    CHECK_EQ(open_rc(path, &cfg, SLUICE_SHARED_CREATE), -EPROTO); /* never overwritten */
    write_file(path, img, n / 2);
    CHECK_EQ(open_rc(path, NULL, 0), -EPROTO);
    write_file(path, img, n - 1);
    CHECK_EQ(open_rc(path, NULL, 0), -EPROTO);
    memcpy(copy, img, n);
    write_file(path, copy, n);
    {
        /* one byte longer */
        int fd = open(path, O_WRONLY | O_APPEND);
        CHECK(write(fd, "", 1) == 1);
        close(fd);
    }
    CHECK_EQ(open_rc(path, NULL, 0), -EPROTO);
    /* each byte of the immutable header (magic, version, sizes, policy,
     * name, checksum): -EPROTO, and never a crash */
    for (size_t off = 0; off < 1024; off += 1) {
        memcpy(copy, img, n);
        copy[off] ^= 0x5a;
        write_file(path, copy, n);
        int rc = open_rc(path, NULL, 0);
        if (rc != -EPROTO && rc != 0)
            fprintf(stderr, "byte %zu: %d\n", off, rc);
        CHECK(rc == -EPROTO || rc == 0);
        if (off < 8 || (off >= 8 && off < 16))
            CHECK_EQ(rc, -EPROTO);
    }
    /* the intact image attaches, with its key */
    write_file(path, img, n);
    l = t_open_shared(path, NULL, 0);
    CHECK_U64(drain(l, "a"), 9);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    free(img);
    free(copy);
}

/*
 * A file corrupted after it was made: a key's length word far above
 * max_key_len.  sluice_set_policy moves every key to the new policy and
 * copied that many bytes of key (an outside tester: SIGSEGV, 4 of 4; a
 * length a little too large overwrote the next entry instead).  Lengths
 * read from the file are bounded by the attach's max_key_len, as a rehash
 * already bounded them: no crash, and the file still serves.
 */
static void test_corrupt_key_len(const char *path)
{
    struct sluice_config cfg;
    unsigned char *b, *k;
    struct stat st;
    sluice_t *l;
    size_t off;
    pid_t c;
    int fd, status;

    cfg_fixed(&cfg, 10);
    cfg.max_keys = 64;
    cfg.max_key_len = 16;
    cfg.shards = 1;
    (void)sluice_unlink_shared(path);
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    CHECK_EQ(sluice_acquire_at(l, "victim-key", 10, 1, T, NULL), SLUICE_ALLOW);
    sluice_destroy(l);
    fd = open(path, O_RDWR);
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    b = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(b != MAP_FAILED);
    k = memmem(b, (size_t)st.st_size, "victim-key", 10);
    CHECK(k != NULL);
    if (fd < 0 || b == MAP_FAILED || k == NULL)
        return;
    /* entries start on cache lines, with their key length (struct sl_entry) */
    for (off = (size_t)(k - b) & ~(size_t)63; *(uint32_t *)(void *)(b + off) != 10; off -= 64)
        ;
    *(uint32_t *)(void *)(b + off) = 0x7fffffff;
    munmap(b, (size_t)st.st_size);
    close(fd);
    fflush(stdout);
    fflush(stderr);
    if ((c = fork()) == 0) { /* a crash must not take the test with it */
        struct sluice_policy p = {0};
        int rc;
        alarm(30);
        if (sluice_open_shared(path, NULL, 0, &l) != 0)
            _exit(2);
        sluice_policy_add(&p, SLUICE_FIXED_WINDOW, 20, S);
        rc = sluice_set_policy(l, &p);
        if (rc != 0 && rc != -EPROTO)
            _exit(3);
        rc = sluice_acquire_at(l, "other", 5, 1, T, NULL);
        _exit(rc == SLUICE_ALLOW ? 0 : 4);
    }
    CHECK_EQ(waitpid(c, &status, 0), c);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (WIFSIGNALED(status))
        fprintf(stderr, "corrupt key length: set_policy killed by signal %d\n", WTERMSIG(status));
    (void)sluice_unlink_shared(path);
}

static void test_policy_seen(const char *path)
{
    struct sluice_config cfg;
    struct sluice_policy p = {0};
    sluice_t *l, *late;
    int to_child[2], from_child[2];
    char c = 0;
    pid_t pid;

    cfg_fixed(&cfg, 10);
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    CHECK(pipe(to_child) == 0 && pipe(from_child) == 0);
    if ((pid = fork()) == 0) {
        sluice_t *mine = t_open_shared(path, NULL, 0);
        uint64_t a, b, c2;
        CHECK_U64(drain(mine, "before"), 10);
        CHECK(write(from_child[1], "r", 1) == 1);
        CHECK(read(to_child[0], &c, 1) == 1); /* the parent changed the policy */
        a = drain(mine, "fresh");             /* GCRA burst 5 */
        b = drain(l, "fresh2");               /* the inherited handle too */
        c2 = drain(mine, "before");           /* same algorithm and period? no: fresh */
        sluice_destroy(mine);
        _exit(a == 5 && b == 5 && c2 == 5 ? 0 : 1);
    }
    CHECK(read(from_child[0], &c, 1) == 1);
    sluice_policy_add(&p, SLUICE_GCRA, 5, S);
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    CHECK(write(to_child[1], "g", 1) == 1);
    {
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    /* a late attacher, with the creation cfg or none, sees the current policy */
    late = t_open_shared(path, &cfg, 0);
    CHECK_U64(drain(late, "late"), 5);
    sluice_destroy(late);
    /* same algorithm and period: the state carries over (never refilled) */
    p.limits[0].count = 50;
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    CHECK_U64(drain(l, "late"), 0);
    CHECK_U64(drain(l, "new"), 50);
    /* refused: more state words than the file holds (a sliding log of 50:
     * 54 words; of 4: 8, which fit) */
    p.limits[0].algo = SLUICE_SLIDING_LOG;
    CHECK_EQ(sluice_set_policy(l, &p), -EINVAL);
    p.limits[0].count = 4;
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    CHECK_U64(drain(l, "log"), 4);
    p.limits[0] = (struct sluice_limit){.algo = SLUICE_GCRA, .count = 50, .period_ns = S};
    CHECK_EQ(sluice_set_policy(l, &p), 0);
    p.limits[0] = (struct sluice_limit){.algo = SLUICE_SLIDING_WINDOW, .count = 10,
                                        .period_ns = 3600 * S, .precision_ns = S};
    CHECK_EQ(sluice_set_policy(l, &p), -EINVAL);
    CHECK_U64(drain(l, "new2"), 50); /* unchanged */
    /* overrides refuse what set_policy refuses, making no key */
    CHECK_EQ(sluice_override_set(l, "k", 1, &p), -EINVAL);
    CHECK_EQ(sluice_override_clear(l, "k", 1), -ENOENT);
    CHECK_EQ(sluice_reset(l, "k", 1), -ENOENT);
    /* reset */
    CHECK_EQ(sluice_reset(l, "new", 3), 0);
    CHECK_U64(drain(l, "new"), 50);
    CHECK_EQ(sluice_reset(l, "absent", 6), -ENOENT);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    close(to_child[0]);
    close(to_child[1]);
    close(from_child[0]);
    close(from_child[1]);
}

static void test_unlink_open(const char *path)
{
    struct sluice_config cfg;
    sluice_t *l, *fresh;
    struct sluice_stats st;
    pid_t pid;

    cfg_fixed(&cfg, 10);
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    CHECK_EQ(sluice_unlink_shared(path), 0);
    CHECK_EQ(open_rc(path, NULL, 0), -ENOENT);
    if ((pid = fork()) == 0)
        _exit(drain(l, "k") == 10 ? 0 : 1); /* the inherited handle, on the unlinked file */
    {
        int s;
        waitpid(pid, &s, 0);
        CHECK(WIFEXITED(s) && WEXITSTATUS(s) == 0);
    }
    CHECK_U64(drain(l, "k"), 0); /* the child's admissions are ours */
    fresh = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    CHECK_U64(drain(fresh, "k"), 10); /* another file */
    sluice_stats(l, &st);
    CHECK_U64(st.allowed, 10);
    sluice_destroy(fresh);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * One file opened twice in one process is one limiter: the same key named
 * through both handles in one acquire_all is one key, charged once.  It
 * was charged twice, and with fewer than twice the cost left the call
 * retried for ever (the alarm fails the test).  Another file is another
 * limiter.
 */
static void test_two_handles(const char *path)
{
    struct sluice_config cfg;
    struct sluice_result r;
    struct sluice_stats st;
    char other_path[256];
    sluice_t *a, *b, *other;

    cfg_fixed(&cfg, 10);
    a = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    b = t_open_shared(path, NULL, 0);
    t_shm_path(other_path, sizeof(other_path), "attach-other");
    other = t_open_shared(other_path, &cfg, SLUICE_SHARED_CREATE);
    alarm(20);
    {
        struct sluice_key same[2] = {{a, "k", 1}, {b, "k", 1}};
        CHECK_EQ(sluice_acquire_all(same, 2, 1, T, &r), SLUICE_ALLOW);
        CHECK_U64(r.remaining, 9);
        CHECK_EQ(sluice_acquire_all(same, 2, 6, T, &r), SLUICE_ALLOW); /* 9 left: 6, not 12 */
        CHECK_U64(r.remaining, 3);
        CHECK_EQ(sluice_acquire_all(same, 2, 4, T, &r), SLUICE_DENY);
        CHECK_U64(drain(b, "k"), 3);
        sluice_stats(a, &st); /* the file's counters: each call once */
        CHECK_U64(st.allowed, 5);
        CHECK_U64(st.denied, 2);
    }
    {
        struct sluice_key two[2] = {{a, "j", 1}, {other, "j", 1}};
        CHECK_EQ(sluice_acquire_all(two, 2, 10, T, &r), SLUICE_ALLOW);
        CHECK_U64(drain(a, "j"), 0);
        CHECK_U64(drain(other, "j"), 0);
    }
    alarm(0);
    sluice_destroy(other);
    sluice_destroy(b);
    sluice_destroy(a);
    CHECK_EQ(sluice_unlink_shared(other_path), 0);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

static void test_churn(const char *path, double scale)
{
    enum { N = 12 };
    struct sluice_config cfg;
    sluice_t *l, *many[1000];
    int cycles = (int)(40 * scale) + 2, opened = 0;
    pid_t pids[N];

    cfg_fixed(&cfg, 1000000);
    cfg.max_keys = 64;
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE);
    for (int i = 0; i < N; i++) {
        if ((pids[i] = fork()) == 0) {
            for (int c = 0; c < cycles; c++) {
                sluice_t *m = t_open_shared(path, NULL, 0);
                char key[16];
                snprintf(key, sizeof(key), "k%d", (i + c) % 8);
                if (sluice_acquire_at(m, key, strlen(key), 1, T, NULL) != SLUICE_ALLOW)
                    _exit(1);
                if (c == cycles - 1 && i % 2 == 1)
                    _exit(0); /* dies attached: its record must come back */
                sluice_destroy(m);
            }
            _exit(0);
        }
    }
    for (int i = 0; i < N; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    {
        struct sluice_stats st;
        sluice_stats(l, &st);
        CHECK_U64(st.allowed, (uint64_t)N * (uint64_t)cycles);
        CHECK_U64(st.keys, 8);
    }
    /* 1000 more handles here (1024 records, one ours): the dead and the
     * detached have given theirs back */
    for (; opened < 1000; opened++)
        if (sluice_open_shared(path, NULL, 0, &many[opened]) != 0)
            break;
    CHECK_EQ(opened, 1000);
    while (opened > 0)
        sluice_destroy(many[--opened]);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

int main(int argc, char **argv)
{
    char path[256];

    t_shm_path(path, sizeof(path), "attach");
    test_errors(path);
    test_excl_race(path);
    test_mismatch(path);
    test_bad_files(path);
    test_corrupt_key_len(path);
    test_policy_seen(path);
    test_unlink_open(path);
    test_two_handles(path);
    test_churn(path, t_scale(argc, argv));
    (void)sluice_unlink_shared(path);
    return t_done("shared_attach");
}
