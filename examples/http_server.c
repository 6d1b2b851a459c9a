/*
 * sluice-http: a small HTTP server limiting every request by client IP and
 * by the X-User header together (sluice_acquire_all), with a per-second and
 * a daily limit each, answering 429 with Retry-After, RateLimit-Policy /
 * RateLimit and X-RateLimit-* headers.  SIGHUP re-reads the limits file and
 * applies it with sluice_set_policy: no restart, state kept.
 *
 *   sluice-http [-p PORT] [-f LIMITS] [-a ADDRESS]
 *
 * LIMITS, one limit per line ("#" starts a comment):
 *   ip   gcra  10   1s
 *   ip   fixed 1000 1d
 *   user gcra  5    1s
 *   user fixed 500  1d
 * algorithms: gcra fixed sliding log approx; periods: N followed by ms s m h d.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sluice.h>

static volatile sig_atomic_t reload, quit;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload = 1;
    else
        quit = 1;
}

static int parse_period(const char *s, uint64_t *ns)
{
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {{"ms", 1000000ull}, {"s", 1000000000ull}, {"m", 60000000000ull},
                 {"h", 3600000000000ull}, {"d", 86400000000000ull}};

    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (end != s && strcmp(end, units[i].unit) == 0) {
            *ns = n * units[i].ns;
            return 0;
        }
    return -EINVAL;
}

/* Read both policies; on any error keep the old ones (returns -errno). */
static int load_limits(const char *path, struct sluice_policy *ip, struct sluice_policy *user)
{
    static const char *algos[] = {"gcra", "fixed", "sliding", "log", "approx"};
    char line[256], who[16], algo[16], period[32];
    unsigned long long count;
    FILE *f = fopen(path, "r");
    int rc = 0;

    if (f == NULL)
        return -errno;
    memset(ip, 0, sizeof(*ip));
    memset(user, 0, sizeof(*user));
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        uint64_t ns;
        int a = -1;
        if (line[strspn(line, " \t")] == '#' || line[strspn(line, " \t\r\n")] == '\0')
            continue;
        if (sscanf(line, "%15s %15s %llu %31s", who, algo, &count, period) != 4 ||
            parse_period(period, &ns) != 0) {
            rc = -EINVAL;
            break;
        }
        for (int i = 0; i < 5; i++)
            if (strcmp(algo, algos[i]) == 0)
                a = i;
        struct sluice_policy *p = strcmp(who, "ip") == 0 ? ip : strcmp(who, "user") == 0 ? user : NULL;
        rc = a < 0 || p == NULL ? -EINVAL : sluice_policy_add(p, (enum sluice_algo)a, count, ns);
    }
    fclose(f);
    if (rc == 0 && (ip->nlimits == 0 || user->nlimits == 0))
        rc = -EINVAL;
    return rc;
}

static sluice_t *make_limiter(const struct sluice_policy *p, const char *name)
{
    struct sluice_config cfg;
    sluice_t *l;

    sluice_config_init(&cfg);
    cfg.policy = *p;
    cfg.name = name;
    cfg.max_keys = 100000;
    cfg.reap_interval_ns = 1000000000;
    if (sluice_create(&cfg, &l) != 0)
        return NULL;
    return l;
}

/* The value of header `name` in the request, or NULL. */
static const char *header(char *req, const char *name, size_t *len)
{
    size_t n = strlen(name);

    for (char *line = strstr(req, "\r\n"); line != NULL; line = strstr(line + 2, "\r\n")) {
        char *h = line + 2;
        if (strncasecmp(h, name, n) == 0 && h[n] == ':') {
            h += n + 1;
            h += strspn(h, " \t");
            *len = strcspn(h, "\r\n");
            return *len ? h : NULL;
        }
    }
    return NULL;
}

static void serve(int fd, const char *ip, sluice_t *by_ip, sluice_t *by_user)
{
    char req[8192], hdrs[1024], resp[2048];
    ssize_t n = 0, got;
    struct sluice_key keys[2] = {{by_ip, ip, strlen(ip)}, {0}};
    struct sluice_result res;
    size_t nkeys = 1, ulen;
    const char *user;
    int rc, status;

    while (n < (ssize_t)sizeof(req) - 1 && (got = read(fd, req + n, sizeof(req) - 1 - n)) > 0) {
        n += got;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    if (n <= 0)
        return;
    req[n] = '\0';
    if ((user = header(req, "X-User", &ulen)) != NULL)
        keys[nkeys++] = (struct sluice_key){by_user, user, ulen};
    rc = sluice_acquire_all(keys, nkeys, 1, sluice_now(by_ip), &res);
    status = rc == SLUICE_ALLOW ? 200 : rc == SLUICE_DENY ? 429 : 500;
    if (rc < 0 || sluice_format_headers(res.key_index ? by_user : by_ip, &res,
                                        SLUICE_HDR_IETF | SLUICE_HDR_X, hdrs, sizeof(hdrs)) < 0)
        hdrs[0] = '\0';
    const char *body = status == 200 ? "ok\n" : status == 429 ? "rate limited\n" : "error\n";
    n = snprintf(resp, sizeof(resp),
                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n%s\r\n%s",
                 status, status == 200 ? "OK" : status == 429 ? "Too Many Requests" : "Error",
                 strlen(body), hdrs, body);
    if (write(fd, resp, (size_t)n) < 0)
        perror("write");
}

int main(int argc, char **argv)
{
    const char *path = "limits.conf", *addr = "127.0.0.1";
    struct sluice_policy ip_pol, user_pol;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int port = 8080, opt, lfd, one = 1, rc;
    sluice_t *by_ip, *by_user;

    while ((opt = getopt(argc, argv, "p:f:a:")) != -1) {
        if (opt == 'p')
            port = atoi(optarg);
        else if (opt == 'f')
            path = optarg;
        else if (opt == 'a')
            addr = optarg;
        else {
            fprintf(stderr, "usage: %s [-p PORT] [-f LIMITS] [-a ADDRESS]\n", argv[0]);
            return 2;
        }
    }
    if ((rc = load_limits(path, &ip_pol, &user_pol)) != 0) {
        fprintf(stderr, "%s: %s\n", path, sluice_strerror(rc));
        return 1;
    }
    by_ip = make_limiter(&ip_pol, "ip");
    by_user = make_limiter(&user_pol, "user");
    if (by_ip == NULL || by_user == NULL)
        return 1;
    {
        /* no SA_RESTART: accept() must return to see a signal */
        struct sigaction act = {.sa_handler = on_signal};
        sigaction(SIGHUP, &act, NULL);
        sigaction(SIGTERM, &act, NULL);
        sigaction(SIGINT, &act, NULL);
        signal(SIGPIPE, SIG_IGN);
    }
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, addr, &sa.sin_addr);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 64) != 0) {
        perror("bind/listen");
        return 1;
    }
    fprintf(stderr, "sluice-http: listening on %s:%d, limits from %s\n", addr, port, path);
    while (!quit) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        char ip[INET_ADDRSTRLEN];
        int fd;

        if (reload) {
            reload = 0;
            rc = load_limits(path, &ip_pol, &user_pol);
            if (rc == 0)
                rc = sluice_set_policy(by_ip, &ip_pol);
            if (rc == 0)
                rc = sluice_set_policy(by_user, &user_pol);
            fprintf(stderr, "sluice-http: reload %s: %s\n", path, rc ? sluice_strerror(rc) : "ok");
        }
        fd = accept(lfd, (struct sockaddr *)&peer, &plen);
        if (fd < 0)
            continue; /* EINTR: a signal */
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
        serve(fd, ip, by_ip, by_user);
        close(fd);
    }
    close(lfd);
    sluice_destroy(by_ip);
    sluice_destroy(by_user);
    return 0;
}
