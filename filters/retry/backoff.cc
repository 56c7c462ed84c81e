#include "filters/retry/backoff.h"

#include <algorithm>
#include <cmath>

namespace sluice {

using std::chrono::milliseconds;

milliseconds backoffCeiling(const config::BackoffConfig& backoff, uint32_t retry_index) {
  const int64_t base = backoff.base.count();
  const int64_t max = backoff.max.count();
  if (base <= 0 || max <= 0) return milliseconds(0);
  // Double until the cap is reached; at most 63 steps, so no overflow and no
  // dependence on how large retry_index is.
  int64_t ceiling = base;
  for (uint32_t i = 0; i < retry_index && ceiling < max; ++i) {
    ceiling = (ceiling > max / 2) ? max : ceiling * 2;
  }
  return milliseconds(std::min(ceiling, max));
}

milliseconds fullJitterDelay(const config::BackoffConfig& backoff, uint32_t retry_index,
                             const UniformRandom& random) {
  const int64_t ceiling = backoffCeiling(backoff, retry_index).count();
  if (ceiling <= 0) return milliseconds(0);
  double r = random ? random() : 0.0;
  if (!(r >= 0.0)) r = 0.0;  // also catches NaN
  if (r >= 1.0) r = std::nextafter(1.0, 0.0);
  // floor(r * (ceiling + 1)) is uniform over the integers 0..ceiling. In
  // double so that a ceiling near INT64_MAX cannot overflow.
  const double delay = std::floor(r * (static_cast<double>(ceiling) + 1.0));
  if (delay >= static_cast<double>(ceiling)) return milliseconds(ceiling);
  return milliseconds(static_cast<int64_t>(delay));
}

milliseconds retryDelay(const config::BackoffConfig& backoff, uint32_t retry_index,
                        std::optional<milliseconds> retry_after_hint, bool respect_retry_after,
                        const UniformRandom& random) {
  const milliseconds jitter = fullJitterDelay(backoff, retry_index, random);
  if (respect_retry_after && retry_after_hint && *retry_after_hint > jitter) {
    return *retry_after_hint;
  }
  return jitter;
}

}  // namespace sluice
