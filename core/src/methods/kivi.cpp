// kivi: keys per channel in groups of G tokens, values per token, sink and residual in fp16.
#include "uniform.h"

namespace kvlab::methods {

// Shared with kitty, which is kivi with boosted key pages.
QuantizerSpec kivi_key(const UniformParams& p) {
  QuantizerSpec q;
  q.bits = p.kbits;
  q.axis = Axis::Channel;
  q.group = p.group;
  q.params = p.params;
  q.profile = p.profile;
  return q;
}

QuantizerSpec kivi_value(const UniformParams& p) {
  QuantizerSpec q;
  q.bits = p.vbits;
  q.axis = Axis::Token;
  q.group = p.vgroup;
  q.params = p.params;
  q.profile = p.profile;
  return q;
}

// The keys kivi and kitty share; kitty adds boost and changes sink's default.
std::vector<MethodKey> kivi_keys(const std::string& sink) {
  return {
      {"kbits", "2", "code bits of keys (1..8)"},
      {"vbits", "2", "code bits of values (1..8)"},
      {"group", "128", "keys: tokens per group, per channel ('all': the whole sequence)"},
      {"vgroup", "all", "values: channels per group, per token ('all' = head dim)"},
      {"sink", sink, "the first S tokens stay fp16"},
      {"residual", "128", "the newest R values stay fp16; keys past the last whole group stay fp16"},
      {"params", "fp16", "fp16|fp32 storage of scales and zeros"},
      {"profile", "kvlab", "kvlab|kivi|kitty-sim arithmetic (docs/FORMATS.md)"},
      {"rot", "none", "hadamard[:SEED]: randomized Hadamard along head_dim before quantizing, undone after"},
      {"rot_roles", "kv", "roles rot applies to: k, v or kv"}};
}

std::vector<MethodKey> rotation_keys() {
  const std::vector<MethodKey> all = kivi_keys("0");
  return {all.end() - 2, all.end()};
}

MethodFamily kivi_family() {
  return uniform_family(
      "kivi", "KIVI: keys per channel in groups of G tokens, values per token, fp16 sink and residual window",
      kivi_keys("0"),
      {{"kivi-4", "kivi:kbits=4,vbits=4,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kvlab",
        "KIVI K4V4: keys per channel in groups of 128 tokens, values per token, 128 newest values fp16"},
       {"kivi-2", "kivi:kbits=2,vbits=2,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kvlab",
        "KIVI K2V2, G=128, R=128"},
       {"kivi-2-sink",
        "kivi:kbits=2,vbits=2,group=128,vgroup=all,sink=32,residual=128,params=fp16,profile=kvlab",
        "kivi-2 with the first 32 tokens (attention sinks) in fp16"}},
      {kivi_key, kivi_value, sink_and_residual, nullptr, whole_sequence_group, sink_and_residual});
}

}  // namespace kvlab::methods
