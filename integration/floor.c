/* floor: what any process start costs on this machine, below the hook's own
 * work (integration/bench-floor).
 *
 *   floor cpuid N                    time N CPUID instructions; prints the
 *                                    microseconds one takes
 *   floor count PROGRAM ARGV0 [ARGS...]
 *                                    run PROGRAM single-stepped under ptrace;
 *                                    prints "INSTRUCTIONS CPUIDS": how many
 *                                    instructions it executed from exec to
 *                                    exit, and how many of them were CPUID
 *
 * Under a hypervisor, CPUID is not run by the CPU but trapped to the
 * hypervisor (a VM exit): microseconds each, where bare metal takes tens of
 * nanoseconds. glibc's start-up (ld.so's CPU feature and cache detection)
 * issues it dozens of times in every process, the hook's included.
 */
#include <cpuid.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cpuid_cost(long n) {
  struct timespec t0, t1;
  unsigned a, b, c, d, sink = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {
    /* The leaf glibc asks most on AMD (cache topology), and a basic one. */
    __cpuid_count(i % 2 ? 0x8000001d : 0x1, (unsigned)i % 4, a, b, c, d);
    sink += a ^ b ^ c ^ d;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
  printf("%.3f\n", ns / n / 1000.0 + (sink & 0) * 1.0);
  return 0;
}

static int count(char **argv) {
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "floor: fork: %s\n", strerror(errno));
    return 2;
  }
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, 0, 0);
    execv(argv[0], argv + 1);
    fprintf(stderr, "floor: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int status;
  long steps = 0, cpuids = 0;
  /* Stopped at the exec (SIGTRAP): count from the new image's first instruction. */
  if (waitpid(pid, &status, 0) < 0 || !WIFSTOPPED(status)) {
    fprintf(stderr, "floor: %s did not stop at exec\n", argv[0]);
    return 2;
  }
  for (;;) {
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, pid, 0, &regs) == 0) {
      errno = 0;
      long word = ptrace(PTRACE_PEEKTEXT, pid, regs.rip, 0);
      if (errno == 0 && (word & 0xffff) == 0xa20f) /* 0f a2: cpuid */
        cpuids++;
    }
    steps++;
    if (ptrace(PTRACE_SINGLESTEP, pid, 0, 0) < 0) {
      fprintf(stderr, "floor: ptrace: %s\n", strerror(errno));
      return 2;
    }
    if (waitpid(pid, &status, 0) < 0) {
      fprintf(stderr, "floor: waitpid: %s\n", strerror(errno));
      return 2;
    }
    if (WIFEXITED(status) || WIFSIGNALED(status))
      break;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "floor: %s failed under ptrace\n", argv[0]);
    return 2;
  }
  printf("%ld %ld\n", steps, cpuids);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "cpuid") == 0)
    return cpuid_cost(atol(argv[2]) > 0 ? atol(argv[2]) : 1000);
  if (argc >= 4 && strcmp(argv[1], "count") == 0)
    return count(argv + 2);
  fprintf(stderr, "usage: floor cpuid N | floor count PROGRAM ARGV0 [ARGS...]\n");
  return 2;
}
