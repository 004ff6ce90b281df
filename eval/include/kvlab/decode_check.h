// Checking anyone's decode-attention kernel (`kvlab check-attention`, docs/FORMATS.md section 9.4):
// a decode case (queries and a packed cache in kvlab's layout, section 9.1) made by core, the fp64
// reference over core's K_hat / V_hat, and a stated error bound for a kernel that rounds its
// operands to fp32, fp16 or bf16 and accumulates in fp32, checked per sequence, head and channel.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/quantizer.h"

namespace kvlab {

// One role (keys or values) of one sequence: tokens [S, S + packed) as core's quantize of the
// (KV heads, packed, D) slice, the others as fp16 rows (the sink [0, S) then [S + packed, L)).
struct DecodeRole {
  std::optional<QuantizedTensor> packed;  // absent: no packed tokens
  std::vector<uint16_t> fp16;             // (KV heads, L - packed, D) fp16 bits
  int64_t packed_tokens() const { return packed ? packed->tokens() : 0; }
};

struct DecodeCase {
  std::string method;  // canonical spec
  int Hq = 0, Hkv = 0, D = 0;
  std::vector<int> lengths, sinks;  // per sequence: L_b, S_b
  std::vector<float> q;             // (B, Hq, D)
  std::vector<DecodeRole> k, v;     // per sequence
  int batch() const { return (int)lengths.size(); }
};

// Random keys (a few large channels, as real keys), values and queries, quantized with the
// method's schedule. Throws std::invalid_argument for a method without key and value quantizers
// (other than fp16), Hq not a multiple of Hkv, or a length < 1.
DecodeCase make_decode_case(const Method& m, const std::vector<int>& lengths, int Hq, int Hkv, int D,
                            uint64_t seed);

// Checks a case read from a file: shapes agree with the method's schedule and each other.
// Throws std::invalid_argument naming the sequence, role and part.
void check_decode_case(const DecodeCase& c);

// K_hat or V_hat of sequence b, (KV heads, L, D) fp32: core's dequantize and the fp16 rows.
std::vector<float> decode_case_hat(const DecodeCase& c, int b, bool keys);

// How the checked kernel computes: operands (dequantized K and V, q, probabilities) rounded
// with unit roundoff operand_u; products and sums in fp32 in any order; the output stored with
// output_u (fp32 or fp16).
struct KernelArithmetic {
  double operand_u = 0x1p-11;  // fp16
  double output_u = 0x1p-24;   // fp32
};
double unit_roundoff(const std::string& type);  // "fp32", "fp16", "bf16"; throws naming the type

struct DecodeCheckRow {
  int seq = 0, head = 0, worst_channel = 0;
  double max_err = 0, bound = 0;  // bound < 0: none (set atol)
  bool ok = false;
};
struct DecodeCheckResult {
  std::vector<DecodeCheckRow> rows;  // per (sequence, query head)
  bool ok() const;
};
// out: (B, Hq, D). atol > 0 replaces the bound by that absolute tolerance.
DecodeCheckResult check_decode_output(const DecodeCase& c, const std::vector<float>& out,
                                      const KernelArithmetic& arith, double atol = 0);

}  // namespace kvlab
