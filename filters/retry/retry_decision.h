#pragma once

// The retry decision (DESIGN.md §3 "Retries") as a pure function of what the
// Exchange knows when an attempt ends, plus RetryBudget, the one piece of
// shared state: a cap on retries in flight relative to active requests, so a
// failing upstream cannot be hit with a retry storm (Envoy's retry budget).
//
// Checks, in order; the first that fails is the reason:
//   1. response_started        something already went downstream (Pingora's rule)
//   2. not_retriable           outcome not in `on` (problem+json / x-should-retry override)
//   3. not_idempotent          idempotent: never, or auto and not a safe method / no key
//   4. body_too_large          request body above max_body was streamed, not kept
//   5. attempts_exhausted      this was attempt `attempts`
//   6. wait_exceeds_budget     the delay would not leave any budget for the retry
//   7. retry_budget_exhausted  RetryBudget refused (checked last: it takes a slot)

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/http_headers.h"
#include "filters/attempt_outcome.h"
#include "filters/retry/backoff.h"
#include "filters/retry/retry_config.h"

namespace sluice {

/**
 * Retries in flight per route, bounded by max(min_retries, active *
 * budget_percent / 100). Thread-safe and lock-free; shared by all workers.
 * Each started request calls onRequestStart()/onRequestEnd() once; each
 * successful tryAcquireRetry() is matched by one releaseRetry() when that
 * retry attempt ends.
 */
class RetryBudget {
 public:
  explicit RetryBudget(uint32_t budget_percent, uint32_t min_retries = 3)
      : budget_percent_(budget_percent), min_retries_(min_retries) {}

  /** A request became active (counted whether or not it ever retries). */
  void onRequestStart() { active_.fetch_add(1, std::memory_order_relaxed); }
  /** An active request finished. */
  void onRequestEnd() { active_.fetch_sub(1, std::memory_order_relaxed); }

  /**
   * Takes a retry slot if retries in flight are below the current cap;
   * otherwise counts an overflow and returns false.
   */
  bool tryAcquireRetry();
  /** Gives back a slot taken by tryAcquireRetry(). */
  void releaseRetry() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }

  /** The current cap: max(min_retries, active * budget_percent / 100). */
  uint64_t maxRetriesInFlight() const;
  /** Changes the percentage (config reload). */
  void setBudgetPercent(uint32_t percent) { budget_percent_.store(percent); }

  uint64_t activeRequests() const { return active_.load(std::memory_order_relaxed); }
  uint64_t retriesInFlight() const { return in_flight_.load(std::memory_order_relaxed); }
  /** How many retries were refused by the budget since construction. */
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint32_t> budget_percent_;
  const uint32_t min_retries_;
  std::atomic<uint64_t> active_{0};
  std::atomic<uint64_t> in_flight_{0};
  std::atomic<uint64_t> overflows_{0};
};

/** Why an attempt is not retried. The strings are stable (tests, logs). */
enum class NoRetryReason {
  None,  // it is retried
  ResponseStarted,
  NotRetriable,
  NotIdempotent,
  BodyTooLarge,
  AttemptsExhausted,
  WaitExceedsBudget,
  RetryBudgetExhausted,
};

/** "response_started", "not_retriable", ...; "" for None. */
std::string_view toString(NoRetryReason reason);

/** Everything the decision reads. Non-owning; valid only for the call. */
struct RetryInput {
  const config::RetryConfig* config = nullptr;  // required
  uint32_t attempt = 1;                         // 1-based number of the attempt that ended
  AttemptOutcome outcome;
  const HeaderMap* response_headers = nullptr;  // null when no response head arrived
  // The response body if the caller buffered it (only error bodies are worth
  // it). Read only when the Content-Type is application/problem+json.
  std::string_view response_body;
  bool response_started = false;  // any byte of the response sent downstream
  std::string_view method;        // request method, e.g. "POST"
  bool has_idempotency_key = false;
  // The upstream cannot have processed the attempt (connect error, HTTP/2
  // REFUSED_STREAM / GOAWAY): retried whatever the method's idempotency, when
  // `on` names connect_error or reset.
  bool unprocessed = false;
  // Whether the request body was kept for replay; false when it exceeded max_body.
  bool body_replayable = true;
  std::chrono::milliseconds remaining_budget{0};  // what is left of the request's deadline
  // Optional: the route's budget. When set and everything else allows a
  // retry, a slot is taken from it (RetryDecision::budget_acquired).
  RetryBudget* retry_budget = nullptr;
  // Clock for Retry-After HTTP-dates and quota resets; null = the real clock.
  const Clock* clock = nullptr;
  // Random source for the jitter; empty = threadLocalUniform().
  UniformRandom random;
};

/** The verdict. */
struct RetryDecision {
  bool retry = false;
  NoRetryReason reason = NoRetryReason::None;
  // The `cause` label of sluice_retries_total: "503", "connect_error", ...
  std::string cause;
  // The wait before the retry (when retry), or the wait that did not fit
  // (when wait_exceeds_budget); 0 otherwise.
  std::chrono::milliseconds delay{0};
  // What the upstream asked for (Retry-After & co., or an exhausted quota's
  // reset), whether or not it was honoured. Useful for the answer's own
  // Retry-After when sluice gives up.
  std::optional<std::chrono::milliseconds> upstream_wait;
  // True when a RetryBudget slot was taken: the caller must releaseRetry()
  // once the retry attempt ends (or if it abandons the retry).
  bool budget_acquired = false;
};

/**
 * Whether the request is retry-safe under `mode`: always / never, or auto =
 * GET, HEAD, OPTIONS, PUT, DELETE, TRACE (RFC 9110 §9.2.2) or carrying an
 * Idempotency-Key.
 */
bool isRetrySafe(config::IdempotencyMode mode, std::string_view method, bool has_idempotency_key);

/**
 * The upstream's own verdict on retrying, if it gave one: an RFC 9457
 * problem body's `is_retriable` (else `retryable`) boolean when the
 * Content-Type is application/problem+json, else an `x-should-retry:
 * true|false` header (what the OpenAI and Anthropic SDKs obey). Malformed
 * input is ignored. nullopt = no verdict, use the `on` list.
 */
std::optional<bool> upstreamRetryVerdict(const HeaderMap* headers, std::string_view body);

/** What sluice knows when it answers with an error of its own (DESIGN.md §3, §8). */
struct ClientRetryInput {
  uint32_t attempts = 0;  // attempts this request made (a refused admission included)
  // The wait the answer asks for (its Retry-After), if any; none = no wait.
  std::optional<std::chrono::milliseconds> wait;
  std::chrono::milliseconds remaining_budget{0};  // what is left of the request's deadline
  // sluice itself gave up a retry because its wait did not fit the budget.
  bool retry_wait_exceeded_budget = false;
};

/**
 * The longest wait sluice hands to an agent SDK as retriable. The OpenAI and
 * Anthropic SDKs sleep a `retry-after-ms` / `Retry-After` only below 60 s;
 * a longer one they replace with their own backoff (or, in some versions,
 * sleep it whole), and every SDK retry starts a new budget: a call could take
 * its budget once per SDK attempt plus the waits. At or above this, the
 * answer says `x-should-retry: false` and the agent decides.
 */
inline constexpr std::chrono::milliseconds kClientRetryMaxWait = std::chrono::seconds(60);

/**
 * Whether an agent SDK retrying sluice's error could help ("No retry storms
 * across layers"): not once sluice made more than one attempt (3 × 3 = 9
 * calls), not when the answer's wait does not fit the remaining budget (an
 * exact fit fails, as for sluice's own retries), not when it reaches
 * kClientRetryMaxWait, not when sluice's own retry did not fit it. The answer
 * then says `x-should-retry: false` and `is_retriable: false`.
 */
bool clientRetryMayHelp(const ClientRetryInput& input);

/**
 * The decision. Pure apart from the optional RetryBudget slot. The delay is
 * full jitter for retry n = attempt - 1, raised to the upstream's wait when
 * `respect_retry_after`.
 */
RetryDecision decideRetry(const RetryInput& input);

}  // namespace sluice
