// Write a file through a temporary name and rename it into place.
#pragma once
#include <unistd.h>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace kvlab::detail {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path)
      : path_(path), tmp_(path + ".tmp." + std::to_string(getpid())) {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) throw std::runtime_error("cannot create '" + tmp_ + "' (for " + path_ + ")");
  }
  ~AtomicFile() {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n)
      throw std::runtime_error("write to '" + tmp_ + "' failed (disk full?)");
  }
  void commit() {
    const bool ok = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
    std::fclose(f_);
    f_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::remove(tmp_.c_str());
      throw std::runtime_error("cannot finish writing '" + path_ + "'");
    }
  }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

}  // namespace kvlab::detail
