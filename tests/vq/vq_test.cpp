// VQ specs, training, encode/decode, packing, and frequency reordering (lossless).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kvlab/vq.h"
#include "kvlab/vq_reorder.h"

namespace {

using namespace kvlab;

std::vector<float> keys(int64_t T, int64_t D, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < D; ++j) x[t * D + j] = g(rng) * (1.0f + (j % 5)) + (j == 3 ? 8.0f : 0.0f);
  return x;
}

double sq_err(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double)(a[i] - b[i]) * (a[i] - b[i]);
  return s;
}

TEST(VQSpec, ParsesBothNotationsAndPrintsCanonically) {
  EXPECT_EQ(parse_vq_spec("CQ-4c8b"), (VQSpec{4, 8, 1}));
  EXPECT_EQ(parse_vq_spec("VQ<4,8,1>"), (VQSpec{4, 8, 1}));
  EXPECT_EQ(parse_vq_spec("VQ<8,6,2>"), (VQSpec{8, 6, 2}));
  EXPECT_EQ(to_string(parse_vq_spec("VQ<4,8,1>")), "CQ-4c8b");
  EXPECT_EQ(to_string(parse_vq_spec("VQ<8,6,2>")), "VQ<8,6,2>");
  EXPECT_DOUBLE_EQ(vq_code_bits(parse_vq_spec("CQ-4c8b")), 2.0);
  EXPECT_DOUBLE_EQ(vq_code_bits(parse_vq_spec("VQ<8,6,2>")), 1.5);
  // 256 entries x 4 channels x 16 bits x 32 groups = 524288 bits over 4096 x 128 elements: +1.
  EXPECT_DOUBLE_EQ(vq_bits_per_element(parse_vq_spec("CQ-4c8b"), 4096, 128), 3.0);
}

TEST(VQSpec, BadSpecsAreNamed) {
  for (const char* s : {"CQ-4c", "VQ<4,8>", "cq-4c8b", "CQ-0c8b", "CQ-4c9b", "VQ<4,8,0>"})
    EXPECT_THROW(parse_vq_spec(s), std::invalid_argument) << s;
  try {
    check_vq_fits(parse_vq_spec("CQ-3c8b"), 128);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide head_dim 128"), std::string::npos) << e.what();
  }
  const auto x = keys(100, 8, 1);
  EXPECT_THROW(vq_train(x.data(), 100, 8, parse_vq_spec("CQ-4c8b"), {}), std::invalid_argument);  // 256 > T
}

TEST(VQ, ErrorFallsWithBitsAndStagesAndRisesWithVectorSize) {
  const int64_t T = 1024, D = 16;
  const auto x = keys(T, D, 2);
  KMeansParams p;
  p.iters = 10;
  p.init = KMeansInit::KMeansPP;
  auto err = [&](const char* s) {
    const VQCodebooks cb = vq_train(x.data(), T, D, parse_vq_spec(s), p);
    return sq_err(x, vq_decode(cb, vq_encode(cb, x.data(), T).data(), T));
  };
  EXPECT_LT(err("CQ-4c6b"), err("CQ-4c4b"));
  EXPECT_LT(err("VQ<4,4,2>"), err("CQ-4c4b"));
  EXPECT_LT(err("CQ-2c6b"), err("CQ-8c6b"));
}

// vq train's whole-layer batch (vq_train_heads, one trainer call per stage for every head's
// groups; the GPU trainer takes the same batch) gives each head the codebooks it gets alone. T =
// 4396 crosses vq_train_heads's 4096-token work units; the problems lie back to back (the GPU
// trainer uploads them without a copy).
TEST(VQ, HeadsTrainedTogetherEqualHeadsTrainedAlone) {
  for (const int64_t T : {512, 4396}) {
    const int64_t D = 16, H = 3;
    std::vector<std::vector<float>> xs;
    for (int64_t h = 0; h < H; ++h) xs.push_back(keys(T, D, 10 + h));
    KMeansParams p;
    p.iters = 6;
    p.init = KMeansInit::KMeansPP;
    const VQSpec spec = parse_vq_spec("VQ<4,5,2>");
    std::vector<size_t> batch_sizes;
    const KMeansBatchFn counting = [&](const std::vector<KMeansProblem>& probs, const KMeansParams& q) {
      batch_sizes.push_back(probs.size());
      for (size_t i = 0; i < probs.size(); ++i) EXPECT_EQ(probs[i].x, probs[0].x + i * T * 4) << i;
      return kmeans_batch(probs, q);
    };
    std::vector<std::vector<uint8_t>> codes;
    const auto together =
        vq_train_heads({xs[0].data(), xs[1].data(), xs[2].data()}, T, D, spec, p, counting, &codes);
    EXPECT_EQ(batch_sizes, (std::vector<size_t>{H * 4, H * 4}));  // 2 stages x (3 heads x 4 groups)
    ASSERT_EQ(together.size(), (size_t)H);
    for (int64_t h = 0; h < H; ++h) {
      const VQCodebooks alone = vq_train(xs[h].data(), T, D, spec, p);
      EXPECT_EQ(together[h].data, alone.data) << "T " << T << ", head " << h;  // every bit
      EXPECT_EQ(together[h].spec, spec);
      EXPECT_EQ(codes[h], vq_encode(alone, xs[h].data(), T)) << "T " << T << ", head " << h;
    }
    EXPECT_NE(together[0].data, together[1].data);  // the heads' data differ, so must their books
  }
}

TEST(VQ, EncodingPicksTheNearestEntryPerGroup) {
  // Two groups of 2 channels, 2 entries each (1 bit): hand-checkable codes.
  VQCodebooks cb;
  cb.spec = {2, 1, 1};
  cb.head_dim = 4;
  cb.data = {0, 0, 10, 10, /* group 0: (0,0), (10,10) */ -1, -1, 5, 5 /* group 1 */};
  const std::vector<float> x = {9, 9, 4, 6, 1, 0, -2, -1};
  const auto codes = vq_encode(cb, x.data(), 2);
  EXPECT_EQ(codes, (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(vq_decode(cb, codes.data(), 2), (std::vector<float>{10, 10, 5, 5, 0, 0, -1, -1}));
}

TEST(VQ, PackedCodesRoundTripAtBBits) {
  const int64_t T = 300, D = 12;
  const auto x = keys(T, D, 3);
  for (const char* s : {"CQ-4c8b", "CQ-3c5b", "VQ<4,3,2>"}) {
    const VQCodebooks cb = vq_train(x.data(), T, D, parse_vq_spec(s), {});
    const auto codes = vq_encode(cb, x.data(), T);
    const auto packed = vq_pack(cb, codes, T);
    const int64_t per = cb.spec.stages * cb.groups();
    EXPECT_EQ((int64_t)packed.size(), T * ((per * cb.spec.bits + 7) / 8)) << s;
    EXPECT_EQ(vq_unpack(cb, packed, T), codes) << s;
  }
}

TEST(VQReorder, IsLosslessAndSortsByFrequency) {
  const int64_t T = 2048, D = 16;
  const auto x = keys(T, D, 4);
  for (const char* s : {"CQ-4c8b", "VQ<4,6,2>", "CQ-2c4b"}) {
    VQCodebooks cb = vq_train(x.data(), T, D, parse_vq_spec(s), {});
    std::vector<uint8_t> codes = vq_encode(cb, x.data(), T);
    const std::vector<float> before = vq_decode(cb, codes.data(), T);
    const VQCodebooks old = cb;
    std::vector<int64_t> u = vq_usage(cb, codes.data(), T);
    const auto old_of_new = vq_reorder(cb, u, codes.data(), T);
    // Decoding is bit for bit the same: same entries, same order of summation.
    EXPECT_EQ(vq_decode(cb, codes.data(), T), before) << s;
    // The permutation moved the entries, not their values.
    const int64_t K = cb.spec.entries(), v = cb.spec.vec, books = cb.spec.stages * cb.groups();
    bool moved = false;
    for (int64_t b = 0; b < books; ++b)
      for (int64_t e = 0; e < K; ++e) {
        moved |= old_of_new[b * K + e] != e;
        for (int64_t j = 0; j < v; ++j)
          ASSERT_EQ(cb.data[(b * K + e) * v + j], old.data[(b * K + old_of_new[b * K + e]) * v + j]);
        if (e > 0) {
          EXPECT_GE(u[b * K + e - 1], u[b * K + e]);
        }
      }
    EXPECT_TRUE(moved) << s;
    // Counting again on the remapped codes gives the sorted counts.
    EXPECT_EQ(vq_usage(cb, codes.data(), T), u) << s;
    // Re-encoding with the reordered books yields the remapped codes (ties aside, none here).
    EXPECT_EQ(vq_encode(cb, x.data(), T), codes) << s;
  }
}

TEST(VQReorder, CacheLevelsByHand) {
  // 8 entries of 8 bytes; counts sorted: 60 10 10 10 5 5 0 0 (total 100).
  const std::vector<int64_t> c = {60, 10, 10, 10, 5, 5, 0, 0};
  const CacheLevels l = cache_levels(c.data(), 8, 8, 16, 24);  // 2 entries in registers, 3 in shared
  EXPECT_EQ(l.n_reg, 2);
  EXPECT_EQ(l.n_shared, 3);
  EXPECT_DOUBLE_EQ(l.share_reg, 0.70);
  EXPECT_DOUBLE_EQ(l.share_shared, 0.25);
  EXPECT_NEAR(l.share_global, 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(l.coverage.back(), 1.0);
  // mean 12.5, sigma ~18.1: 60 is not above mean + 3 sigma (66.9); nothing is hot.
  EXPECT_EQ(l.hot, 0);
  std::vector<int64_t> spike(64, 1);
  spike[0] = 1000;
  EXPECT_EQ(cache_levels(spike.data(), 64, 8, 0, 0).hot, 1);
  EXPECT_THROW(cache_levels(c.data(), 8, 0, 16, 24), std::invalid_argument);
}

}  // namespace
