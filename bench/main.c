/*
 * sluice-bench: compare the algorithms, measure sluice against baselines
 * side by side in one run, show accuracy and the race naive throttles lose.
 * `sluice-bench --help` lists the options.
 *
 * Prints tables on stdout, writes CSV and gnuplot PNGs into DIR
 * (default bench-out/), progress on stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* Upper bounds of the numeric options.  Thread and list counts are the sizes
 * of the arrays in struct options and run_case; keys and ops only keep a
 * mistyped digit from asking for terabytes (10^8 keys are ~10 GB, 10^9
 * decisions ~25 s per case, ~40 min per run). */
#define MAX_THREADS 8
#define MAX_LIST 4
#define MAX_KEYS UINT64_C(100000000)
#define MAX_OPS UINT64_C(1000000000)
/* Each key's bench limit holds 1000 units; the sliding log's only 16. */
#define MAX_COST UINT64_C(1000)
/* Room for a file name after it in open_out's buffer. */
#define MAX_OUT 400

static const char *const algo_names[] = {"gcra", "fixed", "sliding", "log", "approx"};
static const char *const dist_names[] = {"hot", "uniform", "zipf", "split"};
static const char *const part_names[] = {"baselines", "algorithms", "memory", "reap",
                                         "accuracy",  "race",       "targets"};

static _Noreturn void help(void)
{
    printf("usage: sluice-bench [OPTION]...\n"
           "\n"
           "Measures sluice's rate-limiting decisions: sluice next to mutex baselines, the\n"
           "five algorithms side by side, memory per key, reaping under load, accuracy\n"
           "against a limit of 100/s, and the read-then-write race of naive throttles.\n"
           "Tables go to stdout, progress to stderr, and results.csv, the plot data,\n"
           "plots.gp and the PNG plots (with gnuplot) into the output directory.\n"
           "\n"
           "Options (LIST is comma-separated without spaces; --opt=VALUE works too):\n"
           "  --out DIR       output directory, created if missing (default bench-out)\n"
           "  --only LIST     parts to run (default: all of them but targets):\n"
           "                    baselines   sluice vs a global mutex, 256 striped mutexes and a\n"
           "                                CAS floor, GCRA (throughput, latency)\n"
           "                    algorithms  the five algorithms (throughput, latency)\n"
           "                    memory      bytes per key of each algorithm\n"
           "                    reap        reaping idle keys while another thread decides\n"
           "                    accuracy    most admitted in any 1 s under a 100/s limit\n"
           "                    race        naive GET/decide/SET vs sluice on one key\n"
           "                    targets     issue 12's ratios side by side: floor, mutex tables,\n"
           "                                stacked limits, acquire_all, batch, TSC vs Go\n"
           "                                (2^20 keys whatever --keys says; 2^16 with --quick)\n"
           "  --threads LIST  thread counts for baselines and algorithms, each 1..%d,\n"
           "                  at most %d values (default 1,2)\n"
           "  --keys LIST     key counts for baselines and algorithms, each 1..%llu,\n"
           "                  at most %d values (default 1,1000,1000000;\n"
           "                  with --quick 1,1000,100000)\n"
           "  --algos LIST    algorithms of the algorithms and memory parts (default: all):\n"
           "                    gcra, fixed, sliding, log, approx\n"
           "                  (the baselines part is GCRA; accuracy always shows all five)\n"
           "  --dist LIST     key distributions, the workloads of baselines and algorithms\n"
           "                  (default: all); 1 key runs hot only, more keys the others:\n"
           "                    hot      every decision on the one key\n"
           "                    uniform  keys drawn uniformly\n"
           "                    zipf     keys drawn Zipf-distributed (s = 1.1)\n"
           "                    split    each thread uniform over its own share of the keys\n"
           "  --ops N         decisions per thread per case, 1..%llu\n"
           "                  (default 1000000; with --quick 200000)\n"
           "  --cost N        units per sluice decision, 1..%llu (default 1); the baselines\n"
           "                  always take 1. Each key admits 1000 units per ms, with\n"
           "                  the sliding log 16 per 16 us: above 16 it refuses everything\n"
           "  --quick         a short run (about 5 s on 2 cores): 200000 decisions per\n"
           "                  case and 100000 keys at most, in memory and reap as well\n"
           "                  (an explicit --ops or --keys wins)\n"
           "  --no-plots      write plots.gp and the data but do not run gnuplot\n"
           "  --shared        decisions on a shared limiter (sluice_open_shared) from 1\n"
           "                  and 2 processes next to in-process ones from 1 and 2\n"
           "                  threads, a hot key and the largest --keys (default 2^20),\n"
           "                  --ops decisions each: runs sluice-bench-shared beside it\n"
           "  -h, --help      print this help and exit\n"
           "\n"
           "Exit status: 0 done, 1 an output file could not be written, 2 bad usage.\n"
           "\n"
           "Examples:\n"
           "  sluice-bench                         the default run (about 45 s on 2 cores)\n"
           "  sluice-bench --quick --out /tmp/b    a short run, output in /tmp/b\n"
           "  sluice-bench --keys 1000000 --dist zipf --threads 1,2 --algos gcra,log\n"
           "  sluice-bench --only accuracy         only the accuracy table and plot\n",
           MAX_THREADS, MAX_LIST, (unsigned long long)MAX_KEYS, MAX_LIST,
           (unsigned long long)MAX_OPS, (unsigned long long)MAX_COST);
    exit(0);
}

/* Every usage error ends here: one line naming what was wrong, a hint, 2. */
static _Noreturn void bad_usage(const char *fmt, ...)
{
    va_list ap;

    fputs("sluice-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'sluice-bench --help' for the options and their valid values.\n", stderr);
    exit(2);
}

static const char *names_list(const char *const *names, unsigned count, char *buf, size_t size)
{
    size_t used = 0;

    buf[0] = 0;
    for (unsigned i = 0; i < count && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
    return buf;
}

/* One number in [lo, hi]; strtoull alone would take "-1", " 5", "" and "5x". */
static uint64_t parse_number(const char *opt, const char *s, size_t len, uint64_t lo, uint64_t hi)
{
    uint64_t v = 0;
    bool overflow = false;

    if (len == 0)
        bad_usage("%s: empty value; expected a number from %llu to %llu", opt,
                  (unsigned long long)lo, (unsigned long long)hi);
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            bad_usage("%s: '%.*s' is not a number; expected %llu..%llu", opt, (int)len, s,
                      (unsigned long long)lo, (unsigned long long)hi);
        if (v > (UINT64_MAX - 9) / 10)
            overflow = true;
        else
            v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (overflow || v < lo || v > hi)
        bad_usage("%s: %.*s is out of range; expected %llu..%llu", opt, (int)len, s,
                  (unsigned long long)lo, (unsigned long long)hi);
    return v;
}

static unsigned parse_list(const char *opt, const char *s, uint64_t *out, uint64_t lo, uint64_t hi)
{
    unsigned n = 0;

    for (;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (n == MAX_LIST)
            bad_usage("%s: more than %d values", opt, MAX_LIST);
        out[n++] = parse_number(opt, s, len, lo, hi);
        if (comma == NULL)
            return n;
        s = comma + 1;
    }
}

static void parse_names(const char *opt, const char *s, const char *const *names, unsigned count,
                        bool *on)
{
    char valid[128];

    memset(on, 0, count * sizeof(bool));
    for (;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        unsigned i = 0;
        while (i < count && !(strlen(names[i]) == len && !strncmp(s, names[i], len)))
            i++;
        if (i == count)
            bad_usage("%s: unknown name '%.*s'; valid names: %s", opt, (int)len, s,
                      names_list(names, count, valid, sizeof(valid)));
        on[i] = true;
        if (comma == NULL)
            return;
        s = comma + 1;
    }
}

/* The distributions a key count is measured with: 1 key is the hot key. */
static bool dist_applies(const struct options *o, uint64_t keys, enum dist d)
{
    return o->dists[d] && (keys == 1 ? d == DIST_HOT : d != DIST_HOT);
}

static void parse(int argc, char **argv, struct options *o)
{
    bool keys_set = false, ops_set = false;
    uint64_t tmp[MAX_LIST];

    *o = (struct options){.out = "bench-out", .threads = {1, 2}, .nthreads = 2,
                          .keys = {1, 1000, 1000000}, .nkeys = 3, .ops = 1000000, .cost = 1,
                          .plots = true};
    for (int i = 0; i < 5; i++)
        o->algo_on[i] = true;
    for (int d = 0; d < DIST_COUNT; d++)
        o->dists[d] = true;
    for (int p = 0; p < PART_COUNT; p++)
        o->part_on[p] = p != PART_TARGETS; /* its own run: ~3 min, ~1 GB */
    for (int i = 1; i < argc; i++) {
        static const char *const with_value[] = {"--out",  "--only", "--threads", "--keys",
                                                 "--algos", "--dist", "--ops",     "--cost"};
        char name[32];
        const char *a = argv[i], *eq = strchr(a, '='), *v = NULL;
        size_t nlen = eq && !strncmp(a, "--", 2) ? (size_t)(eq - a) : strlen(a);
        bool takes_value = false;

        if (nlen >= sizeof(name))
            bad_usage("unknown option '%s'", a);
        memcpy(name, a, nlen);
        name[nlen] = 0;
        for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
            takes_value |= !strcmp(name, with_value[k]);
        if (takes_value) {
            /* "--out --quick" is a forgotten value, not a directory named --quick */
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                v = argv[++i];
            else
                bad_usage("option '%s' needs a value", name);
        } else if (eq && (!strcmp(name, "--quick") || !strcmp(name, "--no-plots") ||
                          !strcmp(name, "--shared") || !strcmp(name, "--help"))) {
            bad_usage("option '%s' takes no value", name);
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            help();
        else if (!strcmp(name, "--out")) {
            if (*v == 0 || strlen(v) > MAX_OUT)
                bad_usage("--out: the directory name must have 1..%d bytes", MAX_OUT);
            o->out = v;
        } else if (!strcmp(name, "--only"))
            parse_names(name, v, part_names, PART_COUNT, o->part_on);
        else if (!strcmp(name, "--threads")) {
            o->nthreads = parse_list(name, v, tmp, 1, MAX_THREADS);
            for (unsigned k = 0; k < o->nthreads; k++)
                o->threads[k] = (unsigned)tmp[k];
        } else if (!strcmp(name, "--keys")) {
            o->nkeys = parse_list(name, v, o->keys, 1, MAX_KEYS);
            keys_set = true;
        } else if (!strcmp(name, "--algos"))
            parse_names(name, v, algo_names, 5, o->algo_on);
        else if (!strcmp(name, "--dist"))
            parse_names(name, v, dist_names, DIST_COUNT, o->dists);
        else if (!strcmp(name, "--ops")) {
            o->ops = parse_number(name, v, strlen(v), 1, MAX_OPS);
            ops_set = true;
        } else if (!strcmp(name, "--cost"))
            o->cost = parse_number(name, v, strlen(v), 1, MAX_COST);
        else if (!strcmp(a, "--no-plots"))
            o->plots = false;
        else if (!strcmp(a, "--quick"))
            o->quick = true;
        else if (!strcmp(a, "--shared"))
            o->shared = true;
        else if (a[0] != '-')
            bad_usage("unexpected argument '%s': sluice-bench takes options only", a);
        else
            bad_usage("unknown option '%s'", a);
    }
    /* Applied last so that explicit --ops and --keys win wherever they are. */
    if (o->quick && !ops_set)
        o->ops = 200000;
    if (o->quick && !keys_set)
        o->keys[2] = 100000;
    if (o->part_on[PART_BASELINES] || o->part_on[PART_ALGORITHMS]) {
        unsigned cases = 0;
        for (unsigned k = 0; k < o->nkeys; k++)
            for (int d = 0; d < DIST_COUNT; d++)
                cases += dist_applies(o, o->keys[k], d);
        if (cases == 0)
            bad_usage("--keys and --dist select no case: 'hot' runs only with 1 key, "
                      "'uniform', 'zipf' and 'split' only with more");
    }
}

static void print_row(FILE *csv, const struct result *r, const char *ratio)
{
    printf("%-12s %-8s %-8s %8llu %3u %8.1f %8.2f %7.0f %7.0f %7.0f %7.1f%% %s\n", r->engine,
           r->algo, r->dist, (unsigned long long)r->keys, r->threads, r->ns_per_op, r->mops,
           r->p50, r->p99, r->p999, r->allowed_pct, ratio);
    if (csv)
        fprintf(csv, "throughput,%s,%s,%s,%llu,%u,%.2f,%.3f,%.0f,%.0f,%.0f,%.1f\n", r->engine,
                r->algo, r->dist, (unsigned long long)r->keys, r->threads, r->ns_per_op, r->mops,
                r->p50, r->p99, r->p999, r->allowed_pct);
}

static void header(const char *title)
{
    printf("\n%s\n%-12s %-8s %-8s %8s %3s %8s %8s %7s %7s %7s %8s %s\n", title, "engine", "algo",
           "dist", "keys", "thr", "ns/op", "Mops/s", "p50", "p99", "p999", "admitted", "ratio");
}

/* Under every throughput table, so that a table pasted alone still reads. */
static void legend(bool ratio)
{
    printf("  thr: threads; ns/op: time per decision on one thread; Mops/s: decisions per second,\n"
           "  all threads together; p50/p99/p999: ns of one decision, every %dth timed alone\n"
           "  (~30 ns of that is clock_gettime); admitted: %% of decisions allowed, with each thread\n"
           "  offering 10^7 decisions/s against 10^6/s per key: ~10%% on 1 hot key and 1 thread,\n"
           "  ~5%% with 2, near 100%% when spread over many keys\n",
           SAMPLE_EVERY);
    if (ratio)
        printf("  ratio: on baseline rows their ns/op / sluice's (above 1x: sluice is faster);\n"
               "  on sluice rows sluice's ns/op / the CAS floor's (the cheapest possible decision)\n");
}

/* Results of one key count: [dist][threads][engine or algorithm]. */
struct grid {
    struct result r[DIST_COUNT][MAX_LIST][5];
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

    header("GCRA: sluice vs baselines, same keys, threads and arithmetic (mutex: one mutex\n"
           "around a hash table; striped256: 256 mutexes; cas-floor: one CAS per key, no lookup)");
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
    legend(true);
}

static void compare_algorithms(const struct options *o, FILE *csv, FILE *dat)
{
    static struct grid g;

    header("Algorithms: sluice_acquire_at on each algorithm");
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
    legend(false);
}

static FILE *open_out(const struct options *o, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", o->out, name);
    return fopen(path, "w");
}

/*
 * plots.gp always holds every plot so that `gnuplot plots.gp` in the output
 * directory redraws a full run; a run of some parts only passes `parts` so
 * that gnuplot reads no data file the run did not write.
 */
#define NS_HISTOGRAM /* the two bar charts of ns per decision */ \
    "  reset\n" \
    "  set terminal pngcairo size 1100,520 noenhanced font ',10'\n" \
    "  set style data histograms\n" \
    "  set style histogram clustered gap 1\n" \
    "  set style fill solid 0.8\n" \
    "  set ylabel 'ns per decision (lower is better)'\n" \
    "  set xtics rotate by -30\n" \
    "  set grid ytics\n" \
    "  set key outside right\n"

static const char plot_script[] =
    "if (!exists('parts')) parts = 'baselines algorithms accuracy'\n"
    "\n"
    "if (strstrt(parts, 'algorithms') > 0) {\n"
    NS_HISTOGRAM
    "  set output 'algorithms.png'\n"
    "  set title 'sluice: ns per decision by algorithm'\n"
    "  plot 'algorithms.dat' using 2:xtic(1) title 'gcra', '' using 3 title 'fixed', \\\n"
    "       '' using 4 title 'sliding', '' using 5 title 'log', '' using 6 title 'approx'\n"
    "}\n"
    "\n"
    "if (strstrt(parts, 'baselines') > 0) {\n"
    NS_HISTOGRAM
    "  set logscale y\n"
    "  set output 'baselines.png'\n"
    "  set title 'GCRA: sluice vs baselines, same keys and threads'\n"
    "  plot 'baselines.dat' using 2:xtic(1) title 'sluice', '' using 3 title 'sluice+clock', \\\n"
    "       '' using 4 title 'global mutex', '' using 5 title '256 striped mutexes', \\\n"
    "       '' using 6 title 'CAS floor'\n"
    "}\n"
    "\n"
    /* One panel per algorithm: on a shared axis the four that hold the limit
     * draw the same line at 100 and hide each other. */
    "if (strstrt(parts, 'accuracy') > 0) {\n"
    "  reset\n"
    "  set terminal pngcairo size 1100,900 noenhanced font ',10'\n"
    "  set output 'accuracy.png'\n"
    "  set datafile separator ','\n"
    "  algos = 'gcra fixed sliding log approx'\n"
    "  colors = '#1f77b4 #d62728 #2ca02c #9467bd #e08000'\n"
    "  pat(a) = ($1 == 1 && strcol(2) eq a)\n"
    "  set multiplot layout 5,1 margins 0.08,0.86,0.07,0.89 spacing 0,0.015 \\\n"
    "      title \"Bursts of 100 units just before and 100 just after every 2nd second, \" . \\\n"
    "            \"limit 100 per second\\n\" . \\\n"
    "            \"units admitted in the trailing 1 s (colour; at most 100 where the limit \" . \\\n"
    "            \"holds over any 1 s), units offered (grey), the limit (dashed)\"\n"
    "  set xrange [1.5:7.5]\n"
    "  set yrange [0:230]\n"
    "  set ytics 0,50,200\n"
    "  set grid xtics ytics\n"
    "  unset key\n"
    "  do for [i = 1:5] {\n"
    "    a = word(algos, i)\n"
    "    c = word(colors, i)\n"
    "    stats 'accuracy.csv' using (pat(a) ? $4 : NaN) nooutput\n"
    "    set ylabel a tc rgb c\n"
    "    set label 1 sprintf(\"peak %d\\nin 1 s\", int(STATS_max)) \\\n"
    "        at graph 1.02, graph 0.6 left tc rgb c\n"
    "    if (i == 5) { set xlabel 'seconds'; set format x '%g' } else { unset xlabel; set format x '' }\n"
    "    plot 'accuracy.csv' using (pat(a) ? $3 : NaN):5 with steps lw 1 lc rgb 'grey60', \\\n"
    "         '' using (pat(a) ? $3 : NaN):4 with steps lw 2 lc rgb c, \\\n"
    "         100 with lines dt 2 lw 1 lc rgb 'black'\n"
    "  }\n"
    "  unset multiplot\n"
    "}\n";

/* gnuplot runs in the output directory, started without a shell so that
 * no directory name needs quoting. */
static int run_gnuplot(const struct options *o, const char *parts)
{
    char expr[160];
    int status;
    pid_t pid;

    snprintf(expr, sizeof(expr), "parts='%s'", parts);
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (chdir(o->out) == 0)
            execlp("gnuplot", "gnuplot", "-e", expr, "plots.gp", (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static void plots(const struct options *o)
{
    static const struct {
        enum part part;
        const char *name;
    } png[] = {{PART_BASELINES, "baselines"}, {PART_ALGORITHMS, "algorithms"},
               {PART_ACCURACY, "accuracy"}};
    char parts[128] = "", done[1600] = "";
    FILE *gp = open_out(o, "plots.gp");
    size_t np = 0, nd = 0;
    int rc;

    if (gp == NULL)
        return;
    fputs(plot_script, gp);
    fclose(gp);
    for (size_t i = 0; i < sizeof(png) / sizeof(png[0]); i++)
        if (o->part_on[png[i].part]) {
            np += (size_t)snprintf(parts + np, sizeof(parts) - np, " %s", png[i].name);
            nd += (size_t)snprintf(done + nd, sizeof(done) - nd, " %s/%s.png", o->out,
                                   png[i].name);
        }
    if (!o->plots || np == 0)
        return;
    rc = run_gnuplot(o, parts + 1);
    if (rc == 0)
        printf("\nplots:%s\n", done);
    else if (rc == 127)
        printf("\ngnuplot not found: plots skipped (apt-get install gnuplot-nox); "
               "data and %s/plots.gp are written\n", o->out);
    else
        printf("\ngnuplot failed: plots skipped\n");
}

/* Says what every throughput case shares, once, above the first table. */
static void throughput_intro(const struct options *o)
{
    printf("\nThroughput and latency: %llu decisions per thread per case, cost %llu, on keys\n"
           "created before timing. Time is simulated: each thread's clock advances %d ns per\n"
           "decision (10^7 decisions/s offered per thread) and is passed to sluice_acquire_at;\n"
           "only sluice+clock reads CLOCK_MONOTONIC (sluice_acquire). Every key is limited to\n"
           "10^6 units/s: 1000 per ms (sliding window: 10 sub-buckets; sliding log: 16 per 16 us).\n",
           (unsigned long long)o->ops, (unsigned long long)o->cost, STEP_NS);
}

/* --shared: the sibling program sluice-bench-shared, in this one's directory. */
static int run_shared(const char *argv0, const struct options *o)
{
    const char *slash = strrchr(argv0, '/');
    char path[4096], keys[32], ops[32];
    uint64_t most = 0;
    bool keys_given = o->nkeys != 3 || o->keys[2] != 1000000;

    for (unsigned k = 0; k < o->nkeys; k++)
        most = o->keys[k] > most ? o->keys[k] : most;
    snprintf(path, sizeof(path), "%.*ssluice-bench-shared", slash ? (int)(slash - argv0 + 1) : 0,
             argv0);
    snprintf(keys, sizeof(keys), "%llu", (unsigned long long)(keys_given ? most : 1u << 20));
    snprintf(ops, sizeof(ops), "%llu", (unsigned long long)o->ops);
    fflush(stdout);
    execl(path, path, keys, ops, (char *)NULL);
    perror(path);
    return 1;
}

int main(int argc, char **argv)
{
    struct options o;
    FILE *csv = NULL, *alg = NULL, *base = NULL;
    bool p_base, p_alg, p_csv;

    parse(argc, argv, &o);
    if (o.shared)
        return run_shared(argv[0], &o);
    p_base = o.part_on[PART_BASELINES];
    p_alg = o.part_on[PART_ALGORITHMS];
    p_csv = p_base || p_alg || o.part_on[PART_MEMORY] || o.part_on[PART_REAP] ||
            o.part_on[PART_TARGETS];
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        perror(o.out);
        return 1;
    }
    /* Files of parts not run are left alone: a run of one part into the
     * directory of a full run keeps the other results. */
    if ((p_csv && (csv = open_out(&o, "results.csv")) == NULL) ||
        (p_alg && (alg = open_out(&o, "algorithms.dat")) == NULL) ||
        (p_base && (base = open_out(&o, "baselines.dat")) == NULL)) {
        perror("output files");
        return 1;
    }
    if (csv)
        fprintf(csv, "kind,engine,algo,dist,keys,threads,ns_per_op,mops,p50,p99,p999,allowed_pct\n");
    printf("sluice-bench %s on %ld CPUs; data and plots in %s/\n", sluice_version(),
           sysconf(_SC_NPROCESSORS_ONLN), o.out);
    if (p_base || p_alg)
        throughput_intro(&o);
    if (p_base) {
        compare_baselines(&o, csv, base);
        fclose(base);
    }
    if (p_alg) {
        compare_algorithms(&o, csv, alg);
        fclose(alg);
    }
    if (o.part_on[PART_MEMORY])
        bench_memory(&o, csv);
    if (o.part_on[PART_REAP])
        bench_reap(&o, csv);
    if (o.part_on[PART_ACCURACY])
        bench_accuracy(&o);
    if (o.part_on[PART_RACE])
        bench_race(&o);
    if (o.part_on[PART_TARGETS])
        bench_targets(&o, csv);
    progress("done");
    fputs("\n", stderr);
    if (csv)
        fclose(csv);
    plots(&o);
    return 0;
}
