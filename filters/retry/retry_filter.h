#pragma once

// The retry filter (docs/design.md §3 "Retries"): the policy side of the Exchange's
// attempt loop. It holds back answers it may retry (encodeHeaders returns
// StopIteration for a retriable status, so nothing reaches the client yet),
// decides when each attempt ends (decideAttempt → decideRetry: `on` causes,
// retry-safety, attempts left, Retry-After vs. the remaining budget, the
// retry budget, an RFC 9457 `is_retriable`), and returns a Retry verdict with
// a full-jitter backoff to the Exchange. It also marks answers a client retry
// cannot improve with `x-should-retry: false` — upstream answers it forwards
// (a held one through its Deliver verdict) and sluice's own problems alike
// (encodeLocalReply) — so agent SDKs do not stack retries on ours.

#include <string>

#include "filters/filter.h"
#include "filters/retry/retry_config.h"
#include "filters/retry/retry_decision.h"

namespace sluice {

class RetryFilter final : public StreamFilter {
 public:
  /** `budget` is the route's retry budget, shared by every request on it. */
  RetryFilter(const config::RetryConfig& config, RetryBudget& budget)
      : config_(config), budget_(budget) {}

  std::string_view name() const override { return "retry"; }
  FilterStatus decodeHeaders(RequestHead& request) override;
  FilterStatus encodeHeaders(ResponseHead& response, bool end_stream) override;
  AttemptVerdict decideAttempt(const AttemptEnd& end, AttemptVerdict proposed) override;
  void onAttemptDone(const AttemptEnd& end, const AttemptVerdict& verdict) override;
  void encodeLocalReply(Problem& problem) override;
  void onDestroy() override;

 private:
  /** What is left of the request's deadline (24 h when it has none). */
  std::chrono::milliseconds remainingBudget() const;
  /** True when a response with `status` could be retried at all (so worth holding). */
  bool mayRetryStatus(const ResponseHead& response) const;
  void releaseSlot();

  const config::RetryConfig& config_;
  RetryBudget& budget_;
  std::string method_;
  bool has_idempotency_key_ = false;
  bool counted_active_ = false;
  bool slot_held_ = false;  // a retry budget slot taken for the retry attempt (in flight or next)
  bool wait_exceeded_budget_ = false;  // the last decision: the retry's wait did not fit
};

}  // namespace sluice
