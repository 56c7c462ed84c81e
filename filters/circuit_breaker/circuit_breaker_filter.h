#pragma once

// The circuit breaker filter (docs/design.md §3 "Circuit breakers"): asks the
// shared CircuitBreaker of the attempt's endpoint (docs/design.md §5: state is kept
// per endpoint; beforeAttempt's AttemptContext) before every attempt and
// reports how the attempt ended. An open circuit refuses the attempt
// (`circuit_open`): the Exchange moves it to the route's next fallback
// upstream, or answers 503 at once with Retry-After = the cooldown left, and
// nothing is sent upstream; too many attempts in flight refuse it as
// `overloaded` the same way. A half-open probe is judged
// by its response head, not when its (possibly minutes-long) stream ends.
// Half-open with shared state, the attempt whose admission asked the fleet
// for its probe permit is held until the answer: it is the probe when the
// permit was won, and is refused `circuit_open` when a peer holds it.

#include <memory>
#include <optional>

#include "filters/circuit_breaker/circuit_breaker.h"
#include "filters/filter.h"

namespace sluice {

class CircuitBreakerFilter final : public StreamFilter {
 public:
  CircuitBreakerFilter() = default;

  std::string_view name() const override { return "circuit_breaker"; }
  Admission beforeAttempt(RequestHead& upstream_request, const AttemptContext& attempt) override;
  FilterStatus encodeHeaders(ResponseHead& response, bool end_stream) override;
  void onAttemptDone(const AttemptEnd& end, const AttemptVerdict& verdict) override;
  void onDestroy() override;

 private:
  void onPermit(const CircuitAdmission& admission);

  CircuitBreaker* breaker_ = nullptr;          // the attempt's endpoint's
  std::shared_ptr<bool> alive_;                // false once destroyed (a permit answer may follow)
  bool waiting_ = false;                       // held for the fleet's probe permit
  std::optional<CircuitAdmission> admission_;  // the attempt in flight, until reported
};

}  // namespace sluice
