/*
 * Writes the seed images of fuzz_shared (test/fuzz/corpus/shared) for the
 * current file layout: small files (max_keys 2, one shard) holding keys
 * the fuzzer's peeks look up ("a", "key-1", "client-42"), one of them
 * under an override.  Run it again whenever the layout version changes:
 *   ninja -C build test/shared_images && ./build/test/shared_images test/fuzz/corpus/shared
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm.h"

#define S UINT64_C(1000000000)

static struct sluice_policy pol(enum sluice_algo a, uint64_t count, uint64_t period)
{
    struct sluice_policy p = {0};

    sluice_policy_add(&p, a, count, period);
    return p;
}

static int make(const char *dir, const char *name, const struct sluice_policy *def,
                const struct sluice_policy *ovr, const char *ovr_key)
{
    char path[512];
    struct sluice_config cfg;
    sluice_t *l;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    (void)sluice_unlink_shared(path);
    sluice_config_init(&cfg);
    cfg.policy = *def;
    cfg.max_keys = 2;
    cfg.max_key_len = 16;
    cfg.shards = 1;
    if ((rc = sluice_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL, &l)) != 0)
        return rc;
    for (int i = 0; i < 3; i++)
        (void)sluice_acquire_at(l, "a", 1, 1, S, NULL);
    rc = sluice_override_set(l, ovr_key, strlen(ovr_key), ovr);
    if (rc == 0)
        (void)sluice_acquire_at(l, ovr_key, strlen(ovr_key), 2, S, NULL);
    sluice_destroy(l);
    return rc;
}

/* Edit an image in place through its own layout. */
static int patch(const char *dir, const char *name, bool freeze, bool busy)
{
    char path[512];
    struct sl_shm_layout lay;
    struct stat st;
    unsigned char *base;
    struct sl_shm_hdr *h;
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((fd = open(path, O_RDWR)) < 0 || fstat(fd, &st) != 0)
        return -1;
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return -1;
    h = (struct sl_shm_hdr *)(void *)base;
    if (sl_shm_layout(h, &lay) != 0)
        return -1;
    for (uint64_t i = 0; freeze && i < h->pool; i++) {
        struct sl_entry *e = (struct sl_entry *)(void *)(base + lay.entries + i * h->esize);
        sl_aword *state = (sl_aword *)(void *)(base + lay.states) + i;
        if (sl_load_rlx(state) == SL_ST_USED && sl_shm_is_ovr(e->polref)) {
            /* a dead writer's: frozen, its last_ns sealed (one shard) */
            struct sl_shm_shard *sh = (struct sl_shm_shard *)(void *)(base + lay.shards);
            sl_store_rlx(&e->w[0], sl_load_rlx(&e->w[0]) | SL_DEAD);
            (void)sl_last_seal(&e->last_ns, &sh->sealed_last);
        }
    }
    if (busy) { /* a dead override_set's slot, taken and never published */
        struct sl_shm_ovr *o = (struct sl_shm_ovr *)(void *)(base + lay.ovr);
        for (uint64_t i = 0; i < h->novr; i++)
            if (sl_load_rlx(&o[i].tag) == 0)
                sl_store_rlx(&o[i].tag, SL_SHM_OVR_BUSY);
    }
    munmap(base, (size_t)st.st_size);
    return 0;
}

static int truncated(const char *dir, const char *from, const char *name)
{
    char a[512], b[512], buf[4096];
    FILE *in, *out;
    size_t n;

    snprintf(a, sizeof(a), "%s/%s", dir, from);
    snprintf(b, sizeof(b), "%s/%s", dir, name);
    if ((in = fopen(a, "rb")) == NULL || (out = fopen(b, "wb")) == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf), in);
    fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out) == 0 && n == sizeof(buf) ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct sluice_policy fw = pol(SLUICE_FIXED_WINDOW, 10, S);
    struct sluice_policy fw20 = pol(SLUICE_FIXED_WINDOW, 20, S);
    struct sluice_policy gs = pol(SLUICE_GCRA, 10, S), go = pol(SLUICE_GCRA, 5, S);
    const char *dir = argc > 1 ? argv[1] : ".";

    sluice_policy_add(&gs, SLUICE_SLIDING_WINDOW, 100, 60 * S);
    sluice_policy_add(&go, SLUICE_FIXED_WINDOW, 50, 60 * S);
    if (make(dir, "fixed-window", &fw, &fw20, "key-1") != 0 ||
        make(dir, "gcra-sliding", &gs, &go, "client-42") != 0 ||
        make(dir, "frozen-entry", &fw, &fw20, "key-1") != 0 ||
        patch(dir, "frozen-entry", true, false) != 0 ||
        make(dir, "override-busy", &fw, &fw20, "key-1") != 0 ||
        patch(dir, "override-busy", false, true) != 0 ||
        truncated(dir, "fixed-window", "truncated") != 0) {
        fprintf(stderr, "shared_images: failed\n");
        return 1;
    }
    return 0;
}
