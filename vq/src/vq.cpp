#include "kvlab/vq.h"

#include <algorithm>
#include <cstdio>
#include <memory>
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
  const int64_t G = proto.groups(), v = spec.vec, K = spec.entries(), R = spec.stages;
  proto.data.assign((int64_t)R * G * K * v, 0.0f);
  std::vector<VQCodebooks> cbs(H, proto);
  // Every (head, group)'s sub-vectors in one buffer, problem-major [H * G][T][v] (the GPU uploads
  // it as it is); new[] leaves it uninitialized, so the parallel gather is its first touch, not a
  // serial zeroing of hundreds of MB. Residuals exist only when a later stage needs them.
  const std::unique_ptr<float[]> sub(new float[H * G * T * v]);
  std::vector<std::vector<float>> resid(R > 1 ? H : 0);
  if (codes) codes->assign(H, std::vector<uint8_t>(T * R * G));
  KMeansParams p = params;
  p.k = K;
  const int nt = resolve_threads(params.threads);
  // Work in (head, token block) units: rows of a head are read and written whole, and each unit
  // touches only its own rows and codes (the same values for any thread count).
  constexpr int64_t kRows = 4096;
  const int64_t blocks = (T + kRows - 1) / kRows;
  for (int s = 0; s < R; ++s) {
    const auto rows = [&](int64_t h) { return s == 0 ? heads[h] : resid[h].data(); };
#pragma omp parallel for schedule(static) num_threads(nt) if (H * blocks > 1)
    for (int64_t hb = 0; hb < H * blocks; ++hb) {
      const int64_t h = hb / blocks, t1 = std::min(T, (hb % blocks + 1) * kRows);
      const float* x = rows(h);
      for (int64_t t = hb % blocks * kRows; t < t1; ++t)
        for (int64_t g = 0; g < G; ++g)
          std::copy(x + t * D + g * v, x + t * D + (g + 1) * v, &sub[((h * G + g) * T + t) * v]);
    }
    std::vector<KMeansProblem> probs(H * G);  // head-major: problem h * G + g
    for (int64_t hg = 0; hg < H * G; ++hg) probs[hg] = {&sub[hg * T * v], T, v, nullptr, nullptr};
    const auto res = trainer(probs, p);
    for (int64_t hg = 0; hg < H * G; ++hg)
      std::copy(res[hg].centroids.begin(), res[hg].centroids.end(), cbs[hg / G].book(s, hg % G));
    const bool next = s + 1 < R;
    if (!codes && !next) break;
    if (next && s == 0)
#pragma omp parallel for schedule(static) num_threads(nt) if (H > 1)
      for (int64_t h = 0; h < H; ++h) resid[h].resize(T * D);
#pragma omp parallel for schedule(static) num_threads(nt) if (H * blocks > 1)
    for (int64_t hb = 0; hb < H * blocks; ++hb) {
      const int64_t h = hb / blocks, t1 = std::min(T, (hb % blocks + 1) * kRows);
      for (int64_t t = hb % blocks * kRows; t < t1; ++t)
        for (int64_t g = 0; g < G; ++g) {
          const int32_t a = res[h * G + g].assign[t];
          if (codes) (*codes)[h][(t * R + s) * G + g] = (uint8_t)a;
          if (!next) continue;
          const float* c = &res[h * G + g].centroids[a * v];
          const float* x = rows(h) + t * D + g * v;
          float* r = resid[h].data() + t * D + g * v;
          for (int64_t j = 0; j < v; ++j) r[j] = x[j] - c[j];
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
  std::vector<float> out(T * cb.head_dim);
  vq_decode_into(cb, codes, T, out.data());
  return out;
}

void vq_decode_into(const VQCodebooks& cb, const uint8_t* codes, int64_t T, float* out) {
  const int64_t D = cb.head_dim, G = cb.groups(), v = cb.spec.vec, R = cb.spec.stages;
  std::fill(out, out + T * D, 0.0f);
  // Stages added in order, the same order vq_encode subtracted them.
  for (int64_t t = 0; t < T; ++t)
    for (int s = 0; s < R; ++s)
      for (int64_t g = 0; g < G; ++g) {
        const float* e = cb.book(s, g) + (int64_t)codes[(t * R + s) * G + g] * v;
        for (int64_t j = 0; j < v; ++j) out[t * D + g * v + j] += e[j];
      }
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
