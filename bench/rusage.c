/* rusage: run a command and print its own resource usage on a descriptor (bench/tick_cost.py).
 *
 * Why: a child's ru_maxrss includes the memory of the process it was forked from, because
 * exec() folds the old address space's high-water mark into the process's maxrss
 * (fs/exec.c exec_mmap -> setmax_mm_hiwater_rss). A command spawned straight from the
 * Python bench (~30 MiB) could never read below that. Forked from this small program, it
 * reports its own peak.
 *
 * Usage: rusage FD CMD [ARGS...]   -> "exit user_s sys_s maxrss_kib\n" on FD; exit status 0
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: rusage FD CMD [ARGS...]\n");
        return 2;
    }
    int report = atoi(argv[1]);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        close(report);
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("wait4");
        return 2;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    dprintf(report, "%d %ld.%06ld %ld.%06ld %ld\n", code, (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec,
            (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec, ru.ru_maxrss);
    return 0;
}
