// Vector quantization of KV caches with trained codebooks.
//
// VQ<v,b,r> (VQ-LLM's notation): vectors of v contiguous channels, b index bits (2^b entries),
// r residual stages. CQ-<c>c<b>b (coupled quantization) is VQ<c,b,1>. One head's D channels
// are split into D / v groups (product quantization); each group has its own codebook per
// stage; stage s quantizes what stages 0..s-1 left (residual quantization). One set of
// codebooks per (layer, KV head, role). A token's codes: [stage][group], b bits each.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvlab/kmeans.h"

namespace kvlab {

struct VQSpec {
  int vec = 4;     // channels per sub-vector (v, or c in CQ)
  int bits = 8;    // index bits b (1..8): 2^b entries per codebook
  int stages = 1;  // residual stages r
  int64_t entries() const { return (int64_t)1 << bits; }
  bool operator==(const VQSpec&) const = default;
};

// "CQ-4c8b" or "VQ<4,8,1>" (also "VQ4,8,1"); throws std::invalid_argument showing both forms.
VQSpec parse_vq_spec(const std::string& text);
// Canonical: "CQ-<v>c<b>b" when r = 1, else "VQ<v,b,r>".
std::string to_string(const VQSpec& s);
// Throws when vec does not divide head_dim.
void check_vq_fits(const VQSpec& s, int64_t head_dim);

// Bits per element: codes b * r / v; with `tokens`, plus the codebooks (fp16 entries)
// amortized over tokens x head_dim elements.
double vq_code_bits(const VQSpec& s);
double vq_bits_per_element(const VQSpec& s, int64_t tokens, int64_t head_dim);

// The codebooks of one (layer, KV head, role): [stage][group][entry][vec] fp32.
struct VQCodebooks {
  VQSpec spec;
  int64_t head_dim = 0;
  std::vector<float> data;
  int64_t groups() const { return head_dim / spec.vec; }
  const float* book(int stage, int64_t group) const {
    return &data[((int64_t)stage * groups() + group) * spec.entries() * spec.vec];
  }
  float* book(int stage, int64_t group) {
    return &data[((int64_t)stage * groups() + group) * spec.entries() * spec.vec];
  }
};

// Trains one stage's batch of problems (kmeans_batch, or the GPU's: `kvlab vq train --device cuda`);
// vq_train reads each result's centroids and assign.
using KMeansBatchFn =
    std::function<std::vector<KMeansResult>(const std::vector<KMeansProblem>&, const KMeansParams&)>;

// Train on x (T x D fp32): stage by stage, all groups of a stage as one k-means batch. Entries
// beyond T (2^b > T) are impossible: throws naming T and 2^b.
VQCodebooks vq_train(const float* x, int64_t T, int64_t D, const VQSpec& spec, const KMeansParams& params,
                     const KMeansBatchFn& trainer = kmeans_batch);
// Several heads (each T x D) at once: one trainer call per stage holds every head's groups (a
// whole layer in one GPU launch sequence with `--device cuda`). Problems are independent, so
// head h's codebooks equal vq_train(heads[h], ...) alone. codes (optional): each head's
// vq_encode(codebooks, heads[h], T), read from the training's final assignments (the nearest
// final entry of every point in the same arithmetic), so no second pass over the tokens.
std::vector<VQCodebooks> vq_train_heads(const std::vector<const float*>& heads, int64_t T, int64_t D,
                                        const VQSpec& spec, const KMeansParams& params,
                                        const KMeansBatchFn& trainer = kmeans_batch,
                                        std::vector<std::vector<uint8_t>>* codes = nullptr);

// Codes of each token: [T][stages][groups] (uint8: b <= 8), nearest entry stage by stage.
std::vector<uint8_t> vq_encode(const VQCodebooks& cb, const float* x, int64_t T, int threads = 1);
// x_hat (T x D): the sum over stages of each group's entries.
std::vector<float> vq_decode(const VQCodebooks& cb, const uint8_t* codes, int64_t T);
// The same into out (T x D values; no allocation).
void vq_decode_into(const VQCodebooks& cb, const uint8_t* codes, int64_t T, float* out);

// Codes packed at b bits per code, one row per token (core's LSB-first bit stream, pack.h).
std::vector<uint8_t> vq_pack(const VQCodebooks& cb, const std::vector<uint8_t>& codes, int64_t T);
std::vector<uint8_t> vq_unpack(const VQCodebooks& cb, const std::vector<uint8_t>& packed, int64_t T);

}  // namespace kvlab
