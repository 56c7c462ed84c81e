#include "filters/throttle/throttle_filter.h"

#include <array>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/json_fields.h"
#include "filters/throttle/quota_headers.h"

namespace sluice {

namespace {

// The fleet's quota is spent and nobody knows its reset yet (its probe is
// out, or a refill was assumed with no report since): ask again this soon.
// Each request held so asks on its own, so a key costs a few Redis calls per
// second per waiting request, and only while no reset is known.
constexpr std::chrono::milliseconds kGlobalQuotaPoll{250};

constexpr std::array<std::string_view, 3> kOutputCapFields = {"max_tokens", "max_completion_tokens",
                                                              "max_output_tokens"};

// True when a JSON text cannot hold any of the output-cap keys: none of their
// names occurs in it, and no \u escape could spell one. Most agent requests
// carry no cap, and lexing a long conversation (~90 instructions per byte in
// nlohmann's lexer) was a third of sluice's per-request cost (PROFILE.md).
// Every cap's name starts with "max_": one search for that instead of one
// per name (a body that has it is scanned, which reads the caps exactly).
bool cannotHoldOutputCap(std::string_view body) {
  static_assert(kOutputCapFields[0].starts_with("max_") &&
                kOutputCapFields[1].starts_with("max_") && kOutputCapFields[2].starts_with("max_"));
  return body.find("\\u") == std::string_view::npos && body.find("max_") == std::string_view::npos;
}

}  // namespace

uint64_t estimateTokenNeed(std::string_view request_body) {
  uint64_t need = (request_body.size() + 3) / 4;
  if (cannotHoldOutputCap(request_body)) return need;
  // Locate the caps without lexing the whole body; decode each with nlohmann.
  std::array<std::string_view, kOutputCapFields.size()> values;
  const bool scanned =
      scanTopLevelMembers(request_body, [&](std::string_view key, std::string_view value) {
        for (size_t i = 0; i < kOutputCapFields.size(); ++i) {
          if (key == kOutputCapFields[i]) values[i] = value;  // the last wins, as in a parse
        }
        return true;
      });
  if (scanned) {
    for (std::string_view value : values) {
      if (value.empty()) continue;
      auto v = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (v.is_number_unsigned()) return need + v.get<uint64_t>();
    }
    return need;
  }
  auto j = nlohmann::json::parse(request_body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    for (std::string_view field : kOutputCapFields) {
      auto it = j.find(field);
      if (it != j.end() && it->is_number_unsigned()) {
        need += it->get<uint64_t>();
        break;
      }
    }
  }
  return need;
}

FilterStatus ThrottleFilter::decodeComplete(std::string_view body) {
  token_need_ = estimateTokenNeed(body);
  return FilterStatus::Continue;
}

Admission ThrottleFilter::beforeAttempt(RequestHead& upstream_request,
                                        const AttemptContext& attempt) {
  // Each attempt's endpoint has its own quota (docs/design.md §5); the previous
  // attempt's ticket ended in onAttemptDone.
  const AttemptDestination& to = attempt.destination;
  tracker_ = to.quota;
  if (tracker_ == nullptr) return Admission::proceed();
  config_ = to.rate_limit;
  breaker_ = to.breaker;
  metrics_ = to.metrics;
  endpoint_metrics_ = to.endpoint_metrics;
  global_ = to.global_quota;
  // The quota is the provider's, so its key is the header as the provider
  // sees it: after the upstream's `headers:` replaced the client's dummy key.
  key_ = quotaKeyFor(*config_, upstream_request.headers);
  headers_seen_ = false;
  // The waker may run on any thread; it only posts back to this Exchange's
  // worker, which drops it if the Exchange is gone by then.
  auto waker = callbacks_->crossThreadWaker([this] { poll(); });
  return apply(tracker_->admit(key_, token_need_, callbacks_->deadline(), std::move(waker)));
}

Admission ThrottleFilter::apply(const QuotaTracker::Admission& admission) {
  using Kind = QuotaTracker::Admission::Kind;
  callbacks_->disarmTimer(wake_timer_);
  wake_timer_ = 0;
  switch (admission.kind) {
    case Kind::Admitted:
      ticket_ = admission.ticket;
      admitted_ = true;
      pending_.release();
      if (queued_) {
        queued_ = false;
        metrics_->throttleWait().Observe(
            std::chrono::duration<double>(callbacks_->clock().now() - queued_at_).count());
      }
      updateGauges();
      admitted_at_ = callbacks_->clock().now();
      return confirmGlobally();
    case Kind::Rejected:
      queued_ = false;
      pending_.release();
      updateGauges();
      return reject(admission.retry_after);
    case Kind::Queued:
      if (!pending_.acquire(*breaker_)) {
        // max_pending requests already wait for this upstream: not one more.
        tracker_->abandon(admission.ticket);
        queued_ = false;
        updateGauges();
        return Admission::refuse(CancelReason::Overloaded, kOverloadedRetryAfter);
      }
      if (!queued_) queued_at_ = callbacks_->clock().now();
      queued_ = true;
      ticket_ = admission.ticket;
      if (admission.wake_at) {
        // A wake_at at or before now is polled again on a later loop turn, never
        // in a hot loop: at least a millisecond from now.
        const MonotonicTime now = callbacks_->clock().now();
        const MonotonicTime at =
            *admission.wake_at > now ? *admission.wake_at : now + std::chrono::milliseconds(1);
        wake_timer_ = callbacks_->armTimer(at, [this] {
          wake_timer_ = 0;
          poll();
        });
      }
      updateGauges();
      return Admission::wait();
  }
  return Admission::wait();
}

void ThrottleFilter::resolve(const Admission& admission) {
  if (!admission.waits()) callbacks_->resolveAttempt(admission);
}

Admission ThrottleFilter::confirmGlobally() {
  if (global_ == nullptr || tracker_->unthrottled(key_)) return Admission::proceed();
  // The answer comes on this worker's own loop, on a later turn (GlobalQuota's
  // contract): no cross-thread post is needed, only to drop it if this filter
  // is gone by then (the post was ~7k instructions per admitted request).
  if (!alive_) alive_ = std::make_shared<bool>(true);
  const bool asked =
      global_->reserve(key_, token_need_, [this, alive = alive_](const GlobalQuota::Answer& a) {
        if (*alive) onGlobalAnswer(a);
      });
  // Redis down: the local decision stands, the fleet will not count it.
  tracker_->awaitingFleet(ticket_, asked);
  if (!asked) return Admission::proceed();
  confirming_ = true;
  return Admission::wait();
}

void ThrottleFilter::onGlobalAnswer(const GlobalQuota::Answer& answer) {
  if (!confirming_) return;
  confirming_ = false;
  tracker_->awaitingFleet(ticket_, false);
  if (answer.kind != GlobalQuota::Answer::Kind::Wait) {
    fleet_probe_ = answer.kind == GlobalQuota::Answer::Kind::Probe;
    callbacks_->resolveAttempt(Admission::proceed());
    return;
  }
  const MonotonicTime now = callbacks_->clock().now();
  if (!answer.wait) {
    // Nobody knows when the fleet's quota frees (its probe is out, or a
    // refill was assumed): keep the local slot and ask again shortly. Like the
    // local probe wait, this never answers 429: the request's own deadline
    // ends it. The key's local queue is not held for it.
    confirming_ = true;
    tracker_->awaitingFleet(ticket_, true);
    wake_timer_ = callbacks_->armTimer(now + kGlobalQuotaPoll, [this] {
      wake_timer_ = 0;
      confirming_ = false;
      resolve(confirmGlobally());
    });
    return;
  }
  // The fleet's quota is spent until a known reset: back to the head of the
  // local FIFO until then, or 429 now when that is beyond the budget.
  const auto wait = std::max(*answer.wait, std::chrono::milliseconds(1));
  admitted_ = false;
  if (now + wait >= callbacks_->deadline()) {
    tracker_->abandon(ticket_);
    resolve(reject(wait));
    return;
  }
  resolve(apply(tracker_->deferAdmitted(ticket_, now + wait)));
}

Admission ThrottleFilter::reject(std::chrono::milliseconds retry_after) {
  // A request whose budget ran out while it waited (the wake-up that found it
  // late ran before the Exchange's deadline timer in the same loop turn) ends
  // as the budget's end, exactly as that timer would have ended it: 504
  // budget_exhausted, not a quota verdict. Only a wait known to outlast the
  // budget, or a full queue, is 429 rate_limited.
  if (callbacks_->clock().now() >= callbacks_->deadline()) {
    return Admission::refuse(CancelReason::BudgetExhausted, std::nullopt);
  }
  return Admission::refuse(CancelReason::RateLimited, retry_after);
}

void ThrottleFilter::endFleetProbe(bool answered_without_quota) {
  if (!fleet_probe_) return;
  fleet_probe_ = false;
  global_->endProbe(key_, answered_without_quota);
}

void ThrottleFilter::reportGlobally(const QuotaObservation& observation) {
  if (global_ == nullptr) return;
  if (!observation.requests && !observation.tokens) {
    endFleetProbe(/*answered_without_quota=*/true);
    return;
  }
  fleet_probe_ = false;  // the report (below) ends the fleet's probe
  const MonotonicTime now = callbacks_->clock().now();
  const auto counter = [&](const Quota& quota, int64_t unanswered) {
    GlobalQuota::Counter c{quota.limit, quota.remaining, std::nullopt, unanswered};
    if (quota.reset_at) {
      c.reset_in = std::chrono::ceil<std::chrono::milliseconds>(*quota.reset_at - now);
    }
    return c;
  };
  // In flight and not in the report: what this replica has sent and the
  // fleet has reserved. A request still waiting for its reservation is not
  // subtracted here: its reservation subtracts it.
  const QuotaTracker::InFlight in_flight = tracker_->fleetUnanswered(key_);
  GlobalQuota::Report report;
  if (observation.requests) report.requests = counter(*observation.requests, in_flight.requests);
  if (observation.tokens) report.tokens = counter(*observation.tokens, in_flight.tokens);
  if (admitted_) {
    report.sent_ago = std::chrono::floor<std::chrono::milliseconds>(now - admitted_at_);
  }
  global_->report(key_, report);
}

void ThrottleFilter::poll() {
  if (!queued_) return;
  resolve(apply(tracker_->poll(ticket_)));
}

FilterStatus ThrottleFilter::encodeHeaders(ResponseHead& response, bool) {
  if (tracker_ == nullptr) return FilterStatus::Continue;
  const QuotaObservation observation =
      observeQuota(response.headers, response.status, callbacks_->clock());
  // By ticket: its send time bounds the latency jitter of relative resets.
  if (admitted_) {
    tracker_->observe(ticket_, observation);
  } else {
    tracker_->observe(key_, observation);
  }
  reportGlobally(observation);
  headers_seen_ = true;
  updateGauges();
  return FilterStatus::Continue;
}

void ThrottleFilter::onAttemptDone(const AttemptEnd&, const AttemptVerdict&) {
  if (tracker_ == nullptr) return;
  // Refused (no slot, or a wait beyond the budget) or never sent: nothing to return.
  if (queued_) tracker_->abandon(ticket_);
  if (confirming_) {
    tracker_->abandon(ticket_);
    confirming_ = admitted_ = false;
  }
  queued_ = false;
  pending_.release();
  callbacks_->disarmTimer(wake_timer_);
  wake_timer_ = 0;
  endFleetProbe(/*answered_without_quota=*/false);  // ended before any header
  if (!admitted_) return;
  tracker_->onAttemptDone(ticket_, headers_seen_);
  admitted_ = false;
}

ThrottleFilter::~ThrottleFilter() {
  if (alive_) *alive_ = false;
}

void ThrottleFilter::onDestroy() {
  if (alive_) *alive_ = false;
  if (tracker_ == nullptr) return;
  callbacks_->disarmTimer(wake_timer_);
  wake_timer_ = 0;
  if (queued_) tracker_->abandon(ticket_);  // a client that left is never sent
  if (confirming_) {
    tracker_->abandon(ticket_);  // admitted, never sent: its slot goes back
  } else if (admitted_) {
    tracker_->onAttemptDone(ticket_, headers_seen_);
  }
  endFleetProbe(/*answered_without_quota=*/false);
  queued_ = admitted_ = confirming_ = false;
  pending_.release();
  updateGauges();
}

void ThrottleFilter::updateGauges() {
  if (endpoint_metrics_ == nullptr) return;
  // One lock for the three values (this runs several times per request).
  const QuotaTracker::GaugeValues values = tracker_->gaugeValues();
  endpoint_metrics_->throttleQueueDepth().Set(static_cast<double>(values.queue_depth));
  if (values.remaining_requests) {
    endpoint_metrics_->setRateLimitRemaining(false,
                                             static_cast<double>(*values.remaining_requests));
  }
  if (values.remaining_tokens) {
    endpoint_metrics_->setRateLimitRemaining(true, static_cast<double>(*values.remaining_tokens));
  }
}

}  // namespace sluice
