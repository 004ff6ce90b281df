// The in-memory face of a KV dump: what a model's attention saw, layer by layer. Every source
// (the HDF5 dump format, .npy/.npz, torch.save files, the synthetic generator) is read through
// DumpReader, lazily, one layer or one head at a time. The file format is docs/DUMP_FORMAT.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/enum_names.h"
#include "kvlab/rope.h"
#include "kvlab/tensor.h"

namespace kvlab {

// q: (num_q_heads, T, D); k, v, k_pre_rope: (num_kv_heads, T, D). Keys are stored after RoPE.
enum class Role { Q, K, V, KPreRope };
template <>
struct EnumNames<Role> {
  static constexpr EnumName<Role> names[] = {
      {Role::Q, "q"}, {Role::K, "k"}, {Role::V, "v"}, {Role::KPreRope, "k_pre_rope"}};
};
inline const char* to_string(Role r) { return enum_name(r); }  // "q", "k", "v", "k_pre_rope"
Role parse_role(const std::string& name);  // throws std::invalid_argument listing the valid names

// RopeStyle (adjacent or halves) lives in core's rope.h: methods that quantize keys before RoPE
// apply it after dequantization.
RopeStyle parse_rope_style(const std::string& name);

// The dtype the values had when captured; in memory they are always fp32 (converted exactly).
enum class CaptureDtype { F16, BF16, F32 };
template <>
struct EnumNames<CaptureDtype> {
  static constexpr EnumName<CaptureDtype> names[] = {
      {CaptureDtype::F16, "float16"}, {CaptureDtype::BF16, "bfloat16"}, {CaptureDtype::F32, "float32"}};
};
inline const char* to_string(CaptureDtype d) { return enum_name(d); }  // "float16", "bfloat16", "float32"
CaptureDtype parse_capture_dtype(const std::string& name);

struct DumpInfo {
  std::string model;  // free text, e.g. "stories260K"
  int64_t num_layers = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t tokens = 0;  // T, the same for every layer and role
  double rope_theta = 10000.0;
  RopeStyle rope_style = RopeStyle::Adjacent;
  bool k_after_rope = true;
  bool has_k_pre_rope = false;
  CaptureDtype dtype = CaptureDtype::F32;
  std::vector<int32_t> token_ids;  // empty when unknown; else `tokens` entries
  std::string text;                // decoded text, empty when unknown
  std::string source;              // what made the dump (command line, generator and seed)

  int64_t heads(Role r) const { return r == Role::Q ? num_q_heads : num_kv_heads; }
  std::vector<int64_t> shape(Role r) const { return {heads(r), tokens, head_dim}; }
  // Throws std::invalid_argument starting with `where` for non-positive sizes, q heads not a
  // multiple of kv heads, an odd head_dim with RoPE, or token_ids of the wrong length.
  void validate(const std::string& where) const;
};

// One layer in memory; k_pre_rope is empty (no shape) when the dump has none.
struct LayerKV {
  Tensor q, k, v, k_pre_rope;
};

class DumpReader {
 public:
  virtual ~DumpReader() = default;
  virtual const DumpInfo& info() const = 0;
  virtual const std::string& path() const = 0;  // for error messages
  // One layer and role, shape info().shape(role), fp32. Throws std::runtime_error naming the
  // file, layer and role for missing data, wrong shapes and NaN/Inf values.
  virtual Tensor read(int64_t layer, Role role) const = 0;
  // One head, shape (1, T, D). The default reads the whole role and slices it; formats with
  // per-head chunks override it so only that head is loaded.
  virtual Tensor read_head(int64_t layer, Role role, int64_t head) const;
  LayerKV read_layer(int64_t layer) const;  // q, k, v (and k_pre_rope when present)

 protected:
  void check_request(int64_t layer, Role role, int64_t head) const;  // range checks, clear errors
};

// Opens a dump by its content: HDF5 (.h5/.hdf5), .npz, a directory of .npy files, a stacked
// .npy, or a torch.save file (.pt/.pth, when built with libtorch). docs/DUMP_FORMAT.md lists
// the accepted layouts and names. Throws std::runtime_error naming the path on any problem.
std::unique_ptr<DumpReader> open_dump(const std::string& path);

// The dump that ships with kvlab (stories260K, data/stories260K.h5), or $KVLAB_DEFAULT_DUMP.
std::string default_dump_path();

// How dumps are written: chunks of (1, chunk_tokens, D), so one head reads alone; with
// `compress`, byte shuffle + deflate (Huffman-only, compressed in parallel; docs/DUMP_FORMAT.md).
struct DumpWriteOptions {
  bool compress = true;
  int64_t chunk_tokens = 1024;
};

// Writes the HDF5 dump format to `path` + ".tmp.<pid>" and renames it onto `path` in commit(),
// so an interrupted dump never leaves a file that looks complete. Destroying an uncommitted
// writer deletes the temporary file.
class DumpWriter {
 public:
  DumpWriter(const std::string& path, const DumpInfo& info, DumpWriteOptions options = {});
  ~DumpWriter();
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;

  // x: shape info.shape(role), F32 or F16. Values are stored as info.dtype (fp16 and bf16
  // rounding to nearest even from fp32). Throws on wrong shape, NaN/Inf, or a repeated write.
  void write(int64_t layer, Role role, const TensorView& x);
  // Checks that q, k, v (and k_pre_rope when info.has_k_pre_rope) of every layer were written,
  // then closes and renames. Throws naming what is missing.
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvlab
