// NumPy .npy reading and writing, and .npz (ZIP of .npy, stored) writing. Format: numpy's
// NEP 1 (format versions 1.0-3.0 read, 1.0 written); files are written to a temporary name
// and renamed, so a crash never leaves a file that looks complete.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/tensor.h"

namespace kvlab {

struct NpyArray {
  std::string descr;            // numpy dtype string: "<f2", "<f4", "|u1", "<i4", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;   // C-order little-endian data

  size_t item_size() const;
  int64_t numel() const;
};

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

// Serialize one array in .npy format (header + data).
std::vector<uint8_t> npy_bytes(const NpyArray& a);

}  // namespace kvlab
