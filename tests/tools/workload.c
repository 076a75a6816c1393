/*
 * workload - tiny, predictable workloads for cgstat's real-cgroup tests.
 *
 *   workload burn SECONDS   spin until this process has used SECONDS of CPU time
 *                           (CLOCK_PROCESS_CPUTIME_ID), print "done", then sleep forever
 *   workload spin           busy loop forever (prints "ready" first)
 *   workload hold MIB       mmap MIB of anonymous memory, write every page, print "ready",
 *                           then sleep forever holding it
 *   workload alloc MIB      like hold, but exits 0 once everything is touched (used to
 *                           run past a memory limit: expect SIGKILL from the OOM killer)
 *   workload sleep          print "ready", sleep forever
 *
 * Readiness lines go to stdout (line-buffered) so a harness can wait for them instead of
 * guessing with sleeps. Build: gcc -O2 -static -o workload workload.c (or without -static).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double cputime(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void forever(void)
{
	for (;;)
		pause();
}

static void say(const char *s)
{
	fputs(s, stdout);
	fputc('\n', stdout);
	fflush(stdout);
}

static void *touch(long mib)
{
	size_t len = (size_t)mib << 20;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	long pg = sysconf(_SC_PAGESIZE);
	for (size_t off = 0; off < len; off += pg)
		p[off] = (char)(off / pg + 1);
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: workload burn SECONDS | spin | hold MIB | alloc MIB | sleep\n");
		return 2;
	}
	const char *mode = argv[1];
	if (!strcmp(mode, "burn") && argc == 3) {
		double target = strtod(argv[2], NULL);
		volatile unsigned long x = 0;
		while (cputime() < target)
			for (int i = 0; i < 100000; i++)
				x++;
		say("done");
		forever();
	} else if (!strcmp(mode, "spin")) {
		say("ready");
		volatile unsigned long x = 0;
		for (;;)
			x++;
	} else if (!strcmp(mode, "hold") && argc == 3) {
		volatile char *p = touch(atol(argv[2]));
		(void)p;
		say("ready");
		forever();
	} else if (!strcmp(mode, "alloc") && argc == 3) {
		touch(atol(argv[2]));
		say("survived");
		return 0;
	} else if (!strcmp(mode, "sleep")) {
		say("ready");
		forever();
	}
	fprintf(stderr, "workload: bad arguments\n");
	return 2;
}
