#include "filters/spend/spend_filter.h"

#include <algorithm>

namespace sluice {

AttemptDisposition spendDisposition(const AttemptEnd& end, const AttemptVerdict& verdict) {
  if (end.finish_draining) return AttemptDisposition::Finished;
  if (verdict.isRetry() || end.outcome.kind == OutcomeKind::Timeout) {
    return AttemptDisposition::Abandoned;
  }
  if (end.outcome.kind == OutcomeKind::Cancelled || end.outcome.kind == OutcomeKind::Reset ||
      end.cancel_reason) {
    return AttemptDisposition::Cancelled;
  }
  return AttemptDisposition::Completed;
}

FilterStatus SpendFilter::decodeComplete(std::string_view body) {
  request_ = MeteredRequest::fromRequest(callbacks_->request().pathOnly(), body);
  return FilterStatus::Continue;
}

Admission SpendFilter::beforeAttempt(RequestHead&, const AttemptContext& attempt) {
  if (!request_) return Admission::proceed();
  const std::string_view model = attempt.destination.model;
  if (model.empty()) {
    meter_ = std::make_unique<UsageMeter>(*request_);
  } else {
    // A fallback rewrote the body's model: its usage is priced as that model.
    MeteredRequest rewritten = *request_;
    rewritten.model = std::string(model);
    meter_ = std::make_unique<UsageMeter>(rewritten);
  }
  run_price_ = nullptr;  // a new attempt: its first metered spend is fed whatever it is
  return Admission::proceed();
}

FilterStatus SpendFilter::encodeHeaders(ResponseHead& response, bool) {
  if (meter_) {
    meter_->onResponseHeaders(response.status, response.headers.get("content-type").value_or(""));
    feedRunMetered();
  }
  return FilterStatus::Continue;
}

void SpendFilter::encodeData(const char* data, size_t len, bool end_stream) {
  if (!meter_) return;
  if (len > 0) meter_->onResponseData(data, len);
  if (end_stream) meter_->onResponseEnd();
  feedRunMetered();
}

void SpendFilter::feedRunMetered() {
  // A stream feeds its run as its tokens arrive; any other answer once it
  // is booked (account): its usage comes with its end anyway.
  if (!meter_ || !meter_->streaming() || callbacks_->runSpend() == nullptr) return;
  const uint64_t input = meter_->inputTokens();
  const uint64_t output = meter_->outputTokens();
  const std::string& model = meter_->model();
  if (run_price_ != nullptr && input == run_input_ && output == run_output_ &&
      model == run_model_) {
    return;  // (a chunk without tokens: nothing new for the run)
  }
  if (run_price_ == nullptr || model != run_model_) {
    run_price_ = &prices_.match(model);
    run_model_ = model;
  }
  run_input_ = input;
  run_output_ = output;
  feedRun(run_price_->inputUsd(input) + run_price_->outputUsd(output));
}

void SpendFilter::feedRun(double attempt_usd) {
  RunSpend* run = callbacks_->runSpend();
  if (run == nullptr) return;
  const double delta = attempt_usd - run_usd_;
  run_usd_ = attempt_usd;
  if (delta != 0) run->addRunSpend(delta);
}

void SpendFilter::onAttemptDone(const AttemptEnd& end, const AttemptVerdict& verdict) {
  if (!end.sent || end.unprocessed) {
    // Refused before it went, never connected, or refused by the upstream
    // unprocessed (REFUSED_STREAM, GOAWAY): no provider billed it.
    forgetAttempt();
    return;
  }
  account(end, spendDisposition(end, verdict));
}

void SpendFilter::onDestroy() {
  // An attempt begun (beforeAttempt) but never handed to a connection —
  // refused on the way (overloaded, a cancel) — never reached the upstream:
  // nothing was billed.
  forgetAttempt();
  // A request sluice refused before any attempt was billed still names its
  // model in the access log.
  if (!named_model_ && request_ && !request_->model.empty()) {
    callbacks_->record().addUsage(AttemptUsage{request_->model});
  }
}

void SpendFilter::forgetAttempt() {
  if (!meter_) return;
  feedRun(0);  // nothing billed: take back what the run was told
  run_usd_ = 0;
  const std::unique_ptr<UsageMeter> meter = std::move(meter_);
  if (!meter->model().empty()) {
    callbacks_->record().addUsage(AttemptUsage{meter->model()});  // the model, at no cost
    named_model_ = true;
  }
}

namespace {

// Books one attempt: tokens and USD by disposition, leaked USD by reason.
AttemptUsage book(UsageMeter& meter, const PriceTable& prices, RouteMetrics& metrics,
                  AttemptDisposition disposition, std::optional<CancelReason> why) {
  const ModelPrice& price = prices.match(meter.model());
  const SpendSplit split = splitSpend(meter.tokenCounts(), disposition, price);
  const std::string& model = price.label;
  if (split.delivered_input_tokens > 0) {
    metrics.tokens(model, false, Disposition::Delivered).Increment(split.delivered_input_tokens);
  }
  if (split.delivered_output_tokens > 0) {
    metrics.tokens(model, true, Disposition::Delivered).Increment(split.delivered_output_tokens);
  }
  if (split.leaked_input_tokens > 0) {
    metrics.tokens(model, false, Disposition::Leaked).Increment(split.leaked_input_tokens);
  }
  if (split.leaked_output_tokens > 0) {
    metrics.tokens(model, true, Disposition::Leaked).Increment(split.leaked_output_tokens);
  }
  if (split.delivered_usd > 0)
    metrics.spend(model, Disposition::Delivered).Increment(split.delivered_usd);
  if (split.leaked_usd > 0) {
    metrics.spend(model, Disposition::Leaked).Increment(split.leaked_usd);
    if (why) metrics.leakedSpend(model, toString(*why)).Increment(split.leaked_usd);
  }
  return AttemptUsage{meter.model(), split.delivered_input_tokens + split.leaked_input_tokens,
                      split.delivered_output_tokens + split.leaked_output_tokens,
                      split.delivered_usd + split.leaked_usd, split.leaked_usd};
}

// An attempt waiting for the client's reading: what was written minus what
// the client left unread is delivered. A leak goes under the attempt's own
// reason (sluice cut it: budget_exhausted, upstream_timeout, ...), else the
// client's (client_abandoned). Holds the prices and metrics of the runtime
// the Exchange pinned; the connection that settles it pins that runtime too.
class SpendReceipt final : public ReadReceipt {
 public:
  SpendReceipt(std::unique_ptr<UsageMeter> meter, const PriceTable& prices, RouteMetrics& metrics,
               uint64_t written_body_bytes, AttemptDisposition disposition,
               std::optional<CancelReason> why)
      : meter_(std::move(meter)),
        prices_(prices),
        metrics_(metrics),
        written_(written_body_bytes),
        disposition_(disposition),
        why_(why) {}

  AttemptUsage settle(uint64_t unread_body_bytes,
                      std::optional<CancelReason> unread_reason) override {
    const uint64_t unread = std::min(unread_body_bytes, written_);
    meter_->onBytesDelivered(written_ - unread);
    std::optional<CancelReason> why = why_;
    if (unread > 0 && unread_reason) why = unread_reason;
    if (unread > 0 && !why) why = CancelReason::ClientAbandoned;
    return book(*meter_, prices_, metrics_, disposition_, why);
  }
  std::optional<CancelReason> reason() const override { return why_; }

 private:
  std::unique_ptr<UsageMeter> meter_;
  const PriceTable& prices_;
  RouteMetrics& metrics_;
  uint64_t written_;
  AttemptDisposition disposition_;
  std::optional<CancelReason> why_;
};

}  // namespace

void SpendFilter::account(const AttemptEnd& end, AttemptDisposition disposition) {
  if (!meter_) return;
  std::unique_ptr<UsageMeter> meter = std::move(meter_);
  // The reason the work went unused: the Exchange's cancel_reason, or for an
  // attempt abandoned by a stall, upstream_timeout; by a broken connection
  // (then retried), upstream_reset.
  std::optional<CancelReason> why = end.cancel_reason;
  if (!why && end.outcome.kind == OutcomeKind::Timeout) why = CancelReason::UpstreamTimeout;
  if (!why && end.outcome.kind == OutcomeKind::Reset) why = CancelReason::UpstreamReset;
  named_model_ = named_model_ || !meter->model().empty();
  // The run is told the attempt's whole cost now: what the client read
  // changes how it splits, not what it costs.
  {
    const ModelPrice& price = prices_.match(meter->model());
    feedRun(price.inputUsd(meter->inputTokens()) + price.outputUsd(meter->outputTokens()));
    run_usd_ = 0;
  }
  const bool whole = disposition == AttemptDisposition::Completed && !end.cancel_reason &&
                     meter->responseComplete() && meter->billable() &&
                     end.delivered_body_bytes >= meter->bodyBytesSeen();
  // Cut by sluice with the client still there: what it was written may
  // still sit unread in its socket.
  const bool cut = disposition == AttemptDisposition::Cancelled && end.delivered_body_bytes > 0;
  if (whole || cut) {
    // Whether what went out was read, the client's connection will tell
    // (docs/reference/metrics.md, "Delivered means read").
    std::unique_ptr<ReadReceipt> receipt = std::make_unique<SpendReceipt>(
        std::move(meter), prices_, metrics_, end.delivered_body_bytes, disposition, why);
    if (callbacks_->holdUntilRead(receipt)) return;
    callbacks_->record().addUsage(receipt->settle(0));
    return;
  }
  meter->onBytesDelivered(end.delivered_body_bytes);
  callbacks_->record().addUsage(book(*meter, prices_, metrics_, disposition, why));
}

}  // namespace sluice
