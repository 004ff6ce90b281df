// Building decode caches (through core's quantize, or the GPU's on random data) and running the
// decode kernels on them.
#include <cmath>
#include <stdexcept>

#include "attn_cache.h"
#include "kvlab/half.h"
#include "kvlab/quantizer.h"
#include "util.h"

namespace kvlab::gpu {

DecodeCache::DecodeCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DecodeCache::~DecodeCache() = default;
int DecodeCache::batch() const { return impl_->B; }
int DecodeCache::kv_heads() const { return impl_->Hkv; }
int DecodeCache::head_dim() const { return impl_->D; }
const std::vector<int>& DecodeCache::lengths() const { return impl_->lens; }
int64_t DecodeCache::bytes() const { return impl_->bytes; }

attn::AttnKind decode_kind(const Method& m, int64_t D) {
  const std::string who = "decode attention: method '" + m.spec() + "'";
  if (D != 128 && D != 64)
    throw std::invalid_argument(who + ": head_dim " + std::to_string(D) + " (kernels: 64, 128)");
  if (m.family() == "fp16") return {};
  if (m.family() == "vq") {
    if (D != 128)
      throw std::invalid_argument(who + ": head_dim " + std::to_string(D) + " (codebook kernel: 128)");
    attn::AttnKind kind;
    kind.vq = true;
    return kind;
  }
  const auto k = m.key_quantizer(), v = m.value_quantizer();
  if (!k || !v || (m.family() != "int8" && m.family() != "kivi" && m.family() != "kitty"))
    throw std::invalid_argument(who + ": no decode kernel for family " + m.family() +
                                " (served: fp16, int8, kivi, kitty, vq)");
  if (k->profile != Profile::Kvlab || v->profile != Profile::Kvlab)
    throw std::invalid_argument(who + ": decode kernels read the kvlab profile only");
  attn::AttnKind kind{k->bits, k->boosted(), v->bits, v->axis == Axis::Channel};
  const bool served =
      (kind.kbits == 8 && kind.vbits == 8 && !kind.kboost && kind.vchannel && k->axis == Axis::Channel) ||
      (!kind.vchannel && k->axis == Axis::Channel && kind.kbits == kind.vbits &&
       (kind.kbits == 4 || kind.kbits == 2) && (!kind.kboost || kind.kbits == 2));
  if (!served)
    throw std::invalid_argument(
        who + ": no decode kernel for keys " + to_string(*k) + " and values " + to_string(*v) +
        " (served: int8 per channel; kivi kbits = vbits = 2 or 4; kitty kbits = vbits = 2)");
  return kind;
}

void check_decode_method(const Method& m, int64_t D) { decode_kind(m, D); }

void check_part(const attn::AttnPart& p, const attn::AttnKind& kind, bool key) {
  const PackedLayout& f = p.f;
  if (f.T == 0) return;
  const int per_word = 32 / f.bits;
  const std::string role = key ? "keys" : "values";
  if (f.channel && f.groups > 1 && f.G % per_word != 0)
    throw std::invalid_argument("decode attention: " + role + " in groups of " + std::to_string(f.G) +
                                " tokens; the kernel reads " + std::to_string(per_word) +
                                " tokens per word, so groups must be a multiple of that");
  if (!f.channel && f.groups > 1 && f.G % 16 != 0)
    throw std::invalid_argument(
        "decode attention: values in groups of " + std::to_string(f.G) +
        " channels; the kernel reads 16 channels per thread, so groups must be a multiple of 16");
  (void)kind;
}

void DecodeCache::Impl::finish() {
  dev_seqs = DeviceBuffer((int64_t)(seqs.size() * sizeof(attn::AttnSeq)));
  cuda_check(cudaMemcpy(dev_seqs.p, seqs.data(), seqs.size() * sizeof(attn::AttnSeq), cudaMemcpyHostToDevice),
             "cudaMemcpy");
  bytes = 0;
  if (kind.vq) {  // the codes of every token, and each head's books once
    for (int L : lens) bytes += 2 * (int64_t)Hkv * L * vq.row_bytes;
    bytes += vq_books[0].n + vq_books[1].n;
    return;
  }
  for (const attn::AttnSeq& s : seqs) {
    for (const attn::AttnPart* p : {&s.k, &s.v}) {
      const PackedLayout& f = p->f;
      if (f.T == 0) continue;
      bytes += f.codes_bytes() + f.high_bytes() + f.index_bytes() +
               f.n_params() * f.param_size() * (f.has_zero() ? 2 : 1);
    }
    bytes += (int64_t)Hkv * D * 2 * ((s.L - s.k.f.T) + (s.L - s.v.f.T));
  }
}

namespace {

attn::AttnPart part_of(const DeviceQuant& d, const PackedLayout& f) {
  attn::AttnPart p;
  p.f = f;
  const DevQuant v = d.view();
  p.codes = v.codes;
  p.scale = v.scale;
  p.zero = f.has_zero() ? v.zero : nullptr;
  p.high = v.high;
  p.index = v.index;
  return p;
}

// |scale * code| + |zero| of q's elements (asymmetric plain layouts; others stay 0) into the
// rows [S, S + n) of mag (H, L, D).
void add_magnitudes(const QuantizedTensor& q, int64_t S, int64_t L, std::vector<float>& mag) {
  const PackedLayout f = layout_of(q);
  if (f.sym) return;  // symmetric parts need none (docs/FORMATS.md 9.3)
  const std::vector<uint8_t> codes = unpack_codes(q);
  for (int64_t h = 0; h < f.N; ++h)
    for (int64_t t = 0; t < f.T; ++t)
      for (int64_t c = 0; c < f.D; ++c) {
        const int64_t i = f.boost     ? (h * f.groups + t / f.G) * f.D + c  // Kitty pages
                          : f.channel ? (h * f.D + c) * f.groups + t / f.G
                                      : (h * f.T + t) * f.groups + c / f.G;
        const double m =
            std::fabs((double)q.scale[i] * codes[f.elem(h, t, c)]) + std::fabs((double)q.zero[i]);
        mag[(h * L + S + t) * f.D + c] = (float)(m * (1 + 0x1p-20));  // rounded up
      }
}

// Tokens [b, e) of x (H, L, D) as fp32 (H, e - b, D).
Tensor token_range(const TensorView& x, int64_t b, int64_t e) {
  const int64_t H = x.shape[0], L = x.shape[1], D = x.shape[2];
  Tensor t;
  t.shape = {H, e - b, D};
  t.data.resize(H * (e - b) * D);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < (e - b) * D; ++i) t.data[(h * (e - b)) * D + i] = x.at((h * L + b) * D + i);
  return t;
}

}  // namespace

std::unique_ptr<DecodeCache> make_decode_cache(const Method& m, const std::vector<TensorView>& keys,
                                               const std::vector<TensorView>& values) {
  if (keys.empty() || keys.size() != values.size())
    throw std::invalid_argument("decode cache: " + std::to_string(keys.size()) + " key and " +
                                std::to_string(values.size()) +
                                " value sequences (want the same number, >= 1)");
  if (decode_kind(m, keys[0].shape.back()).vq) return make_vq_decode_cache(m, keys, values);
  auto impl = std::make_unique<DecodeCache::Impl>();
  impl->B = (int)keys.size();
  impl->Hkv = (int)keys[0].shape.at(0);
  impl->D = (int)keys[0].shape.back();
  impl->kind = decode_kind(m, impl->D);
  for (size_t b = 0; b < keys.size(); ++b) {
    const TensorView &k = keys[b], &v = values[b];
    const std::string who = "decode cache: sequence " + std::to_string(b);
    if (k.shape.size() != 3 || k.shape != v.shape || k.shape[0] != impl->Hkv || k.shape[2] != impl->D ||
        k.shape[1] < 1)
      throw std::invalid_argument(who + ": keys " + shape_string(k.shape) + " and values " +
                                  shape_string(v.shape) + " (want both (" + std::to_string(impl->Hkv) +
                                  ", L >= 1, " + std::to_string(impl->D) + "))");
    check_finite(k, who + " keys");
    check_finite(v, who + " values");
    const int64_t L = k.shape[1];
    const Schedule s = m.schedule(L);
    attn::AttnSeq seq;
    seq.L = (int)L;
    seq.S = (int)s.key_begin;
    if (s.value_begin != s.key_begin)
      throw std::invalid_argument(who + ": keys and values start their packed ranges at different tokens");
    if (impl->kind.vchannel && (s.value_begin != 0 || s.value_end != L))
      throw std::invalid_argument(who + ": channel-major values must cover every token");
    seq.dbg = 0;
    for (size_t i = 0; i < b; ++i) seq.dbg += (int64_t)impl->Hkv * impl->lens[i] * impl->D;
    const std::optional<QuantizerSpec> specs[2] = {m.key_quantizer(), m.value_quantizer()};
    const int64_t ends[2] = {s.key_end, s.value_end};
    const TensorView* xs[2] = {&k, &v};
    PackedMagnitudes mag;
    mag.k.assign((size_t)(impl->Hkv * L * impl->D), 0.0f);
    mag.v.assign(mag.k.size(), 0.0f);
    for (int role = 0; role < 2; ++role) {
      attn::AttnPart& part = role == 0 ? seq.k : seq.v;
      const int64_t n = ends[role] - seq.S;
      if (specs[role] && n > 0) {
        const Tensor x = token_range(*xs[role], seq.S, ends[role]);
        const QuantizedTensor q = quantize(x.view(), *specs[role]);
        impl->packed.push_back(upload(q));
        part = part_of(impl->packed.back(), layout_of(q));
        check_part(part, impl->kind, role == 0);
        add_magnitudes(q, seq.S, L, role == 0 ? mag.k : mag.v);
      }
      // fp16 rows: the sink, then the tokens after the packed range (as core keeps them)
      const int64_t packed = part.f.T, rows = L - packed;
      std::vector<uint16_t> h((size_t)(impl->Hkv * rows * impl->D));
      for (int64_t hh = 0; hh < impl->Hkv; ++hh)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t t = r < seq.S ? r : r + packed;
          for (int64_t c = 0; c < impl->D; ++c)
            h[(hh * rows + r) * impl->D + c] = float_to_half(xs[role]->at((hh * L + t) * impl->D + c));
        }
      impl->fp16.emplace_back((int64_t)h.size() * 2 + 32);
      cuda_check(cudaMemcpy(impl->fp16.back().p, h.data(), h.size() * 2, cudaMemcpyHostToDevice),
                 "cudaMemcpy");
      (role == 0 ? seq.k_fp : seq.v_fp) = static_cast<const uint16_t*>(impl->fp16.back().p);
    }
    impl->lens.push_back((int)L);
    impl->seqs.push_back(seq);
    impl->mags.push_back(std::move(mag));
  }
  impl->finish();
  return std::make_unique<DecodeCache>(std::move(impl));
}

const PackedMagnitudes& packed_magnitudes(const DecodeCache& cache, int b) {
  const auto& c = cache.impl();
  if (b < 0 || b >= (int)c.mags.size())
    throw std::invalid_argument("packed_magnitudes: sequence " + std::to_string(b) + " of a cache with " +
                                std::to_string(c.mags.size()) +
                                " (only caches from make_decode_cache keep them)");
  return c.mags[b];
}

std::unique_ptr<DecodeCache> make_random_decode_cache(const Method& m, int B, int Hkv, int D, int L,
                                                      uint64_t seed) {
  if (B < 1 || Hkv < 1 || L < 1)
    throw std::invalid_argument("random decode cache: B, KV heads and L must be >= 1");
  auto impl = std::make_unique<DecodeCache::Impl>();
  impl->B = B;
  impl->Hkv = Hkv;
  impl->D = D;
  impl->kind = decode_kind(m, D);
  if (impl->kind.vq)
    throw std::invalid_argument(
        "random decode cache: method '" + m.spec() +
        "': random codebook caches take a VQ spec (make_random_vq_cache, e.g. CQ-4c8b)");
  impl->lens.assign(B, L);
  const Schedule s = m.schedule(L);
  const std::optional<QuantizerSpec> specs[2] = {m.key_quantizer(), m.value_quantizer()};
  const int64_t ends[2] = {s.key_end, s.value_end};
  PackedLayout lay[2];
  for (int role = 0; role < 2; ++role) {
    const int64_t n = ends[role] - s.key_begin;
    if (specs[role] && n > 0) {
      // all sequences as one tensor of B * Hkv slices: sequence b is slices [b * Hkv, (b + 1) * Hkv)
      const DevFormat f = make_format({(int64_t)B * Hkv, n, D}, *specs[role]);
      DeviceBuffer x(f.N * f.T * f.D * 2);
      fill_random(x.p, f.N * f.T * f.D, D, true, seed + role, nullptr);
      impl->packed.emplace_back(f);
      run_quantize(f, x.p, InType::F16, impl->packed.back().view(), nullptr, KernelConfig{});
      cuda_check(cudaDeviceSynchronize(), "quantize for the decode cache");
      lay[role] = f;
    }
    const int64_t rows = L - lay[role].T;
    impl->fp16.emplace_back((int64_t)B * Hkv * rows * D * 2 + 32);
    if (rows)
      fill_random(impl->fp16.back().p, (int64_t)B * Hkv * rows * D, D, true, seed + 7 + role, nullptr);
  }
  for (int b = 0; b < B; ++b) {
    attn::AttnSeq seq;
    seq.L = L;
    seq.S = (int)s.key_begin;
    seq.dbg = (int64_t)b * Hkv * L * D;
    for (int role = 0; role < 2; ++role) {
      attn::AttnPart& part = role == 0 ? seq.k : seq.v;
      const PackedLayout& f = lay[role];
      if (f.T) {
        const DeviceQuant& d = impl->packed[role == 0 ? 0 : (lay[0].T ? 1 : 0)];
        part = part_of(d, f);
        part.f.N = Hkv;
        // per-slice sizes are N-proportional in every layout
        part.codes += f.codes_bytes() / f.N * b * Hkv;
        part.scale = static_cast<const uint8_t*>(part.scale) + f.n_params() / f.N * f.param_size() * b * Hkv;
        if (part.zero)
          part.zero = static_cast<const uint8_t*>(part.zero) + f.n_params() / f.N * f.param_size() * b * Hkv;
        if (f.boost) {
          part.high += f.high_bytes() / f.N * b * Hkv;
          part.index += f.index_bytes() / f.N * b * Hkv;
        }
        check_part(part, impl->kind, role == 0);
      }
      const int64_t rows = L - f.T;
      const uint16_t* base = static_cast<const uint16_t*>(impl->fp16[role].p);
      (role == 0 ? seq.k_fp : seq.v_fp) = base + (int64_t)b * Hkv * rows * D;
    }
    impl->seqs.push_back(seq);
  }
  impl->finish();
  return std::make_unique<DecodeCache>(std::move(impl));
}

DecodeKernel parse_decode_kernel(const std::string& s) {
  if (s == "auto") return DecodeKernel::Auto;
  if (s == "split") return DecodeKernel::Split;
  if (s == "stream") return DecodeKernel::Stream;
  if (s == "codebook") return DecodeKernel::Codebook;
  throw std::invalid_argument("decode kernel '" + s + "' (want auto, split, stream or codebook)");
}

const char* decode_kernel_name(DecodeKernel k) {
  switch (k) {
    case DecodeKernel::Stream: return "stream";
    case DecodeKernel::Split: return "split";
    case DecodeKernel::Codebook: return "codebook";
    default: return "auto";
  }
}

std::string stream_refusal(const DecodeCache& cache, int Hq) {
  const auto& c = cache.impl();
  if (c.D != 128 || Hq != 4 * c.Hkv) return "head_dim 128 with 4 query heads per KV head only";
  const attn::AttnKind& k = c.kind;
  if (k.vq) return "codebook caches run on the codebook kernel";
  const bool int8 = !k.kboost && k.vchannel && k.kbits == 8 && k.vbits == 8;
  const bool kitty = k.kboost && !k.vchannel && k.kbits == 2 && k.vbits == 2;
  if (!(k.kbits == 0 && k.vbits == 0) && !int8 && !kitty &&
      !(!k.kboost && !k.vchannel && k.kbits == k.vbits && (k.kbits == 2 || k.kbits == 4)))
    return "formats: fp16, int8 (group=all), kitty (kbits = vbits = 2) or kivi with kbits = vbits = 2 or 4";
  const int tt = attn::stream_tile_tokens(k.kbits);
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  for (const attn::AttnSeq& s : c.seqs) {
    if (!aligned(s.k_fp) || !aligned(s.v_fp)) return "fp16 rows not 16-byte aligned";
    const PackedLayout &kf = s.k.f, &vf = s.v.f;
    if (int8) {  // any row length (unaligned rows are staged by byte loads)
      if ((kf.T > 0 && kf.groups != 1) || (vf.T > 0 && vf.groups != 1))
        return "int8: one scale per channel over every token (group=all)";
      if (s.S != 0 || kf.T != s.L || vf.T != s.L) return "int8: every token packed (no fp16 rows)";
      if (kf.row_bytes > (1 << 24) || vf.row_bytes > (1 << 24)) return "int8: at most 2^24 tokens";
      continue;
    }
    if (kitty && kf.T > 0 &&
        (kf.G % tt != 0 || kf.T % kf.G != 0 || kf.k > attn::kStreamMaxSlots || !aligned(s.k.codes) ||
         !aligned(s.k.high)))
      return "kitty keys: whole pages of a multiple of " + std::to_string(tt) + " tokens, at most " +
             std::to_string(attn::kStreamMaxSlots) + " boosted channels per page";
    if (kf.T > 0 && !kitty &&
        (kf.sym || (kf.groups > 1 && kf.G % tt != 0) || kf.row_bytes % 16 != 0 || !aligned(s.k.codes)))
      return "keys: asymmetric, groups a multiple of " + std::to_string(tt) + " tokens, 16-byte rows";
    if (vf.T > 0 && (vf.sym || vf.groups != 1 || vf.row_bytes != 128 * k.vbits / 8 || !aligned(s.v.codes)))
      return "values: one asymmetric group per token";
  }
  return "";
}

DecodeKernel pick_kernel(const DecodeCache& cache, int Hq, DecodeKernel want) {
  if (cache.impl().kind.vq != (want == DecodeKernel::Codebook) && want != DecodeKernel::Auto)
    throw std::invalid_argument(std::string("decode attention: the ") + decode_kernel_name(want) +
                                " kernel does not serve " + (cache.impl().kind.vq ? "codebook" : "this") +
                                " cache (codebook caches: the codebook kernel only)");
  if (cache.impl().kind.vq) return DecodeKernel::Codebook;
  if (want == DecodeKernel::Split) return want;
  const std::string why = stream_refusal(cache, Hq);
  if (why.empty()) return DecodeKernel::Stream;
  if (want == DecodeKernel::Stream) throw std::invalid_argument("decode attention: streaming kernel: " + why);
  return DecodeKernel::Split;
}

std::vector<DecodeShape> decode_shapes(const DecodeCache::Impl& c, DecodeKernel k, int splits, int group) {
  std::vector<DecodeShape> out;
  for (const attn::AttnSeq& s : c.seqs) {
    DecodeShape d;
    d.kernel = k;
    d.splits = splits;
    if (k == DecodeKernel::Codebook) {
      d.tile_tokens = attn::kVqTile;
      d.main_tokens = s.L;
      d.warps = attn::vq_warps(c.vq, group);
      out.push_back(d);
      continue;
    }
    d.tile_tokens = k == DecodeKernel::Stream ? attn::stream_tile_tokens(c.kind.kbits)
                                              : attn::attn_tile_tokens(c.kind.kbits);
    if (k == DecodeKernel::Stream)
      d.main_tokens = attn::stream_main_tokens(c.kind.kbits, s.L, (int)s.k.f.T, (int)s.v.f.T);
    d.mma = k == DecodeKernel::Stream && c.kind.kbits > 0;
    if (k == DecodeKernel::Stream) d.run_tiles = attn::stream_run_tiles(c.kind.kbits);
    d.p_fixed = k == DecodeKernel::Stream && c.kind.kbits == 8;
    out.push_back(d);
  }
  return out;
}

int auto_splits(const DecodeCache& cache, DecodeKernel kernel) {
  const auto& c = cache.impl();
  int dev = 0, sms = 0;  // the current device: the cache's, where the kernels run
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  if (c.kind.vq) {
    // one wave of blocks (4 query heads per KV head taken for the shared memory), every warp a tile or more
    attn::AttnVq v = c.vq;
    v.n_smem = std::max(0, attn::vq_max_smem_entries(v, 4));
    int max_len = 0;
    for (int L : c.lens) max_len = std::max(max_len, L);
    const int tiles = (max_len + attn::kVqTile - 1) / attn::kVqTile;
    const int slots = sms * std::max(1, attn::vq_blocks_per_sm(v, 4));
    return std::max(
        1, std::min(slots / (c.B * c.Hkv * attn::vq_head_blocks(v, 4)), tiles / attn::vq_warps(v, 4)));
  }
  if (kernel == DecodeKernel::Stream) {
    // one wave of blocks (B x Hkv x splits <= what the SMs hold at once), every warp a tile or more
    int tiles = 0;
    const int tt = attn::stream_tile_tokens(c.kind.kbits);
    for (const attn::AttnSeq& s : c.seqs)
      tiles = std::max(
          tiles, (attn::stream_main_tokens(c.kind.kbits, s.L, (int)s.k.f.T, (int)s.v.f.T) + tt - 1) / tt);
    const int slots = sms * std::max(1, attn::stream_blocks_per_sm(c.kind));
    return std::max(1, std::min(slots / (c.B * c.Hkv),
                                tiles / (attn::kStreamWarps * attn::stream_run_tiles(c.kind.kbits))));
  }
  int max_len = 0;
  for (int L : c.lens) max_len = std::max(max_len, L);
  const int tiles =
      1 + (max_len + attn::attn_tile_tokens(c.kind.kbits) - 1) / attn::attn_tile_tokens(c.kind.kbits);
  const int want = (2 * sms + c.B * c.Hkv - 1) / (c.B * c.Hkv);  // two blocks per SM
  return std::max(1, std::min(want, tiles));
}

DecodeLaunch::DecodeLaunch(const DecodeCache::Impl& c, int Hq, int splits, bool use_stream)
    : stream(use_stream) {
  if (Hq % c.Hkv != 0)
    throw std::invalid_argument("decode attention: " + std::to_string(Hq) + " query heads for " +
                                std::to_string(c.Hkv) + " KV heads (want a multiple)");
  group = Hq / c.Hkv;
  const int64_t rows = (int64_t)c.B * Hq;
  q = DeviceBuffer(rows * c.D * 4);
  out = DeviceBuffer(rows * c.D * 4);
  part_o = DeviceBuffer(rows * splits * c.D * 4);
  part_ml = DeviceBuffer(rows * splits * 8);
  args.seqs = static_cast<const attn::AttnSeq*>(c.dev_seqs.p);
  args.q = static_cast<const float*>(q.p);
  args.part_o = static_cast<float*>(part_o.p);
  args.part_ml = static_cast<float*>(part_ml.p);
  args.Hkv = c.Hkv;
  args.splits = splits;
  args.scale_log2 = (float)(1.4426950408889634 / std::sqrt((double)c.D));
  if (c.kind.vq) {
    args.vq = c.vq;
    args.vq.n_smem = attn::vq_max_smem_entries(c.vq, group);
    if (args.vq.n_smem < 0)
      throw std::invalid_argument("decode attention: codebook rows of " + std::to_string(c.vq.row_bytes) +
                                  " bytes: the staged tiles alone exceed the shared memory");
  }
}

void DecodeLaunch::run(const DecodeCache::Impl& c, cudaStream_t s) const {
  const std::string why =
      c.kind.vq ? attn::launch_vq(group, c.B, args, static_cast<float*>(out.p), s)
      : stream  ? attn::launch_stream(c.kind, c.B, args, static_cast<float*>(out.p), s)
                : attn::launch_decode(c.kind, c.D, group, c.B, args, static_cast<float*>(out.p), s);
  if (!why.empty()) throw std::invalid_argument("decode attention: " + why);
  cuda_check(cudaGetLastError(), "decode attention launch");
}

// The kernel, splits and bound shapes of one decode step with `opt` (both entries below).
static DecodeResult plan_decode(const DecodeCache& cache, int Hq, const DecodeOptions& opt) {
  DecodeResult r;
  r.kernel = pick_kernel(cache, Hq, opt.kernel);
  r.splits = opt.splits > 0 ? opt.splits : auto_splits(cache, r.kernel);
  r.shapes = decode_shapes(cache.impl(), r.kernel, r.splits, Hq / cache.impl().Hkv);
  return r;
}

DecodeResult decode_attention(const DecodeCache& cache, const std::vector<float>& q, int Hq,
                              const DecodeOptions& opt) {
  const auto& c = cache.impl();
  DecodeResult r = plan_decode(cache, Hq, opt);
  DecodeLaunch run(c, Hq, r.splits, r.kernel == DecodeKernel::Stream);
  const int64_t rows = (int64_t)c.B * Hq;
  if ((int64_t)q.size() != rows * c.D)
    throw std::invalid_argument("decode attention: q has " + std::to_string(q.size()) +
                                " values, want B*Hq*D = " + std::to_string(rows * c.D));
  cuda_check(cudaMemcpy(run.q.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  cuda_check(cudaMemset(run.out.p, 0xFF, rows * c.D * 4),
             "cudaMemset");  // NaN poison: every output must be written
  int64_t total = 0;
  for (int L : c.lens) total += (int64_t)c.Hkv * L * c.D;
  DeviceBuffer dk, dv;
  if (opt.debug) {
    dk = DeviceBuffer(total * 4);
    dv = DeviceBuffer(total * 4);
    cuda_check(cudaMemset(dk.p, 0xFF, total * 4), "cudaMemset");
    cuda_check(cudaMemset(dv.p, 0xFF, total * 4), "cudaMemset");
    run.args.dbg_k = static_cast<float*>(dk.p);
    run.args.dbg_v = static_cast<float*>(dv.p);
  }
  run.run(c, nullptr);
  cuda_check(cudaDeviceSynchronize(), "decode attention");
  r.out.resize(rows * c.D);
  cuda_check(cudaMemcpy(r.out.data(), run.out.p, rows * c.D * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (opt.debug) {
    r.k_hat.resize(total);
    r.v_hat.resize(total);
    cuda_check(cudaMemcpy(r.k_hat.data(), dk.p, total * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda_check(cudaMemcpy(r.v_hat.data(), dv.p, total * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  return r;
}

DecodeResult decode_attention_device(const DecodeCache& cache, const float* q, float* out, int Hq,
                                     const DecodeOptions& opt, void* stream) {
  if (opt.debug)
    throw std::invalid_argument("decode attention on device memory: no debug path (decode_attention has it)");
  if (!q || !out) throw std::invalid_argument("decode attention on device memory: null q or out");
  const auto& c = cache.impl();
  DecodeResult r = plan_decode(cache, Hq, opt);
  DecodeLaunch run(c, Hq, r.splits, r.kernel == DecodeKernel::Stream);
  run.args.q = q;  // read in place
  const auto s = static_cast<cudaStream_t>(stream);
  const size_t bytes = (size_t)c.B * Hq * c.D * 4;
  cuda_check(cudaMemsetAsync(run.out.p, 0xFF, bytes, s), "cudaMemsetAsync");  // NaN poison, as above
  try {
    run.run(c, s);
  } catch (...) {
    cudaStreamSynchronize(s);  // the memset, before run's buffers are freed
    throw;
  }
  cuda_check(cudaMemcpyAsync(out, run.out.p, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(s), "decode attention");  // before run's buffers are freed
  return r;
}

}  // namespace kvlab::gpu
