// kitty: kivi with key pages of G tokens in which a share of channels (largest mean |k|, or the
// caller's) is stored at kbits + 2.
#include <stdexcept>

#include "kvlab/kv_text.h"
#include "uniform.h"

namespace kvlab::methods {
namespace {

const std::string kName = "kitty";

QuantizerSpec kitty_key(const UniformParams& p) {
  QuantizerSpec q = kivi_key(p);
  q.boost = p.boost;
  return q;
}

std::string check_boost(const UniformParams& p) {
  return p.boost >= 0.0 && p.boost <= 1.0 ? "" : "boost must be in [0, 1]";
}

const UniformMethod& as_kitty(const Method& m, const char* what) {
  const auto* u = dynamic_cast<const UniformMethod*>(&m);
  if (!u || m.family() != kName)
    throw std::invalid_argument(std::string(what) + " " + m.spec() + ", which is not a kitty method");
  return *u;
}

}  // namespace

MethodFamily kitty_family() {
  std::vector<MethodKey> keys = kivi_keys("32");
  keys.insert(keys.begin() + 6,
              {"boost", "0.125", "share of key channels per page at kbits+2, chosen by mean |k|"});
  return uniform_family(
      kName, "Kitty: kivi with a share of key channels per page at kbits+2", keys,
      {{"kitty",
        "kitty:kbits=2,vbits=2,group=128,vgroup=all,sink=32,residual=128,boost=0.125,"
        "params=fp16,profile=kvlab",
        "Kitty K2V2: 12.5% of key channels per page at 4 bits, sink 32, G=128, R=128"},
       {"kitty-pro",
        "kitty:kbits=2,vbits=2,group=128,vgroup=all,sink=32,residual=128,boost=0.25,params="
        "fp16,profile=kvlab",
        "Kitty-Pro: as kitty with 25% of key channels boosted"}},
      {kitty_key, kivi_value, sink_and_residual, check_boost, whole_sequence_group, sink_and_residual});
}

}  // namespace kvlab::methods

namespace kvlab {

Reconstruction apply_kitty(const Method& m, const TensorView& k, const TensorView& v,
                           const std::vector<int32_t>& key_boost) {
  return methods::as_kitty(m, "apply_kitty: key boost channels were given for").apply_with(k, v, &key_boost);
}

MethodPtr kitty_with_boost(const Method& m, double boost) {
  UniformParams p = *methods::as_kitty(m, "kitty_with_boost: a boost share was given for").uniform();
  p.boost = boost;
  return make_uniform_method(methods::kName, p);
}

}  // namespace kvlab
