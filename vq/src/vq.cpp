#include "kvlab/vq.h"

#include <cstdio>
#include <regex>
#include <stdexcept>
#include <utility>

#include "kvlab/codebook_file.h"
#include "kvlab/kv_text.h"
#include "kvlab/pack.h"
#include "kvlab/threads.h"

namespace kvlab {

VQSpec parse_vq_spec(const std::string& text) {
  static const std::regex cq(R"(CQ-(\d+)c(\d+)b)"), vq(R"(VQ<?(\d+),(\d+),(\d+)>?)");
  std::smatch m;
  VQSpec s;
  if (std::regex_match(text, m, cq))
    s = {text::parse_int(m[1], "vq spec vector size"), text::parse_int(m[2], "vq spec index bits"), 1};
  else if (std::regex_match(text, m, vq))
    s = {text::parse_int(m[1], "vq spec vector size"), text::parse_int(m[2], "vq spec index bits"),
         text::parse_int(m[3], "vq spec stages")};
  else
    throw std::invalid_argument("vq spec '" + text +
                                "': expected CQ-<c>c<b>b (e.g. CQ-4c8b) or VQ<v,b,r> (e.g. VQ<4,8,1>)");
  if (s.vec < 1 || s.vec > 4096)
    throw std::invalid_argument("vq spec '" + text + "': vector size must be 1..4096");
  if (s.bits < 1 || s.bits > 8)
    throw std::invalid_argument("vq spec '" + text + "': index bits must be 1..8");
  if (s.stages < 1 || s.stages > 8)
    throw std::invalid_argument("vq spec '" + text + "': residual stages must be 1..8");
  return s;
}

std::string to_string(const VQSpec& s) { return vq_spec_text(s.vec, s.bits, s.stages); }

void check_vq_fits(const VQSpec& s, int64_t head_dim) {
  if (head_dim % s.vec != 0)
    throw std::invalid_argument("vq spec " + to_string(s) + ": vector size " + std::to_string(s.vec) +
                                " does not divide head_dim " + std::to_string(head_dim));
}

double vq_code_bits(const VQSpec& s) { return (double)s.bits * s.stages / s.vec; }

double vq_bits_per_element(const VQSpec& s, int64_t tokens, int64_t head_dim) {
  const double book_bits = 16.0 * s.stages * (head_dim / s.vec) * s.entries() * s.vec;
  return vq_code_bits(s) + book_bits / ((double)tokens * head_dim);
}

VQCodebooks vq_train(const float* x, int64_t T, int64_t D, const VQSpec& spec, const KMeansParams& params,
                     const KMeansBatchFn& trainer) {
  return std::move(vq_train_heads({x}, T, D, spec, params, trainer)[0]);
}

std::vector<VQCodebooks> vq_train_heads(const std::vector<const float*>& heads, int64_t T, int64_t D,
                                        const VQSpec& spec, const KMeansParams& params,
                                        const KMeansBatchFn& trainer,
                                        std::vector<std::vector<uint8_t>>* codes) {
  check_vq_fits(spec, D);
  if (spec.entries() > T)
    throw std::invalid_argument("vq_train: " + std::to_string(spec.entries()) + " entries (2^" +
                                std::to_string(spec.bits) + ") but only " + std::to_string(T) +
                                " tokens to train on");
  const int64_t H = heads.size();
  VQCodebooks proto;
  proto.spec = spec;
  proto.head_dim = D;
  const int64_t G = proto.groups(), v = spec.vec, K = spec.entries();
  proto.data.assign((int64_t)spec.stages * G * K * v, 0.0f);
  std::vector<VQCodebooks> cbs(H, proto);
  std::vector<std::vector<float>> resid(H), sub(H * G, std::vector<float>(T * v));
  for (int64_t h = 0; h < H; ++h) resid[h].assign(heads[h], heads[h] + T * D);
  if (codes) codes->assign(H, std::vector<uint8_t>(T * spec.stages * G));
  KMeansParams p = params;
  p.k = K;
  const int nt = resolve_threads(params.threads);
  for (int s = 0; s < spec.stages; ++s) {
    std::vector<KMeansProblem> probs(H * G);  // head-major: problem h * G + g
    // (each (head, group) touches only its own columns: the same values for any thread count)
#pragma omp parallel for schedule(static) num_threads(nt) if (H * G > 1)
    for (int64_t hg = 0; hg < H * G; ++hg) {
      const int64_t h = hg / G, g = hg % G;
      float* q = sub[hg].data();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < v; ++j) q[t * v + j] = resid[h][t * D + g * v + j];
      probs[hg] = {q, T, v, nullptr, nullptr};
    }
    const auto res = trainer(probs, p);
#pragma omp parallel for schedule(static) num_threads(nt) if (H * G > 1)
    for (int64_t hg = 0; hg < H * G; ++hg) {
      const int64_t h = hg / G, g = hg % G;
      const KMeansResult& r = res[hg];
      std::copy(r.centroids.begin(), r.centroids.end(), cbs[h].book(s, g));
      for (int64_t t = 0; t < T; ++t) {
        if (codes) (*codes)[h][(t * spec.stages + s) * G + g] = (uint8_t)r.assign[t];
        for (int64_t j = 0; j < v; ++j) resid[h][t * D + g * v + j] -= r.centroids[r.assign[t] * v + j];
      }
    }
  }
  return cbs;
}

std::vector<uint8_t> vq_encode(const VQCodebooks& cb, const float* x, int64_t T, int threads) {
  const int64_t D = cb.head_dim, G = cb.groups(), v = cb.spec.vec, R = cb.spec.stages;
  std::vector<uint8_t> codes(T * R * G);
  std::vector<float> resid(x, x + T * D), sub(T * v);
  std::vector<int32_t> a(T);
  for (int s = 0; s < R; ++s)
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < v; ++j) sub[t * v + j] = resid[t * D + g * v + j];
      const float* book = cb.book(s, g);
      kmeans_assign(sub.data(), T, v, book, cb.spec.entries(), a.data(), nullptr, threads);
      for (int64_t t = 0; t < T; ++t) {
        codes[(t * R + s) * G + g] = (uint8_t)a[t];
        for (int64_t j = 0; j < v; ++j) resid[t * D + g * v + j] -= book[a[t] * v + j];
      }
    }
  return codes;
}

std::vector<float> vq_decode(const VQCodebooks& cb, const uint8_t* codes, int64_t T) {
  const int64_t D = cb.head_dim, G = cb.groups(), v = cb.spec.vec, R = cb.spec.stages;
  std::vector<float> out(T * D, 0.0f);
  // Stages added in order, the same order vq_encode subtracted them.
  for (int64_t t = 0; t < T; ++t)
    for (int s = 0; s < R; ++s)
      for (int64_t g = 0; g < G; ++g) {
        const float* e = cb.book(s, g) + (int64_t)codes[(t * R + s) * G + g] * v;
        for (int64_t j = 0; j < v; ++j) out[t * D + g * v + j] += e[j];
      }
  return out;
}

std::vector<uint8_t> vq_pack(const VQCodebooks& cb, const std::vector<uint8_t>& codes, int64_t T) {
  const int64_t per = (int64_t)cb.spec.stages * cb.groups(), row = packed_bytes(per, cb.spec.bits);
  if ((int64_t)codes.size() != T * per)
    throw std::invalid_argument("vq_pack: codes do not match T x stages x groups");
  std::vector<uint8_t> out(T * row, 0);
  for (int64_t t = 0; t < T; ++t) pack_row(&codes[t * per], per, cb.spec.bits, &out[t * row]);
  return out;
}

std::vector<uint8_t> vq_unpack(const VQCodebooks& cb, const std::vector<uint8_t>& packed, int64_t T) {
  const int64_t per = (int64_t)cb.spec.stages * cb.groups(), row = packed_bytes(per, cb.spec.bits);
  if ((int64_t)packed.size() != T * row)
    throw std::invalid_argument("vq_unpack: packed bytes do not match T rows");
  std::vector<uint8_t> codes(T * per);
  for (int64_t t = 0; t < T; ++t) unpack_row(&packed[t * row], per, cb.spec.bits, &codes[t * per]);
  return codes;
}

}  // namespace kvlab
