#pragma once

// One upstream attempt's end, and the decision taken on it (docs/design.md §1, §3).
//
// When an attempt ends — its response completed, the transport failed, a
// timer fired, sluice tore it down — the Exchange describes the ending in one
// AttemptEnd value and asks the filter chain for an AttemptVerdict: deliver
// what the attempt produced, retry (after a delay, to a target), or fail with
// a problem. The verdict is returned, never signalled through the Exchange;
// the Exchange alone acts on it, then tells every filter what was decided
// (StreamFilter::onAttemptDone), so observers (spend, circuit breaker,
// throttle) do not depend on the chain's order to learn it. This is the shape
// of Envoy's RetryState::shouldRetry* and Pingora's fail_to_connect /
// error_while_proxy.
//
// AttemptOutcome is the one type for how an attempt ended; its metric label
// (`result` of sluice_upstream_attempts_total) is derived from it in
// common/metrics.h, the retry and circuit-breaker classification
// (`retry.on`, `circuit_breaker.failure_on`) in filters/attempt_outcome.h.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "common/cancel_reason.h"
#include "common/http_message.h"
#include "common/problem.h"

namespace sluice {

/** The kind of ending of one upstream attempt. */
enum class OutcomeKind {
  Status,        // a response head arrived and the response ended; `status` holds its code
  ConnectError,  // no connection (refused, DNS, TLS handshake, connect_timeout)
  Reset,         // the connection/stream broke after it was established (or a protocol error)
  Timeout,       // first-byte or idle timeout of the attempt
  Cancelled,     // sluice tore the attempt down itself (client left, budget, drain, a filter)
};

/**
 * How one attempt ended. A plain value: build it with the named constructors
 * (`AttemptOutcome::fromStatus(503)`, `AttemptOutcome::reset()`, ...).
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
 * The `cause` label of `sluice_retries_total`: the status code as a string
 * ("429", "503") or `connect_error` / `reset` / `timeout` / `cancelled`.
 */
std::string causeLabel(const AttemptOutcome& outcome);

/** Everything known about an attempt when it ends: what the chain decides on. */
struct AttemptEnd {
  AttemptOutcome outcome;
  uint32_t attempt = 1;  // 1-based number of the attempt that ended
  int status = 0;        // the response's status if its head arrived (also when cut later), else 0
  /**
   * The response head a filter held back (encodeHeaders returned
   * StopIteration) and its buffered body (at most kMaxHeldBody bytes): the
   * answer a retry would discard. Null when none is held — none arrived, or
   * it already went to the client. Valid only during the call.
   */
  const ResponseHead* held_response = nullptr;
  std::string_view held_body;
  bool response_started = false;  // something of this request's response reached the client
  /**
   * The upstream cannot have processed the request: connect error, HTTP/2
   * REFUSED_STREAM or GOAWAY. Safe to retry whatever the method.
   */
  bool unprocessed = false;
  /**
   * Response body bytes of this attempt that reached the client: what was
   * handed to the client connection, minus what was still buffered in sluice
   * when the client left (or what a cut drops).
   */
  uint64_t delivered_body_bytes = 0;
  /** The Exchange's cancel_reason so far (first cause), if any. */
  std::optional<CancelReason> cancel_reason;
  /** `finish` mode after the client left: the response was drained and discarded. */
  bool finish_draining = false;
  /**
   * False when the attempt never went upstream: a filter refused it before
   * it was sent and the request moved to a fallback upstream
   * (FilterCallbacks::refuseAttempt). Nothing was billed for it.
   */
  bool sent = true;
};

/**
 * Where the next attempt goes (docs/design.md §5), routed by Exchange::startAttempt().
 * Any attempt to the same upstream prefers another endpoint than the one the
 * last attempt failed on, when one is available.
 */
struct AttemptTarget {
  enum class Kind {
    SameUpstream,  // the upstream of the failed attempt (another endpoint of it if one is up)
    NextFallback,  // the next upstream of the route's fallback chain
  };
  Kind kind = Kind::SameUpstream;

  static constexpr AttemptTarget sameUpstream() { return {Kind::SameUpstream}; }
  static constexpr AttemptTarget nextFallback() { return {Kind::NextFallback}; }
  friend bool operator==(const AttemptTarget&, const AttemptTarget&) = default;
};

/** The chain's decision on an ended attempt. */
struct AttemptVerdict {
  /**
   * The attempt's result is final: its response goes to the client (a held
   * one is released), or, when it ended without a response, the Exchange
   * answers with its own problem for that ending.
   */
  struct Deliver {
    /** A released held answer says `x-should-retry: false` (a client retry cannot help). */
    bool discourage_client_retry = false;
  };
  /** Another attempt after `delay`; the held response (if any) is discarded. */
  struct Retry {
    std::chrono::milliseconds delay{0};
    std::string cause;  // the sluice_retries_total label: "503", "connect_error", ...
    AttemptTarget target;
  };
  /** No further attempt: answer with `problem` (or cut a response under way). */
  struct Fail {
    Problem problem;
  };

  std::variant<Deliver, Retry, Fail> decision;

  static AttemptVerdict deliver() { return {Deliver{}}; }
  static AttemptVerdict retry(std::chrono::milliseconds delay, std::string cause,
                              AttemptTarget target = AttemptTarget::sameUpstream()) {
    return {Retry{delay, std::move(cause), target}};
  }
  static AttemptVerdict fail(Problem problem) { return {Fail{std::move(problem)}}; }

  bool isRetry() const { return std::holds_alternative<Retry>(decision); }
  const Retry* asRetry() const { return std::get_if<Retry>(&decision); }
  const Fail* asFail() const { return std::get_if<Fail>(&decision); }
  const Deliver* asDeliver() const { return std::get_if<Deliver>(&decision); }
};

}  // namespace sluice
