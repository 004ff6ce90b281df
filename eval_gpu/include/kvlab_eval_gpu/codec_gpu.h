// The methods' quantize -> dequantize on a CUDA device (kvlab/codec.h) through gpu/'s kernels,
// which give core's bytes: uniform quantizers of the kvlab profile (int8, kivi, kitty), FP8,
// NVFP4 and MXFP4. Specs without a kernel (other profiles, caller-chosen boost channels) are
// declined, and core runs them on the CPU.
#pragma once
#include <memory>

#include "kvlab/codec.h"

namespace kvlab {

// Runs on `device` from any thread (each call selects it). Throws std::runtime_error naming the
// device when CUDA has no such device.
std::shared_ptr<const Codec> cuda_codec(int device);

}  // namespace kvlab
