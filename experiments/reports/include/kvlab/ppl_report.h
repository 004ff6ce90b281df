// Output of `kvlab ppl` (kvlab/ppl.h): JSON, CSV and the text table, in the style of kvlab
// eval's reports (docs/FORMATS.md section 10.3). Methods in the order given, the fp16 reference
// first.
#pragma once
#include <ostream>
#include <string>

#include "kvlab/ppl.h"

namespace kvlab {

struct PplSource {
  std::string model;   // the checkpoint path
  std::string text;    // the text or token file
  double seconds = 0;  // wall time of the evaluation
};

// Every number at full precision (shortest round-trip form); per method the pooled numbers and
// a "windows" array with each window's.
void write_ppl_json(std::ostream& out, const PplResult& r, const PplSource& src);
// One row per method and window (window = all for the pooled row); specs quoted (RFC 4180).
void write_ppl_csv(std::ostream& out, const PplResult& r);
// One row per method, then a footer naming the model, text, windows, layers and time.
std::string ppl_table(const PplResult& r, const PplSource& src);

}  // namespace kvlab
