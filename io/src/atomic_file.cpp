#include "kvlab/atomic_file.h"

#include <unistd.h>

#include <cerrno>

namespace kvlab {

AtomicFile::AtomicFile(const std::string& path) : tmp_(path) {
  f_ = std::fopen(tmp_.tmp().c_str(), "wb");
  if (!f_) throw_os_error("cannot open '" + tmp_.tmp() + "' (to become '" + path + "')");
}

AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
}

void AtomicFile::write(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n) throw_os_error("cannot write '" + tmp_.tmp() + "'");
}

void AtomicFile::commit() {
  const bool flushed = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!flushed || !closed) {
    if (flushed) errno = err;
    throw_os_error("cannot finish writing '" + tmp_.tmp() + "'");
  }
  tmp_.commit();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace kvlab
