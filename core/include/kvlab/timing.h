// Wall and process-CPU seconds for the studies' phase timings (eval's times, the MPI drivers').
#pragma once
#include <chrono>
#include <ctime>

namespace kvlab::timing {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds of the whole process, all threads.
inline double process_cpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

}  // namespace kvlab::timing
