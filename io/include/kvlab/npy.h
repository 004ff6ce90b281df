// NumPy .npy reading and writing, .npz (ZIP of .npy) writing (stored) and reading (stored or
// deflate, ZIP64 included: what numpy.savez and numpy.savez_compressed write). Format: numpy's
// NEP 1 (format versions 1.0-3.0 read, 1.0 written); files are written to a temporary name
// and renamed, so a crash never leaves a file that looks complete.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/tensor.h"

namespace kvlab {

struct NpyArray {
  std::string descr;  // numpy dtype string: "<f2", "<f4", "|u1", "<i4", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // C-order little-endian data

  size_t item_size() const;  // "<U5" (unicode) counts 4 bytes a character
  int64_t numel() const;
};

// What a .npy header says; the data starts `data_offset` bytes into the .npy.
struct NpyHeader {
  std::string descr;
  std::vector<int64_t> shape;
  size_t item_size = 0;
  size_t data_offset = 0;
  uint64_t data_bytes = 0;  // item_size times the element count; checked: no overflow
};

// Parse .npy bytes held in memory; `where` names them in errors, quoted as it should appear
// ("'a.npy'", "'a.npz' member 'q'"). parse_npy_header needs only the bytes up to the data.
// Bytes up to the end of the header from the first 12 (10 for version 1) bytes; 0 when they are
// not the start of a .npy.
size_t npy_header_size(const uint8_t* p, size_t n);
NpyHeader parse_npy_header(const uint8_t* p, size_t n, const std::string& where);
NpyArray parse_npy(const uint8_t* p, size_t n, const std::string& where);

// Throws std::runtime_error naming the file for: missing file, bad magic, truncated header or
// data, Fortran order, big-endian data.
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const NpyArray& a);

// Build arrays from typed data.
NpyArray make_npy(const std::vector<float>& v, std::vector<int64_t> shape);
NpyArray make_npy(const std::vector<uint16_t>& half_bits, std::vector<int64_t> shape);  // "<f2"
NpyArray make_npy(const std::vector<uint8_t>& v, std::vector<int64_t> shape);

// View a float16/float32 array as a tensor; other dtypes throw, naming the file and dtype.
TensorView as_tensor(const NpyArray& a, const std::string& path);

// Write name -> array pairs into an uncompressed .npz (numpy.load reads it).
void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays);

// Reads a .npz lazily: the constructor reads the ZIP directory only; header() and read() read
// one member. Member names are given without ".npy". Errors name the file and the member:
// not a ZIP, truncated or corrupt archive (CRC, deflate), encryption, unknown compression.
class NpzReader {
 public:
  explicit NpzReader(const std::string& path);
  ~NpzReader();
  NpzReader(NpzReader&&) noexcept;
  const std::string& path() const;
  std::vector<std::string> names() const;  // archive order
  bool contains(const std::string& name) const;
  NpyHeader header(const std::string& name) const;  // reads the start of the member only
  NpyArray read(const std::string& name) const;     // the whole member, CRC-checked
  // `n` bytes of the array's data from byte `offset`. All of it is CRC-checked; a part is not
  // (a stored member is read in place, a deflated one inflated up to offset + n): call verify.
  std::vector<uint8_t> read_data(const std::string& name, uint64_t offset, uint64_t n) const;
  // Reads the whole member in pieces (constant memory) and checks its size and CRC-32.
  void verify(const std::string& name) const;
  std::string where(const std::string& name) const;  // "'a.npz' member 'q'"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every array of a .npz, in archive order.
std::vector<std::pair<std::string, NpyArray>> read_npz(const std::string& path);

// Serialize one array in .npy format (header + data).
std::vector<uint8_t> npy_bytes(const NpyArray& a);

}  // namespace kvlab
