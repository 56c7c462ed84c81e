#include "proxy/exchange/exchange.h"

#include <cassert>

#include "common/release_storage.h"
#include "filters/retry/retry_decision.h"
#include "proxy/exchange/exchange_problem.h"
#include "proxy/exchange/filter_chain.h"
#include "proxy/exchange/request_intake.h"
#include "proxy/exchange/tool_cancel_notifier.h"
#include "proxy/observability/access_log.h"

namespace sluice {

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

constexpr int kClientClosedRequest = 499;  // nginx's code for "the client went away"

}  // namespace

Exchange::Exchange(ExchangeHost& host, uint64_t id, ConfigSnapshotPtr runtime,
                   const RouteRuntime* route, DownstreamStream* downstream, MonotonicTime start)
    : host_(host),
      id_(id),
      runtime_(std::move(runtime)),
      route_(route != nullptr ? route : &runtime_->noRoute()),
      start_(start),
      intake_(&runtime_->bodyMemory(), runtime_->config().limits.max_buffered_body_bytes),
      chain_(*this, request_, intake_.body()),
      router_(route_),
      client_(downstream, record_, identity_, request_, start),
      timers_(host.dispatcher(), *this),
      attempts_(*this, timers_, client_, router_, chain_.filters()) {
  route_->metrics->active().Increment();
  client_.noteRoute(*route_);
  if (route_->config != nullptr) chain_.install(buildFilterChain(*route_), *this);
}

// finish() normally ran; attempts_ resets a stream still held (a worker shutting down).
Exchange::~Exchange() = default;

// --- request path -----------------------------------------------------------------

void Exchange::decodeHeaders(RequestHead&& head) {
  request_ = std::move(head);
  client_.noteRequest(request_);
  identity_ = establishIdentity(request_.headers, host_.ids());
  // DELETE /sluice/runs/{id} with runs.cancel_token: sluice's own, before any route.
  if (auto reply = runtime_->answerRunCancel(request_)) {
    answerLocally(std::move(*reply));
    return;
  }
  if (route_->config == nullptr) {
    answer(noRouteProblem(request_), ExchangeState::Completed);
    return;
  }
  const RequestIntake::Plan plan =
      intake_.plan(request_, runtime_->config().limits.max_body,
                   RequestIntake::streamAbove(route_->config->retry, request_));
  if (plan != RequestIntake::Plan::Ok) {
    refuseBody(plan == RequestIntake::Plan::TooLarge);
    return;
  }
  if (!route_->config->match.model.empty()) {
    // The route depends on the body's model: decided once the body is in.
    intake_.awaitModel();
    if (intake_.modelReady()) routeOnModel();
    return;
  }
  chain_.run();
}

void Exchange::routeOnModel() {
  const std::string model = intake_.takeModel();
  const RouteRuntime* chosen = runtime_->match(request_.method, request_.pathOnly(), &model);
  if (chosen != route_) {
    route_->metrics->active().Decrement();
    route_ = chosen != nullptr ? chosen : &runtime_->noRoute();
    router_.reroute(route_);
    client_.noteRoute(*route_);
    route_->metrics->active().Increment();
    if (route_->config == nullptr) {
      chain_.install(FilterChain(), *this);
      answer(noRouteProblem(request_, &model), ExchangeState::Completed);
      return;
    }
    chain_.install(buildFilterChain(*route_), *this);
  }
  chain_.run();
}

void Exchange::decodeData(const char* data, size_t len) {
  if (finished_) return;
  const RequestIntake::Intake intake =
      intake_.append(data, len, runtime_->config().limits.max_body);
  switch (intake) {
    case RequestIntake::Intake::TooLarge:
    case RequestIntake::Intake::Refused:
      refuseBody(intake == RequestIntake::Intake::TooLarge);
      return;
    case RequestIntake::Intake::Held:
      return;
    case RequestIntake::Intake::StartStreaming:
      if (intake_.modelReady()) {
        routeOnModel();  // with the model in the body's first block, if it is there
      } else if (chain_.waitsForBody()) {
        chain_.run();
      }
      if (finished_) return;
      break;
    case RequestIntake::Intake::Streamed:
      break;
  }
  if (attempts_.inFlight()) attempts_.current().stream->onRequestBodyData();
  applyBodyBackpressure();
}

void Exchange::decodeComplete() {
  if (intake_.complete() && client_.stream() != nullptr) {
    // The codec read the end with the bytes that paused it: let it read
    // again, so a client that leaves is seen at once.
    client_.stream()->resumeRequestBody();
  }
  if (finished_) return;
  if (attempts_.inFlight()) {
    attempts_.bodyEnded();  // a streamed body's
    return;
  }
  if (chain_.held()) return;
  if (intake_.modelReady()) {
    routeOnModel();
  } else if (chain_.waitsForBody()) {
    chain_.run();
  }
}

void Exchange::applyBodyBackpressure() {
  if (client_.stream() != nullptr && !finished_) intake_.steer(*client_.stream());
}

void Exchange::refuseBody(bool too_large) {
  if (too_large) {
    runtime_->metrics().rejections(Rejection::BodyTooLarge).Increment();
    answer(bodyTooLargeProblem(runtime_->config().limits.max_body), ExchangeState::Failed);
    return;
  }
  cancelWith(CancelReason::Overloaded,
             bodyOverloadedProblem(runtime_->config().limits.max_buffered_body_bytes));
}

void Exchange::onPhaseDone(ChainRunner::Phase phase) {
  switch (phase) {
    case ChainRunner::Phase::DecodeHeaders:
      // A streamed body does not wait for its end: the attempt carries it.
      if (intake_.requestComplete() || intake_.body().streaming()) chain_.run();
      return;
    case ChainRunner::Phase::DecodeComplete:
      startAttempt(AttemptTarget::sameUpstream());
      return;
    case ChainRunner::Phase::BeforeAttempt:
      sendAttempt();
      return;
    case ChainRunner::Phase::Done:
      return;
  }
}

void Exchange::refuseAttempt(CancelReason reason,
                             std::optional<std::chrono::milliseconds> retry_after) {
  if (finished_) return;
  if (!router_.fallsBackOn(reason, mayReplay())) {
    cancel(reason, retry_after);
    return;
  }
  attempts_.spillOverRefused(reason);  // never sent: not an attempt
  startAttempt(AttemptTarget::nextFallback());
}

// --- attempts ---------------------------------------------------------------------

void Exchange::startAttempt(const AttemptTarget& target) {
  assert(!attempts_.inFlight() && "one attempt at a time");
  assert(intake_.body().replayable() && "a retry needs the whole body");
  attempts_.begin(target, {request_, client_.clientInfo(), intake_.body(), *runtime_});
  const AttemptLoop::Attempt& attempt = attempts_.current();
  chain_.beginAttempt(*attempt.request, AttemptContext{attempts_.started(), attempt.destination});
}

void Exchange::notifyMcpCancel() {
  ToolCancelNotifier* notifier = host_.toolCancels();
  McpSession* session = attempts_.mcpSession();
  if (notifier == nullptr || session == nullptr) return;
  const AttemptLoop::Attempt& attempt = attempts_.current();
  notifier->cancelCall(*session, {request_, record_.jsonRpcId(), *record_.cancelReason(), runtime_,
                                  route_, attempt.upstream, attempt.endpoint});
}

bool Exchange::mayReplay() const {
  // The rules of a retry (docs/design.md §5): nothing reached the client yet, the
  // body can be sent again, and the request is safe to repeat.
  return route_->config != nullptr && !finished_ && !client_.relay().started() &&
         !client_.draining() && state_ != ExchangeState::Cancelling && intake_.replayable() &&
         clock().now() < timers_.deadline() &&
         isRetrySafe(route_->config->retry.idempotent, request_.method,
                     request_.headers.has("idempotency-key"));
}

AttemptLoop::ExchangeFacts Exchange::attemptFacts() const {
  return {record_.cancelReason(), client_.draining(), client_.stream(),
          !finished_ && state_ == ExchangeState::Running, intake_.requestComplete()};
}

void Exchange::sendAttempt() {
  if (!transition(ExchangeState::Running)) return;
  UpstreamStreamSource& pool = host_.pool(*runtime_, attempts_.current().endpoint->pool_index);
  if (!attempts_.send(pool, attemptBody(), *route_->config, intake_.requestComplete(),
                      clock().now())) {
    cancel(CancelReason::Overloaded, kOverloadedRetryAfter);
  }
}

// --- what the attempts leave to decide (AttemptLoop::Owner) --------------------------------

void Exchange::onAttemptRetry(const AttemptVerdict::Retry& retry) {
  attempts_.scheduleRetry(retry, *route_->metrics, record_, clock().now());
  transition(ExchangeState::BackingOff);
}

void Exchange::onAttemptFailed(AttemptOutcome outcome, const Problem& problem) {
  if (finished_) return;
  // A response under way is never retried: it will be cut, after one final
  // error event if the client can take it (decided before the spend meter reads).
  const std::string final_event = client_.finalEventFor(problem);
  // The upstream broke the response the client is reading: the request ends
  // cut (its status stays the one the client saw), with a reason the spend
  // meter, the access log and sluice_cancellations_total all see.
  if (client_.relay().started() && outcome.kind == OutcomeKind::Reset) {
    record_.noteCancel(CancelReason::UpstreamReset);
  }
  const AttemptVerdict verdict = attempts_.end(outcome, false, AttemptVerdict::fail(problem));
  if (finished_) return;
  if (const auto* retry = verdict.asRetry()) {
    onAttemptRetry(*retry);
    return;
  }
  if (client_.relay().started()) {
    if (record_.cancelReason() == CancelReason::UpstreamReset) countCancel();
    client_.cut(final_event);
    finish(ExchangeState::Failed, attempts_.current().status);
    return;
  }
  if (client_.draining()) {
    finish(ExchangeState::Failed, kClientClosedRequest);
    return;
  }
  const auto* fail = verdict.asFail();
  answer(fail != nullptr ? fail->problem : problem, ExchangeState::Failed);
}

void Exchange::onAttemptTimedOut() {
  if (finished_) return;
  if (client_.relay().started() || client_.draining() || client_.relay().holding()) {
    cancel(CancelReason::UpstreamTimeout);
    return;
  }
  // Nothing reached the client: the attempt failed with `timeout`, which the
  // retry filter may retry. Otherwise the exchange stops with upstream_timeout.
  const AttemptVerdict verdict = attempts_.tearDown(
      AttemptOutcome::timeout(),
      AttemptVerdict::fail(problemFor(CancelReason::UpstreamTimeout, std::nullopt)),
      clock().preciseNow());
  if (finished_) return;
  if (const auto* retry = verdict.asRetry()) {
    onAttemptRetry(*retry);
    return;
  }
  const auto* fail = verdict.asFail();
  cancelWith(CancelReason::UpstreamTimeout,
             fail != nullptr ? std::optional<Problem>(fail->problem) : std::nullopt);
}

void Exchange::onAttemptBodySent(uint64_t offset) {
  intake_.body().discardBefore(offset);  // a streamed body frees what the upstream took
  applyBodyBackpressure();
  // The upstream answered before it took the whole body: the rest goes once it has.
  if (client_.relay().started() && offset == attemptBody().size()) releaseReplayState();
}

void Exchange::releaseReplayState() {
  // Moved out and destroyed, not assigned an empty value: a string's move
  // assignment from a short (inline) one keeps the target's heap buffer, so
  // `= HeaderMap{}` freed nothing of a head's bytes.
  releaseStorage(request_.headers);  // FilterCallbacks::request() says so
  attempts_.releaseReplayState(intake_.body());
}

void Exchange::onResponseDelivered(int status) {
  finish(ExchangeState::Completed, client_.listening() ? status : kClientClosedRequest);
}

// --- downstream events ----------------------------------------------------------------

void Exchange::onDownstreamDisconnect(CancelReason reason) {
  client_.clientLeft();  // never written again
  if (finished_) return;
  const bool finish_mode = route_->config != nullptr && route_->config->on_client_disconnect ==
                                                            config::ClientDisconnectMode::Finish;
  // A streamed request cut short cannot complete upstream: cancel it instead.
  if (finish_mode && attempts_.inFlight() && state_ == ExchangeState::Running &&
      intake_.requestComplete()) {
    // Let the side-effecting call complete, within finish_grace; its output is leaked.
    client_.drain();
    record_.noteCancel(reason);
    countCancel();
    attempts_.clientDrained();  // nobody reads any more: a paused upstream is read on
    // The first grace holds (its cancel's reason is the one noted above).
    if (!timers_.armed(ExchangeSlot::FinishGrace)) {
      timers_.arm(ExchangeSlot::FinishGrace, clock().now() + route_->config->finish_grace);
    }
    return;
  }
  cancel(reason);
}

void Exchange::onDownstreamWritable() {
  if (!finished_) attempts_.clientDrained();
}

// --- endings --------------------------------------------------------------------------

void Exchange::cancel(CancelReason reason, std::optional<std::chrono::milliseconds> retry_after) {
  cancelWith(reason, std::nullopt, retry_after);
}

void Exchange::cancelWith(CancelReason reason, std::optional<Problem> answer_with,
                          std::optional<std::chrono::milliseconds> retry_after) {
  if (finished_ || isTerminal(state_) || state_ == ExchangeState::Cancelling) return;
  record_.noteCancel(reason);  // first cause wins
  const CancelReason cause = *record_.cancelReason();
  const MonotonicTime decided = clock().preciseNow();
  const bool had_attempt = attempts_.inFlight();
  transition(ExchangeState::Cancelling);
  timers_.clear();  // wakes nothing: every sleep of this request ends here
  Problem problem = answer_with ? std::move(*answer_with) : problemFor(cause, retry_after);
  std::string final_event;
  // Decided before the attempt ends: the spend meter must know whether what
  // is buffered for the client will still be delivered.
  if (clientStillListening(cause)) final_event = client_.finalEventFor(problem);
  if (had_attempt) {
    const bool sent = attempts_.current().connected;
    // Torn down: the verdict can only be this cancel's answer (no retry).
    attempts_.tearDown(cause == CancelReason::UpstreamTimeout ? AttemptOutcome::timeout()
                                                              : AttemptOutcome::cancelled(),
                       AttemptVerdict::fail(problem), decided);
    // A session-ful MCP server may not read the closed stream as a cancel.
    if (sent) notifyMcpCancel();
  }
  countCancel();
  int code = kClientClosedRequest;
  if (client_.stream() != nullptr) {
    if (!client_.relay().started()) {
      sendProblem(problem);
      code = problem.status;
    } else {
      client_.cut(final_event);
      code = attempts_.current().status;
    }
  }
  finish(ExchangeState::Cancelled, code);
}

void Exchange::sendLocalReply(const Problem& problem) {
  if (finished_) return;
  attempts_.abandon(problem);
  answer(problem, ExchangeState::Completed);
}

void Exchange::answer(Problem problem, ExchangeState terminal) {
  if (finished_) return;
  sendProblem(problem);
  attempts_.abandon(problem);  // a streamed body refused midway: its attempt is torn down
  finish(terminal, problem.status);
}

void Exchange::answerLocally(LocalReply reply) {
  const int status = reply.head.status;
  if (client_.stream() != nullptr && !client_.relay().started()) {
    client_.sendReply(reply, clock().now());
  }
  finish(ExchangeState::Completed, status);
}

void Exchange::sendProblem(Problem& problem) {
  chain_.encodeLocalReply(problem);
  if (client_.stream() == nullptr || client_.relay().started()) return;
  LocalReply reply = problemReply(problem, mcpRoute(), record_.jsonRpcId(), attempts_.sent());
  client_.sendReply(reply, clock().now());
}

Problem Exchange::problemFor(CancelReason reason,
                             std::optional<std::chrono::milliseconds> retry_after) const {
  CancelContext context = attempts_.cancelContext();
  if (timers_.deadline() != MonotonicTime::max()) {
    context.budget =
        std::chrono::duration_cast<std::chrono::milliseconds>(timers_.deadline() - start_);
  }
  return problemForCancel(reason, context, retry_after);
}

void Exchange::countCancel() {
  if (cancel_counted_) return;
  route_->metrics->cancellations(*record_.cancelReason()).Increment();
  cancel_counted_ = true;
}

void Exchange::finish(ExchangeState terminal, int status_code) {
  if (finished_) return;
  transition(terminal);
  finished_ = true;
  chain_.stop();
  timers_.clear();
  attempts_.releaseSlot();
  if (attempts_.inFlight()) {  // a safety net: every ending above ended its attempt
    attempts_.abandon(
        problemFor(record_.cancelReason().value_or(CancelReason::ClientDisconnect), std::nullopt));
  }
  chain_.destroy();
  RouteMetrics& m = *route_->metrics;
  const MonotonicTime now = clock().now();
  m.requests(status_code).Increment();
  m.duration().Observe(seconds(now - start_));
  m.active().Decrement();
  logAccess(status_code, now);
  // Answered before the upload ended: the codec reads (and drops) the rest.
  if (client_.stream() != nullptr) client_.done(intake_.takeClientPaused());
  host_.retire(*this);
}

void Exchange::logAccess(int status_code, MonotonicTime now) {
  AccessLogBuffer* log = host_.accessLog();
  if (log == nullptr || !log->enabled()) {
    client_.closeBooks(runtime_, nullptr, nullptr);
    return;
  }
  const AccessRecord r = accessRecordOf(view(), status_code, now, clock().systemNow());
  client_.closeBooks(runtime_, &r, log);
}

// --- timers (ExchangeTimers: one wake at the earliest) ----------------------------------

void Exchange::onSlot(ExchangeSlot slot) {
  switch (slot) {
    case ExchangeSlot::Deadline:
      cancel(timers_.deadlineReason());
      return;
    case ExchangeSlot::Connect:
    case ExchangeSlot::FirstByte:
    case ExchangeSlot::Idle:
      attempts_.onTimer(slot);
      return;
    case ExchangeSlot::RetryDelay:
      startAttempt(attempts_.retryTarget());
      return;
    case ExchangeSlot::FinishGrace:
      cancel(record_.cancelReason().value_or(CancelReason::ClientDisconnect));
      return;
  }
}

// --- introspection -----------------------------------------------------------------------

ExchangeView Exchange::view() const {
  const AttemptLoop::Attempt& last = attempts_.current();
  return {.id = id_,
          .request = request_,
          .identity = identity_,
          .route = *route_,
          .upstream = last.upstream,
          .endpoint = last.endpoint,
          .record = record_,
          .state = state_,
          .start = start_,
          .deadline = timers_.deadline(),
          .attempts_started = attempts_.started(),
          .attempts_sent = attempts_.sent(),
          .fallbacks = router_.fallbacks(),
          .bytes_in = intake_.bytesIn(),
          .response_bytes = attempts_.responseBytes(),
          .client = client_.stream(),
          .upstream_paused = client_.relay().paused()};
}

ExchangeSnapshot Exchange::snapshot() const { return snapshotOf(view(), clock().now()); }

}  // namespace sluice
