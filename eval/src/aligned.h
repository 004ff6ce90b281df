// 64-byte aligned buffers. The kernel's buffers must not differ in alignment between threads or
// between the reference and a method: Eigen peels unaligned leading elements of an array
// expression into scalar code (libm expf instead of its own vector exp), which changes bits.
#pragma once
#include <cstddef>
#include <new>
#include <vector>

namespace kvlab::detail {

constexpr std::size_t kAlign = 64;

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kAlign}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{kAlign}); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace kvlab::detail
