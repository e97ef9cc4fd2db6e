/* execthrough: exec PROGRAM with the rest of the arguments, and nothing else.
 *
 *   execthrough PROGRAM ARGV0 [ARGS...]
 *
 * Static and without a C library: no dynamic loader, no start-up code, no
 * allocation. `execthrough /bin/true true` less `/bin/true` is what one more
 * exec costs by itself on this machine, the floor under any wrapper that
 * execs the real runtime (integration/bench-floor). Exits 127 when the exec
 * fails.
 */
#include <sys/syscall.h>

static long sys3(long n, long a, long b, long c) {
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return ret;
}

/* Called from _start with the initial stack: argc, argv..., NULL, envp... */
__attribute__((used)) static void start(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  if (argc >= 3)
    sys3(SYS_execve, (long)argv[1], (long)(argv + 2), (long)(argv + argc + 1));
  sys3(SYS_exit_group, 127, 0, 0);
}

__asm__(".globl _start\n"
        "_start:\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call start\n");
