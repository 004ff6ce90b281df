// Which CPUs slow each other down: a fixed integer loop on CPU 0 alone, then with the same loop
// on CPU j at the same time, for every other CPU j. On a VM whose vCPUs are hyperthreads of one
// physical core (the guest cannot see it: lscpu says one thread per core) the pair runs slower;
// python_quantize.py's per-repetition CPUs can then be read against this map.
// Build: cc -O2 -o cpu_pairs benchmarks/cpu_pairs.c. Usage: cpu_pairs [iterations, default 3e7]
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// Fork a child pinned to `cpu` that runs the loop; it writes its seconds to fd.
static pid_t spin_on(int cpu, long iters, int fd) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(2);
  const double t0 = now();
  // 8 independent chains keep the multiplier busy every cycle, so a hyperthread sibling doing
  // the same halves the rate (one dependent chain would leave it idle and hide the sharing).
  unsigned long a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8;
  const unsigned long m = 6364136223846793005ul, k = 1442695040888963407ul;
  for (long i = 0; i < iters; ++i) {
    a = a * m + k, b = b * m + k, c = c * m + k, d = d * m + k;
    e = e * m + k, f = f * m + k, g = g * m + k, h = h * m + k;
  }
  volatile unsigned long sink = a ^ b ^ c ^ d ^ e ^ f ^ g ^ h;
  (void)sink;
  const double s = now() - t0;
  if (write(fd, &s, sizeof s) != sizeof s) _exit(3);
  _exit(0);
}

// Seconds of the loop on CPU 0, with (j >= 0) or without a second loop on CPU j.
static double run(int j, long iters) {
  int p[2];
  if (pipe(p) != 0) exit(1);
  const pid_t a = spin_on(0, iters, p[1]);
  const pid_t b = j >= 0 ? spin_on(j, iters, -1) : -1;  // its result is not read (fd -1: write fails)
  double s = -1;
  if (read(p[0], &s, sizeof s) != sizeof s) s = -1;
  waitpid(a, NULL, 0);
  if (b > 0) waitpid(b, NULL, 0);
  close(p[0]);
  close(p[1]);
  return s;
}

int main(int argc, char** argv) {
  const long iters = argc > 1 ? atol(argv[1]) : 30000000L;
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  const double solo = run(-1, iters);
  printf("cpu_pairs: loop on CPU 0 alone %.3f s; with CPU j busy, time / alone:", solo);
  for (int j = 1; j < ncpu; ++j) printf(" %d:%.2f", j, run(j, iters) / solo);
  printf(" (alone again: %.2f)\n", run(-1, iters) / solo);
  return 0;
}
