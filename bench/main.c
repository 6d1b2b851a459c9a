/*
 * sluice-bench: compare the algorithms, measure sluice against baselines
 * side by side in one run, show accuracy and the race naive throttles lose.
 *
 *   sluice-bench [--out DIR] [--threads 1,2] [--keys 1,1000,1000000]
 *                [--algos gcra,fixed,sliding,log,approx] [--dist hot,uniform,zipf,split]
 *                [--ops N] [--cost N] [--csv] [--no-plots] [--quick]
 *
 * Prints tables on stdout, writes CSV and gnuplot PNGs into DIR
 * (default bench-out/), progress on stderr.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

static void usage(void)
{
    fputs("usage: sluice-bench [--out DIR] [--threads LIST] [--keys LIST] [--algos LIST]\n"
          "                    [--dist LIST] [--ops N] [--cost N] [--csv] [--no-plots] [--quick]\n",
          stderr);
    exit(2);
}

static unsigned parse_list(const char *s, uint64_t *out, unsigned max)
{
    unsigned n = 0;
    char *end;

    while (*s && n < max) {
        out[n++] = strtoull(s, &end, 10);
        if (end == s)
            usage();
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static void parse_names(const char *s, const char *const *names, unsigned count, bool *on)
{
    memset(on, 0, count * sizeof(bool));
    for (unsigned i = 0; i < count; i++) {
        const char *p = strstr(s, names[i]);
        size_t len = strlen(names[i]);
        if (p && (p == s || p[-1] == ',') && (p[len] == 0 || p[len] == ','))
            on[i] = true;
    }
}

static void parse(int argc, char **argv, struct options *o)
{
    static const char *algos[] = {"gcra", "fixed", "sliding", "log", "approx"};
    static const char *dists[] = {"hot", "uniform", "zipf", "split"};
    uint64_t tmp[4];

    *o = (struct options){.out = "bench-out", .threads = {1, 2}, .nthreads = 2,
                          .keys = {1, 1000, 1000000}, .nkeys = 3, .ops = 1000000, .cost = 1,
                          .plots = true};
    for (int i = 0; i < 5; i++)
        o->algo_on[i] = true;
    o->dists[DIST_HOT] = o->dists[DIST_UNIFORM] = o->dists[DIST_ZIPF] = o->dists[DIST_SPLIT] = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--out") && v)
            o->out = argv[++i];
        else if (!strcmp(a, "--threads") && v) {
            o->nthreads = parse_list(argv[++i], tmp, 4);
            for (unsigned k = 0; k < o->nthreads; k++)
                o->threads[k] = tmp[k] >= 1 && tmp[k] <= 8 ? (unsigned)tmp[k] : (usage(), 1);
        } else if (!strcmp(a, "--keys") && v)
            o->nkeys = parse_list(argv[++i], o->keys, 4);
        else if (!strcmp(a, "--algos") && v)
            parse_names(argv[++i], algos, 5, o->algo_on);
        else if (!strcmp(a, "--dist") && v)
            parse_names(argv[++i], dists, DIST_COUNT, o->dists);
        else if (!strcmp(a, "--ops") && v)
            o->ops = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--cost") && v)
            o->cost = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--csv"))
            o->csv_only = true;
        else if (!strcmp(a, "--no-plots"))
            o->plots = false;
        else if (!strcmp(a, "--quick")) {
            o->quick = true;
            o->ops = 200000;
            o->keys[2] = 100000;
        } else
            usage();
    }
    if (o->ops == 0 || o->cost == 0 || o->nkeys == 0)
        usage();
}

/* The distributions a key count is measured with: 1 key is the hot key. */
static bool dist_applies(const struct options *o, uint64_t keys, enum dist d)
{
    return o->dists[d] && (keys == 1 ? d == DIST_HOT : d != DIST_HOT);
}

static void print_row(FILE *csv, const struct result *r, const char *ratio)
{
    printf("%-12s %-8s %-8s %8llu %3u %8.1f %8.2f %7.0f %7.0f %7.0f %6.1f%% %s\n", r->engine,
           r->algo, r->dist, (unsigned long long)r->keys, r->threads, r->ns_per_op, r->mops,
           r->p50, r->p99, r->p999, r->allowed_pct, ratio);
    if (csv)
        fprintf(csv, "throughput,%s,%s,%s,%llu,%u,%.2f,%.3f,%.0f,%.0f,%.0f,%.1f\n", r->engine,
                r->algo, r->dist, (unsigned long long)r->keys, r->threads, r->ns_per_op, r->mops,
                r->p50, r->p99, r->p999, r->allowed_pct);
}

static void header(const char *title)
{
    printf("\n%s\n%-12s %-8s %-8s %8s %3s %8s %8s %7s %7s %7s %7s %s\n", title, "engine", "algo",
           "keys", "count", "thr", "ns/op", "Mops/s", "p50", "p99", "p999", "allowed", "ratio");
}

/* Results of one key count: [dist][threads][engine or algorithm]. */
struct grid {
    struct result r[DIST_COUNT][4][5];
};

static void run_grid(const struct options *o, uint64_t keys, bool engines, struct grid *g)
{
    for (int x = 0; x < 5; x++) {
        struct fixture *f;
        if (!engines && !o->algo_on[x])
            continue;
        progress("%s: %s, %llu keys: creating keys", engines ? "baselines" : "algorithms",
                 engines ? "engine" : algo_name(x), (unsigned long long)keys);
        f = fixture_new(engines ? (enum engine)x : ENG_SLUICE,
                        engines ? SLUICE_GCRA : (enum sluice_algo)x, keys);
        for (int d = 0; d < DIST_COUNT; d++)
            for (unsigned ti = 0; ti < o->nthreads && dist_applies(o, keys, d); ti++) {
                progress("%s: %s, %llu keys %s, %u threads", engines ? "baselines" : "algorithms",
                         engines ? "engine" : algo_name(x), (unsigned long long)keys,
                         dist_name(d), o->threads[ti]);
                run_case(o, f, d, o->threads[ti], &g->r[d][ti][x]);
            }
        fixture_free(f);
    }
}

/* sluice vs the baselines, GCRA, same keys and threads. */
static void compare_baselines(const struct options *o, FILE *csv, FILE *dat)
{
    static struct grid g;

    header("GCRA, sluice vs baselines (ratio = baseline ns / sluice ns; floor: sluice / floor)");
    for (unsigned ki = 0; ki < o->nkeys; ki++) {
        run_grid(o, o->keys[ki], true, &g);
        for (int d = 0; d < DIST_COUNT; d++)
            for (unsigned ti = 0; ti < o->nthreads && dist_applies(o, o->keys[ki], d); ti++) {
                struct result *r = g.r[d][ti];
                char ratio[64];
                for (int e = 0; e < 5; e++) {
                    if (e == ENG_SLUICE)
                        snprintf(ratio, sizeof(ratio), "%.2fx floor", r[0].ns_per_op / r[4].ns_per_op);
                    else
                        snprintf(ratio, sizeof(ratio), "%.2fx", r[e].ns_per_op / r[0].ns_per_op);
                    print_row(csv, &r[e], e == ENG_CAS_FLOOR ? "" : ratio);
                }
                fprintf(dat, "\"%llu %s %ut\" %.2f %.2f %.2f %.2f %.2f\n",
                        (unsigned long long)o->keys[ki], dist_name(d), o->threads[ti],
                        r[0].ns_per_op, r[1].ns_per_op, r[2].ns_per_op, r[3].ns_per_op,
                        r[4].ns_per_op);
            }
    }
}

static void compare_algorithms(const struct options *o, FILE *csv, FILE *dat)
{
    static struct grid g;

    header("Algorithms (sluice_acquire_at, keys pre-created)");
    for (unsigned ki = 0; ki < o->nkeys; ki++) {
        run_grid(o, o->keys[ki], false, &g);
        for (int d = 0; d < DIST_COUNT; d++)
            for (unsigned ti = 0; ti < o->nthreads && dist_applies(o, o->keys[ki], d); ti++) {
                fprintf(dat, "\"%llu %s %ut\"", (unsigned long long)o->keys[ki], dist_name(d),
                        o->threads[ti]);
                for (int a = 0; a < 5; a++) {
                    fprintf(dat, " %.2f", o->algo_on[a] ? g.r[d][ti][a].ns_per_op : 0.0);
                    if (o->algo_on[a])
                        print_row(csv, &g.r[d][ti][a], "");
                }
                fprintf(dat, "\n");
            }
    }
}

static FILE *open_out(const struct options *o, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", o->out, name);
    return fopen(path, "w");
}

static const char plot_script[] =
    "set terminal pngcairo size 1100,520 noenhanced font ',10'\n"
    "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8\n"
    "set ylabel 'ns per decision (lower is better)'\nset xtics rotate by -30\nset grid ytics\n"
    "set key outside right\n"
    "set output 'algorithms.png'\nset title 'sluice: ns per decision by algorithm'\n"
    "plot 'algorithms.dat' using 2:xtic(1) title 'gcra', '' using 3 title 'fixed', "
    "'' using 4 title 'sliding', '' using 5 title 'log', '' using 6 title 'approx'\n"
    "set output 'baselines.png'\nset title 'GCRA: sluice vs baselines, same keys and threads'\n"
    "set logscale y\n"
    "plot 'baselines.dat' using 2:xtic(1) title 'sluice', '' using 3 title 'sluice+clock', "
    "'' using 4 title 'global mutex', '' using 5 title '256 striped mutexes', "
    "'' using 6 title 'CAS floor'\n"
    "unset logscale y\nset style data lines\nset xtics norotate\n"
    "set output 'accuracy.png'\nset datafile separator ','\n"
    "set title 'Bursts of 100 just before and 100 just after every 2nd second, limit 100/s'\n"
    "set xlabel 'seconds'\nset ylabel 'units admitted in the trailing 1 s'\n"
    "set xrange [1.5:7.5]\nset yrange [0:220]\n"
    "plot for [a in 'fixed gcra approx sliding log'] 'accuracy.csv' "
    "using (($1==1 && strcol(2) eq a) ? $3 : NaN):4 with steps lw 2 title a, "
    "100 with lines dt 2 lc rgb 'black' title 'limit'\n";

static void plots(const struct options *o)
{
    char cmd[1024];
    FILE *gp = open_out(o, "plots.gp");

    if (gp == NULL)
        return;
    fputs(plot_script, gp);
    fclose(gp);
    if (!o->plots)
        return;
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("\ngnuplot not found: plots skipped (apt-get install gnuplot-nox); "
               "data and %s/plots.gp are written\n", o->out);
        return;
    }
    snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot plots.gp", o->out);
    if (system(cmd) == 0)
        printf("\nplots: %s/algorithms.png %s/baselines.png %s/accuracy.png\n", o->out, o->out,
               o->out);
    else
        printf("\ngnuplot failed: plots skipped\n");
}

int main(int argc, char **argv)
{
    struct options o;
    FILE *csv, *alg, *base;

    parse(argc, argv, &o);
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        perror(o.out);
        return 1;
    }
    csv = open_out(&o, "results.csv");
    alg = open_out(&o, "algorithms.dat");
    base = open_out(&o, "baselines.dat");
    if (!csv || !alg || !base) {
        perror("output files");
        return 1;
    }
    fprintf(csv, "kind,engine,algo,dist,keys,threads,ns_per_op,mops,p50,p99,p999,allowed_pct\n");
    printf("sluice-bench %s: %llu decisions per thread per case, %ld CPUs, time passed "
           "explicitly (+100 ns per decision)\n",
           sluice_version(), (unsigned long long)o.ops, sysconf(_SC_NPROCESSORS_ONLN));
    compare_baselines(&o, csv, base);
    compare_algorithms(&o, csv, alg);
    fclose(alg);
    fclose(base);
    bench_memory(&o, csv);
    bench_reap(&o, csv);
    bench_accuracy(&o);
    bench_race(&o);
    progress("done");
    fputs("\n", stderr);
    fclose(csv);
    plots(&o);
    return 0;
}
