#include "kvlab/method.h"

#include <algorithm>
#include <stdexcept>

#include "kvlab/half.h"
#include "kvlab/kv_text.h"
#include "kvlab/quantizer.h"
#include "tiles.h"

namespace kvlab {

const char* to_string(Family f) {
  switch (f) {
    case Family::Fp16: return "fp16";
    case Family::Int8: return "int8";
    case Family::Kivi: return "kivi";
    case Family::Kitty: return "kitty";
  }
  return "?";
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"fp16", "fp16", "no quantization: the cache in fp16 (reference)"},
      {"int8", "int8:group=all,params=fp16", "symmetric INT8 per channel, absmax/127, keys and values"},
      {"kivi-4", "kivi:kbits=4,vbits=4,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kvlab",
       "KIVI K4V4: keys per channel in groups of 128 tokens, values per token, 128 newest values fp16"},
      {"kivi-2", "kivi:kbits=2,vbits=2,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kvlab",
       "KIVI K2V2, G=128, R=128"},
      {"kivi-2-sink",
       "kivi:kbits=2,vbits=2,group=128,vgroup=all,sink=32,residual=128,params=fp16,profile=kvlab",
       "kivi-2 with the first 32 tokens (attention sinks) in fp16"},
      {"kitty",
       "kitty:kbits=2,vbits=2,group=128,vgroup=all,sink=32,residual=128,boost=0.125,params=fp16,profile="
       "kvlab",
       "Kitty K2V2: 12.5% of key channels per page at 4 bits, sink 32, G=128, R=128"},
      {"kitty-pro",
       "kitty:kbits=2,vbits=2,group=128,vgroup=all,sink=32,residual=128,boost=0.25,params=fp16,profile=kvlab",
       "Kitty-Pro: as kitty with 25% of key channels boosted"},
  };
  return p;
}

namespace {

std::vector<std::string> keys_of(Family f) {
  switch (f) {
    case Family::Fp16: return {};
    case Family::Int8: return {"group", "params"};
    case Family::Kivi: return {"kbits", "vbits", "group", "vgroup", "sink", "residual", "params", "profile"};
    case Family::Kitty:
      return {"kbits", "vbits", "group", "vgroup", "sink", "residual", "boost", "params", "profile"};
  }
  return {};
}

std::string group_text(int g) { return g == kWholeAxis ? "all" : std::to_string(g); }

void validate(const MethodSpec& m) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("method '" + to_string(m) + "': " + why);
  };
  if (m.family == Family::Fp16) return;
  if (m.sink < 0) fail("sink must be >= 0");
  if (m.residual < 0) fail("residual must be >= 0");
  if (m.family == Family::Kitty && !(m.boost >= 0.0 && m.boost <= 1.0)) fail("boost must be in [0, 1]");
  validate(key_quantizer(m));
  validate(value_quantizer(m));
}

}  // namespace

MethodSpec parse_method(const std::string& text_in) {
  std::string text = text_in;
  for (const auto& p : presets())
    if (p.name == text) text = p.spec;
  const size_t colon = text.find(':');
  const std::string fam = text.substr(0, colon);
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  for (const char* f : {"int8:", "kivi:", "kitty:"}) names.push_back(std::string(f) + "key=value,...");
  MethodSpec m;
  bool known = false;
  for (Family f : {Family::Fp16, Family::Int8, Family::Kivi, Family::Kitty})
    if (fam == to_string(f)) m.family = f, known = true;
  if (!known) text::choose(text_in, "method", names);
  if (m.family == Family::Int8) m.group = kWholeAxis;
  if (m.family == Family::Kitty) m.boost = 0.125, m.sink = 32;
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  bool params_set = false;
  for (const auto& [key, v] : text::split_pairs(rest, "method spec")) {
    text::choose(key, std::string(to_string(m.family)) + " key", keys_of(m.family));
    if (key == "kbits")
      m.kbits = text::parse_int(v, key);
    else if (key == "vbits")
      m.vbits = text::parse_int(v, key);
    else if (key == "group")
      m.group = v == "all" ? kWholeAxis : text::parse_int(v, key);
    else if (key == "vgroup")
      m.vgroup = v == "all" ? kWholeAxis : text::parse_int(v, key);
    else if (key == "sink")
      m.sink = text::parse_int(v, key);
    else if (key == "residual")
      m.residual = text::parse_int(v, key);
    else if (key == "boost")
      m.boost = text::parse_double(v, key);
    else if (key == "params")
      m.params = (ParamType)text::choose(v, key, {"fp32", "fp16"}), params_set = true;
    else if (key == "profile")
      m.profile = (Profile)text::choose(v, key, {"kvlab", "kivi", "kitty-sim"});
  }
  if (!params_set && m.profile != Profile::Kvlab) m.params = ParamType::F16;
  validate(m);
  return m;
}

std::string to_string(const MethodSpec& m) {
  std::string out = to_string(m.family);
  if (m.family == Family::Fp16) return out;
  if (m.family == Family::Int8)
    return out + ":group=" + group_text(m.group) + ",params=" + to_string(m.params);
  out += ":kbits=" + std::to_string(m.kbits) + ",vbits=" + std::to_string(m.vbits) +
         ",group=" + group_text(m.group) + ",vgroup=" + group_text(m.vgroup) +
         ",sink=" + std::to_string(m.sink) + ",residual=" + std::to_string(m.residual);
  if (m.family == Family::Kitty) out += ",boost=" + text::format_double(m.boost);
  return out + ",params=" + to_string(m.params) + ",profile=" + to_string(m.profile);
}

QuantizerSpec key_quantizer(const MethodSpec& m) {
  QuantizerSpec q;
  q.params = m.params;
  q.profile = m.profile;
  q.axis = Axis::Channel;
  q.group = m.group;
  if (m.family == Family::Int8) {
    q.scheme = Scheme::Sym, q.bits = 8;
  } else {
    q.bits = m.kbits;
    if (m.family == Family::Kitty) q.boost = m.boost;
  }
  return q;
}

QuantizerSpec value_quantizer(const MethodSpec& m) {
  QuantizerSpec q;
  q.params = m.params;
  q.profile = m.profile;
  if (m.family == Family::Int8) {
    q.scheme = Scheme::Sym, q.bits = 8, q.axis = Axis::Channel, q.group = m.group;
  } else {
    q.bits = m.vbits, q.axis = Axis::Token, q.group = m.vgroup;
  }
  return q;
}

Schedule schedule(const MethodSpec& m, int64_t T) {
  Schedule s;
  if (m.family == Family::Fp16) return s;
  if (m.family == Family::Int8) return {0, T, 0, T};
  const int64_t first = std::min<int64_t>(m.sink, T);
  s.key_begin = s.key_end = s.value_begin = first;
  s.key_end = first + (T - first) / m.group * m.group;  // whole groups; the rest is the residual
  s.value_end = std::max<int64_t>(first, T - m.residual);
  return s;
}

Bits bits_per_element(const MethodSpec& m, int64_t T, int64_t D) {
  const Schedule s = schedule(m, T);
  const double pbits = m.params == ParamType::F16 ? 16.0 : 32.0;
  auto cost = [&](const QuantizerSpec& q, int64_t n) {  // bits of n quantized tokens of one head
    if (n == 0) return 0.0;
    const bool channel = q.axis == Axis::Channel;
    const int64_t L = channel ? n : D, R = channel ? D : n;
    const int64_t G = q.group == kWholeAxis ? L : q.group;
    const int64_t groups = R * ((L + G - 1) / G);
    double b = (double)n * D * q.bits + groups * pbits * (q.scheme == Scheme::Asym ? 2 : 1);
    if (q.boosted()) b += (double)boost_count((int)D, q.boost) * n * 2 + (double)((n + G - 1) / G) * D * 8;
    return b;
  };
  const int64_t kq = s.key_end - s.key_begin, vq = s.value_end - s.value_begin;
  Bits out;
  const double full = 16.0 * D;
  out.key =
      m.family == Family::Fp16 ? 16.0 : (cost(key_quantizer(m), kq) + (T - kq) * full) / (double)(T * D);
  out.value =
      m.family == Family::Fp16 ? 16.0 : (cost(value_quantizer(m), vq) + (T - vq) * full) / (double)(T * D);
  return out;
}

namespace {

// Elements [first, first + n) of x as floats (fp16 converts exactly).
void load(const TensorView& x, int64_t first, int64_t n, float* out) {
  if (x.dtype == DType::F16)
    detail::load_floats(static_cast<const uint16_t*>(x.data) + first, out, n);
  else
    detail::load_floats(static_cast<const float*>(x.data) + first, out, n);
}

// Quantize tokens [b, e) of x (..., T, D) and write the dequantized values into out.
// boost: null, or the caller's boosted channels per (slice, page) of the range.
void replace_range(const TensorView& x, int64_t b, int64_t e, const QuantizerSpec& spec, Tensor& out,
                   const std::vector<int32_t>* boost = nullptr) {
  if (e <= b) {
    if (boost && !boost->empty())
      throw std::invalid_argument("apply_method: key boost channels were given but no key page is quantized");
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
  const std::vector<float> deq =
      dequantize(boost ? quantize(part.view(), spec, *boost) : quantize(part.view(), spec));
  for (int64_t n = 0; n < N; ++n) std::copy_n(&deq[n * len], len, &out.data[(n * T + b) * D]);
}

// The cache as fp16 holds it.
Tensor full_precision(const TensorView& x) {
  Tensor t;
  t.shape = x.shape;
  t.data.resize(x.numel());
  load(x, 0, x.numel(), t.data.data());
  if (x.dtype == DType::F32)
    for (float& v : t.data) v = round_to_half(v);
  return t;
}

}  // namespace

Reconstruction apply_method(const MethodSpec& m, const TensorView& k, const TensorView& v) {
  return apply_method(m, k, v, nullptr);
}

Reconstruction apply_method(const MethodSpec& m, const TensorView& k, const TensorView& v,
                            const std::vector<int32_t>& key_boost) {
  if (m.family != Family::Kitty)
    throw std::invalid_argument("apply_method: key boost channels were given for " + to_string(m) +
                                ", which is not a kitty method");
  return apply_method(m, k, v, &key_boost);
}

Reconstruction apply_method(const MethodSpec& m, const TensorView& k, const TensorView& v,
                            const std::vector<int32_t>* key_boost) {
  if (k.shape != v.shape)
    throw std::invalid_argument("apply_method: keys " + shape_string(k.shape) + " and values " +
                                shape_string(v.shape) + " differ in shape");
  if (k.shape.size() < 2 || k.numel() == 0)
    throw std::invalid_argument("apply_method: keys of shape " + shape_string(k.shape) +
                                " are empty or not (..., T, D)");
  check_finite(k, "apply_method: keys");
  check_finite(v, "apply_method: values");
  const Schedule s = schedule(m, k.shape[k.shape.size() - 2]);
  Reconstruction r{full_precision(k), full_precision(v)};
  replace_range(k, s.key_begin, s.key_end, key_quantizer(m), r.k, key_boost);
  replace_range(v, s.value_begin, s.value_end, value_quantizer(m), r.v);
  return r;
}

}  // namespace kvlab
