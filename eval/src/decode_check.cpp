// Decode cases, their fp64 reference and the stated bound (docs/FORMATS.md section 9.4).
#include "kvlab/decode_check.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "kvlab/half.h"

namespace kvlab {

namespace {

// Tokens [b, e) of x (H, L, D) as fp32 (H, e - b, D).
Tensor token_range(const std::vector<float>& x, int64_t H, int64_t L, int64_t D, int64_t b, int64_t e) {
  Tensor t;
  t.shape = {H, e - b, D};
  t.data.resize(H * (e - b) * D);
  for (int64_t h = 0; h < H; ++h)
    std::copy(x.begin() + (h * L + b) * D, x.begin() + (h * L + e) * D, t.data.begin() + h * (e - b) * D);
  return t;
}

std::string where(int b, bool keys) { return "sequence " + std::to_string(b) + (keys ? " keys" : " values"); }

}  // namespace

DecodeCase make_decode_case(const Method& m, const std::vector<int>& lengths, int Hq, int Hkv, int D,
                            uint64_t seed) {
  if (lengths.empty()) throw std::invalid_argument("decode case: no sequence lengths");
  if (Hkv < 1 || Hq < 1 || Hq % Hkv != 0)
    throw std::invalid_argument("decode case: " + std::to_string(Hq) + " query heads for " +
                                std::to_string(Hkv) + " KV heads (want a positive multiple)");
  if (D < 1 || D > 1024)
    throw std::invalid_argument("decode case: head dim " + std::to_string(D) + " (want 1..1024)");
  const bool fp16 = m.family() == "fp16";
  if (!fp16 && (!m.key_quantizer() || !m.value_quantizer()))
    throw std::invalid_argument("decode case: method '" + m.spec() +
                                "' has no key and value quantizers (its cache is not a packed layout)");
  DecodeCase c;
  c.method = m.spec();
  c.Hq = Hq;
  c.Hkv = Hkv;
  c.D = D;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int L : lengths) {
    if (L < 1 || L > (1 << 24)) throw std::invalid_argument("decode case: length " + std::to_string(L));
    std::vector<float> x[2];
    for (int role = 0; role < 2; ++role) {
      x[role].resize((size_t)Hkv * L * D);
      for (size_t i = 0; i < x[role].size(); ++i)
        x[role][i] = n(rng) * (role == 0 && (i % D) % 37 == 5 ? 8.0f : 1.0f);
    }
    const Schedule s = m.schedule(L);
    const int S = fp16 ? 0 : (int)s.key_begin;
    const int64_t ends[2] = {fp16 ? 0 : s.key_end, fp16 ? 0 : s.value_end};
    c.lengths.push_back(L);
    c.sinks.push_back(S);
    for (int role = 0; role < 2; ++role) {
      DecodeRole r;
      const int64_t np = std::max<int64_t>(0, ends[role] - S);
      if (np > 0) {
        const Tensor t = token_range(x[role], Hkv, L, D, S, S + np);
        r.packed = quantize(t.view(), role == 0 ? *m.key_quantizer() : *m.value_quantizer());
      }
      const int64_t rows = L - np;
      r.fp16.resize((size_t)(Hkv * rows * D));
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t row = 0; row < rows; ++row) {
          const int64_t t = row < S ? row : row + np;
          for (int64_t ch = 0; ch < D; ++ch)
            r.fp16[(h * rows + row) * D + ch] = float_to_half(x[role][(h * L + t) * D + ch]);
        }
      (role == 0 ? c.k : c.v).push_back(std::move(r));
    }
  }
  c.q.resize((size_t)c.batch() * Hq * D);
  for (float& v : c.q) v = n(rng);
  return c;
}

void check_decode_case(const DecodeCase& c) {
  const MethodPtr m = parse_method(c.method);
  const int B = c.batch();
  if (B < 1 || (int)c.sinks.size() != B || (int)c.k.size() != B || (int)c.v.size() != B)
    throw std::invalid_argument("decode case: " + std::to_string(B) + " lengths, " +
                                std::to_string(c.sinks.size()) + " sinks, " + std::to_string(c.k.size()) +
                                " key and " + std::to_string(c.v.size()) +
                                " value sequences (want the same number, >= 1)");
  if (c.Hkv < 1 || c.Hq < 1 || c.Hq % c.Hkv != 0 || c.D < 1)
    throw std::invalid_argument("decode case: heads " + std::to_string(c.Hq) + "/" + std::to_string(c.Hkv) +
                                ", head dim " + std::to_string(c.D));
  if (c.q.size() != (size_t)B * c.Hq * c.D)
    throw std::invalid_argument("decode case: q has " + std::to_string(c.q.size()) +
                                " values, want B*Hq*D = " + std::to_string((size_t)B * c.Hq * c.D));
  for (int b = 0; b < B; ++b) {
    const int L = c.lengths[b];
    if (L < 1 || c.sinks[b] < 0 || c.sinks[b] > L)
      throw std::invalid_argument("decode case: sequence " + std::to_string(b) + ": length " +
                                  std::to_string(L) + ", sink " + std::to_string(c.sinks[b]));
    for (int role = 0; role < 2; ++role) {
      const DecodeRole& r = role == 0 ? c.k[b] : c.v[b];
      const int64_t np = r.packed_tokens();
      if (r.packed) {
        const std::optional<QuantizerSpec> spec = role == 0 ? m->key_quantizer() : m->value_quantizer();
        if (!spec || !(r.packed->spec == *spec))
          throw std::invalid_argument("decode case: " + where(b, role == 0) + ": packed with " +
                                      to_string(r.packed->spec) + ", not the method's quantizer");
        const std::vector<int64_t> want = {c.Hkv, np, c.D};
        if (r.packed->shape != want || c.sinks[b] + np > L)
          throw std::invalid_argument("decode case: " + where(b, role == 0) + ": packed shape " +
                                      shape_string(r.packed->shape) + " (want (" + std::to_string(c.Hkv) +
                                      ", n <= L - sink, " + std::to_string(c.D) + "))");
      }
      if (r.fp16.size() != (size_t)c.Hkv * (L - np) * c.D)
        throw std::invalid_argument("decode case: " + where(b, role == 0) + ": " +
                                    std::to_string(r.fp16.size()) +
                                    " fp16 values, want KV heads * (L - packed) * D = " +
                                    std::to_string((size_t)c.Hkv * (L - np) * c.D));
    }
  }
}

std::vector<float> decode_case_hat(const DecodeCase& c, int b, bool keys) {
  const DecodeRole& r = keys ? c.k[b] : c.v[b];
  const int64_t L = c.lengths[b], S = c.sinks[b], np = r.packed_tokens(), D = c.D, rows = L - np;
  std::vector<float> hat((size_t)(c.Hkv * L * D));
  const std::vector<float> deq = r.packed ? dequantize(*r.packed) : std::vector<float>();
  for (int64_t h = 0; h < c.Hkv; ++h)
    for (int64_t t = 0; t < L; ++t) {
      float* dst = hat.data() + (h * L + t) * D;
      if (t >= S && t < S + np) {
        std::copy_n(deq.data() + (h * np + t - S) * D, D, dst);
      } else {
        const int64_t row = t < S ? t : t - np;
        for (int64_t ch = 0; ch < D; ++ch) dst[ch] = half_to_float(r.fp16[(h * rows + row) * D + ch]);
      }
    }
  return hat;
}

double unit_roundoff(const std::string& type) {
  if (type == "fp32") return 0x1p-24;
  if (type == "fp16") return 0x1p-11;
  if (type == "bf16") return 0x1p-8;
  throw std::invalid_argument("arithmetic type '" + type + "' (want fp32, fp16 or bf16)");
}

bool DecodeCheckResult::ok() const {
  return !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const DecodeCheckRow& r) { return r.ok; });
}

// Per (sequence, query head), with ua = 2^-24 (fp32 sums), uo the operands' unit roundoff,
// gamma(n) = n ua / (1 - n ua), A = max_t sum_c |q_c k_tc| / sqrt(D), V = max |v_hat|:
//   logit error delta <= (2 uo + gamma(D + 2)) A   (q and K_hat rounded, a D-term fp32 dot product)
//   eta = 2 delta (1 + 2 delta) + 4 ua             (relative error of each exp(s - max))
//   |out - ref| <= V (2 eta / (1 - eta) + 2 gamma(L + 4) + 3 uo + 4 ua + u_out)
// (V_hat and p rounded, the sums of p v and p in any order, the division, the stored output).
DecodeCheckResult check_decode_output(const DecodeCase& c, const std::vector<float>& out,
                                      const KernelArithmetic& arith, double atol) {
  check_decode_case(c);
  const int B = c.batch(), D = c.D, group = c.Hq / c.Hkv;
  if (out.size() != (size_t)B * c.Hq * D)
    throw std::invalid_argument("check-attention: output has " + std::to_string(out.size()) +
                                " values, want B*Hq*D = " + std::to_string((size_t)B * c.Hq * D));
  const double ua = 0x1p-24, uo = arith.operand_u;
  auto gamma = [ua](double n) { return n * ua < 0.5 ? n * ua / (1 - n * ua) : HUGE_VAL; };
  DecodeCheckResult res;
  for (int b = 0; b < B; ++b) {
    const int L = c.lengths[b];
    const std::vector<float> k = decode_case_hat(c, b, true), v = decode_case_hat(c, b, false);
    std::vector<double> logit(L);
    for (int hq = 0; hq < c.Hq; ++hq) {
      const float* qh = c.q.data() + ((size_t)b * c.Hq + hq) * D;
      const float* kh = k.data() + (size_t)(hq / group) * L * D;
      const float* vh = v.data() + (size_t)(hq / group) * L * D;
      double mx = -HUGE_VAL, amax = 0, vmax = 0;
      for (int t = 0; t < L; ++t) {
        double s = 0, a = 0;
        for (int ch = 0; ch < D; ++ch) {
          s += (double)qh[ch] * kh[(size_t)t * D + ch];
          a += std::fabs((double)qh[ch] * kh[(size_t)t * D + ch]);
          vmax = std::max(vmax, (double)std::fabs(vh[(size_t)t * D + ch]));
        }
        logit[t] = s / std::sqrt((double)D);
        amax = std::max(amax, a / std::sqrt((double)D));
        mx = std::max(mx, logit[t]);
      }
      double den = 0;
      for (int t = 0; t < L; ++t) den += logit[t] = std::exp(logit[t] - mx);
      DecodeCheckRow row;
      row.seq = b;
      row.head = hq;
      const double delta = (2 * uo + gamma(D + 2)) * amax;
      const double eta = 2 * delta * (1 + 2 * delta) + 4 * ua;
      row.bound = atol > 0 ? atol
                  : eta < 0.5
                      ? vmax * (2 * eta / (1 - eta) + 2 * gamma(L + 4) + 3 * uo + 4 * ua + arith.output_u)
                      : HUGE_VAL;
      for (int ch = 0; ch < D; ++ch) {
        double ref = 0;
        for (int t = 0; t < L; ++t) ref += logit[t] / den * vh[(size_t)t * D + ch];
        const double o = out[((size_t)b * c.Hq + hq) * D + ch];
        const double err = std::isfinite(o) ? std::fabs(o - ref) : HUGE_VAL;
        if (ch == 0 || err > row.max_err) {
          row.max_err = err;
          row.worst_channel = ch;
        }
      }
      row.ok = row.max_err <= row.bound && std::isfinite(row.bound);
      res.rows.push_back(row);
    }
  }
  return res;
}

}  // namespace kvlab
