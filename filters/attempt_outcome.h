#pragma once

// How the resilience filters classify an attempt's outcome (common/attempt.h):
// the retry decision (`on`) and the circuit breaker (`failure_on`) both test
// the same value against a config::OutcomeSet.

#include "common/attempt.h"
#include "filters/outcome_set.h"

namespace sluice {

/**
 * True when `outcome` is named by `set` (`retry.on`, `circuit_breaker.failure_on`):
 * a status by exact code or class, the transport kinds by their flags. A
 * cancelled attempt is never in any set: sluice caused it, not the upstream.
 */
inline bool outcomeIn(const config::OutcomeSet& set, const AttemptOutcome& outcome) {
  switch (outcome.kind) {
    case OutcomeKind::Status:
      return set.matchesStatus(outcome.status);
    case OutcomeKind::ConnectError:
      return set.connect_error;
    case OutcomeKind::Reset:
      return set.reset;
    case OutcomeKind::Timeout:
      return set.timeout;
    case OutcomeKind::Cancelled:
      return false;
  }
  return false;
}

}  // namespace sluice
