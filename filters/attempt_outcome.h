#pragma once

// How one upstream attempt ended, as the resilience filters see it. The retry
// decision (`on`) and the circuit breaker (`failure_on`) both classify the same
// value against a config::OutcomeSet, and the metrics layer labels it, so the
// type lives beside the filters rather than inside one of them.

#include <string>
#include <string_view>

#include "config/config.h"

namespace sluice {

/** The kind of ending of one upstream attempt. */
enum class OutcomeKind {
  Status,        // a response head arrived; `status` holds its code
  ConnectError,  // no connection (refused, DNS, TLS handshake, connect_timeout)
  Reset,         // the connection/stream broke after it was established
  Timeout,       // first-byte or idle timeout of the attempt
  Cancelled,     // sluice tore the attempt down itself (client left, budget, drain)
};

/**
 * One attempt's outcome. A plain value: build it with the named constructors
 * (`AttemptOutcome::status(503)`, `AttemptOutcome::reset()`, ...).
 */
struct AttemptOutcome {
  OutcomeKind kind = OutcomeKind::Status;
  int status = 0;  // only meaningful for OutcomeKind::Status

  static constexpr AttemptOutcome fromStatus(int code) { return {OutcomeKind::Status, code}; }
  static constexpr AttemptOutcome connectError() { return {OutcomeKind::ConnectError, 0}; }
  static constexpr AttemptOutcome reset() { return {OutcomeKind::Reset, 0}; }
  static constexpr AttemptOutcome timeout() { return {OutcomeKind::Timeout, 0}; }
  static constexpr AttemptOutcome cancelled() { return {OutcomeKind::Cancelled, 0}; }

  bool isStatus() const { return kind == OutcomeKind::Status; }
  friend bool operator==(const AttemptOutcome&, const AttemptOutcome&) = default;
};

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

/**
 * The `cause` label of `sluice_retries_total`: the status code as a string
 * ("429", "503") or `connect_error` / `reset` / `timeout` / `cancelled`.
 */
inline std::string causeLabel(const AttemptOutcome& outcome) {
  switch (outcome.kind) {
    case OutcomeKind::Status:
      return std::to_string(outcome.status);
    case OutcomeKind::ConnectError:
      return "connect_error";
    case OutcomeKind::Reset:
      return "reset";
    case OutcomeKind::Timeout:
      return "timeout";
    case OutcomeKind::Cancelled:
      return "cancelled";
  }
  return "unknown";
}


}  // namespace sluice
