#pragma once

// `upstreams[].circuit_breaker` (docs/design.md §2, §3 "Circuit breakers"): when an
// upstream's circuit opens, how long it stays open, and how many attempts
// and waiting requests it holds; and its YAML decoder. config/config.h
// composes it into UpstreamConfig.

#include <chrono>
#include <cstdint>

#include "common/yaml/field_reader.h"
#include "filters/outcome_set.h"

namespace sluice::config {

/** `failure_rate` of a circuit breaker; threshold in [0, 1]. */
struct FailureRateConfig {
  double threshold = 0.5;
  Duration window = std::chrono::seconds(10);
  uint32_t min_requests = 20;
};

/** `upstreams[].circuit_breaker`. Always present; defaults as in the contract. */
struct CircuitBreakerConfig {
  uint32_t consecutive_failures = 5;
  FailureRateConfig failure_rate;
  Duration cooldown = std::chrono::seconds(5);
  Duration max_cooldown = std::chrono::seconds(60);
  uint32_t half_open_probes = 1;
  OutcomeSet failure_on{{}, false, true, true, true, true};
  uint32_t max_requests = 1000;
  uint32_t max_pending = 1000;
};

/**
 * Decodes `circuit_breaker: {consecutive_failures, failure_rate: {threshold,
 * window, min_requests}, cooldown, max_cooldown, half_open_probes,
 * failure_on, max_requests, max_pending}`: the counts are >= 1 but
 * max_pending (may be 0), the durations > 0s, cooldown <= max_cooldown.
 */
CircuitBreakerConfig decodeCircuitBreaker(detail::FieldReader& reader, const detail::Field& f);

}  // namespace sluice::config
