/*
 * Start-up pieces of sluice-http (see http.h): the limits file, the
 * limiters, the listening socket.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"

static int parse_period(const char *s, uint64_t *ns)
{
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {{"ms", 1000000ull}, {"s", 1000000000ull}, {"m", 60000000000ull},
                 {"h", 3600000000000ull}, {"d", 86400000000000ull}};
    char *end;
    unsigned long long n;

    errno = 0;
    n = strtoull(s, &end, 10);
    if (end == s || *s == '-' || errno != 0)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].unit) == 0) {
            if (n > UINT64_MAX / units[i].ns)
                return -EINVAL;
            *ns = n * units[i].ns;
            return 0;
        }
    return -EINVAL;
}

int http_load_limits(const char *path, struct sluice_policy *ip_out,
                     struct sluice_policy *user_out)
{
    static const char *algos[] = {"gcra", "fixed", "sliding", "log", "approx"};
    struct sluice_policy ip = {0}, user = {0};
    char line[256], who[16], algo[16], period[32], kw[16];
    unsigned long long count, burst;
    FILE *f = fopen(path, "r");
    int rc = 0;

    if (f == NULL)
        return -errno;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        uint64_t ns;
        int a = -1;
        if (line[strspn(line, " \t")] == '#' || line[strspn(line, " \t\r\n")] == '\0')
            continue;
        int fields = sscanf(line, "%15s %15s %llu %31s %15s %llu", who, algo, &count, period, kw,
                            &burst);
        if ((fields != 4 && (fields != 6 || strcmp(kw, "burst") != 0 || strcmp(algo, "gcra") != 0)) ||
            parse_period(period, &ns) != 0) {
            rc = -EINVAL;
            break;
        }
        for (int i = 0; i < 5; i++)
            if (strcmp(algo, algos[i]) == 0)
                a = i;
        struct sluice_policy *p = strcmp(who, "ip") == 0     ? &ip
                                  : strcmp(who, "user") == 0 ? &user
                                                             : NULL;
        rc = a < 0 || p == NULL ? -EINVAL : sluice_policy_add(p, (enum sluice_algo)a, count, ns);
        if (rc == 0 && fields == 6)
            p->limits[p->nlimits - 1].burst = burst;
    }
    if (rc == 0 && ferror(f))
        rc = -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && (ip.nlimits == 0 || user.nlimits == 0))
        rc = -EINVAL;
    if (rc == 0) {
        *ip_out = ip;
        *user_out = user;
    }
    return rc;
}

sluice_t *http_make_limiter(const struct sluice_policy *p, const char *name)
{
    struct sluice_config cfg;
    sluice_t *l;
    int rc;

    sluice_config_init(&cfg);
    cfg.policy = *p;
    cfg.name = name;
    cfg.max_keys = 100000;
    cfg.reap_interval_ns = 1000000000;
    if ((rc = sluice_create(&cfg, &l)) != 0) {
        fprintf(stderr, "sluice_create: %s\n", sluice_strerror(rc));
        return NULL;
    }
    return l;
}

int http_listen(const char *addr, long port)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    socklen_t len;
    int fd, one = 1;

    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof(*v4);
    } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof(*v6);
    } else {
        fprintf(stderr, "sluice-http: not an IP address: %s\n", addr);
        return -1;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("socket");
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, SOMAXCONN) != 0) {
        perror("bind/listen");
        close(fd);
        return -1;
    }
    return fd;
}
