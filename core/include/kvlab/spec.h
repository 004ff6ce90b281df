// Quantizer specification: a plain struct with defaults, and its `key=value,...` string form.
#pragma once
#include <string>

#include "kvlab/enum_names.h"

namespace kvlab {

enum class Scheme { Asym, Sym };               // asym: zero = group minimum; sym: absmax, no zero
enum class Axis { Channel, Token };            // channel: a group is G tokens of one channel
enum class ParamType { F32, F16 };             // storage of scales and zeros
enum class Profile { Kvlab, Kivi, KittySim };  // which arithmetic recipe (see docs/FORMATS.md)

template <>
struct EnumNames<Scheme> {
  static constexpr EnumName<Scheme> names[] = {{Scheme::Asym, "asym"}, {Scheme::Sym, "sym"}};
};
template <>
struct EnumNames<Axis> {
  static constexpr EnumName<Axis> names[] = {{Axis::Channel, "channel"}, {Axis::Token, "token"}};
};
template <>
struct EnumNames<ParamType> {
  static constexpr EnumName<ParamType> names[] = {{ParamType::F32, "fp32"}, {ParamType::F16, "fp16"}};
};
template <>
struct EnumNames<Profile> {
  static constexpr EnumName<Profile> names[] = {
      {Profile::Kvlab, "kvlab"}, {Profile::Kivi, "kivi"}, {Profile::KittySim, "kitty-sim"}};
};

constexpr int kWholeAxis = -1;  // group size meaning "the whole grouped axis"
// A spec's group value: "all" (kWholeAxis) or a whole number >= 1; "-1" is an error naming the
// key, not a silent "all".
int parse_group_size(const std::string& v, const std::string& key);

struct QuantizerSpec {
  Scheme scheme = Scheme::Asym;       // asym min/max (KIVI, Kitty) or sym absmax (INT8 scheme)
  int bits = 2;                       // code width, 1..8 (sym: 2..8)
  Axis axis = Axis::Channel;          // channel: per channel, groups along tokens; token: the reverse
  int group = kWholeAxis;             // G, elements per group along the grouped axis
  ParamType params = ParamType::F32;  // scale/zero storage (fp16 forced by the kivi/kitty-sim profiles)
  Profile profile = Profile::Kvlab;   // arithmetic recipe
  double boost = -1.0;                // Kitty key pages: share of channels boosted; < 0 = no boost

  bool boosted() const { return boost >= 0.0; }
  bool operator==(const QuantizerSpec&) const = default;
};

// Parse `scheme=asym,bits=2,...`; unknown keys or bad values throw std::invalid_argument
// naming the key and listing the valid choices. The result is validated.
QuantizerSpec parse_quantizer(const std::string& text);
// Canonical string form; parse_quantizer(to_string(s)) == s.
std::string to_string(const QuantizerSpec& s);
// Throws std::invalid_argument if the combination is not valid (bits range, boost rules, ...).
void validate(const QuantizerSpec& s);

inline const char* to_string(Scheme v) { return enum_name(v); }
inline const char* to_string(Axis v) { return enum_name(v); }
inline const char* to_string(ParamType v) { return enum_name(v); }
inline const char* to_string(Profile v) { return enum_name(v); }

// Bits of the codes of boosted channels for base width `bits` (Kitty: bits + 2).
inline int boosted_bits(int bits) { return bits + 2; }
// Number of boosted channels for head dim D: k = int(D * ratio + 1e-6).
int boost_count(int D, double ratio);

}  // namespace kvlab
