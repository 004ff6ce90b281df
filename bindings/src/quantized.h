// The result of kvlab.quantize (CPU or GPU): the tensor and the shapes its parts are shown in.
#pragma once
#include "kvlab/quantizer.h"

namespace kvlab::bind {

struct Quantized {
  QuantizedTensor q;
  PartShapes shapes;
};

}  // namespace kvlab::bind
