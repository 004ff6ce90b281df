// One scoped OpenMP thread count: set for a block, restored after (also on exceptions).
#pragma once
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

namespace kvlab {

// The most threads a caller may ask for: 4 x the hardware threads, at least 64 (so tests can
// oversubscribe a small machine), at most 1024. libgomp crashes (SIGSEGV) when asked for ~100000.
inline int max_threads() {
  static const int limit = std::clamp(4 * (int)std::thread::hardware_concurrency(), 64, 1024);
  return limit;
}

// Why n is not a thread count one may ask for ("" when it is: 0 <= n <= max_threads()).
inline std::string threads_error(int n) {
  if (n >= 0 && n <= max_threads()) return "";
  return std::to_string(n) + " is outside 0 (the OpenMP default) to " + std::to_string(max_threads()) +
         " (4 x the hardware threads, at least 64, at most 1024)";
}

// Throws std::invalid_argument naming `option` unless threads_error(n) is empty.
inline void check_threads(int n, const std::string& option) {
  const std::string why = threads_error(n);
  if (!why.empty()) throw std::invalid_argument(option + ": " + why);
}

// OpenMP's default count (OMP_NUM_THREADS) is bounded as an asked-for count is: libgomp would
// try to start that many threads at the first parallel region. Throws std::invalid_argument
// naming OMP_NUM_THREADS when the default is above max_threads(). (libgomp itself ignores,
// with its own message, values that are not positive integers.)
inline void check_default_threads() {
  const int n = omp_get_max_threads();
  if (n > max_threads())
    throw std::invalid_argument(
        "OMP_NUM_THREADS: " + std::to_string(n) + " threads is more than " + std::to_string(max_threads()) +
        " (4 x the hardware threads, at least 64, at most 1024); set it lower or unset it");
}

class ScopedThreads {
 public:
  // n > 0: use n threads inside the scope; n == 0: keep the current setting; see check_threads.
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) {
    check_threads(n, "threads");
    if (n > 0)
      omp_set_num_threads(n);
    else
      check_default_threads();
  }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
  int count() const { return omp_get_max_threads(); }

 private:
  int saved_;
};

// Threads a parallel region would use for a requested count (0: the current default).
inline int resolve_threads(int requested) {
  check_threads(requested, "threads");
  if (requested == 0) check_default_threads();
  return requested > 0 ? requested : omp_get_max_threads();
}

}  // namespace kvlab
