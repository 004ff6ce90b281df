// Write a file through a temporary name (temp_file.h) and rename it into place.
#pragma once
#include <cstdio>
#include <string>

#include "kvlab/temp_file.h"

namespace kvlab {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();  // without commit(): closes and removes the temporary file
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Errors name the file and give the OS reason (e.g. "No space left on device").
  void write(const void* p, size_t n);
  void commit();  // flush, fsync, close, rename

 private:
  TempFile tmp_;
  std::FILE* f_ = nullptr;
};

// `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace kvlab
