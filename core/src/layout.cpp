// make_layout: the packed geometry of a shape under a spec, and the input checks shared by the
// CPU reference and the GPU kernels (one set of messages).
#include <climits>
#include <stdexcept>
#include <string>

#include "kvlab/pack.h"
#include "kvlab/quantizer.h"

namespace kvlab {
namespace {

constexpr int kMaxBoosted = 254;  // uint8 index: 0..253 name slots, 0xFF = not boosted

PackedLayout make_layout_checked(const std::vector<int64_t>& shape, const QuantizerSpec& spec,
                                 const std::string& who) {
  validate(spec);
  if (shape.size() < 2)
    throw std::invalid_argument(who + ": input of shape " + shape_string(shape) +
                                " needs at least 2 dims (..., T, D)");
  if (numel(shape) == 0)
    throw std::invalid_argument(who + ": input of shape " + shape_string(shape) + " is empty");
  PackedLayout lo;
  lo.T = shape[shape.size() - 2];
  lo.D = shape.back();
  lo.N = numel(shape) / (lo.T * lo.D);
  lo.channel = spec.axis == Axis::Channel;
  const int64_t L = lo.row_len();
  if (spec.group > L)
    throw std::invalid_argument(who + ": group=" + std::to_string(spec.group) + " is larger than the " +
                                (lo.channel ? "token" : "channel") + " axis it groups (" + std::to_string(L) +
                                ") of input shape " + shape_string(shape));
  if (L > INT_MAX)
    throw std::invalid_argument(who + ": the grouped axis of input shape " + shape_string(shape) +
                                " is longer than 2^31 - 1");
  lo.G = spec.group == kWholeAxis ? (int)L : spec.group;
  lo.bits = spec.bits;
  lo.sym = spec.scheme == Scheme::Sym;
  lo.half_params = spec.params == ParamType::F16;
  lo.boost = spec.boosted();
  if (lo.boost) {
    lo.k = boost_count((int)lo.D, spec.boost);
    if (lo.k > kMaxBoosted)
      throw std::invalid_argument(who + ": boost=" + std::to_string(spec.boost) +
                                  " of D=" + std::to_string(lo.D) +
                                  " channels boosts more than the 254 slots a uint8 index can name");
  }
  lo.groups = (L + lo.G - 1) / lo.G;
  lo.row_bytes = packed_bytes(L, lo.bits);
  return lo;
}

}  // namespace

PackedLayout make_layout(const std::vector<int64_t>& shape, const QuantizerSpec& spec) {
  return make_layout_checked(shape, spec, "quantize");
}

PackedLayout layout_of(const QuantizedTensor& q) { return make_layout(q.shape, q.spec); }

PartShapes part_shapes(const QuantizedTensor& q) {
  const PackedLayout lo = layout_of(q);
  auto lead = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> s(q.shape.begin(), q.shape.end() - 2);
    s.insert(s.end(), tail);
    return s;
  };
  if (lo.boost)
    return {{lo.codes_bytes()}, {lo.high_bytes()}, lead({lo.groups, lo.D}), lead({lo.groups, lo.D})};
  return {lead({lo.rows(), lo.row_bytes}), {}, {}, lead({lo.rows(), lo.groups})};
}

PackedLayout check_input(const TensorView& x, const QuantizerSpec& spec, const std::string& who) {
  const PackedLayout lo = make_layout_checked(x.shape, spec, who);
  check_finite(x, who + ": input");
  return lo;
}

}  // namespace kvlab
