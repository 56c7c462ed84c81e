#include "filters/circuit_breaker/circuit_breaker_filter.h"

namespace sluice {

Admission CircuitBreakerFilter::beforeAttempt(RequestHead&, const AttemptContext& attempt) {
  breaker_ = attempt.destination.breaker;
  if (breaker_ == nullptr) return Admission::proceed();
  if (!alive_) alive_ = std::make_shared<bool>(true);
  const CircuitAdmission admission =
      breaker_->admit([this, alive = alive_, breaker = breaker_](const CircuitAdmission& answer) {
        if (*alive) {
          onPermit(answer);
        } else {
          // The request is gone: a probe admitted for it ends at once (and
          // gives the fleet's permit back).
          breaker->onResult(answer, AttemptOutcome::cancelled());
        }
      });
  switch (admission.result) {
    case CircuitAdmission::Result::Deferred:
      waiting_ = true;
      return Admission::wait();
    case CircuitAdmission::Result::Admitted:
      admission_ = admission;
      return Admission::proceed();
    case CircuitAdmission::Result::Rejected:
      return Admission::refuse(CancelReason::CircuitOpen, admission.retry_after);
    case CircuitAdmission::Result::Overloaded:
      return Admission::refuse(CancelReason::Overloaded, kOverloadedRetryAfter);
  }
  return Admission::proceed();
}

void CircuitBreakerFilter::onPermit(const CircuitAdmission& answer) {
  if (!waiting_) {
    breaker_->onResult(answer, AttemptOutcome::cancelled());
    return;
  }
  waiting_ = false;
  if (answer.admitted()) {
    admission_ = answer;  // the probe
    callbacks_->resolveAttempt(Admission::proceed());
  } else {
    callbacks_->resolveAttempt(Admission::refuse(CancelReason::CircuitOpen, answer.retry_after));
  }
}

FilterStatus CircuitBreakerFilter::encodeHeaders(ResponseHead& response, bool) {
  if (admission_ && admission_->probe &&
      breaker_->judgeProbe(*admission_, AttemptOutcome::fromStatus(response.status))) {
    admission_->probe = false;  // judged: the attempt's end only frees its slot
  }
  return FilterStatus::Continue;
}

void CircuitBreakerFilter::onAttemptDone(const AttemptEnd& end, const AttemptVerdict&) {
  if (!admission_) return;
  breaker_->onResult(*admission_, end.outcome);
  admission_.reset();
}

void CircuitBreakerFilter::onDestroy() {
  // An admitted attempt that never reported (torn down early) frees its slot.
  if (admission_) breaker_->onResult(*admission_, AttemptOutcome::cancelled());
  admission_.reset();
  if (alive_) *alive_ = false;
}

}  // namespace sluice
