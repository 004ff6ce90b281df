// Reading safetensors files (Hugging Face): an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the data. Every entry is checked
// against the file size when the file is opened, before anything is allocated; the data is
// memory-mapped and copied out as fp32 (F32, F16 and BF16 are read).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvlab {

struct SafetensorsEntry {
  std::string dtype;  // as the header spells it: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // from the start of the file
  uint64_t bytes = 0;
};

class SafetensorsFile {
 public:
  // Throws std::runtime_error naming the file (and the tensor and field) for a missing or short
  // file, a header length past the end of the file, a header that is not JSON or not the
  // format, an unknown dtype, a byte range outside the data or not matching dtype and shape,
  // overlapping tensors.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // The tensor as fp32, after checking that its shape is `shape`. Throws std::runtime_error
  // naming the file and tensor for a missing tensor, another shape, or a dtype other than
  // F32, F16 or BF16.
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& shape) const;

 private:
  std::string path_;
  std::map<std::string, SafetensorsEntry> entries_;
  const uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace kvlab
