// One scoped OpenMP thread count: set for a block, restored after (also on exceptions).
#pragma once
#include <omp.h>

namespace kvlab {

class ScopedThreads {
 public:
  // n > 0: use n threads inside the scope; n <= 0: keep the current setting.
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) {
    if (n > 0) omp_set_num_threads(n);
  }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
  int count() const { return omp_get_max_threads(); }

 private:
  int saved_;
};

// Threads a parallel region would use for a requested count (<= 0: the current default).
inline int resolve_threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

}  // namespace kvlab
