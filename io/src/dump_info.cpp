// DumpInfo checks, names of roles/styles/dtypes, and the shared parts of DumpReader.
#include <cstdlib>
#include <stdexcept>

#include "kvlab/dump.h"
#include "readers.h"

namespace kvlab {

const char* role_name(Role r) {
  switch (r) {
    case Role::q: return "q";
    case Role::k: return "k";
    case Role::v: return "v";
    case Role::k_pre_rope: return "k_pre_rope";
  }
  return "?";
}

Role parse_role(const std::string& name) {
  for (Role r : {Role::q, Role::k, Role::v, Role::k_pre_rope})
    if (name == role_name(r)) return r;
  throw std::invalid_argument("unknown role '" + name + "' (valid: q, k, v, k_pre_rope)");
}

const char* rope_style_name(RopeStyle s) {
  switch (s) {
    case RopeStyle::none: return "none";
    case RopeStyle::adjacent: return "adjacent";
    case RopeStyle::halves: return "halves";
  }
  return "?";
}

RopeStyle parse_rope_style(const std::string& name) {
  for (RopeStyle s : {RopeStyle::none, RopeStyle::adjacent, RopeStyle::halves})
    if (name == rope_style_name(s)) return s;
  throw std::invalid_argument("unknown RoPE style '" + name + "' (valid: none, adjacent, halves)");
}

const char* capture_dtype_name(CaptureDtype d) {
  switch (d) {
    case CaptureDtype::f16: return "float16";
    case CaptureDtype::bf16: return "bfloat16";
    case CaptureDtype::f32: return "float32";
  }
  return "?";
}

CaptureDtype parse_capture_dtype(const std::string& name) {
  for (CaptureDtype d : {CaptureDtype::f16, CaptureDtype::bf16, CaptureDtype::f32})
    if (name == capture_dtype_name(d)) return d;
  throw std::invalid_argument("unknown dtype '" + name + "' (valid: float16, bfloat16, float32)");
}

void DumpInfo::validate(const std::string& where) const {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(where + ": " + what); };
  if (num_layers <= 0) fail("num_layers must be positive, got " + std::to_string(num_layers));
  if (num_q_heads <= 0) fail("num_q_heads must be positive, got " + std::to_string(num_q_heads));
  if (num_kv_heads <= 0) fail("num_kv_heads must be positive, got " + std::to_string(num_kv_heads));
  if (head_dim <= 0) fail("head_dim must be positive, got " + std::to_string(head_dim));
  if (tokens <= 0) fail("the number of tokens must be positive, got " + std::to_string(tokens));
  if (num_q_heads % num_kv_heads != 0)
    fail("num_q_heads (" + std::to_string(num_q_heads) + ") is not a multiple of num_kv_heads (" +
         std::to_string(num_kv_heads) + ")");
  if (rope_style != RopeStyle::none && head_dim % 2 != 0)
    fail("RoPE needs an even head_dim, got " + std::to_string(head_dim));
  if (!token_ids.empty() && (int64_t)token_ids.size() != tokens)
    fail("token_ids has " + std::to_string(token_ids.size()) + " entries for " + std::to_string(tokens) +
         " tokens");
}

void DumpReader::check_request(int64_t layer, Role role, int64_t head) const {
  const DumpInfo& in = info();
  if (layer < 0 || layer >= in.num_layers)
    throw std::out_of_range(path() + ": layer " + std::to_string(layer) + " out of range [0, " +
                            std::to_string(in.num_layers) + ")");
  if (role == Role::k_pre_rope && !in.has_k_pre_rope)
    throw std::runtime_error(path() + ": the dump has no k_pre_rope");
  if (head < 0 || head >= in.heads(role))
    throw std::out_of_range(path() + ": " + role_name(role) + " head " + std::to_string(head) +
                            " out of range [0, " + std::to_string(in.heads(role)) + ")");
}

Tensor DumpReader::read_head(int64_t layer, Role role, int64_t head) const {
  check_request(layer, role, head);
  Tensor all = read(layer, role);
  const int64_t n = info().tokens * info().head_dim;
  Tensor one;
  one.shape = {1, info().tokens, info().head_dim};
  one.data.assign(all.data.begin() + head * n, all.data.begin() + (head + 1) * n);
  return one;
}

LayerKV DumpReader::read_layer(int64_t layer) const {
  LayerKV out;
  out.q = read(layer, Role::q);
  out.k = read(layer, Role::k);
  out.v = read(layer, Role::v);
  if (info().has_k_pre_rope) out.k_pre_rope = read(layer, Role::k_pre_rope);
  return out;
}

std::string default_dump_path() {
  if (const char* env = std::getenv("KVLAB_DEFAULT_DUMP"); env && *env) return env;
  return KVLAB_DEFAULT_DUMP;
}

}  // namespace kvlab
