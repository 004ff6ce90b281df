// The VQ codebook file (HDF5) written by `kvlab vq train` and read by `kvlab vq reorder` and the
// eval method `vq:codebooks=CB.h5`. Layout: docs/FORMATS.md section "VQ codebook file".
// Plain data only: vq/ trains the books; this file only moves them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab {

struct CodebookFile {
  std::string spec;  // canonical VQ spec, e.g. "CQ-4c8b"
  int64_t vec = 0, bits = 0, stages = 0;
  int64_t first_layer = 0;  // the books cover layers first_layer .. first_layer + num_layers - 1
  int64_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
  int64_t tokens = 0;              // tokens each codebook was trained on
  std::string model, source;       // the dump's model and path; the training command
  std::vector<std::string> roles;  // "k" and/or "v"
  // Per role: (layers, kv_heads, stages, groups, 2^bits, vec) float32.
  std::vector<std::vector<float>> books;
  // Per role: (layers, kv_heads, stages, groups, 2^bits) int64 uses on the dump, or empty.
  std::vector<std::vector<int64_t>> usage;
  bool reordered = false;  // entries sorted by usage, descending

  int64_t groups() const { return vec > 0 ? head_dim / vec : 0; }
  int64_t book_floats() const { return stages * groups() * ((int64_t)1 << bits) * vec; }  // one (layer, head)
  int64_t role_index(const std::string& role) const;                                      // -1 when absent
};

// Throws std::invalid_argument naming both files when the codebooks cannot serve a dump of this
// shape: another head_dim or KV head count, or layers the file does not cover.
void check_codebooks_match(const CodebookFile& f, const std::string& file, int64_t dump_layers,
                           int64_t dump_kv_heads, int64_t dump_head_dim, const std::string& dump);

// The canonical VQ spec of these sizes: "CQ-<vec>c<bits>b" when stages = 1, else
// "VQ<vec,bits,stages>" (vq/'s to_string; a file's spec must equal it).
std::string vq_spec_text(int64_t vec, int64_t bits, int64_t stages);

// Written to a temporary name and renamed. Throws std::runtime_error naming the file.
void write_codebook_file(const std::string& path, const CodebookFile& f);
// Throws std::runtime_error naming the file and what is wrong (not a codebook file, missing
// datasets, shapes or a spec that disagree with the attributes). libhdf5 parses the file in a
// child process first (io/src/isolate.h).
CodebookFile read_codebook_file(const std::string& path);

}  // namespace kvlab
