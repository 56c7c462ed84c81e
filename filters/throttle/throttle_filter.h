#pragma once

// The throttle filter (docs/design.md §3 "Rate-limit throttling"): before each
// attempt it asks the shared QuotaTracker of the attempt's endpoint
// (beforeAttempt's AttemptContext; none when its upstream has no
// `rate_limit`) for admission, so
// sluice holds requests *before* the provider's own 429 when its reported
// quota is nearly spent. A held request waits FIFO, on a timer of its
// Exchange (the quota reset) and on a cross-thread wake-up (another
// response refilled the quota); a client that leaves while queued is
// dropped, never sent. A wait that cannot fit the budget, or a full queue,
// refuses the attempt (`rate_limited`): the Exchange moves the request to
// the route's next fallback upstream, or answers 429 with Retry-After. A queued request holds one
// of the upstream's `circuit_breaker.max_pending` slots while it waits; with none left it is not
// queued but answered 503 `overloaded`. Every response's quota headers are fed back to the tracker.
// The quota key (`rate_limit.key`) is read from the request as sent upstream, after the upstream's
// `headers:` were applied: agents with different dummy keys share the one real quota.
//
// With shared state (docs/design.md §6) a request the local tracker admitted also
// takes a slot of the fleet's quota (GlobalQuota: one Redis round trip,
// bounded by shared_state.timeout; one request and its estimated token need)
// before it goes; when the fleet's quota is spent it goes back to the head of
// the local FIFO until the global reset. Every response's request and token
// quota (the most restrictive one) is reported to the fleet too. No answer in
// time, or Redis down: the local decision stands.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/metrics.h"
#include "filters/circuit_breaker/circuit_breaker.h"
#include "filters/filter.h"
#include "filters/throttle/global_quota.h"
#include "filters/throttle/quota_tracker.h"
#include "filters/throttle/rate_limit_config.h"

namespace sluice {

/** The tokens a request may spend: its output cap plus an input estimate (body bytes / 4). */
uint64_t estimateTokenNeed(std::string_view request_body);

class ThrottleFilter final : public StreamFilter {
 public:
  ThrottleFilter() = default;

  std::string_view name() const override { return "throttle"; }
  FilterStatus decodeComplete(std::string_view body) override;
  Admission beforeAttempt(RequestHead& upstream_request, const AttemptContext& attempt) override;
  FilterStatus encodeHeaders(ResponseHead& response, bool end_stream) override;
  void onAttemptDone(const AttemptEnd& end, const AttemptVerdict& verdict) override;
  void onDestroy() override;
  ~ThrottleFilter() override;

 private:
  /** Acts on the quota's admission: go, keep waiting (re-armed), or refuse (429). */
  Admission apply(const QuotaTracker::Admission& admission);
  /** A later event resolved the waiting attempt (anything but a Wait): tells the Exchange. */
  void resolve(const Admission& admission);
  void poll();
  /** Admitted locally: asks the fleet (Wait while asking), or Continue. */
  Admission confirmGlobally();
  void onGlobalAnswer(const GlobalQuota::Answer& answer);
  void reportGlobally(const QuotaObservation& observation);
  void endFleetProbe(bool answered_without_quota);
  Admission reject(std::chrono::milliseconds retry_after);
  void updateGauges();

  // The attempt's endpoint (bound in beforeAttempt; tracker_ null = not throttled).
  const config::RateLimitConfig* config_ = nullptr;
  QuotaTracker* tracker_ = nullptr;
  CircuitBreaker* breaker_ = nullptr;  // its max_pending bounds the queue across routes and keys
  UpstreamMetrics* metrics_ = nullptr;
  EndpointMetrics* endpoint_metrics_ = nullptr;  // its quota gauges
  GlobalQuota* global_ = nullptr;  // the fleet's side of the quota; null = local state only
  PendingSlot pending_;            // held while queued_
  std::string key_;
  uint64_t token_need_ = 0;
  uint64_t ticket_ = 0;
  bool queued_ = false;
  bool admitted_ = false;
  bool headers_seen_ = false;
  bool confirming_ = false;  // admitted locally, the fleet's answer pending
  bool fleet_probe_ = false;
  // Shared with a pending fleet answer: false once this filter is gone.
  std::shared_ptr<bool> alive_;  // the fleet's probe for key_, nothing reported yet
  MonotonicTime admitted_at_{};
  MonotonicTime queued_at_{};
  TimerId wake_timer_ = 0;
};

}  // namespace sluice
