/*
 * snap - take one snapshot of a cgroup v1 / hybrid / v2 host for cgstat test data.
 * (adapted from shared/tools/v2-recorder/recorder/snap.c: walks every hierarchy mounted
 * below /sys/fs/cgroup, records symlinks (co-mount links such as cpu -> cpu,cpuacct) as
 * symlinks, and writes inodes.txt / cgroup_read_times.txt only for directories that are
 * on a cgroup or cgroup2 filesystem, with paths relative to /sys/fs/cgroup.)
 *
 * usage: snap OUTDIR [NOT_BEFORE]
 *   NOT_BEFORE: optional CLOCK_BOOTTIME (= /proc/uptime) seconds; sleep until then first
 *
 * - mirrors /sys/fs/cgroup into OUTDIR/sys/fs/cgroup: every regular file is
 *   opened and read until EOF (cgroupfs reports st_size 0, so cp/tar are of
 *   no use); files that cannot be opened/read (write-only: cgroup.kill,
 *   memory.reclaim, ...) are skipped and listed in OUTDIR/unreadable.txt
 * - OUTDIR/inodes.txt: "<inode> <cgroup path>" for every cgroup directory
 * - OUTDIR/listing.txt: "<octal mode> <cgroup path>/<file>" for every entry
 * - OUTDIR/proc/<pid>/{cgroup,status,comm,stat,cmdline} for every pid (incl. snap itself,
 *   which sits in /init.scope next to pid 1)
 * - OUTDIR/proc/self/{mountinfo,cgroup} (self = this process), proc/1/mountinfo
 * - OUTDIR/proc/{meminfo,stat,partitions,uptime,...}
 * - OUTDIR/snapshot_time      = /proc/uptime read at the start
 *   OUTDIR/snapshot_time_end  = /proc/uptime read at the end
 *   OUTDIR/snapshot_clock     = CLOCK_MONOTONIC / CLOCK_BOOTTIME ns, start+end
 *   OUTDIR/cgroup_read_times.txt = "<CLOCK_BOOTTIME s> <cgroup path>" taken just before
 *                                  the files of that cgroup were read
 *
 * Static build: gcc -O2 -static -o snap snap.c
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static char *buf;
static size_t bufcap = 1 << 20;
static FILE *f_inodes, *f_unread, *f_listing, *f_times;
static const char *outdir;

static void mkdirs(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			mkdir(tmp, 0755);
			*p = '/';
		}
	}
	mkdir(tmp, 0755);
}

/* read whole file; returns length or -errno */
static long slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	size_t len = 0;
	for (;;) {
		if (len == bufcap) {
			bufcap *= 2;
			buf = realloc(buf, bufcap);
			if (!buf) {
				perror("realloc");
				exit(1);
			}
		}
		ssize_t n = read(fd, buf + len, bufcap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			close(fd);
			return -e;
		}
		if (n == 0)
			break;
		len += n;
	}
	close(fd);
	return (long)len;
}

static int dump(const char *dst, long len)
{
	int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "snap: cannot create %s: %s\n", dst, strerror(errno));
		return -1;
	}
	size_t off = 0;
	while (off < (size_t)len) {
		ssize_t n = write(fd, buf + off, len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "snap: write %s: %s\n", dst, strerror(errno));
			close(fd);
			return -1;
		}
		off += n;
	}
	close(fd);
	return 0;
}

/* copy src to OUTDIR/rel; returns 0 or -errno */
static int copy_to(const char *src, const char *rel)
{
	char dst[4096];
	long len = slurp(src);
	if (len < 0)
		return (int)len;
	snprintf(dst, sizeof dst, "%s/%s", outdir, rel);
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", dst);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = 0;
		mkdirs(dir);
	}
	return dump(dst, len);
}

static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* in-memory store of the cgroup tree: the walk only reads (to keep it short, so that
 * all cgroups are sampled as close together as possible); it is written out afterwards */
struct item {
	char *rel;  /* path below OUTDIR/sys/fs/cgroup ("" = root dir) */
	char *data; /* NULL for a directory */
	long len;
	char *link; /* symlink target, or NULL */
};
static struct item *items;
static size_t nitems, capitems;

static void add_item(const char *rel, const char *data, long len)
{
	if (nitems == capitems) {
		capitems = capitems ? capitems * 2 : 4096;
		items = realloc(items, capitems * sizeof *items);
		if (!items) {
			perror("realloc");
			exit(1);
		}
	}
	items[nitems].rel = strdup(rel);
	items[nitems].data = NULL;
	items[nitems].len = len;
	items[nitems].link = NULL;
	if (data) {
		items[nitems].data = malloc(len + 1);
		memcpy(items[nitems].data, data, len);
	}
	nitems++;
}

static void write_items(void)
{
	for (size_t i = 0; i < nitems; i++) {
		char dst[4096];
		snprintf(dst, sizeof dst, "%s/sys/fs/cgroup%s", outdir, items[i].rel);
		if (items[i].link) {
			unlink(dst);
			if (symlink(items[i].link, dst) != 0)
				fprintf(stderr, "snap: symlink %s: %s\n", dst, strerror(errno));
			continue;
		}
		if (!items[i].data) {
			mkdirs(dst);
			continue;
		}
		int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			fprintf(stderr, "snap: cannot create %s: %s\n", dst, strerror(errno));
			continue;
		}
		long off = 0;
		while (off < items[i].len) {
			ssize_t n = write(fd, items[i].data + off, items[i].len - off);
			if (n <= 0)
				break;
			off += n;
		}
		close(fd);
	}
}

/* walk cgroup dir; rel is "" for root or "/a/b" */
static void walk(const char *rel)
{
	char src[4096];
	struct stat st;

	snprintf(src, sizeof src, "/sys/fs/cgroup%s", rel);
	add_item(rel, NULL, 0);
	struct statfs sfs;
	int is_cg = statfs(src, &sfs) == 0 &&
		    (sfs.f_type == 0x27e0eb /* CGROUP_SUPER_MAGIC */ ||
		     sfs.f_type == 0x63677270 /* CGROUP2_SUPER_MAGIC */);
	if (is_cg && stat(src, &st) == 0)
		fprintf(f_inodes, "%llu %s\n", (unsigned long long)st.st_ino,
			*rel ? rel : "/");

	DIR *d = opendir(src);
	if (!d) {
		fprintf(stderr, "snap: opendir %s: %s\n", src, strerror(errno));
		return;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 128;
			names = realloc(names, cap * sizeof *names);
		}
		names[n++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, cmpstr);
	if (is_cg) {
		struct timespec ts;
		clock_gettime(CLOCK_BOOTTIME, &ts);
		fprintf(f_times, "%lld.%09ld %s\n", (long long)ts.tv_sec, ts.tv_nsec,
			*rel ? rel : "/");
	}

	/* files first (all of this cgroup read close together), then subdirs */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < n; i++) {
			char fsrc[4096], frel[4096];
			snprintf(fsrc, sizeof fsrc, "%s/%s", src, names[i]);
			snprintf(frel, sizeof frel, "%s/%s", rel, names[i]);
			if (lstat(fsrc, &st) != 0)
				continue;
			if (S_ISDIR(st.st_mode)) {
				if (pass == 1)
					walk(frel);
				continue;
			}
			if (pass != 0)
				continue;
			if (S_ISLNK(st.st_mode)) {
				char tgt[4096];
				ssize_t tl = readlink(fsrc, tgt, sizeof tgt - 1);
				if (tl < 0)
					continue;
				tgt[tl] = 0;
				fprintf(f_listing, "%04o %s -> %s\n", st.st_mode & 07777, frel, tgt);
				add_item(frel, NULL, 0);
				items[nitems - 1].link = strdup(tgt);
				continue;
			}
			fprintf(f_listing, "%04o %s\n", st.st_mode & 07777, frel);
			if (!S_ISREG(st.st_mode))
				continue;
			long len = slurp(fsrc);
			if (len < 0) {
				fprintf(f_unread, "%s %s\n", frel, strerror((int)-len));
				continue;
			}
			add_item(frel, buf, len);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static void stamp(const char *name)
{
	copy_to("/proc/uptime", name);
}

static unsigned long long ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: snap OUTDIR [NOT_BEFORE_UPTIME_SECONDS]\n");
		return 2;
	}
	outdir = argv[1];
	if (argc == 3) {
		double nb = strtod(argv[2], NULL);
		for (;;) {
			double now = ns(CLOCK_BOOTTIME) / 1e9;
			if (now >= nb)
				break;
			double d = nb - now;
			struct timespec ts = {(time_t)d, (long)((d - (time_t)d) * 1e9)};
			nanosleep(&ts, NULL);
		}
	}
	buf = malloc(bufcap);
	mkdirs(outdir);

	unsigned long long mono0 = ns(CLOCK_MONOTONIC), boot0 = ns(CLOCK_BOOTTIME);
	stamp("snapshot_time");

	char p[4096];
	snprintf(p, sizeof p, "%s/inodes.txt", outdir);
	f_inodes = fopen(p, "w");
	snprintf(p, sizeof p, "%s/unreadable.txt", outdir);
	f_unread = fopen(p, "w");
	snprintf(p, sizeof p, "%s/listing.txt", outdir);
	f_listing = fopen(p, "w");
	snprintf(p, sizeof p, "%s/cgroup_read_times.txt", outdir);
	f_times = fopen(p, "w");
	if (!f_inodes || !f_unread || !f_listing || !f_times) {
		perror("fopen");
		return 1;
	}

	walk("");
	unsigned long long mono_cg = ns(CLOCK_MONOTONIC);
	write_items();

	/* global proc files */
	static const char *globals[] = {
		"meminfo", "stat", "partitions", "uptime", "loadavg", "diskstats",
		"cgroups", "filesystems", "cpuinfo", "version", "mounts", "vmstat",
		"pressure/cpu", "pressure/memory", "pressure/io", "swaps", NULL};
	for (int i = 0; globals[i]; i++) {
		char src[256], rel[256];
		snprintf(src, sizeof src, "/proc/%s", globals[i]);
		snprintf(rel, sizeof rel, "proc/%s", globals[i]);
		copy_to(src, rel);
	}
	copy_to("/proc/self/mountinfo", "proc/self/mountinfo");
	copy_to("/proc/self/cgroup", "proc/self/cgroup");
	copy_to("/proc/1/mountinfo", "proc/1/mountinfo");
	static const char *sysfiles[] = {
		"devices/system/cpu/online", "devices/system/cpu/possible",
		"devices/system/cpu/present", NULL};
	for (int i = 0; sysfiles[i]; i++) {
		char src[256], rel[256];
		snprintf(src, sizeof src, "/sys/%s", sysfiles[i]);
		snprintf(rel, sizeof rel, "sys/%s", sysfiles[i]);
		copy_to(src, rel);
	}

	/* per pid files */
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		static const char *pf[] = {"cgroup", "status", "comm", "stat", "cmdline", NULL};
		for (int i = 0; pf[i]; i++) {
			char src[256], rel[256];
			snprintf(src, sizeof src, "/proc/%ld/%s", pid, pf[i]);
			snprintf(rel, sizeof rel, "proc/%ld/%s", pid, pf[i]);
			copy_to(src, rel);
		}
	}
	if (d)
		closedir(d);

	unsigned long long mono1 = ns(CLOCK_MONOTONIC), boot1 = ns(CLOCK_BOOTTIME);
	stamp("snapshot_time_end");
	snprintf(p, sizeof p, "%s/snapshot_clock", outdir);
	FILE *fc = fopen(p, "w");
	if (fc) {
		fprintf(fc, "monotonic_ns_start %llu\nboottime_ns_start %llu\n"
			    "monotonic_ns_cgroup_done %llu\n"
			    "monotonic_ns_end %llu\nboottime_ns_end %llu\n",
			mono0, boot0, mono_cg, mono1, boot1);
		fclose(fc);
	}
	fclose(f_inodes);
	fclose(f_unread);
	fclose(f_listing);
	fclose(f_times);
	return 0;
}
