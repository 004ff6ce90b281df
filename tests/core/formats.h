// Every quantizer format the suite sweeps: asym bits 1..8 and sym bits 2..8 on both axes with
// fp32 and fp16 params (kvlab), kivi and kitty-sim (asym, fp16 params) on both axes, and Kitty
// boost pages for bits 1..6 (kvlab fp32/fp16, kitty-sim); first, every entry of core's format
// table (kvlab/formats.h) under its own name.
#pragma once
#include <string>
#include <vector>

#include "kvlab/formats.h"
#include "kvlab/spec.h"

namespace kvtest {

struct Format {
  kvlab::Scheme scheme;
  int bits;
  kvlab::Axis axis;
  kvlab::ParamType params;
  kvlab::Profile profile;
  double boost = -1.0;
  std::string label = {};  // the format table's name, if the format comes from there

  kvlab::QuantizerSpec spec(int group) const {
    kvlab::QuantizerSpec s;
    s.scheme = scheme;
    s.bits = bits;
    s.axis = axis;
    s.group = group;
    s.params = params;
    s.profile = profile;
    s.boost = boost;
    return s;
  }
  std::string name() const {
    std::string n = label;
    if (!n.empty()) {
      for (auto& ch : n)
        if (ch == '-') ch = '_';
      return "table_" + n;
    }
    n = boost >= 0 ? "boost" : kvlab::to_string(scheme);
    n += "_b" + std::to_string(bits);
    if (boost < 0) n += std::string("_") + kvlab::to_string(axis);
    n += std::string("_") + kvlab::to_string(params) + "_" + kvlab::to_string(profile);
    for (auto& ch : n)
      if (ch == '-') ch = '_';
    return n;
  }
};

inline std::vector<Format> all_formats() {
  using namespace kvlab;
  std::vector<Format> out;
  for (const FormatEntry& e : kFormats) {
    const QuantizerSpec s = parse_quantizer(e.spec);
    out.push_back({s.scheme, s.bits, s.axis, s.params, s.profile, s.boost, e.name});
  }
  for (Axis a : {Axis::Channel, Axis::Token})
    for (ParamType p : {ParamType::F32, ParamType::F16}) {
      for (int b = 1; b <= 8; ++b) out.push_back({Scheme::Asym, b, a, p, Profile::Kvlab});
      for (int b = 2; b <= 8; ++b) out.push_back({Scheme::Sym, b, a, p, Profile::Kvlab});
    }
  for (Profile pr : {Profile::Kivi, Profile::KittySim})
    for (Axis a : {Axis::Channel, Axis::Token})
      for (int b = 1; b <= 8; ++b) out.push_back({Scheme::Asym, b, a, ParamType::F16, pr});
  for (int b = 1; b <= 6; ++b) {
    out.push_back({Scheme::Asym, b, Axis::Channel, ParamType::F32, Profile::Kvlab, 0.3});
    out.push_back({Scheme::Asym, b, Axis::Channel, ParamType::F16, Profile::Kvlab, 0.3});
    out.push_back({Scheme::Asym, b, Axis::Channel, ParamType::F16, Profile::KittySim, 0.3});
  }
  return out;
}

}  // namespace kvtest
