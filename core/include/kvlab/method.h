// KV-cache methods: one registry of method families. A family is one entry (name, keys with
// defaults and meaning, presets, parse); a parsed method knows its canonical spec, schedule,
// bit accounting and how to rebuild one head's K and V. Core's families live in
// core/src/methods/, one file each (docs/EXTENDING.md); other libraries register theirs
// (register_method_family), e.g. vq/'s `vq`. Spec strings: a preset name (`kivi-2`) or
// `family:key=value,...`; see `kvlab methods`.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvlab/rope.h"
#include "kvlab/spec.h"
#include "kvlab/tensor.h"

namespace kvlab {

// Token ranges [begin, end) that are quantized after T tokens; all others stay full precision.
struct Schedule {
  int64_t key_begin = 0, key_end = 0;
  int64_t value_begin = 0, value_end = 0;
};

// Bits per element of one head's cache of T tokens x D channels (codes, scales, zeros, boost
// planes and index, and 16 bits for every full-precision element).
struct Bits {
  double key = 0, value = 0;
  double both() const { return (key + value) / 2.0; }
};

// What the cache holds after T tokens, dequantized to fp32: K and V of shape (..., T, D).
// Full-precision tokens are kept as fp16 (the cache dtype).
struct Reconstruction {
  Tensor k, v;
};

class Codec;

// Which KV head is being rebuilt: codebook methods pick their tables by it. Methods that
// quantize keys before RoPE (needs_k_pre_rope) also get this head's pre-RoPE keys (1, T, D) and
// the RoPE that turns them into k; the others ignore those fields.
struct HeadContext {
  int64_t layer = 0, kv_head = 0;
  TensorView k_pre_rope{};  // data null: the caller has none
  RopeStyle rope_style = RopeStyle::None;
  float rope_theta = 10000.0f;
  const Codec* codec = nullptr;  // where quantize -> dequantize runs (kvlab/codec.h); null: core
};

// The model a method will serve; a method trained for another model (a codebook file) refuses it.
struct ModelShape {
  int64_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
};

// Parameters of the families built on core's uniform quantizers (int8, kivi, kitty). Each
// family reads only the keys it lists; the others keep these defaults.
struct UniformParams {
  int kbits = 2;                      // key code bits (kivi, kitty)
  int vbits = 2;                      // value code bits (kivi, kitty)
  int group = 128;                    // G: keys per channel in groups (kitty: pages) of G tokens;
                                      //    int8: tokens per scale (kWholeAxis = whole sequence)
  int vgroup = kWholeAxis;            // values per token in groups of this many channels (all = D)
  int sink = 0;                       // S: the first S tokens stay in full precision
  int residual = 128;                 // R: the newest R values stay in full precision
  double boost = -1.0;                // kitty: share of key channels at kbits + 2 per page
  ParamType params = ParamType::F16;  // scale/zero storage
  Profile profile = Profile::Kvlab;   // arithmetic recipe of both quantizers
  int rot_seed = -1;                  // rot=hadamard:SEED (>= 0): randomized Hadamard along head_dim
  int rot_roles = 3;                  // which roles rot rotates: 1 keys, 2 values, 3 both

  bool operator==(const UniformParams&) const = default;
};

// One parsed method; immutable, so one instance serves every thread.
class Method {
 public:
  virtual ~Method() = default;
  virtual const std::string& family() const = 0;
  // Canonical spec: parse_method(spec()) is equal to this method.
  virtual std::string spec() const = 0;
  virtual Schedule schedule(int64_t T) const = 0;
  virtual Bits bits(int64_t T, int64_t D) const = 0;
  // K_hat and V_hat of k and v ((..., T, D), fp32 or fp16, one KV head per slice for methods
  // that look at `at`). Throws std::invalid_argument for mismatched shapes or non-finite input.
  virtual Reconstruction apply(const TensorView& k, const TensorView& v,
                               const HeadContext& at = {}) const = 0;
  // Throws std::invalid_argument when the method cannot serve this model.
  virtual void check_model(const ModelShape&) const {}
  // Core's uniform quantizers applied to the quantized ranges (value groups of `all` resolve to
  // the head dim D), where the family uses them.
  virtual std::optional<QuantizerSpec> key_quantizer() const { return std::nullopt; }
  virtual std::optional<QuantizerSpec> value_quantizer() const { return std::nullopt; }
  // The parameters of a uniform family's method; null for other families.
  virtual const UniformParams* uniform() const { return nullptr; }
  // Files the method reads (vq: its codebook file), so a command never writes over them.
  virtual std::vector<std::string> files() const { return {}; }
  // Decoding (kvlab/decode_view.h, docs/FORMATS.md section 12): the token ranges the cache holds
  // quantized after n >= 1 tokens were appended one at a time. Throws std::invalid_argument
  // saying why and what to use instead when a streaming cache cannot hold what apply() computes
  // (a scale over tokens that do not exist yet).
  virtual Schedule decode_schedule(int64_t n) const;
  // How many leading tokens apply() must see so that every range decode_schedule(m), m <= n,
  // holds the bytes the streaming cache wrote for it (n, or fewer when an open group must not
  // be quantized yet).
  virtual int64_t decode_apply_tokens(int64_t n) const { return n; }
  // What the method learned from (calibration tokens, another dump, a codebook's training
  // data), stated in every eval report; empty for methods that learn nothing.
  virtual std::string calibration() const { return {}; }
  // True when apply needs HeadContext::k_pre_rope (the caller loads the dump's k_pre_rope role).
  virtual bool needs_k_pre_rope() const { return false; }
  // Methods that rebuild each layer with another method (plan): those methods, one per layer;
  // empty for the others (one method for every layer). Decoding asks the layer's own method
  // (layer_method in kvlab/decode_view.h).
  virtual std::vector<const Method*> per_layer() const { return {}; }
  // Methods that rebuild each KV head with another method (one layer of a per-head plan whose
  // heads differ): those methods, one per KV head; empty for the others. Decoding asks the
  // head's own method (head_method in kvlab/decode_view.h).
  virtual std::vector<const Method*> per_head() const { return {}; }
};
using MethodPtr = std::shared_ptr<const Method>;

// Same family and canonical spec (the spec prints every parameter).
bool operator==(const Method& a, const Method& b);

struct MethodKey {
  std::string name;
  std::string default_value;  // as written in a spec
  std::string meaning;        // one line for `kvlab methods`
};

struct Preset {
  std::string name;
  std::string spec;         // canonical spec string
  std::string description;  // one line for `kvlab methods`
};

struct MethodFamily {
  std::string name;
  std::string summary;          // one line for `kvlab methods`
  std::vector<MethodKey> keys;  // in canonical order
  std::vector<Preset> presets;
  // args: the text after "name:" ("" when absent). Throws std::invalid_argument naming the key.
  std::function<MethodPtr(const std::string& args)> parse;
};

// Adds a family after core's. Throws std::invalid_argument for a name or preset name already
// taken. Call before any thread uses the registry (in main, or once in a test).
void register_method_family(MethodFamily family);
// Every family in registration order (core's first); null when `name` is not registered.
std::vector<const MethodFamily*> method_families();
const MethodFamily* find_method_family(const std::string& name);
// Every family's presets, in registration order.
std::vector<Preset> presets();

// Parse a preset name or `family[:key=value,...]`; throws std::invalid_argument listing the
// presets and families, or the family's keys.
MethodPtr parse_method(const std::string& text);
// A uniform family's method with these parameters (only the family's keys are read), validated.
MethodPtr make_uniform_method(const std::string& family, const UniformParams& p);

// Kitty with the boosted key channels chosen by the caller (channel selection studies):
// key_boost holds k = boost_count(D, boost) channels per (slice, page) of the quantized key
// range, P = (key_end - key_begin) / group pages (quantize's boost_channels). Throws for other
// families; with no quantized pages it must be empty.
Reconstruction apply_kitty(const Method& m, const TensorView& k, const TensorView& v,
                           const std::vector<int32_t>& key_boost);
// The kitty method m with another boost share; throws for other families.
MethodPtr kitty_with_boost(const Method& m, double boost);

}  // namespace kvlab
