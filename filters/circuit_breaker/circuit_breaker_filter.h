#pragma once

// The circuit breaker filter (DESIGN.md §3 "Circuit breakers"): asks the
// upstream's shared CircuitBreaker before every attempt and reports how the
// attempt ended. An open circuit answers 503 `circuit_open` at once with
// Retry-After = the cooldown left, and nothing is sent upstream; too many
// attempts in flight answer 503 `overloaded`. A half-open probe is judged
// by its response head, not when its (possibly minutes-long) stream ends.

#include <optional>

#include "filters/circuit_breaker/circuit_breaker.h"
#include "filters/filter.h"

namespace sluice {

class CircuitBreakerFilter final : public StreamFilter {
 public:
  explicit CircuitBreakerFilter(CircuitBreaker& breaker) : breaker_(breaker) {}

  std::string_view name() const override { return "circuit_breaker"; }
  FilterStatus beforeAttempt(RequestHead& upstream_request) override;
  FilterStatus encodeHeaders(ResponseHead& response, bool end_stream) override;
  void onAttemptDone(const AttemptEnd& end, const AttemptVerdict& verdict) override;
  void onDestroy() override;

 private:
  CircuitBreaker& breaker_;
  std::optional<CircuitAdmission> admission_;  // the attempt in flight, until reported
};

}  // namespace sluice
