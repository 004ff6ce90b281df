// run.c's sampler: argmax at temperature 0; otherwise a draw from softmax(logits / T), over the
// top-p nucleus when asked, with run.c's xorshift RNG so a seed gives the same tokens.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kvlab/generate.h"

namespace kvlab {

Sampler::Sampler(float temperature, float top_p, uint64_t seed)
    : temperature_(temperature), top_p_(top_p), state_(seed) {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw std::invalid_argument("temperature must be a finite number >= 0, got " +
                                std::to_string(temperature));
  // run.c samples the full distribution for any top_p outside (0, 1); a typo like -0.5 would
  // then pass silently, so only (0, 1] is accepted (1: off).
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw std::invalid_argument("top_p must be in (0, 1] (1: off), got " + std::to_string(top_p));
  // xorshift stays at zero forever from a zero state.
  if (seed == 0) throw std::invalid_argument("seed must be nonzero");
}

float Sampler::random_f32() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const uint32_t r = (uint32_t)((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  return (float)(r >> 8) / 16777216.0f;
}

int32_t Sampler::sample(std::vector<float>& logits) {
  const int32_t n = (int32_t)logits.size();
  if (temperature_ == 0.0f)  // first maximum: ties go to the lowest id
    return (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());

  float mx = -INFINITY, sum = 0.0f;
  for (float& x : logits) mx = std::max(mx, x /= temperature_);
  for (float& x : logits) sum += (x = std::exp(x - mx));
  for (float& x : logits) x /= sum;
  const float coin = random_f32();

  if (top_p_ <= 0.0f || top_p_ >= 1.0f) {
    float cdf = 0.0f;
    for (int32_t i = 0; i < n; ++i)
      if (coin < (cdf += logits[i])) return i;
    return n - 1;  // rounding left the cdf short of 1
  }

  // Nucleus: tokens below (1 - p) / (n - 1) cannot be in it, so they are dropped before sorting.
  const float cutoff = (1.0f - top_p_) / (float)(n - 1);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; ++i)
    if (logits[i] >= cutoff) ids.push_back(i);
  if (ids.empty())  // only a near-uniform distribution with a tiny p gets here
    ids.push_back((int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  size_t last = ids.size() - 1;
  float mass = 0.0f;
  for (size_t i = 0; i < ids.size(); ++i) {
    mass += logits[ids[i]];
    if (mass > top_p_) {
      last = i;
      break;
    }
  }
  const float r = coin * mass;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i)
    if (r < (cdf += logits[ids[i]])) return ids[i];
  return ids[last];
}

}  // namespace kvlab
