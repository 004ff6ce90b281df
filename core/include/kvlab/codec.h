// Where a method's quantize -> dequantize round trips run (HeadContext::codec): core's CPU
// functions when none is given, or a device's kernels with the same bytes (eval_gpu's CUDA
// codec behind `--device cuda`). A codec may decline a spec it has no kernel for; core runs it.
#pragma once
#include <vector>

#include "kvlab/float_quant.h"
#include "kvlab/spec.h"
#include "kvlab/tensor.h"

namespace kvlab {

class Codec {
 public:
  virtual ~Codec() = default;
  // out = dequantize(quantize(x, spec)) (quantizer.h), or false (out untouched) if declined.
  virtual bool uniform(const TensorView& x, const QuantizerSpec& spec, std::vector<float>& out) const = 0;
  // out = dequantize_float(quantize_float(x, s[, scales])) (float_quant.h; scales empty: dynamic).
  virtual bool floating(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales,
                        std::vector<float>& out) const = 0;
};

}  // namespace kvlab
