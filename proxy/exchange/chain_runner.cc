#include "proxy/exchange/chain_runner.h"

namespace sluice {

void ChainRunner::install(FilterChain filters, FilterCallbacks& callbacks) {
  for (auto& filter : filters_) filter->onDestroy();
  filters_ = std::move(filters);
  phase_ = Phase::DecodeHeaders;
  held_ = false;
  for (auto& filter : filters_) filter->setCallbacks(callbacks);
}

void ChainRunner::encodeLocalReply(Problem& problem) {
  for (auto& filter : filters_) filter->encodeLocalReply(problem);
}

void ChainRunner::destroy() {
  phase_ = Phase::Done;
  for (auto& filter : filters_) filter->onDestroy();
}

void ChainRunner::beginAttempt(RequestHead& request, const AttemptContext& attempt) {
  held_ = false;
  attempt_request_ = &request;
  attempt_ = attempt;
  phase_ = Phase::BeforeAttempt;
  runFrom(0);
}

void ChainRunner::resume() {
  if (!held_) return;
  held_ = false;
  runFrom(resume_index_);
}

void ChainRunner::resolve(const Admission& admission) {
  if (!held_ || phase_ != Phase::BeforeAttempt || admission.waits()) return;
  if (admission.proceeds()) {
    resume();
    return;
  }
  held_ = false;
  owner_.onAttemptRefused(admission.reason, admission.retry_after);
}

void ChainRunner::runFrom(size_t from) {
  for (size_t i = from; i < filters_.size(); ++i) {
    StreamFilter& filter = *filters_[i];
    FilterStatus status = FilterStatus::Continue;
    switch (phase_) {
      case Phase::DecodeHeaders:
        status = filter.decodeHeaders(request_);
        break;
      case Phase::DecodeComplete:
        status = filter.decodeComplete(body_.prefix());
        break;
      case Phase::BeforeAttempt: {
        const Admission admission = filter.beforeAttempt(*attempt_request_, attempt_);
        if (admission.refuses() && !owner_.chainStopped()) {
          owner_.onAttemptRefused(admission.reason, admission.retry_after);
          return;
        }
        status = admission.waits() ? FilterStatus::StopIteration : FilterStatus::Continue;
        break;
      }
      case Phase::Done:
        return;
    }
    if (owner_.chainStopped()) return;
    if (status == FilterStatus::StopIteration) {
      held_ = true;
      resume_index_ = i + 1;
      return;
    }
  }
  // The phase ran to its end: move on.
  const Phase done = phase_;
  switch (phase_) {
    case Phase::DecodeHeaders:
      phase_ = Phase::DecodeComplete;
      break;
    case Phase::DecodeComplete:
      break;
    case Phase::BeforeAttempt:
      phase_ = Phase::Done;
      break;
    case Phase::Done:
      return;
  }
  owner_.onPhaseDone(done);
}

}  // namespace sluice
