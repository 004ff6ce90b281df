// Internal: the bytes an isolated parsing child sends its parent (io/src/isolate.h). The parent
// trusts none of it blindly: every read is bounds-checked, every count is checked against what
// is left, so a short or garbled message is a clear error, never an overrun or a huge allocation.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kvlab::detail {

class WireOut {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_ += s;
  }
  template <class T>
  void put(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class WireIn {
 public:
  WireIn(const std::string& bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string get_string() {
    const uint64_t n = count(1);
    return std::string(take(n), n);
  }
  template <class T>
  std::vector<T> get_vector() {
    const uint64_t n = count(sizeof(T));
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
    return v;
  }
  void finish() const {
    if (at_ != bytes_.size()) fail();
  }

 private:
  [[noreturn]] void fail() const {
    throw std::runtime_error(what_ + ": the parsing process sent a malformed result");
  }
  uint64_t count(size_t elem) {  // a count of elements that must fit in what is left
    const uint64_t n = get<uint64_t>();
    if (n > (bytes_.size() - at_) / elem) fail();
    return n;
  }
  const char* take(size_t n) {
    if (n > bytes_.size() - at_) fail();
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  const std::string& bytes_;
  std::string what_;
  size_t at_ = 0;
};

}  // namespace kvlab::detail
