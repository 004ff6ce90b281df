// DumpInfo checks, names of roles/styles/dtypes, and the shared parts of DumpReader.
#include <cstdlib>
#include <stdexcept>

#include "dump_hdf5_layout.h"
#include "kvlab/dump.h"
#include "readers.h"

namespace kvlab {

namespace {

// The enumerator named `name`, else std::invalid_argument "unknown <what> '<name>' (valid: ...)".
template <class E>
E parse_named(const std::string& name, const char* what) {
  if (const auto e = find_enum<E>(name)) return *e;
  throw std::invalid_argument(std::string("unknown ") + what + " '" + name +
                              "' (valid: " + enum_choices<E>() + ")");
}

}  // namespace

Role parse_role(const std::string& name) { return parse_named<Role>(name, "role"); }
RopeStyle parse_rope_style(const std::string& name) { return parse_named<RopeStyle>(name, "RoPE style"); }
CaptureDtype parse_capture_dtype(const std::string& name) { return parse_named<CaptureDtype>(name, "dtype"); }

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
  if (rope_style != RopeStyle::None && head_dim % 2 != 0)
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
  if (role == Role::KPreRope && !in.has_k_pre_rope)
    throw std::runtime_error(path() + ": the dump has no k_pre_rope");
  if (head < 0 || head >= in.heads(role))
    throw std::out_of_range(path() + ": " + to_string(role) + " head " + std::to_string(head) +
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
  out.q = read(layer, Role::Q);
  out.k = read(layer, Role::K);
  out.v = read(layer, Role::V);
  if (info().has_k_pre_rope) out.k_pre_rope = read(layer, Role::KPreRope);
  return out;
}

std::string default_dump_path() {
  if (const char* env = std::getenv("KVLAB_DEFAULT_DUMP"); env && *env) return env;
  return KVLAB_DEFAULT_DUMP;
}

int64_t dump_format_version() { return detail::kDumpFormatVersion; }

}  // namespace kvlab
