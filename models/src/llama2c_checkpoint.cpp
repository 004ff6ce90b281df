// Loading a llama2.c version-0 checkpoint: 7 int32 header values, then fp32 weights in run.c's
// order. The size must match the header exactly, so a wrong or cut file is named, not run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "kvlab/llama2c.h"

namespace kvlab {
namespace {

constexpr uint64_t kHeaderBytes = 7 * sizeof(int32_t);

// Floats after the header, as run.c lays them out; wcls is the embedding when shared.
uint64_t weight_floats(const Llama2cConfig& c) {
  const uint64_t dim = c.dim, hidden = c.hidden_dim, L = c.n_layers, vocab = c.vocab_size;
  const uint64_t hd = c.head_dim(), q_dim = (uint64_t)c.n_heads * hd, kv_dim = (uint64_t)c.kv_dim();
  uint64_t n = vocab * dim;                     // token embedding
  n += L * dim;                                 // rms_att
  n += L * dim * q_dim + 2 * L * dim * kv_dim;  // wq, wk, wv
  n += L * q_dim * dim;                         // wo
  n += L * dim;                                 // rms_ffn
  n += 3 * L * dim * hidden;                    // w1, w2, w3
  n += dim;                                     // rms_final
  n += (uint64_t)c.seq_len * hd;                // freq_cis real + imag (unused: RoPE is recomputed)
  if (!c.shared_classifier) n += vocab * dim;   // wcls
  return n;
}

void check_header(const Llama2cConfig& c, const std::string& path) {
  auto fail = [&](const std::string& what) {
    throw std::runtime_error("'" + path + "': not a llama2.c checkpoint (version-0 header): " + what);
  };
  // Generous bounds: they only catch files that are not checkpoints at all, before any
  // size arithmetic can overflow.
  auto in_range = [&](const char* name, int32_t v, int32_t hi) {
    if (v <= 0 || v > hi)
      fail(std::string(name) + " = " + std::to_string(v) + " (expected 1.." + std::to_string(hi) + ")");
  };
  in_range("dim", c.dim, 1 << 16);
  in_range("hidden_dim", c.hidden_dim, 1 << 18);
  in_range("n_layers", c.n_layers, 1024);
  in_range("n_heads", c.n_heads, 1024);
  in_range("n_kv_heads", c.n_kv_heads, 1024);
  in_range("|vocab_size|", c.vocab_size, 1 << 22);
  in_range("seq_len", c.seq_len, 1 << 22);
  if (c.dim % c.n_heads != 0)
    fail("dim " + std::to_string(c.dim) + " is not a multiple of n_heads " + std::to_string(c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    fail("n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
         std::to_string(c.n_kv_heads));
  if (c.head_dim() % 2 != 0)
    fail("head_dim " + std::to_string(c.head_dim()) + " is odd (RoPE rotates pairs)");
  if (c.vocab_size < 3)
    fail("vocab_size " + std::to_string(c.vocab_size) + " has no room for <unk>, BOS, EOS");
}

}  // namespace

uint64_t llama2c_expected_bytes(const Llama2cConfig& c) {
  return kHeaderBytes + weight_floats(c) * sizeof(float);
}

Llama2cModel load_llama2c(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw std::runtime_error("'" + path + "': llama2.c model file not found");
  const uint64_t found = fs::file_size(path, ec);
  if (ec) throw std::runtime_error("'" + path + "': cannot read its size: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + path + "': cannot open the llama2.c model file");
  if (found < kHeaderBytes)
    throw std::runtime_error("'" + path + "': " + std::to_string(found) + " bytes, shorter than the " +
                             std::to_string(kHeaderBytes) + "-byte llama2.c header");

  int32_t h[7];
  in.read(reinterpret_cast<char*>(h), sizeof h);
  Llama2cModel m;
  m.path = path;
  Llama2cConfig& c = m.config;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;  // run.c: a negative vocab_size flags an unshared classifier
  c.vocab_size = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -h[5] : h[5]);
  c.seq_len = h[6];
  check_header(c, path);

  const uint64_t expected = llama2c_expected_bytes(c);
  if (found != expected) {
    char shape[200];
    std::snprintf(
        shape, sizeof shape,
        "dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d%s, seq_len %d", c.dim,
        c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
        c.shared_classifier ? "" : " (unshared classifier)", c.seq_len);
    throw std::runtime_error("'" + path + "': size " + std::to_string(found) + " bytes, but its header (" +
                             shape + ") implies " + std::to_string(expected) +
                             " bytes of a version-0 llama2.c checkpoint" +
                             (found < expected ? " (truncated?)" : " (another format or version?)"));
  }

  m.weights.resize(weight_floats(c));
  in.read(reinterpret_cast<char*>(m.weights.data()), (std::streamsize)(m.weights.size() * sizeof(float)));
  if (!in) throw std::runtime_error("'" + path + "': read failed after the header");

  // Block offsets in run.c's order.
  const size_t dim = c.dim, hidden = c.hidden_dim, L = c.n_layers, q_dim = (size_t)c.n_heads * c.head_dim(),
               kv_dim = c.kv_dim();
  size_t off = 0;
  auto take = [&](size_t& field, size_t n) {
    field = off;
    off += n;
  };
  take(m.token_embedding, (size_t)c.vocab_size * dim);
  take(m.rms_att, L * dim);
  take(m.wq, L * q_dim * dim);
  take(m.wk, L * kv_dim * dim);
  take(m.wv, L * kv_dim * dim);
  take(m.wo, L * dim * q_dim);
  take(m.rms_ffn, L * dim);
  take(m.w1, L * hidden * dim);
  take(m.w2, L * dim * hidden);
  take(m.w3, L * hidden * dim);
  take(m.rms_final, dim);
  off += (size_t)c.seq_len * c.head_dim();  // freq_cis_real, freq_cis_imag
  m.wcls = c.shared_classifier ? m.token_embedding : off;
  return m;
}

}  // namespace kvlab
