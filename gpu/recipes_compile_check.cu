// Compiles every numerics recipe for the device, so a host-only construct in core's
// shared headers breaks the build here (and in CI) rather than in the GPU kernels later.
#include "kvlab/float_format.h"
#include "kvlab/pack.h"
#include "kvlab/recipe.h"

namespace kvlab {

template <class R>
__global__ void asym_roundtrip(const float* x, float* y, int n, float mn, float mx, int bits) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int levels = asym_levels(bits);
  const GroupParams p = R::asym_params(mn, mx, levels, true);
  y[i] = R::asym_dequant(R::asym_code(R::load(x[i]), p, levels), p);
}

__global__ void sym_roundtrip(const float* x, float* y, int n, float absmax, int bits) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const GroupParams p = KvlabRecipe::sym_params(absmax, sym_qmax(bits), false);
  y[i] = KvlabRecipe::sym_dequant(KvlabRecipe::sym_code(x[i], p, sym_qmax(bits), bits), p, bits);
}

__global__ void pack_codes(const uint8_t* codes, uint8_t* row, int n, int bits) {
  for (int i = 0; i < n; ++i) put_code(row, i, bits, codes[i]);
  (void)get_code(row, 0, bits);
}

__global__ void float_roundtrip(const float* x, float* y, int n, float s) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = fp8_dequant(fp8_code(x[i], s, false), s, false) +
         fp4_dequant(fp4_code(x[i], mxfp4_block_scale(mxfp4_block_code(s))),
                     nvfp4_block_scale(nvfp4_block_code(s, 1.0f), 1.0f));
}

template __global__ void asym_roundtrip<KvlabRecipe>(const float*, float*, int, float, float, int);
template __global__ void asym_roundtrip<KiviRecipe>(const float*, float*, int, float, float, int);
template __global__ void asym_roundtrip<KittySimRecipe>(const float*, float*, int, float, float, int);

}  // namespace kvlab
