/*
 * Runs a fuzz target over every file of the corpus directories given, so the
 * corpora are regression tests in every build (no libFuzzer needed).
 */
#include <dirent.h>
#include <stdio.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    static uint8_t buf[1 << 20];
    size_t n;

    if (fp == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, n);
    return 1;
}

int main(int argc, char **argv)
{
    int files = 0;

    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        char path[4096];
        if (d == NULL) {
            files += run_file(argv[i]);
            continue;
        }
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            files += run_file(path);
        }
        closedir(d);
    }
    printf("replayed %d inputs\n", files);
    return files > 0 ? 0 : 77;
}
