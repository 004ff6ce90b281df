#include "kvlab/spec.h"

#include <stdexcept>

#include "kvlab/kv_text.h"

namespace kvlab {

int boost_count(int D, double ratio) { return (int)(D * ratio + 1e-6); }

int parse_group_size(const std::string& v, const std::string& key) {
  if (v == "all") return kWholeAxis;
  const int g = text::parse_int(v, key);
  if (g < 1) throw std::invalid_argument(key + "=" + v + " must be >= 1 (or 'all' for the whole axis)");
  return g;
}

void validate(const QuantizerSpec& s) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("quantizer spec '" + to_string(s) + "': " + why);
  };
  if (s.bits < 1 || s.bits > 8) fail("bits=" + std::to_string(s.bits) + " is outside 1..8");
  if (s.scheme == Scheme::Sym && s.bits < 2)
    fail("scheme=sym needs bits >= 2 (codes in [-(2^(b-1)-1), 2^(b-1)-1])");
  if (s.group != kWholeAxis && s.group < 1)
    fail("group=" + std::to_string(s.group) + " must be >= 1 (or 'all' for the whole axis)");
  if (s.profile != Profile::Kvlab) {
    if (s.scheme != Scheme::Asym)
      fail(std::string("profile=") + to_string(s.profile) + " is asymmetric only");
    if (s.params != ParamType::F16)
      fail(std::string("profile=") + to_string(s.profile) +
           " stores fp16 scales and minima; params=fp32 is not valid");
  }
  if (s.boosted()) {
    if (s.boost > 1.0) fail("boost=" + text::format_double(s.boost) + " is outside [0, 1]");
    if (s.axis != Axis::Channel) fail("boost (Kitty key pages) needs axis=channel");
    if (s.scheme != Scheme::Asym) fail("boost needs scheme=asym");
    if (boosted_bits(s.bits) > 8) fail("boost raises channels to bits+2, so bits must be <= 6");
    if (s.profile == Profile::Kivi) fail("profile=kivi has no channel boost; use kvlab or kitty-sim");
    if (s.group == kWholeAxis) fail("boost needs a page size: set group=G");
  }
}

QuantizerSpec parse_quantizer(const std::string& str) {
  QuantizerSpec s;
  bool params_set = false;
  for (const auto& [key, v] : text::split_pairs(str, "quantizer spec")) {
    if (key == "scheme")
      s.scheme = parse_enum<Scheme>(v, key);
    else if (key == "bits")
      s.bits = text::parse_int(v, key);
    else if (key == "axis")
      s.axis = parse_enum<Axis>(v, key);
    else if (key == "group")
      s.group = parse_group_size(v, key);
    else if (key == "params") {
      s.params = parse_enum<ParamType>(v, key);
      params_set = true;
    } else if (key == "profile")
      s.profile = parse_enum<Profile>(v, key);
    else if (key == "boost") {
      s.boost = text::parse_double(v, key);
      if (!(s.boost >= 0.0)) throw std::invalid_argument("boost=" + v + " is outside [0, 1]");
    } else
      text::choose(key, "quantizer key", {"scheme", "bits", "axis", "group", "params", "profile", "boost"});
  }
  // The upstream profiles keep fp16 scales; default to that unless the user said otherwise.
  if (!params_set && s.profile != Profile::Kvlab) s.params = ParamType::F16;
  validate(s);
  return s;
}

std::string to_string(const QuantizerSpec& s) {
  std::string out = std::string("scheme=") + to_string(s.scheme) + ",bits=" + std::to_string(s.bits) +
                    ",axis=" + to_string(s.axis) +
                    ",group=" + (s.group == kWholeAxis ? std::string("all") : std::to_string(s.group)) +
                    ",params=" + to_string(s.params) + ",profile=" + to_string(s.profile);
  if (s.boosted()) out += ",boost=" + text::format_double(s.boost);
  return out;
}

}  // namespace kvlab
