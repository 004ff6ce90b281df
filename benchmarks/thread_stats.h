// Where a benchmark's time goes, per thread of the process (Linux /proc), so the C++ benchmark
// and benchmarks/python_quantize.py (which reads the same files) can be compared thread by
// thread: time on a CPU and time runnable but waiting for one (schedstat), the CPU each thread
// last ran on, and the host's steal time (vCPU taken away by the hypervisor). Missing files (no
// schedstat in the kernel) read as zeros.
#pragma once
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace bench {

struct ThreadSample {
  double run_ms = 0, wait_ms = 0;  // on a CPU; runnable, waiting for one
  int cpu = -1;                    // last CPU it ran on
};

// Every thread of this process, by thread id.
inline std::map<long, ThreadSample> thread_samples() {
  std::map<long, ThreadSample> out;
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    ThreadSample s;
    if (FILE* f = std::fopen((dir + "/schedstat").c_str(), "r")) {
      unsigned long long run = 0, wait = 0;
      if (std::fscanf(f, "%llu %llu", &run, &wait) == 2) s = {run / 1e6, wait / 1e6, -1};
      std::fclose(f);
    }
    if (FILE* f = std::fopen((dir + "/stat").c_str(), "r")) {
      char buf[1024];
      const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      buf[n] = 0;
      std::fclose(f);
      // Field 39 (processor), counted after the ")" that ends the command name (field 2).
      const char* p = std::strrchr(buf, ')');
      for (int field = 2; p && *p && field < 39; ++p)
        if (*p == ' ') ++field;
      if (p) std::sscanf(p, "%d", &s.cpu);
    }
    out[std::atol(e->d_name)] = s;
  }
  closedir(d);
  return out;
}

// Steal time of all CPUs so far, ms (/proc/stat's 8th value of the "cpu" line, in USER_HZ ticks).
inline double steal_ms() {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return 0;
  unsigned long long v[8] = {};
  const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                              &v[4], &v[5], &v[6], &v[7]);
  std::fclose(f);
  return got == 8 ? v[7] * 1000.0 / sysconf(_SC_CLK_TCK) : 0;
}

// The calling thread's and the other threads' run and wait time between two samples; the CPU
// the caller and the busiest other thread last ran on.
struct ThreadDelta {
  double main_run = 0, main_wait = 0, other_run = 0, other_wait = 0;
  int main_cpu = -1, other_cpu = -1;
};

inline ThreadDelta thread_delta(const std::map<long, ThreadSample>& a,
                                const std::map<long, ThreadSample>& b) {
  const long self = syscall(SYS_gettid);
  ThreadDelta d;
  double busiest = 0;  // an idle thread's CPU says nothing
  for (const auto& [tid, s1] : b) {
    const auto it = a.find(tid);
    const ThreadSample s0 = it == a.end() ? ThreadSample{} : it->second;  // a thread started in between
    const double run = s1.run_ms - s0.run_ms, wait = s1.wait_ms - s0.wait_ms;
    if (tid == self) {
      d.main_run = run;
      d.main_wait = wait;
      d.main_cpu = s1.cpu;
    } else {
      d.other_run += run;
      d.other_wait += wait;
      if (run > busiest) {
        busiest = run;
        d.other_cpu = s1.cpu;
      }
    }
  }
  return d;
}

}  // namespace bench
