/*
 * readfiles: the native floor for one cgstat tick.
 *
 * Per tick: walk every given cgroup hierarchy (opendir/readdir, like a tree walk must),
 * and for each cgroup whose path relative to the mount contains MATCH, open, read to EOF
 * and close the per-controller files that cgstat reads, turn every number in them into
 * an integer, and format one text line per cgroup; the lines of one tick go to
 * /dev/null in one write(). No JSON, no rates, no names: a lower bound for the same
 * kernel work plus the least user-space work that can still be called "reading".
 *
 * Usage: readfiles [-k TICKS] [-i INTERVAL_S] [-m MATCH] [-p] KIND:MOUNTPOINT...
 *   -p: keep every descriptor open after the first tick and re-read it with pread(fd, n, 0),
 *   without walking again (the floor for kept descriptors and a tree followed by events).
 *   KIND is a comma-separated list of v1 controllers (cpu, cpuacct, memory, blkio,
 *   pids), "unified" (the cgroup2 mount of a hybrid host: cpu.stat and the pressure
 *   files only) or "v2" (a pure cgroup v2 host).
 * Prints one summary line to stderr: ticks, cgroups seen per tick, files read per tick.
 *
 * bench/tick_cost.py compiles this with `cc -O2` and runs it with -k 1 and -k 11,
 * taking the difference in child CPU time (wait4) / 10 as the CPU per tick.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const V1_CPU[] = {"cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us", NULL};
static const char *const V1_CPUACCT[] = {"cpuacct.usage", "cpuacct.stat", NULL};
static const char *const V1_MEMORY[] = {"memory.usage_in_bytes", "memory.limit_in_bytes",
                                        "memory.stat", "memory.oom_control", NULL};
static const char *const V1_BLKIO[] = {"blkio.throttle.io_service_bytes_recursive",
                                       "blkio.throttle.io_serviced_recursive", NULL};
static const char *const V1_PIDS[] = {"pids.current", "pids.max", NULL};
static const char *const UNIFIED[] = {"cpu.stat", "cpu.pressure", "memory.pressure",
                                      "io.pressure", NULL};
static const char *const V2[] = {"cpu.stat", "cpu.max", "memory.current", "memory.max",
                                 "memory.stat", "memory.events", "memory.swap.current",
                                 "io.stat", "pids.current", "pids.max", "cpu.pressure",
                                 "memory.pressure", "io.pressure", NULL};

#define MAX_FILES 32
#define MAX_HIER 16

struct hier {
    char mount[4096];
    const char *files[MAX_FILES];
    int nfiles;
};

static struct hier hiers[MAX_HIER];
static int nhiers;
static const char *match = "";

static char *out;
static size_t out_len, out_cap;
static unsigned long long sink;
static long cgroups_seen, files_read;

static void die(const char *msg) {
    perror(msg);
    exit(1);
}

static void out_reserve(size_t more) {
    if (out_len + more <= out_cap) return;
    while (out_len + more > out_cap) out_cap = out_cap ? out_cap * 2 : 1 << 16;
    out = realloc(out, out_cap);
    if (!out) die("realloc");
}

static void add_files(struct hier *h, const char *const *list) {
    for (; *list; list++) {
        int dup = 0;
        for (int i = 0; i < h->nfiles; i++) dup |= strcmp(h->files[i], *list) == 0;
        if (!dup && h->nfiles < MAX_FILES) h->files[h->nfiles++] = *list;
    }
}

static void parse_kind(struct hier *h, char *kind) {
    for (char *tok = strtok(kind, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "cpu")) add_files(h, V1_CPU);
        else if (!strcmp(tok, "cpuacct")) add_files(h, V1_CPUACCT);
        else if (!strcmp(tok, "memory")) add_files(h, V1_MEMORY);
        else if (!strcmp(tok, "blkio")) add_files(h, V1_BLKIO);
        else if (!strcmp(tok, "pids")) add_files(h, V1_PIDS);
        else if (!strcmp(tok, "unified")) add_files(h, UNIFIED);
        else if (!strcmp(tok, "v2")) add_files(h, V2);
        else {
            fprintf(stderr, "readfiles: unknown kind %s\n", tok);
            exit(2);
        }
    }
}

/* -p: descriptors opened on the first tick, re-read with pread(fd, n, 0) afterwards. */
static int keep;
static int *kfd;
static const char **kname;
static long nk, kcap;

static void parse_numbers(char *buf, size_t len, const char *name);

static void read_kept(void) {
    char buf[65536];
    for (long i = 0; i < nk; i++) {
        ssize_t n = pread(kfd[i], buf, sizeof(buf) - 1, 0);
        if (n < 0) continue; /* ENODEV: gone */
        files_read++;
        parse_numbers(buf, (size_t)n, kname[i]);
        if (i % 16 == 15) {
            out_reserve(1);
            out[out_len++] = '\n';
        }
    }
}

/* Read one file to EOF; append every decimal number in it to the output line. */
static void read_file(int dirfd, const char *name) {
    char buf[65536];
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return; /* absent here (gone, controller off): cgstat skips it too */
    size_t len = 0;
    for (;;) {
        ssize_t n = keep ? pread(fd, buf, sizeof(buf) - 1, 0) : read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n < 0) {
            if (errno == EINTR) continue;
            break; /* ENODEV: the cgroup went away meanwhile */
        }
        if (keep) {
            len = (size_t)n;
            break;
        }
        if (n == 0 || (len += (size_t)n) >= sizeof(buf) - 1) break;
    }
    if (keep) {
        if (nk == kcap) {
            kcap = kcap ? kcap * 2 : 1024;
            kfd = realloc(kfd, (size_t)kcap * sizeof(*kfd));
            kname = realloc(kname, (size_t)kcap * sizeof(*kname));
            if (!kfd || !kname) die("realloc");
        }
        kfd[nk] = fd;
        kname[nk++] = name;
    } else {
        close(fd);
    }
    files_read++;
    parse_numbers(buf, len, name);
}

static void parse_numbers(char *buf, size_t len, const char *name) {
    buf[len] = '\0';
    out_reserve(len + 64);
    out_len += (size_t)snprintf(out + out_len, 64, " %s", name);
    for (char *p = buf; *p;) {
        if ((*p >= '0' && *p <= '9') || (*p == '-' && p[1] >= '0' && p[1] <= '9')) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (*end == '.') strtod(p, &end); /* pressure averages */
            sink += (unsigned long long)v;
            out_len += (size_t)snprintf(out + out_len, 24, " %lld", v);
            out_reserve(24);
            p = end;
        } else {
            p++;
        }
    }
}

static void walk(struct hier *h, int dirfd, char *rel, size_t rel_len) {
    if (strstr(rel, match)) {
        cgroups_seen++;
        out_reserve(rel_len + 2);
        memcpy(out + out_len, rel, rel_len);
        out_len += rel_len;
        for (int i = 0; i < h->nfiles; i++) read_file(dirfd, h->files[i]);
        out_reserve(1);
        out[out_len++] = '\n';
    }
    int fd = dup(dirfd);
    if (fd < 0) return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
        size_t nl = strlen(e->d_name);
        if (rel_len + 1 + nl >= 4096) continue;
        int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sub < 0) continue; /* removed meanwhile */
        rel[rel_len] = '/';
        memcpy(rel + rel_len + 1, e->d_name, nl + 1);
        walk(h, sub, rel, rel_len + 1 + nl);
        rel[rel_len] = '\0';
        close(sub);
    }
    closedir(d);
}

int main(int argc, char **argv) {
    long ticks = 1;
    double interval = 0;
    int opt;
    while ((opt = getopt(argc, argv, "k:i:m:p")) != -1) {
        switch (opt) {
        case 'k': ticks = atol(optarg); break;
        case 'i': interval = atof(optarg); break;
        case 'm': match = optarg; break;
        case 'p': keep = 1; break;
        default:
            fprintf(stderr, "usage: readfiles [-k TICKS] [-i INTERVAL_S] [-m MATCH] KIND:MOUNT...\n");
            return 2;
        }
    }
    for (int i = optind; i < argc && nhiers < MAX_HIER; i++) {
        char *colon = strchr(argv[i], ':');
        if (!colon) {
            fprintf(stderr, "readfiles: expected KIND:MOUNTPOINT, got %s\n", argv[i]);
            return 2;
        }
        *colon = '\0';
        struct hier *h = &hiers[nhiers++];
        parse_kind(h, argv[i]);
        snprintf(h->mount, sizeof(h->mount), "%s", colon + 1);
    }
    if (!nhiers) {
        fprintf(stderr, "readfiles: no hierarchy given\n");
        return 2;
    }
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull < 0) die("/dev/null");

    long seen_per_tick = 0, files_per_tick = 0;
    for (long t = 0; t < ticks; t++) {
        if (t && interval > 0) {
            struct timespec ts = {(time_t)interval, (long)((interval - (time_t)interval) * 1e9)};
            while (nanosleep(&ts, &ts) && errno == EINTR) {}
        }
        cgroups_seen = files_read = 0;
        out_len = 0;
        if (keep && t) {
            read_kept(); /* no walk: the C floor for a tree followed by events */
            cgroups_seen = seen_per_tick;
        } else
        for (int i = 0; i < nhiers; i++) {
            int fd = open(hiers[i].mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (fd < 0) die(hiers[i].mount);
            char rel[4096] = "";
            walk(&hiers[i], fd, rel, 0);
            close(fd);
        }
        if (out_len && write(devnull, out, out_len) < 0) die("write");
        seen_per_tick = cgroups_seen;
        files_per_tick = files_read;
    }
    fprintf(stderr, "readfiles: ticks=%ld cgroups_per_tick=%ld files_per_tick=%ld checksum=%llu\n",
            ticks, seen_per_tick, files_per_tick, sink);
    return 0;
}
