// Decodes `upstreams[].circuit_breaker`.

#include "filters/circuit_breaker/circuit_breaker_config.h"

#include <optional>

namespace sluice::config {

using detail::Field;

CircuitBreakerConfig decodeCircuitBreaker(detail::FieldReader& reader, const Field& f) {
  CircuitBreakerConfig cb;
  std::optional<Field> cooldown_field, max_cooldown_field;
  reader.decodeMap(
      f,
      {
          {"consecutive_failures",
           [&](const Field& v) { cb.consecutive_failures = reader.u32(v, 1); }},
          {"failure_rate",
           [&](const Field& v) {
             FailureRateConfig& fr = cb.failure_rate;
             reader.decodeMap(
                 v,
                 {
                     {"threshold", [&](const Field& x) { fr.threshold = reader.number(x, 0, 1); }},
                     {"window", [&](const Field& x) { fr.window = reader.duration(x, false); }},
                     {"min_requests", [&](const Field& x) { fr.min_requests = reader.u32(x, 1); }},
                 });
           }},
          {"cooldown",
           [&](const Field& v) {
             cb.cooldown = reader.duration(v, false);
             cooldown_field.emplace(v);
           }},
          {"max_cooldown",
           [&](const Field& v) {
             cb.max_cooldown = reader.duration(v, false);
             max_cooldown_field.emplace(v);
           }},
          {"half_open_probes", [&](const Field& v) { cb.half_open_probes = reader.u32(v, 1); }},
          {"failure_on", [&](const Field& v) { cb.failure_on = decodeOutcomeSet(reader, v); }},
          {"max_requests", [&](const Field& v) { cb.max_requests = reader.u32(v, 1); }},
          {"max_pending", [&](const Field& v) { cb.max_pending = reader.u32(v, 0); }},
      });
  reader.requireOrdered(cb.cooldown, cb.max_cooldown, cooldown_field, max_cooldown_field,
                        "cooldown", "max_cooldown");
  return cb;
}

}  // namespace sluice::config
