// kvlab check-attention make|verify: a decode case in kvlab's packed layout for another
// implementation to run, and its output checked against the fp64 reference with a stated bound
// (docs/FORMATS.md section 9.4). CPU only.
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "kvlab/decode_check.h"
#include "kvlab/half.h"
#include "kvlab/npy.h"
#include "kvlab/path_checks.h"

namespace kvlab::cli {
namespace {

NpyArray int32_array(const std::vector<int>& v) {
  NpyArray a;
  a.descr = "<i4";
  a.shape = {(int64_t)v.size()};
  a.bytes.resize(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i)
    for (int j = 0; j < 4; ++j) a.bytes[4 * i + j] = (uint8_t)((uint32_t)v[i] >> (8 * j));
  return a;
}

NpyArray params_array(const std::vector<float>& v, ParamType t, std::vector<int64_t> shape) {
  if (t == ParamType::F32) return make_npy(v, std::move(shape));
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
  return make_npy(h, std::move(shape));
}

// The arrays of section 9.4.
void write_case(const std::string& path, const DecodeCase& c) {
  std::vector<std::pair<std::string, NpyArray>> a;
  a.emplace_back(
      "method", make_npy(std::vector<uint8_t>(c.method.begin(), c.method.end()), {(int64_t)c.method.size()}));
  a.emplace_back("q", make_npy(c.q, {c.batch(), c.Hq, c.D}));
  a.emplace_back("lengths", int32_array(c.lengths));
  a.emplace_back("sink", int32_array(c.sinks));
  for (int b = 0; b < c.batch(); ++b)
    for (int role = 0; role < 2; ++role) {
      const DecodeRole& r = role == 0 ? c.k[b] : c.v[b];
      const std::string p = (role == 0 ? "k" : "v") + std::to_string(b) + "_";
      const int64_t np = r.packed_tokens();
      a.emplace_back(p + "packed", int32_array({(int)np}));
      a.emplace_back(p + "fp16", make_npy(r.fp16, {c.Hkv, c.lengths[b] - np, c.D}));
      if (!r.packed) continue;
      const QuantizedTensor& q = *r.packed;
      const PartShapes s = part_shapes(q);
      a.emplace_back(p + "codes", make_npy(q.codes, s.codes));
      a.emplace_back(p + "scale", params_array(q.scale, q.spec.params, s.params));
      if (q.spec.scheme == Scheme::Asym)
        a.emplace_back(p + "zero", params_array(q.zero, q.spec.params, s.params));
      if (q.spec.boosted()) {
        a.emplace_back(p + "high", make_npy(q.high, s.high));
        a.emplace_back(p + "boost_index", make_npy(q.boost_index, s.boost_index));
      }
    }
  write_npz(path, a);
}

// An array of the case file, checked for dtype and element count (shape (n) or any shape of n).
struct CaseFile {
  NpzReader z;
  explicit CaseFile(const std::string& path) : z(path) {}
  NpyArray get(const std::string& name, const std::string& descr, int64_t n) const {
    if (!z.contains(name))
      throw std::runtime_error(z.where(name) + ": missing (docs/FORMATS.md section 9.4)");
    NpyArray a = z.read(name);
    if (a.descr != descr || (n >= 0 && a.numel() != n))
      throw std::runtime_error(z.where(name) + ": " + a.descr + " " + shape_string(a.shape) + ", want " +
                               descr + (n >= 0 ? " with " + std::to_string(n) + " values" : ""));
    return a;
  }
  std::vector<int> ints(const std::string& name, int64_t n) const {
    const NpyArray a = get(name, "<i4", n);
    std::vector<int> v(a.numel());
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t x = 0;
      for (int j = 0; j < 4; ++j) x |= (uint32_t)a.bytes[4 * i + j] << (8 * j);
      v[i] = (int)x;
    }
    return v;
  }
  template <class T>
  std::vector<T> raw(const NpyArray& a) const {
    std::vector<T> v(a.numel());
    if (!v.empty())
      std::memcpy(v.data(), a.bytes.data(), a.bytes.size());  // an empty vector's data() may be null
    return v;
  }
  std::vector<float> params(const std::string& name, ParamType t, int64_t n) const {
    if (t == ParamType::F32) return raw<float>(get(name, "<f4", n));
    const std::vector<uint16_t> h = raw<uint16_t>(get(name, "<f2", n));
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = half_to_float(h[i]);
    return v;
  }
};

DecodeCase read_case(const std::string& path) {
  const CaseFile f(path);
  DecodeCase c;
  const NpyArray m = f.get("method", "|u1", -1);
  c.method = std::string(m.bytes.begin(), m.bytes.end());
  const MethodPtr method = parse_method(c.method);
  const NpyArray q = f.get("q", "<f4", -1);
  if (q.shape.size() != 3)
    throw std::runtime_error(f.z.where("q") + ": shape " + shape_string(q.shape) + ", want (B, Hq, D)");
  const int B = (int)q.shape[0];
  c.Hq = (int)q.shape[1];
  c.D = (int)q.shape[2];
  c.q = f.raw<float>(q);
  c.lengths = f.ints("lengths", B);
  c.sinks = f.ints("sink", B);
  for (int b = 0; b < B; ++b)
    for (int role = 0; role < 2; ++role) {
      const std::string p = (role == 0 ? "k" : "v") + std::to_string(b) + "_";
      const int np = f.ints(p + "packed", 1)[0];
      const NpyArray fp = f.get(p + "fp16", "<f2", -1);
      if (fp.shape.size() != 3)
        throw std::runtime_error(f.z.where(p + "fp16") + ": want (KV heads, L - packed, D)");
      if (b == 0 && role == 0) c.Hkv = (int)fp.shape[0];
      if (fp.shape[0] != c.Hkv || fp.shape[1] != (int64_t)c.lengths[b] - np || fp.shape[2] != c.D)
        throw std::runtime_error(f.z.where(p + "fp16") + ": shape " + shape_string(fp.shape) + ", want (" +
                                 std::to_string(c.Hkv) + ", " + std::to_string((int64_t)c.lengths[b] - np) +
                                 ", " + std::to_string(c.D) + ")");
      DecodeRole r;
      r.fp16 = f.raw<uint16_t>(fp);
      if (np < 0 || np > c.lengths[b])
        throw std::runtime_error(f.z.where(p + "packed") + ": " + std::to_string(np));
      if (np > 0) {
        const std::optional<QuantizerSpec> spec =
            role == 0 ? method->key_quantizer() : method->value_quantizer();
        if (!spec)
          throw std::runtime_error(f.z.where(p + "packed") + ": the method packs no tokens of this role");
        QuantizedTensor t;
        t.spec = *spec;
        t.shape = {c.Hkv, np, c.D};
        const PackedLayout lay = make_layout(t.shape, t.spec);
        t.group = (int)lay.G;
        t.boost_k = (int)lay.k;
        t.codes = f.raw<uint8_t>(f.get(p + "codes", "|u1", lay.codes_bytes()));
        const int64_t n = lay.n_params();
        t.scale = f.params(p + "scale", spec->params, n);
        if (spec->scheme == Scheme::Asym) t.zero = f.params(p + "zero", spec->params, n);
        if (spec->boosted()) {
          t.high = f.raw<uint8_t>(f.get(p + "high", "|u1", lay.high_bytes()));
          t.boost_index = f.raw<uint8_t>(f.get(p + "boost_index", "|u1", lay.index_bytes()));
        }
        r.packed = std::move(t);
      }
      (role == 0 ? c.k : c.v).push_back(std::move(r));
    }
  try {
    check_decode_case(c);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("'" + path + "': " + e.what());
  }
  return c;
}

struct MakeArgs {
  std::string method = "kivi-2", lengths = "300,1000", out;
  int Hq = 32, Hkv = 8, D = 128;
  uint64_t seed = 1;
};
struct VerifyArgs {
  std::string case_file, out_file, operands = "fp16";
  double atol = 0;
};

std::vector<int> parse_lengths(const std::string& s) {
  std::vector<int> v;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    const std::string x = s.substr(i, j - i);
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(x, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != x.size() || x.empty() || n < 1 || n > (1 << 24))
      throw std::invalid_argument("--lengths: '" + x + "' is not a length in [1, 16777216]");
    v.push_back((int)n);
    i = j + 1;
  }
  return v;
}

void run_make(const MakeArgs& a) {
  check_outputs_not_inputs({{"--out", a.out}}, {});
  const MethodPtr m = parse_method(a.method);
  const DecodeCase c = make_decode_case(*m, parse_lengths(a.lengths), a.Hq, a.Hkv, a.D, a.seed);
  write_case(a.out, c);
  std::printf("%s: %s, %d sequences, %d/%d heads, D %d\n", a.out.c_str(), c.method.c_str(), c.batch(), c.Hq,
              c.Hkv, c.D);
}

int run_verify(const VerifyArgs& a) {
  check_input_file({"CASE", a.case_file});
  check_input_file({"OUT", a.out_file});
  const DecodeCase c = read_case(a.case_file);
  const NpzReader z(a.out_file);
  if (!z.contains("out"))
    throw std::runtime_error(z.where("out") + ": missing (want (B, Hq, D) float32 or float16)");
  const NpyArray o = z.read("out");
  const std::vector<int64_t> want = {c.batch(), c.Hq, c.D};
  if (o.shape != want || (o.descr != "<f4" && o.descr != "<f2"))
    throw std::runtime_error(z.where("out") + ": " + o.descr + " " + shape_string(o.shape) +
                             ", want float32 or float16 " + shape_string(want));
  const TensorView ov = as_tensor(o, a.out_file);
  std::vector<float> out(o.numel());
  for (size_t i = 0; i < out.size(); ++i) out[i] = ov.at((int64_t)i);
  KernelArithmetic ar;
  ar.operand_u = unit_roundoff(a.operands);
  ar.output_u = o.descr == "<f2" ? 0x1p-11 : 0x1p-24;
  const DecodeCheckResult r = check_decode_output(c, out, ar, a.atol);
  std::printf("%-4s %-5s %-8s %-12s %-12s %-8s %s\n", "seq", "head", "channel", "max_err",
              a.atol > 0 ? "atol" : "bound", "err/bnd", "ok");
  int bad = 0;
  for (const DecodeCheckRow& row : r.rows) {
    std::printf("%-4d %-5d %-8d %-12.4g %-12.4g %-8.3g %s\n", row.seq, row.head, row.worst_channel,
                row.max_err, row.bound, row.max_err / row.bound, row.ok ? "ok" : "FAIL");
    bad += !row.ok;
  }
  for (const DecodeCheckRow& row : r.rows)
    if (!row.ok) {
      std::printf("FAIL: sequence %d, head %d, channel %d: |out - ref| = %.6g > %s %.6g\n", row.seq, row.head,
                  row.worst_channel, row.max_err, a.atol > 0 ? "atol" : "bound", row.bound);
      break;
    }
  std::printf("%s: %d of %zu (sequence, head) rows within the %s (operands %s, output %s)\n",
              r.ok() ? "PASS" : "FAIL", (int)r.rows.size() - bad, r.rows.size(),
              a.atol > 0 ? "tolerance" : "bound", a.operands.c_str(), o.descr == "<f2" ? "fp16" : "fp32");
  return r.ok() ? 0 : 1;
}

}  // namespace

static void add_check_attention(CLI::App& app) {
  auto* c = app.add_subcommand(
      "check-attention",
      "Check another decode-attention kernel: make a case in kvlab's packed layout, verify its "
      "output against the fp64 reference (docs/FORMATS.md section 9.4)");
  c->require_subcommand(1);
  auto mk = std::make_shared<MakeArgs>();
  auto* m = c->add_subcommand("make", "Write a decode case: q and a packed cache (.npz)");
  m->add_option("--method", mk->method,
                "KV method with a packed layout (kivi-2, kivi-4, int8, kitty, fp16, ...)")
      ->capture_default_str();
  m->add_option("--lengths", mk->lengths, "tokens per sequence, comma-separated")->capture_default_str();
  m->add_option("--heads", mk->Hq, "query heads")->capture_default_str()->check(CLI::Range(1, 1024));
  m->add_option("--kv-heads", mk->Hkv, "KV heads")->capture_default_str()->check(CLI::Range(1, 1024));
  m->add_option("--head-dim", mk->D, "head dim")->capture_default_str()->check(CLI::Range(1, 1024));
  m->add_option("--seed", mk->seed, "random seed")->capture_default_str();
  m->add_option("--out", mk->out, "case file (.npz)")->required();
  m->callback([mk] { run_make(*mk); });
  auto vf = std::make_shared<VerifyArgs>();
  auto* v = c->add_subcommand("verify",
                              "Check an output (.npz with 'out' (B, Hq, D)) against the reference; exit 1 on "
                              "any head beyond the bound");
  v->add_option("CASE", vf->case_file, "case file from 'make'")->required();
  v->add_option("OUT", vf->out_file, ".npz with 'out'")->required();
  v->add_option("--operands", vf->operands, "the kernel's operand type: fp32, fp16 or bf16 (sums in fp32)")
      ->capture_default_str();
  v->add_option("--atol", vf->atol, "absolute tolerance instead of the bound")->check(CLI::Range(0.0, 1e30));
  v->callback([vf] {
    const int rc = run_verify(*vf);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

KVLAB_COMMAND(42, add_check_attention);

}  // namespace kvlab::cli
