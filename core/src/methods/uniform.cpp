#include "uniform.h"

#include <algorithm>
#include <stdexcept>

#include "../tiles.h"
#include "kvlab/codec.h"
#include "kvlab/half.h"
#include "kvlab/kv_text.h"
#include "kvlab/quantizer.h"
#include "rotation.h"

namespace kvlab::methods {

void check_inputs(const TensorView& k, const TensorView& v) {
  if (k.shape != v.shape)
    throw std::invalid_argument("method apply: keys " + shape_string(k.shape) + " and values " +
                                shape_string(v.shape) + " differ in shape");
  if (k.shape.size() < 2 || k.numel() == 0)
    throw std::invalid_argument("method apply: keys of shape " + shape_string(k.shape) +
                                " are empty or not (..., T, D)");
  check_finite(k, "method apply: keys");
  check_finite(v, "method apply: values");
}

void load(const TensorView& x, int64_t first, int64_t n, float* out) {
  if (x.dtype == DType::F16)
    detail::load_floats(static_cast<const uint16_t*>(x.data) + first, out, n);
  else
    detail::load_floats(static_cast<const float*>(x.data) + first, out, n);
}

Tensor full_precision(const TensorView& x) {
  Tensor t;
  t.shape = x.shape;
  t.data.resize(x.numel());
  load(x, 0, x.numel(), t.data.data());
  if (x.dtype == DType::F32)
    for (float& v : t.data) v = round_to_half(v);
  return t;
}

double role_bits(const QuantizerSpec& q, int64_t n, int64_t T, int64_t D) {
  const double quantized = n == 0 ? 0.0 : packed_bits({n, D}, q);
  return (quantized + (T - n) * (16.0 * D)) / (double)(T * D);
}

Tensor float_roundtrip(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales,
                       const Codec* codec) {
  Tensor out{x.shape, {}};
  if (codec && codec->floating(x, s, scales, out.data)) return out;
  const FloatQuantized q = scales.empty() ? quantize_float(x, s) : quantize_float(x, s, scales);
  return {x.shape, dequantize_float(q)};
}

Schedule every_token(int64_t T) { return {0, T, 0, T}; }

Schedule sink_and_residual(const UniformParams& p, int64_t T) {
  Schedule s;
  const int64_t first = std::min<int64_t>(p.sink, T);
  s.key_begin = s.value_begin = first;
  s.key_end = first + (T - first) / p.group * p.group;  // whole groups; the rest is the residual
  s.value_end = std::max<int64_t>(first, T - p.residual);
  return s;
}

std::string whole_sequence_group(const UniformParams& p) {
  return p.group == kWholeAxis ? "group=all takes each key channel's scale over the whole sequence, which a "
                                 "decoding cache does not have yet; give a group size (group=128)"
                               : "";
}

namespace {

std::string group_text(int g) { return g == kWholeAxis ? "all" : std::to_string(g); }

// rot=none | hadamard | hadamard:SEED (hadamard alone: seed 0)
int parse_rot(const std::string& v, const std::string& key) {
  const std::string pre = "hadamard:";
  if (v == "none") return -1;
  if (v == "hadamard") return 0;
  if (v.rfind(pre, 0) == 0) {
    const int seed = text::parse_int(v.substr(pre.size()), key + " seed");
    if (seed < 0) throw std::invalid_argument(key + "='" + v + "': the seed must be >= 0");
    return seed;
  }
  throw std::invalid_argument(key + "='" + v +
                              "' is not valid; choose one of: none, hadamard, hadamard:SEED");
}
const std::vector<std::string> kRotRoles = {"k", "v", "kv"};  // rot_roles 1, 2, 3

// Every key a uniform family may list: how it reads and prints. `optional` keys are printed
// only when they differ from UniformParams' default, so specs published before them stay
// canonical.
struct KeyRule {
  const char* name;
  void (*set)(UniformParams&, const std::string& value, const std::string& key);
  std::string (*get)(const UniformParams&);
  bool optional = false;
};
constexpr KeyRule kKeys[] = {
    {"kbits",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.kbits = text::parse_int(v, k); },
     [](const UniformParams& p) { return std::to_string(p.kbits); }},
    {"vbits",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.vbits = text::parse_int(v, k); },
     [](const UniformParams& p) { return std::to_string(p.vbits); }},
    {"group",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.group = parse_group_size(v, k); },
     [](const UniformParams& p) { return group_text(p.group); }},
    {"vgroup",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.vgroup = parse_group_size(v, k); },
     [](const UniformParams& p) { return group_text(p.vgroup); }},
    {"sink",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.sink = text::parse_int(v, k); },
     [](const UniformParams& p) { return std::to_string(p.sink); }},
    {"residual",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.residual = text::parse_int(v, k); },
     [](const UniformParams& p) { return std::to_string(p.residual); }},
    {"boost",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.boost = text::parse_double(v, k); },
     [](const UniformParams& p) { return text::format_double(p.boost); }},
    {"params",
     [](UniformParams& p, const std::string& v, const std::string& k) {
       p.params = parse_enum<ParamType>(v, k);
     },
     [](const UniformParams& p) { return std::string(enum_name(p.params)); }},
    {"profile",
     [](UniformParams& p, const std::string& v, const std::string& k) {
       p.profile = parse_enum<Profile>(v, k);
     },
     [](const UniformParams& p) { return std::string(enum_name(p.profile)); }},
    {"rot",
     [](UniformParams& p, const std::string& v, const std::string& k) { p.rot_seed = parse_rot(v, k); },
     [](const UniformParams& p) {
       return p.rot_seed < 0 ? std::string("none") : "hadamard:" + std::to_string(p.rot_seed);
     },
     true},
    {"rot_roles",
     [](UniformParams& p, const std::string& v, const std::string& k) {
       p.rot_roles = text::choose(v, k, kRotRoles) + 1;
     },
     [](const UniformParams& p) { return kRotRoles[p.rot_roles - 1]; }, true},
};

const KeyRule& rule_of(const std::string& name) {
  for (const KeyRule& r : kKeys)
    if (name == r.name) return r;
  throw std::logic_error("uniform method key '" + name + "' has no rule");
}

std::vector<std::string> names_of(const std::vector<MethodKey>& keys) {
  std::vector<std::string> out;
  for (const MethodKey& k : keys) out.push_back(k.name);
  return out;
}

}  // namespace

UniformMethod::UniformMethod(std::string family, std::vector<std::string> keys, UniformRules rules,
                             UniformParams p)
    : family_(std::move(family)), keys_(std::move(keys)), rules_(rules), p_(p) {
  auto fail = [&](const std::string& why) { throw std::invalid_argument("method '" + spec() + "': " + why); };
  if (p_.sink < 0) fail("sink must be >= 0");
  if (p_.residual < 0) fail("residual must be >= 0");
  if (rules_.check) {
    const std::string why = rules_.check(p_);
    if (!why.empty()) fail(why);
  }
  validate(rules_.key(p_));
  validate(rules_.value(p_));
}

std::string UniformMethod::spec() const {
  std::string out = family_;
  bool first = true;
  for (const std::string& k : keys_) {
    const KeyRule& r = rule_of(k);
    if (r.optional && r.get(p_) == r.get(UniformParams{})) continue;
    out += (first ? ":" : ",") + k + "=" + r.get(p_);
    first = false;
  }
  return out;
}

Schedule UniformMethod::decode_schedule(int64_t n) const {
  const std::string why = rules_.decode_refusal ? rules_.decode_refusal(p_) : "";
  if (!rules_.decode || !why.empty())
    throw std::invalid_argument(
        "method '" + spec() + "' cannot be decoded: " + (why.empty() ? std::string("no decode rule") : why));
  return rules_.decode(p_, n);
}

void UniformMethod::check_model(const ModelShape& m) const {
  if (p_.rot_seed >= 0 && !is_power_of_two(m.head_dim))
    throw std::invalid_argument("method '" + spec() +
                                "': rot=hadamard needs a head_dim that is a power of two, got " +
                                std::to_string(m.head_dim));
}

Bits UniformMethod::bits(int64_t T, int64_t D) const {
  const Schedule s = schedule(T);
  return {role_bits(rules_.key(p_), s.key_end - s.key_begin, T, D),
          role_bits(rules_.value(p_), s.value_end - s.value_begin, T, D)};
}

namespace {

// Quantize tokens [b, e) of x (..., T, D) and write the dequantized values into out.
// boost: null, or the caller's boosted channels per (slice, page) of the range. rot_seed >= 0:
// the range is rotated along D before quantizing (the codes are the rotated tensor's) and the
// dequantized values are rotated back.
void replace_range(const TensorView& x, int64_t b, int64_t e, const QuantizerSpec& spec, Tensor& out,
                   const std::vector<int32_t>* boost, int rot_seed, const Codec* codec) {
  if (e <= b) {
    if (boost && !boost->empty())
      throw std::invalid_argument("method apply: key boost channels were given but no key page is quantized");
    return;
  }
  const int64_t T = x.shape[x.shape.size() - 2], D = x.shape.back(), N = x.numel() / (T * D),
                len = (e - b) * D;
  Tensor part;
  part.shape = x.shape;
  part.shape[part.shape.size() - 2] = e - b;
  part.data.resize(N * len);
  // fp16 input converts to fp32 exactly, so every profile sees the values it was given
  for (int64_t n = 0; n < N; ++n) load(x, (n * T + b) * D, len, &part.data[n * len]);
  if (rot_seed >= 0) hadamard_rows(part.data.data(), N * (e - b), D, (uint64_t)rot_seed, false);
  std::vector<float> deq;
  if (boost || !codec || !codec->uniform(part.view(), spec, deq))
    deq = dequantize(boost ? quantize(part.view(), spec, *boost) : quantize(part.view(), spec));
  if (rot_seed >= 0) hadamard_rows(deq.data(), N * (e - b), D, (uint64_t)rot_seed, true);
  for (int64_t n = 0; n < N; ++n) std::copy_n(&deq[n * len], len, &out.data[(n * T + b) * D]);
}

}  // namespace

Reconstruction UniformMethod::apply_with(const TensorView& k, const TensorView& v,
                                         const std::vector<int32_t>* key_boost, const Codec* codec) const {
  check_inputs(k, v);
  const Schedule s = schedule(k.shape[k.shape.size() - 2]);
  Reconstruction r{full_precision(k), full_precision(v)};
  replace_range(k, s.key_begin, s.key_end, rules_.key(p_), r.k, key_boost,
                p_.rot_roles & 1 ? p_.rot_seed : -1, codec);
  replace_range(v, s.value_begin, s.value_end, rules_.value(p_), r.v, nullptr,
                p_.rot_roles & 2 ? p_.rot_seed : -1, codec);
  return r;
}

MethodFamily uniform_family(std::string name, std::string summary, std::vector<MethodKey> keys,
                            std::vector<Preset> presets, UniformRules rules) {
  UniformParams defaults;
  for (const MethodKey& k : keys) rule_of(k.name).set(defaults, k.default_value, k.name);
  MethodFamily f{name, std::move(summary), keys, std::move(presets), nullptr};
  f.parse = [name, names = names_of(keys), defaults, rules](const std::string& args) -> MethodPtr {
    UniformParams p = defaults;
    for (const auto& [key, value] : text::split_pairs(args, "method spec")) {
      text::choose(key, name + " key", names);
      rule_of(key).set(p, value, key);
    }
    return std::make_shared<const UniformMethod>(name, names, rules, p);
  };
  return f;
}

}  // namespace kvlab::methods

namespace kvlab {

MethodPtr make_uniform_method(const std::string& family, const UniformParams& p) {
  const MethodFamily* f = find_method_family(family);
  if (!f) throw std::invalid_argument("make_uniform_method: no method family '" + family + "'");
  std::string args;
  for (const MethodKey& k : f->keys) {
    bool known = false;
    for (const methods::KeyRule& r : methods::kKeys) known = known || k.name == r.name;
    if (!known) throw std::invalid_argument("make_uniform_method: '" + family + "' is not a uniform family");
    args += (args.empty() ? "" : ",") + k.name + "=" + methods::rule_of(k.name).get(p);
  }
  MethodPtr m = f->parse(args);
  if (!m->uniform())
    throw std::invalid_argument("make_uniform_method: '" + family + "' is not a uniform family");
  return m;
}

}  // namespace kvlab
