#pragma once

// The retry filter (DESIGN.md §3 "Retries"): the policy side of the Exchange's
// attempt loop. It holds back answers it may retry (encodeHeaders returns
// StopIteration for a retriable status, so nothing reaches the client yet),
// decides when each attempt ends (decideRetry: `on` causes, retry-safety,
// attempts left, Retry-After vs. the remaining budget, the retry budget, an
// RFC 9457 `is_retriable`), and asks the Exchange for another attempt after
// a full-jitter backoff. It also sets `x-should-retry: false` on answers a
// client retry cannot improve — upstream answers it forwards and sluice's own
// problems alike (encodeLocalReply) — so agent SDKs do not stack retries on ours.

#include <string>

#include "config/config.h"
#include "filters/retry/retry_decision.h"
#include "proxy/filter.h"

namespace sluice {

class RetryFilter final : public StreamFilter {
 public:
  /** `budget` is the route's retry budget, shared by every request on it. */
  RetryFilter(const config::RetryConfig& config, RetryBudget& budget)
      : config_(config), budget_(budget) {}

  std::string_view name() const override { return "retry"; }
  FilterStatus decodeHeaders(RequestHead& request) override;
  FilterStatus encodeHeaders(ResponseHead& response, bool end_stream) override;
  void onAttemptEnd(const AttemptEnd& end) override;
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
  bool slot_held_ = false;  // a retry budget slot taken for the attempt in flight
  bool wait_exceeded_budget_ = false;  // the last decision: the retry's wait did not fit
};

/** The attempt outcome the retry and circuit logic classify, from the Exchange's summary. */
AttemptOutcome toAttemptOutcome(const AttemptEnd& end);

}  // namespace sluice
