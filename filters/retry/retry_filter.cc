#include "filters/retry/retry_filter.h"

#include <algorithm>

namespace sluice {

FilterStatus RetryFilter::decodeHeaders(RequestHead& request) {
  method_ = request.method;
  has_idempotency_key_ = request.headers.has("idempotency-key");
  budget_.onRequestStart();
  counted_active_ = true;
  return FilterStatus::Continue;
}

bool RetryFilter::mayRetryStatus(const ResponseHead& response) const {
  // A body above retry.max_body is streamed and gone once sent (the Exchange knows).
  if (response.status < 400 || !callbacks_->requestBodyReplayable()) return false;
  if (callbacks_->attemptNumber() >= config_.attempts) return false;
  if (!isRetrySafe(config_.idempotent, method_, has_idempotency_key_)) return false;
  if (outcomeIn(config_.on, AttemptOutcome::fromStatus(response.status))) return true;
  // A problem+json body may declare itself retriable whatever the status says.
  const auto type = response.headers.get("content-type");
  return type && type->find("application/problem+json") != std::string_view::npos;
}

FilterStatus RetryFilter::encodeHeaders(ResponseHead& response, bool /*end_stream*/) {
  if (mayRetryStatus(response)) return FilterStatus::StopIteration;  // decided in decideAttempt
  // sluice already retried: a client retry would multiply the calls.
  if (callbacks_->attemptNumber() > 1) response.headers.set("x-should-retry", "false");
  return FilterStatus::Continue;
}

AttemptVerdict RetryFilter::decideAttempt(const AttemptEnd& end, AttemptVerdict proposed) {
  releaseSlot();  // the retry this slot paid for has ended
  if (end.outcome.kind == OutcomeKind::Cancelled) return proposed;

  RetryInput input;
  input.config = &config_;
  input.attempt = end.attempt;
  input.outcome = end.outcome;
  input.response_headers = end.held_response != nullptr ? &end.held_response->headers : nullptr;
  input.response_body = end.held_body;
  input.response_started = end.response_started;
  input.method = method_;
  input.has_idempotency_key = has_idempotency_key_;
  input.unprocessed = end.unprocessed;
  input.body_replayable = callbacks_->requestBodyReplayable();
  input.remaining_budget = remainingBudget();
  input.retry_budget = &budget_;
  input.clock = &callbacks_->clock();
  const RetryDecision decision = decideRetry(input);
  wait_exceeded_budget_ = decision.reason == NoRetryReason::WaitExceedsBudget;

  if (decision.retry) {
    slot_held_ = decision.budget_acquired;
    return AttemptVerdict::retry(decision.delay, decision.cause);
  }
  AttemptVerdict::Deliver* deliver = std::get_if<AttemptVerdict::Deliver>(&proposed.decision);
  if (deliver != nullptr && end.held_response != nullptr &&
      (input.attempt > 1 || decision.reason == NoRetryReason::WaitExceedsBudget ||
       (decision.upstream_wait && *decision.upstream_wait >= kClientRetryMaxWait))) {
    // The answer goes to the client now; retrying it there cannot help (or
    // its wait is longer than an SDK should sleep on its own).
    deliver->discourage_client_retry = true;
  }
  return proposed;
}

void RetryFilter::onAttemptDone(const AttemptEnd&, const AttemptVerdict& verdict) {
  // A retry the Exchange did not act on (it is cancelling) needs no slot.
  if (!verdict.isRetry()) releaseSlot();
}

void RetryFilter::encodeLocalReply(Problem& problem) {
  if (!problem.is_retriable) return;
  ClientRetryInput input;
  input.attempts = callbacks_->attemptNumber();
  input.wait = problem.retry_after;
  input.remaining_budget = remainingBudget();
  input.retry_wait_exceeded_budget = wait_exceeded_budget_;
  problem.is_retriable = clientRetryMayHelp(input);
}

std::chrono::milliseconds RetryFilter::remainingBudget() const {
  const MonotonicTime deadline = callbacks_->deadline();
  if (deadline == MonotonicTime::max()) return std::chrono::hours(24);
  return std::max(
      std::chrono::milliseconds(0),
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - callbacks_->clock().now()));
}

void RetryFilter::releaseSlot() {
  if (slot_held_) {
    budget_.releaseRetry();
    slot_held_ = false;
  }
}

void RetryFilter::onDestroy() {
  releaseSlot();
  if (counted_active_) {
    budget_.onRequestEnd();
    counted_active_ = false;
  }
}

}  // namespace sluice
