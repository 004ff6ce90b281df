// Machine-readable forms of an EvalResult: JSON (schema: docs/EVAL_JSON.md) and CSV.
// Methods appear sorted by bits per element (both K and V), ties in the order given.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "kvlab/evaluate.h"

namespace kvlab {

// What the result does not know about its source.
struct ReportSource {
  std::string path;   // the dump file
  std::string model;  // free text from the dump
};

std::vector<const MethodEval*> methods_by_bits(const EvalResult& r);

// Every number at full precision (shortest round-trip form); NaN and Inf as null.
void write_eval_json(std::ostream& out, const EvalResult& r, const ReportSource& src);

// One row per method (layer = all), per layer (q_head = all) and per query head; the columns
// are the JSON fields. Text fields are quoted as RFC 4180 asks (specs hold commas).
void write_eval_csv(std::ostream& out, const EvalResult& r);

}  // namespace kvlab
