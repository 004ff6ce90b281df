// int8: keys and values symmetric 8-bit per channel (absmax / 127), every token quantized.
#include "uniform.h"

namespace kvlab::methods {
namespace {

QuantizerSpec per_channel(const UniformParams& p) {
  QuantizerSpec q;
  q.scheme = Scheme::Sym;
  q.bits = 8;
  q.axis = Axis::Channel;
  q.group = p.group;
  q.params = p.params;
  q.profile = p.profile;
  return q;
}

Schedule all(const UniformParams&, int64_t T) { return every_token(T); }

// Decoding: a group of G tokens is quantized when it fills (its scale needs all G); the open
// group stays fp16 until then.
int64_t whole_groups(const UniformParams& p, int64_t n) { return n / p.group * p.group; }
Schedule closed_groups(const UniformParams& p, int64_t n) {
  const int64_t e = whole_groups(p, n);
  return {0, e, 0, e};
}

}  // namespace

MethodFamily int8_family() {
  return uniform_family(
      "int8", "symmetric INT8 per channel for keys and values, every token quantized",
      [] {
        std::vector<MethodKey> keys = {{"group", "all", "tokens per scale, per channel, or 'all'"},
                                       {"params", "fp16", "fp16|fp32 storage of the scales"}};
        for (const MethodKey& k : rotation_keys()) keys.push_back(k);
        return keys;
      }(),
      {{"int8", "int8:group=all,params=fp16", "symmetric INT8 per channel, absmax/127, keys and values"}},
      {per_channel, per_channel, all, nullptr, whole_sequence_group, closed_groups, whole_groups});
}

}  // namespace kvlab::methods
