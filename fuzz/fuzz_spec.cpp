// Text options: quantizer specs, method specs (every registered family, vq included), VQ specs,
// --layers and --queries ranges.
#include <exception>
#include <string>

#include "kvlab/method.h"
#include "kvlab/selection.h"
#include "kvlab/spec.h"
#include "kvlab/vq.h"
#include "kvlab/vq_method.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool registered = (kvlab::register_vq_method(), true);
  (void)registered;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto attempt = [](auto&& fn) {
    try {
      fn();
    } catch (const std::exception&) {}
  };
  attempt([&] { (void)kvlab::to_string(kvlab::parse_quantizer(text)); });
  attempt([&] {
    // vq and kvquant (calib=dump:) open files
    if (text.find("vq:") == std::string::npos && text.find("dump:") == std::string::npos)
      (void)kvlab::parse_method(text)->spec();
  });
  attempt([&] { (void)kvlab::to_string(kvlab::parse_vq_spec(text)); });
  attempt([&] { (void)kvlab::resolve_layers(kvlab::parse_layers(text), 32); });
  attempt([&] { (void)kvlab::parse_queries(text); });
  return 0;
}
