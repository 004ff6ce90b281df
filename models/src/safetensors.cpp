// safetensors: header checks before any allocation, then a read-only memory map.
#include "kvlab/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "kvlab/half.h"
#include "kvlab/tensor.h"

namespace kvlab {
namespace {

// Bytes per element of every dtype the format defines (so any file's ranges can be checked).
int64_t dtype_size(const std::string& d) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  const auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& what) { throw std::runtime_error("'" + path + "': " + what); };
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(std::string("cannot open the safetensors file: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  size_ = (uint64_t)st.st_size;
  if (size_ < 8) {
    ::close(fd);
    fail(std::to_string(size_) + " bytes, shorter than the 8-byte safetensors header length (truncated?)");
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail(std::string("cannot map the file: ") + std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);

  try {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | map_[i];
    if (n > size_ - 8)
      fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size_) +
           " bytes; truncated or not safetensors?)");
    if (n > kMaxHeader) fail("header length " + std::to_string(n) + " is over the format's 100 MB limit");
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(map_ + 8, map_ + 8 + n);
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("the header is not valid JSON: ") + e.what());
    }
    if (!h.is_object()) fail("the header is not a JSON object");
    const uint64_t data_start = 8 + n, data_bytes = size_ - data_start;
    for (const auto& entry : h.items()) {
      // Named, not a structured binding: clang 14 (the fuzz build) cannot capture those in a lambda.
      const std::string& name = entry.key();
      const auto& e = entry.value();
      if (name == "__metadata__") continue;
      auto bad = [&](const std::string& what) { fail("tensor '" + name + "': " + what); };
      if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
        bad("needs dtype, shape and data_offsets");
      const auto& dt = e["dtype"];
      const auto& sh = e["shape"];
      const auto& off = e["data_offsets"];
      if (!dt.is_string()) bad("dtype is not a string");
      SafetensorsEntry t;
      t.dtype = dt.get<std::string>();
      const int64_t item = dtype_size(t.dtype);
      if (item == 0) bad("unknown dtype '" + t.dtype + "'");
      if (!sh.is_array()) bad("shape is not an array");
      uint64_t numel = 1;
      for (const auto& d : sh) {
        if (!d.is_number_unsigned()) bad("shape " + sh.dump() + " has an entry that is not a size");
        const uint64_t v = d.get<uint64_t>();
        if (v != 0 && numel > (data_bytes / (uint64_t)item) / v)
          bad("shape " + sh.dump() + " is larger than the file");
        numel *= v;
        t.shape.push_back((int64_t)v);
      }
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        bad("data_offsets is not [begin, end]");
      const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
      if (b > end || end > data_bytes)
        bad("data_offsets [" + std::to_string(b) + ", " + std::to_string(end) + "] outside the " +
            std::to_string(data_bytes) + " data bytes (truncated file?)");
      if (end - b != numel * (uint64_t)item)
        bad("data_offsets cover " + std::to_string(end - b) + " bytes, but dtype " + t.dtype + " and shape " +
            shape_string(t.shape) + " need " + std::to_string(numel * (uint64_t)item));
      t.offset = data_start + b;
      t.bytes = end - b;
      entries_.emplace(name, std::move(t));
    }
    std::vector<std::pair<uint64_t, std::string>> order;
    for (const auto& [name, t] : entries_) order.push_back({t.offset, name});
    std::sort(order.begin(), order.end());
    for (size_t i = 1; i < order.size(); ++i) {
      const SafetensorsEntry& prev = entries_.at(order[i - 1].second);
      if (prev.bytes > 0 && order[i].first < prev.offset + prev.bytes)
        fail("tensors '" + order[i - 1].second + "' and '" + order[i].second + "' overlap");
    }
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(map_), size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { ::munmap(const_cast<uint8_t*>(map_), size_); }

std::vector<float> SafetensorsFile::read_f32(const std::string& name,
                                             const std::vector<int64_t>& shape) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw std::runtime_error("'" + path_ + "': no tensor '" + name + "'");
  const SafetensorsEntry& t = it->second;
  if (t.shape != shape)
    throw std::runtime_error("'" + path_ + "': tensor '" + name + "' has shape " + shape_string(t.shape) +
                             ", expected " + shape_string(shape));
  const uint8_t* p = map_ + t.offset;
  const size_t n = (size_t)numel(shape);
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), p, n * 4);
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    const bool bf = t.dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
      out[i] = bf ? bits_float((uint32_t)h << 16) : half_to_float(h);
    }
  } else {
    throw std::runtime_error("'" + path_ + "': tensor '" + name + "' has dtype " + t.dtype +
                             "; the runner reads F32, F16 and BF16");
  }
  return out;
}

}  // namespace kvlab
