// The attention reference and the score metric against libtorch's scaled dot-product attention
// (eval/CMakeLists.txt links libtorch into this test when it is installed; else it skips).
#include <gtest/gtest.h>

#include "eval_oracle.h"
#include "kvlab/attention.h"
#include "kvlab/selection.h"

#ifdef KVLAB_TEST_TORCH
#include <ATen/ATen.h>

namespace {

at::Tensor as_torch(const kvlab::Tensor& t) {
  return at::from_blob(const_cast<float*>(t.data.data()), t.shape, at::kFloat).to(at::kDouble);
}

// torch 1.13 (Debian) has the private at::_scaled_dot_product_attention; with is_causal it masks
// keys after each query and returns (output, weights).
std::tuple<at::Tensor, at::Tensor> sdpa(const kvlab::Tensor& q, const kvlab::Tensor& k,
                                        const kvlab::Tensor& v) {
  return at::_scaled_dot_product_attention(as_torch(q), as_torch(k), as_torch(v), {}, 0.0, true, true);
}

TEST(TorchSdpa, OutputsAndScoreMse) {
  const int64_t H = 4, T = 200, D = 32;
  const kvlab::Tensor q = evtest::normal({H, T, D}, 1, 0.5f), k = evtest::keys({H, T, D}, 2),
                      v = evtest::normal({H, T, D}, 3);
  const auto pos = kvlab::select_queries({}, T);
  const kvlab::Tensor o = kvlab::attention(q.view(), k.view(), v.view(), pos);
  const auto [ref_o, ref_p] = sdpa(q, k, v);
  const at::Tensor mine = as_torch(o);
  EXPECT_LT((mine - ref_o).abs().max().item<double>() / ref_o.abs().max().item<double>(), 2e-6);
  // Score MSE of a perturbed cache: torch's weights against each other.
  kvlab::Reconstruction r{k, v};
  for (size_t i = 0; i < r.k.data.size(); i += 3) r.k.data[i] *= 1.1f;
  const auto [hat_o, hat_p] = sdpa(q, r.k, r.v);
  const auto got = kvlab::attention_errors(q.view(), k.view(), v.view(), {r}, pos);
  for (int64_t h = 0; h < H; ++h) {
    // Masked entries are 0 in both: the sum over the full matrix is the sum over valid entries.
    const double want = (ref_p[h] - hat_p[h]).pow(2).sum().item<double>() / (double)(T * (T + 1) / 2);
    EXPECT_NEAR(got[0][h].score_mse(), want, 1e-6 * want) << "head " << h;
  }
}

}  // namespace
#else
TEST(TorchSdpa, OutputsAndScoreMse) { GTEST_SKIP() << "built without libtorch"; }
#endif
