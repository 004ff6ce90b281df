// Codebook (VQ / CQ) decode caches: from an encoder's codes (make_decode_cache of a `vq` method)
// or random (the benchmark), in the layout the codebook kernel reads (docs/FORMATS.md 9.5).
#include <cstring>
#include <random>
#include <regex>
#include <stdexcept>

#include "attn_cache.h"
#include "kvlab/pack.h"
#include "util.h"

namespace kvlab::gpu {

namespace {

VqEncoder& encoder() {
  static VqEncoder e;
  return e;
}

// One role's row on the device: vq_pack's row (LSB-first codes [stage][group]) padded with zero
// bytes to a multiple of 4, so the kernel stages rows by 4-byte copies.
int vq_row_bytes(const attn::AttnVq& v, int D) {
  return (int)((packed_bytes((int64_t)v.stages * (D / v.vec), v.bits) + 3) / 4 * 4);
}

void check_vq_shape(const attn::AttnVq& v, int D, const std::string& who) {
  if (D != 128)
    throw std::invalid_argument(who + ": head_dim " + std::to_string(D) + " (the codebook kernel: 128)");
  if (v.vec < 1 || D % v.vec != 0 || v.bits < 1 || v.bits > 8 || v.stages < 1 || v.stages > 8)
    throw std::invalid_argument(who + ": vec " + std::to_string(v.vec) + ", bits " + std::to_string(v.bits) +
                                ", stages " + std::to_string(v.stages) +
                                " (want vec dividing 128, bits 1..8, stages 1..8)");
}

template <class T>
DeviceBuffer upload_vec(const std::vector<T>& x) {
  DeviceBuffer d((int64_t)(x.size() * sizeof(T)));
  cuda_check(cudaMemcpy(d.p, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

// Sets the kind, the layout fields and the sequences' code pointers of a codebook cache whose
// books and codes are uploaded (codes[role]: (B, KV heads, L_b, row) back to back).
void finish_vq(DecodeCache::Impl& c, const DeviceBuffer& kcodes, const DeviceBuffer& vcodes) {
  c.kind = attn::AttnKind{};
  c.kind.vq = true;
  c.vq.k_books = static_cast<const float*>(c.vq_books[0].p);
  c.vq.v_books = static_cast<const float*>(c.vq_books[1].p);
  int64_t off = 0, dbg = 0;
  for (int L : c.lens) {
    attn::AttnSeq s;
    s.L = L;
    s.S = 0;
    s.k.f.T = s.v.f.T = L;  // every token coded
    s.k.codes = static_cast<const uint8_t*>(kcodes.p) + off;
    s.v.codes = static_cast<const uint8_t*>(vcodes.p) + off;
    s.dbg = dbg;
    off += (int64_t)c.Hkv * L * c.vq.row_bytes;
    dbg += (int64_t)c.Hkv * L * c.D;
    c.seqs.push_back(s);
  }
  c.finish();
}

}  // namespace

void set_vq_encoder(VqEncoder e) { encoder() = std::move(e); }

bool parse_vq_text(const std::string& text, int& vec, int& bits, int& stages) {
  static const std::regex cq(R"(CQ-(\d{1,4})c(\d{1,2})b)"), vq(R"(VQ<?(\d{1,4}),(\d{1,2}),(\d{1,2})>?)");
  std::smatch m;
  if (std::regex_match(text, m, cq)) {
    vec = std::stoi(m[1]);
    bits = std::stoi(m[2]);
    stages = 1;
    return true;
  }
  if (std::regex_match(text, m, vq)) {
    vec = std::stoi(m[1]);
    bits = std::stoi(m[2]);
    stages = std::stoi(m[3]);
    return true;
  }
  return false;
}

Reconstruction decode_method_apply(const Method& m, const TensorView& k, const TensorView& v, int64_t layer) {
  if (m.family() != "vq") return m.apply(k, v);
  const int64_t H = k.shape.at(0), L = k.shape.at(1), D = k.shape.at(2);
  Reconstruction r;
  r.k.shape = r.v.shape = k.shape;
  r.k.data.resize(H * L * D);
  r.v.data.resize(H * L * D);
  const size_t es = k.dtype == DType::F32 ? 4 : 2;
  for (int64_t h = 0; h < H; ++h) {
    const TensorView kh{static_cast<const uint8_t*>(k.data) + h * L * D * es, k.dtype, {1, L, D}};
    const TensorView vh{static_cast<const uint8_t*>(v.data) + h * L * D * es, v.dtype, {1, L, D}};
    HeadContext at;
    at.layer = layer;
    at.kv_head = h;
    const Reconstruction x = m.apply(kh, vh, at);
    std::copy(x.k.data.begin(), x.k.data.end(), r.k.data.begin() + h * L * D);
    std::copy(x.v.data.begin(), x.v.data.end(), r.v.data.begin() + h * L * D);
  }
  return r;
}

std::unique_ptr<DecodeCache> make_vq_decode_cache(const Method& m, const std::vector<TensorView>& keys,
                                                  const std::vector<TensorView>& values) {
  if (!encoder())
    throw std::invalid_argument("decode cache: method '" + m.spec() +
                                "' needs the codebook encoder, which only the full build's `kvlab gpu` sets");
  auto impl = std::make_unique<DecodeCache::Impl>();
  DecodeCache::Impl& c = *impl;
  c.B = (int)keys.size();
  c.Hkv = (int)keys[0].shape.at(0);
  c.D = (int)keys[0].shape.back();
  std::vector<uint8_t> codes[2];
  std::vector<float> books[2];
  for (int b = 0; b < c.B; ++b) {
    const TensorView &k = keys[b], &v = values[b];
    const std::string who = "decode cache: sequence " + std::to_string(b);
    if (k.shape.size() != 3 || k.shape != v.shape || k.shape[0] != c.Hkv || k.shape[2] != c.D ||
        k.shape[1] < 1)
      throw std::invalid_argument(who + ": keys " + shape_string(k.shape) + " and values " +
                                  shape_string(v.shape) + " (want both (" + std::to_string(c.Hkv) +
                                  ", L >= 1, " + std::to_string(c.D) + "))");
    const int64_t L = k.shape[1], es = k.dtype == DType::F32 ? 4 : 2;
    for (int h = 0; h < c.Hkv; ++h) {
      const TensorView kh{static_cast<const uint8_t*>(k.data) + h * L * c.D * es, k.dtype, {1, L, c.D}};
      const TensorView vh{static_cast<const uint8_t*>(v.data) + h * L * c.D * es, v.dtype, {1, L, c.D}};
      const VqHead x = encoder()(m, kh, vh, h);
      if (b == 0 && h == 0) {
        c.vq.vec = x.vec;
        c.vq.bits = x.bits;
        c.vq.stages = x.stages;
        check_vq_shape(c.vq, c.D, who);
        c.vq.row_bytes = vq_row_bytes(c.vq, c.D);
        c.vq_layer = x.layer;
      }
      const int64_t per = (int64_t)c.vq.stages * (c.D / c.vq.vec),
                    nbook = (int64_t)c.vq.stages * c.D * ((int64_t)1 << c.vq.bits);
      if (x.vec != c.vq.vec || x.bits != c.vq.bits || x.stages != c.vq.stages || x.layer != c.vq_layer ||
          (int64_t)x.k_books.size() != nbook || (int64_t)x.v_books.size() != nbook ||
          (int64_t)x.k_codes.size() != L * per || (int64_t)x.v_codes.size() != L * per)
        throw std::invalid_argument(
            who + ", KV head " + std::to_string(h) +
            ": the encoder returned another spec, layer or sizes than for the first head");
      const std::vector<uint8_t>* xc[2] = {&x.k_codes, &x.v_codes};
      const std::vector<float>* xb[2] = {&x.k_books, &x.v_books};
      for (int role = 0; role < 2; ++role) {
        if (b == 0)
          books[role].insert(books[role].end(), xb[role]->begin(), xb[role]->end());
        else if (!std::equal(xb[role]->begin(), xb[role]->end(), books[role].begin() + h * nbook))
          throw std::invalid_argument(who + ", KV head " + std::to_string(h) +
                                      ": other codebooks than sequence 0's (one set per cache)");
        const size_t at = codes[role].size();
        codes[role].resize(at + (size_t)L * c.vq.row_bytes, 0);
        for (int64_t t = 0; t < L; ++t)
          pack_row(xc[role]->data() + t * per, per, c.vq.bits, &codes[role][at + t * c.vq.row_bytes]);
      }
    }
    c.lens.push_back((int)L);
    // the bound adds nothing for codebook caches: the kernel forms K_hat, V_hat before any product
    c.mags.push_back({std::vector<float>((size_t)c.Hkv * L * c.D, 0.0f),
                      std::vector<float>((size_t)c.Hkv * L * c.D, 0.0f)});
  }
  for (int role = 0; role < 2; ++role) c.vq_books[role] = upload_vec(books[role]);
  c.vq_codes.push_back(upload_vec(codes[0]));
  c.vq_codes.push_back(upload_vec(codes[1]));
  finish_vq(c, c.vq_codes[0], c.vq_codes[1]);
  return std::make_unique<DecodeCache>(std::move(impl));
}

std::unique_ptr<DecodeCache> make_random_vq_cache(const std::string& spec, int B, int Hkv, int D, int L,
                                                  uint64_t seed) {
  auto impl = std::make_unique<DecodeCache::Impl>();
  DecodeCache::Impl& c = *impl;
  if (!parse_vq_text(spec, c.vq.vec, c.vq.bits, c.vq.stages))
    throw std::invalid_argument("random codebook cache: '" + spec + "' is not CQ-<v>c<b>b or VQ<v,b,r>");
  if (B < 1 || Hkv < 1 || L < 1)
    throw std::invalid_argument("random codebook cache: B, KV heads and L must be >= 1");
  check_vq_shape(c.vq, D, "random codebook cache " + spec);
  c.B = B;
  c.Hkv = Hkv;
  c.D = D;
  c.lens.assign(B, L);
  c.vq.row_bytes = vq_row_bytes(c.vq, D);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> books((size_t)Hkv * c.vq.stages * D << c.vq.bits);
  for (int role = 0; role < 2; ++role) {
    for (float& x : books) x = nd(rng);
    c.vq_books[role] = upload_vec(books);
    // every bit random: every code of every width is uniform (padding bytes are never read as codes)
    c.vq_codes.emplace_back((int64_t)B * Hkv * L * c.vq.row_bytes);
    fill_random_bytes(c.vq_codes.back().p, c.vq_codes.back().n, seed + 1 + role);
  }
  finish_vq(c, c.vq_codes[0], c.vq_codes[1]);
  return std::make_unique<DecodeCache>(std::move(impl));
}

}  // namespace kvlab::gpu
