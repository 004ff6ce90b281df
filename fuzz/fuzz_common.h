// Shared by the fuzz targets: most parsers take a path, so each input goes to a file first.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace kvlab::fuzz {

// Writes the input to a per-process file in /dev/shm (or /tmp) and returns its path.
inline std::string to_file(const uint8_t* data, size_t size, const char* ext) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  const std::string path = dir + "/kvlab-fuzz-" + std::to_string(getpid()) + ext;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace kvlab::fuzz
