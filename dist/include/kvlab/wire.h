// Per-unit results as bytes for dist::gather_to_root: trivially copyable values appended in
// order and read back in the same order. The ranks of one job run the same binary, so the bytes
// are native; a short or long message is a clear error, never an overread.
#pragma once
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kvlab::dist {

class Writer {
 public:
  template <class T>
  void put(const T& x) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&x), sizeof x);
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  Reader(const std::string& bytes, std::string what) : b_(bytes), what_(std::move(what)) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T x;
    need(sizeof x);
    std::memcpy(&x, b_.data() + at_, sizeof x);
    at_ += sizeof x;
    return x;
  }
  template <class T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (n > (b_.size() - at_) / sizeof(T)) fail();
    std::vector<T> v(n);
    std::memcpy(v.data(), b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return v;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void need(size_t n) {
    if (b_.size() - at_ < n) fail();
  }
  [[noreturn]] void fail() const {
    throw std::runtime_error(what_ + ": message of " + std::to_string(b_.size()) + " bytes ends early");
  }
  const std::string& b_;
  std::string what_;
  size_t at_ = 0;
};

}  // namespace kvlab::dist
