/* maxrss: run a program, wait for it with wait4(2), and append one line to
 * FILE: its peak resident set size (ru_maxrss, KiB), then its wall-clock time
 * from fork to reaped, its user and its system CPU time (microseconds).
 *
 *   maxrss FILE PROGRAM ARGV0 [ARGS...]      appends "KIB WALL_US USER_US SYS_US"
 *
 * integration/bench-rss puts it in front of oci-nvidia-hook as a runc
 * prestart hook (same stdin, so the hook reads the container state as usual;
 * the hook accepts a wrapper between itself and the runtime) and in front of
 * `list` and `info`; integration/bench-runc uses it for the hook's own time.
 *
 * Exits with the program's status, or 128 + the signal that killed it, so a
 * failing hook still fails the container start. ru_maxrss from wait4 is the
 * largest of the program and the descendants it waited for (not a sum), and
 * includes the few hundred KiB this wrapper had when it forked: a floor that
 * `maxrss FILE /bin/true true` shows.
 *
 * C, not a script: a wrapper's own RSS before exec counts in the child's
 * ru_maxrss, and a Python interpreter's (about 10 MB) would hide the hook's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long usec(struct timeval tv) { return tv.tv_sec * 1000000LL + tv.tv_usec; }

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: maxrss FILE PROGRAM ARGV0 [ARGS...]\n");
    return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "maxrss: fork: %s\n", strerror(errno));
    return 2;
  }
  if (pid == 0) {
    execv(argv[2], argv + 3);
    fprintf(stderr, "maxrss: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  int status;
  struct rusage ru;
  pid_t got;
  do {
    got = wait4(pid, &status, 0, &ru);
  } while (got < 0 && errno == EINTR);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (got < 0) {
    fprintf(stderr, "maxrss: wait4: %s\n", strerror(errno));
    return 2;
  }
  long long wall = (t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000;
  FILE *f = fopen(argv[1], "a");
  if (!f ||
      fprintf(f, "%ld %lld %lld %lld\n", ru.ru_maxrss, wall, usec(ru.ru_utime),
              usec(ru.ru_stime)) < 0 ||
      fclose(f) != 0) {
    fprintf(stderr, "maxrss: cannot write %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
