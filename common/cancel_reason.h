#pragma once

// Why an Exchange stopped before completing (docs/design.md §4). The set is closed:
// these strings are metric label values and appear in problem+json bodies.

#include <optional>
#include <string_view>

namespace sluice {

enum class CancelReason {
  ClientDisconnect,
  ClientStalled,  // connected but not reading: nothing accepted for limits.send_timeout
  BudgetExhausted,
  CircuitOpen,
  RateLimited,
  Overloaded,
  UpstreamTimeout,
  Draining,
  UpstreamReset,    // the upstream broke a response already under way to the client
  RunCancelled,     // the request's run (or an ancestor run) was cancelled
  RunDeadline,      // the request's run reached its deadline
  RunSpendCap,      // the request's run (or an ancestor run) reached its spend cap
  ClientAbandoned,  // closed without reading what it was sent (a leak only: nothing is cancelled)
};

inline constexpr CancelReason kAllCancelReasons[] = {
    CancelReason::ClientDisconnect, CancelReason::ClientStalled, CancelReason::BudgetExhausted,
    CancelReason::CircuitOpen,      CancelReason::RateLimited,   CancelReason::Overloaded,
    CancelReason::UpstreamTimeout,  CancelReason::Draining,      CancelReason::UpstreamReset,
    CancelReason::RunCancelled,     CancelReason::RunDeadline,   CancelReason::RunSpendCap,
    CancelReason::ClientAbandoned,
};

/** The label value, e.g. "client_disconnect". */
constexpr std::string_view toString(CancelReason r) {
  switch (r) {
    case CancelReason::ClientDisconnect:
      return "client_disconnect";
    case CancelReason::ClientStalled:
      return "client_stalled";
    case CancelReason::BudgetExhausted:
      return "budget_exhausted";
    case CancelReason::CircuitOpen:
      return "circuit_open";
    case CancelReason::RateLimited:
      return "rate_limited";
    case CancelReason::Overloaded:
      return "overloaded";
    case CancelReason::UpstreamTimeout:
      return "upstream_timeout";
    case CancelReason::Draining:
      return "draining";
    case CancelReason::UpstreamReset:
      return "upstream_reset";
    case CancelReason::RunCancelled:
      return "run_cancelled";
    case CancelReason::RunDeadline:
      return "run_deadline";
    case CancelReason::RunSpendCap:
      return "run_spend_cap";
    case CancelReason::ClientAbandoned:
      return "client_abandoned";
  }
  return "unknown";
}

}  // namespace sluice
