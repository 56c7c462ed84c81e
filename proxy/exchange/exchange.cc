#include "proxy/exchange/exchange.h"

#include <algorithm>
#include <cassert>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "common/jsonrpc_error.h"
#include "common/release_storage.h"
#include "filters/attempt_outcome.h"
#include "filters/retry/retry_decision.h"
#include "filters/runs/run_cancel_request.h"
#include "proxy/exchange/delivery_hold.h"
#include "proxy/exchange/exchange_problem.h"
#include "proxy/exchange/filter_chain.h"
#include "proxy/exchange/request_intake.h"
#include "proxy/exchange/tool_cancel_notifier.h"
#include "proxy/http/header_rewrite.h"
#include "proxy/observability/access_log.h"

namespace sluice {

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

constexpr int kClientClosedRequest = 499;  // nginx's code for "the client went away"

}  // namespace

Exchange::Exchange(ExchangeHost& host, uint64_t id, RuntimePtr runtime, const RouteRuntime* route,
                   DownstreamStream* downstream, MonotonicTime start)
    : host_(host),
      id_(id),
      runtime_(std::move(runtime)),
      route_(route != nullptr ? route : &runtime_->noRoute()),
      downstream_(downstream),
      start_(start),
      intake_(&runtime_->bodyMemory(), runtime_->config().limits.max_buffered_body_bytes),
      router_(route_),
      timers_(host.dispatcher(), *this) {
  route_->metrics->active().Increment();
  if (route_->config != nullptr) {
    filters_ = buildFilterChain(*route_);
    for (auto& filter : filters_) filter->setCallbacks(*this);
  }
}

Exchange::~Exchange() {
  // finish() normally ran; this is the safety net for a worker shutting down.
  if (attempt_.stream != nullptr) {
    attempt_.stream->detach();
    attempt_.stream->reset();
  }
}

// --- lifecycle ----------------------------------------------------------------

bool Exchange::transition(ExchangeState to) {
  if (!isLegalTransition(state_, to)) {
    assert(false && "illegal Exchange transition");
    return false;
  }
  state_ = to;
  return true;
}

// --- request path -----------------------------------------------------------------

void Exchange::decodeHeaders(RequestHead&& head) {
  request_ = std::move(head);
  // Looked up only where trailers can be carried (HTTP/2): HTTP/1.1 pays nothing.
  client_takes_trailers_ =
      downstream_ != nullptr && downstream_->carriesTrailers() && acceptsTrailers(request_.headers);
  identity_ = establishIdentity(request_.headers, host_.ids());
  if (runtime_->runs() != nullptr) {
    // DELETE /sluice/runs/{id} with runs.cancel_token: sluice's own, before any route.
    if (auto reply =
            answerRunCancelRequest(request_, *runtime_->config().runs, *runtime_->runs())) {
      answerLocally(std::move(*reply));
      return;
    }
  }
  if (route_->config == nullptr) {
    answer(makeProblem(problems::kNoRoute, "no route matches " + request_.method + " " +
                                               std::string(request_.pathOnly())),
           ExchangeState::Completed);
    return;
  }
  switch (intake_.plan(request_, runtime_->config().limits.max_body,
                       RequestIntake::streamAbove(route_->config->retry, request_))) {
    case RequestIntake::Plan::Ok:
      break;
    case RequestIntake::Plan::TooLarge:
      rejectBodyTooLarge();
      return;
    case RequestIntake::Plan::Refused:
      refuseBody();
      return;
  }
  phase_ = Phase::DecodeHeaders;
  if (!route_->config->match.model.empty()) {
    // The route depends on the body's model: decided once the body is in.
    awaiting_model_ = true;
    if (awaitsModel()) routeOnModel();
    return;
  }
  runChain(0);
}

void Exchange::routeOnModel() {
  awaiting_model_ = false;
  std::string model;
  scanTopLevelMembers(intake_.body().prefix(), [&](std::string_view key, std::string_view value) {
    if (key != "model") return true;
    if (const auto plain = plainString(value)) {
      model = std::string(*plain);
    } else {
      const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
      model = j.is_string() ? j.get<std::string>() : std::string();
    }
    return true;  // the last one wins, as in a parse
  });
  const RouteRuntime* chosen = runtime_->match(request_.method, request_.pathOnly(), &model);
  if (chosen != route_) {
    for (auto& filter : filters_) filter->onDestroy();  // none of them ran: nothing to undo
    filters_.clear();
    route_->metrics->active().Decrement();
    route_ = chosen != nullptr ? chosen : &runtime_->noRoute();
    router_.reroute(route_);
    route_->metrics->active().Increment();
    if (route_->config == nullptr) {
      answer(makeProblem(problems::kNoRoute, "no route matches " + request_.method + " " +
                                                 std::string(request_.pathOnly()) +
                                                 " for model \"" + model + "\""),
             ExchangeState::Completed);
      return;
    }
    filters_ = buildFilterChain(*route_);
    for (auto& filter : filters_) filter->setCallbacks(*this);
  }
  runChain(0);
}

void Exchange::decodeData(const char* data, size_t len) {
  if (finished_) return;
  switch (intake_.append(data, len, runtime_->config().limits.max_body)) {
    case RequestIntake::Intake::TooLarge:
      rejectBodyTooLarge();
      return;
    case RequestIntake::Intake::Refused:
      refuseBody();
      return;
    case RequestIntake::Intake::Held:
      return;
    case RequestIntake::Intake::StartStreaming:
      if (awaitsModel()) {
        routeOnModel();  // with the model in the body's first block, if it is there
      } else if (phase_ == Phase::DecodeComplete && !held_) {
        runChain(0);
      }
      if (finished_) return;
      break;
    case RequestIntake::Intake::Streamed:
      break;
  }
  if (attempt_.stream != nullptr) attempt_.stream->onRequestBodyData();
  applyBodyBackpressure();
}

void Exchange::rejectBodyTooLarge() {
  const uint64_t max_body = runtime_->config().limits.max_body;
  runtime_->metrics().rejections(Rejection::BodyTooLarge).Increment();
  answer(makeProblem(problems::kBodyTooLarge, "the request body exceeds sluice's limit of " +
                                                  std::to_string(max_body) +
                                                  " bytes (limits.max_body)"),
         ExchangeState::Failed);
}

void Exchange::decodeComplete() {
  if (intake_.complete() && downstream_ != nullptr) {
    // The codec read the end with the bytes that paused it: let it read
    // again, so a client that leaves is seen at once.
    downstream_->resumeRequestBody();
  }
  if (finished_) return;
  if (attempt_.stream != nullptr) {
    // A streamed body's end: the upstream has it all, so its time to answer starts now.
    attempt_.stream->onRequestBodyData();
    if (finished_ || attempt_.stream == nullptr) return;
    attempt_.last_upstream_byte = clock().now();
    armFirstByteTimer();
    // Connected (its connect timer is gone) and no first-byte timer: idle time counts.
    if (!timers_.armed(ExchangeSlot::FirstByte) && !timers_.armed(ExchangeSlot::Connect))
      armIdleTimer();
    return;
  }
  if (held_) return;
  if (awaitsModel()) {
    routeOnModel();
    return;
  }
  if (phase_ == Phase::DecodeComplete) runChain(0);
}

void Exchange::applyBodyBackpressure() {
  if (downstream_ == nullptr || finished_) return;
  switch (intake_.flow()) {
    case RequestIntake::Flow::Keep:
      break;
    case RequestIntake::Flow::Pause:
      downstream_->pauseRequestBody();
      break;
    case RequestIntake::Flow::Resume:
      downstream_->resumeRequestBody();
      break;
  }
}

void Exchange::refuseBody() {
  const uint64_t cap = runtime_->config().limits.max_buffered_body_bytes;
  cancelWith(CancelReason::Overloaded, makeProblem(problems::kOverloaded,
                                                   "request bodies held by sluice would exceed "
                                                   "limits.max_buffered_body_bytes (" +
                                                       std::to_string(cap) + " bytes)",
                                                   CancelReason::Overloaded));
}

void Exchange::runChain(size_t from) {
  for (size_t i = from; i < filters_.size(); ++i) {
    StreamFilter& filter = *filters_[i];
    FilterStatus status = FilterStatus::Continue;
    switch (phase_) {
      case Phase::DecodeHeaders:
        status = filter.decodeHeaders(request_);
        break;
      case Phase::DecodeComplete:
        status = filter.decodeComplete(intake_.body().prefix());
        break;
      case Phase::BeforeAttempt: {
        const Admission admission = filter.beforeAttempt(
            *attempt_.request, AttemptContext{attempts_, attempt_.destination});
        if (admission.refuses() && !finished_ && state_ != ExchangeState::Cancelling) {
          refuseAttempt(admission.reason, admission.retry_after);
          return;
        }
        status = admission.waits() ? FilterStatus::StopIteration : FilterStatus::Continue;
        break;
      }
      case Phase::Done:
        return;
    }
    if (finished_ || state_ == ExchangeState::Cancelling) return;
    if (status == FilterStatus::StopIteration) {
      held_ = true;
      resume_index_ = i + 1;
      return;
    }
  }
  // The phase ran to its end: move on.
  switch (phase_) {
    case Phase::DecodeHeaders:
      phase_ = Phase::DecodeComplete;
      // A streamed body does not wait for its end: the attempt carries it.
      if (intake_.requestComplete() || intake_.body().streaming()) runChain(0);
      return;
    case Phase::DecodeComplete:
      startAttempt(AttemptTarget::sameUpstream());
      return;
    case Phase::BeforeAttempt:
      sendAttempt();
      return;
    case Phase::Done:
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
  // The attempt being prepared was never sent: its filters hear that it
  // ended (what they hold for it is returned), and it is not an attempt.
  AttemptEnd end = describeAttempt(AttemptOutcome::cancelled());
  end.sent = false;
  const std::string cause(toString(reason));
  const AttemptVerdict verdict =
      AttemptVerdict::retry(std::chrono::milliseconds(0), cause, AttemptTarget::nextFallback());
  for (auto& filter : filters_) filter->onAttemptDone(end, verdict);
  router_.countFallback(cause);
  --attempts_;
  startAttempt(AttemptTarget::nextFallback());
}

void Exchange::continueDecoding() {
  if (finished_ || !held_) return;
  held_ = false;
  runChain(resume_index_);
}

void Exchange::resolveAttempt(const Admission& admission) {
  if (finished_ || !held_ || phase_ != Phase::BeforeAttempt || admission.waits()) return;
  if (admission.proceeds()) {
    continueDecoding();
    return;
  }
  held_ = false;
  refuseAttempt(admission.reason, admission.retry_after);
}

// --- attempts ---------------------------------------------------------------------

void Exchange::startAttempt(const AttemptTarget& target) {
  assert(attempt_.stream == nullptr && "one attempt at a time");
  assert(intake_.body().replayable() && "a retry needs the whole body");
  ++attempts_;
  held_ = false;
  // A retry prefers another endpoint than the one the last attempt failed on.
  const EndpointRuntime* last = attempt_.endpoint;
  attempt_ = Attempt{};
  relay_.resetAttempt();
  attempt_.target = target;
  if (attempts_ == 1) findMcpSession();
  // The quota key as the throttle filter will compute it: from the head rewritten per endpoint.
  const ClientInfo* client = downstream_ != nullptr ? &downstream_->clientInfo() : nullptr;
  const auto key_for = [this, client](const UpstreamRuntime& up, const EndpointRuntime& e) {
    return quotaKeyAt(request_, up, e, client != nullptr ? *client : ClientInfo{});
  };
  const AttemptRouter::Placement placement =
      router_.place(target, last, mayReplay(), QuotaAsk{key_for, intake_.body().prefix()},
                    threadLocalUniform(), mcp_session_ ? mcp_session_->endpoint : nullptr);
  attempt_.upstream = placement.upstream;
  attempt_.endpoint = placement.endpoint;
  attempt_.request = std::make_unique<RequestHead>(
      requestForUpstream(request_, *attempt_.upstream->config, attempt_.endpoint->config->url,
                         downstream_ != nullptr ? downstream_->clientInfo() : ClientInfo{}));
  attempt_.request->headers.remove("expect");  // sluice answered it (or reads the body anyway)
  attempt_.destination = attempt_.endpoint->destination;
  rewritten_body_.reset();
  if (router_.chainIndex() > 0) {
    const std::string& model = router_.fallbackModel();
    std::optional<std::string> body;
    if (!model.empty()) body = withTopLevelString(intake_.body().prefix(), "model", model);
    if (body) {
      // The same bytes with another model: counted against the process-wide cap as well.
      auto rewritten = std::make_unique<RequestBody>(
          &runtime_->bodyMemory(), runtime_->config().limits.max_buffered_body_bytes);
      if (rewritten->append(body->data(), body->size())) {
        rewritten->markComplete();
        rewritten_body_ = std::move(rewritten);
        attempt_.destination.model = model;
      }
    }
  }
  phase_ = Phase::BeforeAttempt;
  runChain(0);
}

void Exchange::findMcpSession() {
  if (!mcpRoute()) return;
  const std::optional<std::string_view> id = request_.headers.get("mcp-session-id");
  if (!id || id->empty()) return;
  mcp_session_ = std::make_unique<McpSession>();
  mcp_session_->headers = request_.headers;
  const std::string key = sessionKey(*id);
  for (const UpstreamRuntime* upstream : route_->chain) {
    const std::optional<std::string> name = upstream->mcp_sessions->lookup(key, clock().now());
    if (!name) continue;
    // Gone after a reload: placed as usual (the server answers 404, the client re-initializes).
    for (const EndpointRuntime& e : upstream->endpoints) {
      if (e.name() == *name) mcp_session_->endpoint = &e;
    }
    return;
  }
}

void Exchange::notifyMcpCancel() {
  ToolCancelNotifier* notifier = host_.toolCancels();
  if (notifier == nullptr || !mcp_session_ || !record_.jsonRpcId() || request_.method != "POST") {
    return;
  }
  ToolCancel cancel;
  cancel.runtime = runtime_;
  cancel.route = route_;
  cancel.upstream = attempt_.upstream;
  cancel.endpoint = attempt_.endpoint;
  cancel.request.method = "POST";
  cancel.request.path = request_.path;
  cancel.request.headers = std::move(mcp_session_->headers);
  cancel.request_id = *record_.jsonRpcId();
  cancel.reason = toString(*cancel_reason_);
  notifier->send(std::move(cancel));
}

bool Exchange::mayReplay() const {
  // The rules of a retry (docs/design.md §5): nothing reached the client yet, the
  // body can be sent again, and the request is safe to repeat.
  return route_->config != nullptr && !finished_ && !relay_.started() && !discarding_ &&
         state_ != ExchangeState::Cancelling && intake_.requestComplete() &&
         !intake_.body().streaming() && intake_.body().replayable() && clock().now() < deadline_ &&
         isRetrySafe(route_->config->retry.idempotent, request_.method,
                     request_.headers.has("idempotency-key"));
}

void Exchange::sendAttempt() {
  phase_ = Phase::Done;
  if (!transition(ExchangeState::Running)) return;
  const config::UpstreamConfig& uc = *attempt_.upstream->config;
  const MonotonicTime now = clock().now();

  attempt_.last_upstream_byte = now;
  timers_.arm(ExchangeSlot::Connect, now + uc.connect_timeout);
  armFirstByteTimer();

  UpstreamStreamSource& pool = host_.pool(*runtime_, attempt_.endpoint->pool_index);
  // Waiting for a connection (none idle, or still connecting) takes one of the
  // endpoint's max_pending slots until the stream is connected.
  if (!pool.hasReadyStream() && !connect_wait_.acquire(*attempt_.endpoint->breaker)) {
    cancel(CancelReason::Overloaded, kOverloadedRetryAfter);
    return;
  }
  attempt_.stream = pool.acquire();
  ++attempts_sent_;
  // May report back synchronously.
  attempt_.stream->sendRequest(*attempt_.request, attemptBody(), this);
}

AttemptVerdict Exchange::endAttempt(AttemptOutcome outcome, bool reuse, AttemptVerdict proposed) {
  connect_wait_.release();
  timers_.disarm(ExchangeSlot::Connect);
  timers_.disarm(ExchangeSlot::FirstByte);
  timers_.disarm(ExchangeSlot::Idle);
  attempt_.endpoint->metrics->attempts(attemptResultFor(outcome)).Increment();
  relay_.markCut(!outcome.isStatus());
  attempt_.outcome = outcome;
  const AttemptEnd end = describeAttempt(outcome);
  AttemptVerdict verdict = proposed;
  for (auto& filter : filters_) verdict = filter->decideAttempt(end, std::move(verdict));
  // A sent call the upstream may not see twice (a tool that is not safe to
  // repeat) is neither retried nor moved to a fallback.
  const bool may_retry = mayRetry(outcome) && mayResend(end);
  if (verdict.isRetry() && !may_retry) verdict = std::move(proposed);
  verdict = router_.afterFailure(end, std::move(verdict), attempt_.endpoint, may_retry, attempts_,
                                 mayReplay());
  for (auto& filter : filters_) filter->onAttemptDone(end, verdict);
  if (attempt_.stream != nullptr) {
    UpstreamStream* stream = attempt_.stream;
    attempt_.stream = nullptr;
    stream->detach();
    if (reuse) {
      stream->release();
    } else {
      stream->reset();  // closes the connection / resets the stream now: generation stops
    }
  }
  relay_.clearPaused();
  return verdict;
}

AttemptEnd Exchange::describeAttempt(const AttemptOutcome& outcome) const {
  AttemptEnd end;
  end.outcome = outcome;
  end.attempt = attempts_;
  end.status = attempt_.status;
  end.held_response = relay_.heldHead();
  end.held_body = relay_.heldBody();
  end.response_started = relay_.started();
  // Never connected: not a byte of the request reached the upstream.
  end.unprocessed =
      attempt_.unprocessed || outcome.kind == OutcomeKind::ConnectError || !attempt_.connected;
  end.delivered_body_bytes = relay_.deliveredBodyBytes(downstream_);
  end.cancel_reason = cancel_reason_;
  end.finish_draining = discarding_;
  return end;
}

bool Exchange::mayRetry(const AttemptOutcome& outcome) const {
  // Not an attempt sluice tore down itself, not while cancelling, and never
  // once something of the response went to the client.
  return outcome.kind != OutcomeKind::Cancelled && !finished_ && state_ == ExchangeState::Running &&
         !relay_.started();
}

void Exchange::scheduleRetry(const AttemptVerdict::Retry& retry) {
  relay_.dropHeld();  // the answer this retry replaces is never sent
  if (retry.target.kind == AttemptTarget::Kind::NextFallback) {
    router_.countFallback(retry.cause);  // a spill-over, not a retry of this upstream
  } else {
    route_->metrics->retries(retry.cause).Increment();
  }
  // The access log speaks sluice_retries_total's vocabulary for a spill-over too.
  record_.noteRetry(causeLabel(attempt_.outcome));
  transition(ExchangeState::BackingOff);
  // The sleep is a timer of this Exchange: a cancel (client gone, budget)
  // clears it and no further attempt is made.
  retry_target_ = retry.target;
  timers_.arm(ExchangeSlot::RetryDelay, clock().now() + retry.delay);
}

void Exchange::failAttempt(AttemptOutcome outcome, const Problem& problem) {
  if (finished_) return;
  // A response under way is never retried: it will be cut, after one final
  // error event if the client can take it (decided before the spend meter reads).
  const std::string final_event = relay_.started() ? finalEventFor(problem) : std::string();
  // The upstream broke the response the client is reading: the request ends
  // cut (its status stays the one the client saw), with a reason the spend
  // meter, the access log and sluice_cancellations_total all see.
  if (relay_.started() && outcome.kind == OutcomeKind::Reset && !cancel_reason_) {
    cancel_reason_ = CancelReason::UpstreamReset;
  }
  const AttemptVerdict verdict = endAttempt(outcome, false, AttemptVerdict::fail(problem));
  if (finished_) return;
  if (const auto* retry = verdict.asRetry()) {
    scheduleRetry(*retry);
    return;
  }
  if (relay_.started()) {
    if (cancel_reason_ == CancelReason::UpstreamReset && !cancel_counted_) {
      route_->metrics->cancellations(*cancel_reason_).Increment();
      cancel_counted_ = true;
    }
    cutResponse(final_event);
    transition(ExchangeState::Failed);
    finish(attempt_.status);
    return;
  }
  if (discarding_) {
    transition(ExchangeState::Failed);
    finish(kClientClosedRequest);
    return;
  }
  const auto* fail = verdict.asFail();
  answer(fail != nullptr ? fail->problem : problem, ExchangeState::Failed);
}

void Exchange::onAttemptTimeout() {
  if (finished_) return;
  if (relay_.started() || discarding_ || relay_.holding()) {
    cancel(CancelReason::UpstreamTimeout);
    return;
  }
  // Nothing reached the client: the attempt failed with `timeout`, which the
  // retry filter may retry. Otherwise the exchange stops with upstream_timeout.
  const MonotonicTime decided = clock().preciseNow();
  const AttemptVerdict verdict =
      endAttempt(AttemptOutcome::timeout(), /*reuse=*/false,
                 AttemptVerdict::fail(problemFor(CancelReason::UpstreamTimeout, std::nullopt)));
  attempt_.upstream->metrics->cancelPropagation().Observe(seconds(clock().preciseNow() - decided));
  if (finished_) return;
  if (const auto* retry = verdict.asRetry()) {
    scheduleRetry(*retry);
    return;
  }
  const auto* fail = verdict.asFail();
  cancelWith(CancelReason::UpstreamTimeout,
             fail != nullptr ? std::optional<Problem>(fail->problem) : std::nullopt);
}

void Exchange::armFirstByteTimer() {
  // A streamed upload is not the upstream's time to answer: it runs once
  // the upstream has the whole request.
  const auto timeout = route_->config->first_byte_timeout;
  if (timeout.count() <= 0 || !intake_.requestComplete() || attempt_.status != 0) return;
  timers_.arm(ExchangeSlot::FirstByte, clock().now() + timeout);
}

void Exchange::armIdleTimer() {
  // Nor is a stalled upload a stalled upstream (body_read_timeout is the client's).
  if (route_->config == nullptr || relay_.paused() || attempt_.stream == nullptr ||
      !intake_.requestComplete()) {
    return;
  }
  const auto idle = route_->config->idle_timeout;
  if (idle.count() <= 0) return;
  timers_.arm(ExchangeSlot::Idle, attempt_.last_upstream_byte + idle);
}

// --- UpstreamCallbacks --------------------------------------------------------------

void Exchange::onUpstreamConnected() {
  attempt_.connected = true;
  connect_wait_.release();
  timers_.disarm(ExchangeSlot::Connect);
  if (!timers_.armed(ExchangeSlot::FirstByte))
    armIdleTimer();  // waiting for the first byte counts as idle
}

void Exchange::onUpstreamBodySent(uint64_t offset) {
  attempt_.body_sent = offset;
  intake_.body().discardBefore(offset);  // a streamed body frees what the upstream took
  applyBodyBackpressure();
  // The upstream answered before it took the whole body: the rest goes once it has.
  if (relay_.started() && attempt_.body_sent == attemptBody().size()) releaseReplayState();
}

void Exchange::onUpstreamHeaders(ResponseHead&& head, bool end_stream) {
  if (finished_) return;
  timers_.disarm(ExchangeSlot::FirstByte);
  attempt_.status = head.status;
  attempt_.last_upstream_byte = clock().now();
  rewriteResponseForDownstream(head);
  // Every filter sees every response head (the spend meter must know a held
  // 503 is not billable); StopIteration from any of them holds the response.
  bool hold = false;
  for (auto& filter : filters_) {
    hold = filter->encodeHeaders(head, end_stream) == FilterStatus::StopIteration || hold;
    if (finished_) return;
  }
  // An answer the route falls back on waits too: the next upstream may replace it.
  hold =
      hold || router_.fallsBackOn(AttemptOutcome::fromStatus(head.status), attempts_, mayReplay());
  if (hold) {
    // Held back until the attempt ends: maybe retried, maybe released.
    relay_.hold(std::move(head));
    armIdleTimer();
    return;
  }
  sendResponseHead(head);
  armIdleTimer();
}

void Exchange::sendResponseHead(ResponseHead& head) {
  head.headers.set("x-sluice-attempts", std::to_string(attempts_sent_));
  head.headers.set("x-sluice-upstream", attempt_.upstream->name());
  if (!discarding_ && downstream_ != nullptr) {
    beginResponse(head, /*from_upstream=*/true);
    const SseDialect dialect =
        responseDialect(request_.pathOnly(), head.headers.get("content-type").value_or(""),
                        mcpRoute(), record_.jsonRpcId().has_value());
    relay_.sendHead(*downstream_, std::move(head), dialect);  // not read after: handed over
    releaseReplayState();
  }
}

void Exchange::releaseReplayState() {
  // Moved out and destroyed, not assigned an empty value: a string's move
  // assignment from a short (inline) one keeps the target's heap buffer, so
  // `= HeaderMap{}` freed nothing of a head's bytes.
  attempt_.request.reset();          // the transport sent it (UpstreamStream::sendRequest)
  releaseStorage(request_.headers);  // FilterCallbacks::request() says so
  RequestBody& sent = attemptBody();
  if (!sent.complete() || attempt_.body_sent < sent.size()) return;  // the transport reads it still
  sent.releaseAll();
  if (&sent != &intake_.body() && intake_.body().complete()) intake_.body().releaseAll();
}

void Exchange::beginResponse(ResponseHead& head, bool from_upstream) {
  if (from_upstream) {
    // Providers answer with their own x-request-id (what their support asks
    // for): the client gets sluice's id, and the provider's alongside.
    const auto theirs = head.headers.get("x-request-id");
    if (theirs && *theirs != identity_.request_id) {
      const std::string copy(*theirs);  // set() may move the header it points into
      head.headers.set("x-sluice-upstream-request-id", copy);
    }
  }
  head.headers.set("x-request-id", identity_.request_id);
  // The Anthropic SDKs read `request-id` (err.requestID): sluice's own
  // answers carry it too, so that id finds the access log line.
  if (!from_upstream) head.headers.set("request-id", identity_.request_id);
  if (!record_.noteFirstByte(clock().now())) return;
  if (from_upstream) {
    route_->metrics->timeToFirstByte().Observe(seconds(*record_.firstByteAt() - start_));
  }
}

void Exchange::releaseHeldResponse(bool end_stream) {
  const std::unique_ptr<ResponseRelay::Held> held = relay_.takeHeld();
  sendResponseHead(held->head);
  if (!discarding_ && downstream_ != nullptr) {
    record_.addBytesOut(held->body.size());
    relay_.sendBody(*downstream_, held->body.data(), held->body.size(), end_stream);
  }
}

void Exchange::onUpstreamTrailers(HeaderMap&& trailers) {
  // Never merged into a head (RFC 9110 §6.5.1): the client gets them as
  // trailers, at the response's end, or not at all.
  if (finished_ || !client_takes_trailers_) return;
  rewriteTrailersForDownstream(trailers);
  if (trailers.empty()) return;
  relay_.keepTrailers(std::move(trailers));
}

void Exchange::onUpstreamData(const char* data, size_t len) {
  if (finished_) return;
  attempt_.last_upstream_byte = clock().now();
  response_bytes_ += len;
  for (auto& filter : filters_) filter->encodeData(data, len, false);
  if (relay_.holding()) {
    if (relay_.holdData(data, len)) return;
    releaseHeldResponse(false);  // too big to be an error worth retrying: stream it
  }
  if (discarding_ || downstream_ == nullptr) return;
  record_.addBytesOut(len);
  relay_.sendBody(*downstream_, data, len, false);
  // Handing bytes over may have ended the exchange or lost the client.
  if (finished_ || discarding_ || downstream_ == nullptr) return;
  if (attempt_.stream != nullptr && relay_.pauseIfClientSlow(*downstream_)) {
    // The client is slower than the upstream: stop reading the upstream until
    // the client drains (onDownstreamWritable). Memory per stream stays bounded.
    attempt_.stream->pauseReading();
    timers_.disarm(ExchangeSlot::Idle);
  }
}

void Exchange::onUpstreamComplete() {
  if (finished_) return;
  for (auto& filter : filters_) filter->encodeData(nullptr, 0, true);
  const AttemptVerdict verdict = endAttempt(AttemptOutcome::fromStatus(attempt_.status),
                                            /*reuse=*/true, AttemptVerdict::deliver());
  if (finished_) return;
  if (const auto* retry = verdict.asRetry()) {
    scheduleRetry(*retry);
    return;
  }
  if (relay_.holding()) {
    if (const auto* fail = verdict.asFail()) {
      // A filter refused the held answer: the client gets its problem instead.
      relay_.dropHeld();
      answer(fail->problem, ExchangeState::Failed);
      return;
    }
    if (verdict.asDeliver()->discourage_client_retry) {
      relay_.heldHead()->headers.set("x-should-retry", "false");
    }
    releaseHeldResponse(true);
    transition(ExchangeState::Completed);
    finish(discarding_ || downstream_ == nullptr ? kClientClosedRequest : attempt_.status);
    return;
  }
  if (discarding_ || downstream_ == nullptr) {
    transition(ExchangeState::Completed);
    finish(kClientClosedRequest);
    return;
  }
  relay_.end(*downstream_);
  transition(ExchangeState::Completed);
  finish(attempt_.status);
}

void Exchange::onUpstreamError(UpstreamError error, const std::string& detail) {
  if (finished_) return;
  attempt_.unprocessed = unprocessed(error);
  const AttemptOutcome outcome = error == UpstreamError::ConnectError
                                     ? AttemptOutcome::connectError()
                                     : AttemptOutcome::reset();
  const ProblemKind* kind = &problems::kUpstreamReset;
  switch (error) {
    case UpstreamError::ConnectError:
      kind = &problems::kUpstreamConnectError;
      break;
    case UpstreamError::Protocol:
      kind = &problems::kUpstreamProtocolError;
      break;
    case UpstreamError::Refused:
      kind = &problems::kUpstreamRefused;
      break;
    case UpstreamError::Reset:
      break;
  }
  failAttempt(outcome, makeProblem(*kind, detail));
}

// --- downstream events ----------------------------------------------------------------

void Exchange::onDownstreamDisconnect(CancelReason reason) {
  if (downstream_ != nullptr) relay_.clientLeft(downstream_->bufferedBytes());
  downstream_ = nullptr;  // never write to the client again
  if (finished_) return;
  const bool finish_mode = route_->config != nullptr && route_->config->on_client_disconnect ==
                                                            config::ClientDisconnectMode::Finish;
  // A streamed request cut short cannot complete upstream: cancel it instead.
  if (finish_mode && attempt_.stream != nullptr && state_ == ExchangeState::Running &&
      intake_.requestComplete()) {
    // Let the side-effecting call complete, within finish_grace; its output is leaked.
    discarding_ = true;
    if (!cancel_reason_) cancel_reason_ = reason;
    route_->metrics->cancellations(*cancel_reason_).Increment();
    cancel_counted_ = true;
    if (relay_.resume()) {
      attempt_.stream->resumeReading();
      attempt_.last_upstream_byte = clock().now();
      armIdleTimer();
    }
    // The first grace holds (its cancel's reason is cancel_reason_, set above).
    if (!timers_.armed(ExchangeSlot::FinishGrace)) {
      timers_.arm(ExchangeSlot::FinishGrace, clock().now() + route_->config->finish_grace);
    }
    return;
  }
  cancel(reason);
}

void Exchange::onDownstreamWritable() {
  if (finished_ || attempt_.stream == nullptr || !relay_.resume()) return;
  attempt_.stream->resumeReading();
  attempt_.last_upstream_byte = clock().now();
  armIdleTimer();
}

// --- endings --------------------------------------------------------------------------

void Exchange::cancel(CancelReason reason, std::optional<std::chrono::milliseconds> retry_after) {
  cancelWith(reason, std::nullopt, retry_after);
}

void Exchange::cancelWith(CancelReason reason, std::optional<Problem> answer_with,
                          std::optional<std::chrono::milliseconds> retry_after) {
  if (finished_ || isTerminal(state_) || state_ == ExchangeState::Cancelling) return;
  if (!cancel_reason_) cancel_reason_ = reason;  // first cause wins
  const MonotonicTime decided = clock().preciseNow();
  const bool had_attempt = attempt_.stream != nullptr;
  transition(ExchangeState::Cancelling);
  timers_.clear();  // wakes nothing: every sleep of this request ends here
  Problem problem =
      answer_with ? std::move(*answer_with) : problemFor(*cancel_reason_, retry_after);
  std::string final_event;
  // Decided before the attempt ends: the spend meter must know whether what
  // is buffered for the client will still be delivered.
  if (downstream_ != nullptr && relay_.started() && clientStillListening(*cancel_reason_)) {
    final_event = finalEventFor(problem);
  }
  if (had_attempt) {
    const bool sent = attempt_.connected;
    // Torn down: the verdict can only be this cancel's answer (no retry).
    endAttempt(*cancel_reason_ == CancelReason::UpstreamTimeout ? AttemptOutcome::timeout()
                                                                : AttemptOutcome::cancelled(),
               /*reuse=*/false, AttemptVerdict::fail(problem));
    attempt_.upstream->metrics->cancelPropagation().Observe(
        seconds(clock().preciseNow() - decided));
    // A session-ful MCP server may not read the closed stream as a cancel.
    if (sent && mcp_session_) notifyMcpCancel();
  }
  if (!cancel_counted_) {
    route_->metrics->cancellations(*cancel_reason_).Increment();
    cancel_counted_ = true;
  }
  int code = kClientClosedRequest;
  if (downstream_ != nullptr) {
    if (!relay_.started()) {
      sendProblem(problem);
      code = problem.status;
    } else {
      cutResponse(final_event);
      code = attempt_.status;
    }
  }
  transition(ExchangeState::Cancelled);
  finish(code);
}

void Exchange::sendLocalReply(const Problem& problem) {
  if (finished_) return;
  if (attempt_.stream != nullptr) {
    endAttempt(AttemptOutcome::cancelled(), false, AttemptVerdict::fail(problem));
  }
  answer(problem, ExchangeState::Completed);
}

void Exchange::answer(Problem problem, ExchangeState terminal) {
  if (finished_) return;
  sendProblem(problem);
  // An attempt still in flight (a streamed body refused midway) is torn down.
  if (attempt_.stream != nullptr) {
    endAttempt(AttemptOutcome::cancelled(), false, AttemptVerdict::fail(problem));
  }
  transition(terminal);
  finish(problem.status);
}

void Exchange::answerLocally(LocalReply reply) {
  const int status = reply.head.status;
  if (downstream_ != nullptr && !relay_.started()) writeLocalReply(reply);
  transition(ExchangeState::Completed);
  finish(status);
}

void Exchange::writeLocalReply(LocalReply& reply) {
  beginResponse(reply.head, /*from_upstream=*/false);
  record_.addBytesOut(reply.body.size());
  relay_.sendReply(*downstream_, std::move(reply.head), reply.body);
}

void Exchange::sendProblem(Problem& problem) {
  for (auto& filter : filters_) filter->encodeLocalReply(problem);
  if (downstream_ == nullptr || relay_.started()) return;
  LocalReply reply =
      mcpRoute() ? makeMcpReply(problem, record_.jsonRpcId()
                                             ? std::optional<std::string_view>(*record_.jsonRpcId())
                                             : std::nullopt)
                 : makeProblemReply(problem);
  if (attempts_sent_ > 0) {
    reply.head.headers.set("x-sluice-attempts", std::to_string(attempts_sent_));
  }
  writeLocalReply(reply);
}

std::string Exchange::finalEventFor(const Problem& problem) {
  if (downstream_ == nullptr || discarding_) return "";
  return relay_.finalEventFor(*downstream_, problem, record_.jsonRpcId());
}

void Exchange::cutResponse(const std::string& final_event) {
  if (downstream_ != nullptr) ResponseRelay::cut(*downstream_, final_event);
}

Problem Exchange::problemFor(CancelReason reason,
                             std::optional<std::chrono::milliseconds> retry_after) const {
  const UpstreamRuntime* current =
      attempt_.upstream != nullptr ? attempt_.upstream : route_->upstream;
  CancelContext context;
  context.upstream = current != nullptr ? std::string_view(current->name()) : "none";
  if (deadline_ != MonotonicTime::max()) {
    context.budget = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - start_);
  }
  context.attempts = attempts_sent_;
  return problemForCancel(reason, context, retry_after);
}

void Exchange::finish(int status_code) {
  if (finished_) return;
  finished_ = true;
  phase_ = Phase::Done;
  timers_.clear();
  connect_wait_.release();
  if (attempt_.stream != nullptr) {  // a safety net: every ending above ended its attempt
    endAttempt(AttemptOutcome::cancelled(), false,
               AttemptVerdict::fail(problemFor(
                   cancel_reason_.value_or(CancelReason::ClientDisconnect), std::nullopt)));
  }
  for (auto& filter : filters_) filter->onDestroy();
  RouteMetrics& m = *route_->metrics;
  const MonotonicTime now = clock().now();
  m.requests(status_code).Increment();
  m.duration().Observe(seconds(now - start_));
  m.active().Decrement();
  logAccess(status_code, now);
  if (DownstreamStream* d = downstream_) {
    downstream_ = nullptr;
    // Answered before the upload ended: the codec reads (and drops) the rest.
    if (intake_.takeClientPaused()) d->resumeRequestBody();
    d->onExchangeDone();
  }
  host_.retire(*this);
}

std::function<void()> Exchange::crossThreadWaker(std::function<void()> fn) {
  Dispatcher* dispatcher = &host_.dispatcher();
  ExchangeHost* host = &host_;
  const uint64_t id = id_;
  return [dispatcher, host, id, fn = std::move(fn)] {
    dispatcher->post([host, id, fn] {
      if (host->alive(id)) fn();
    });
  };
}

void Exchange::recordRun(std::string_view run_id, std::string_view parent_run_id) {
  record_.setRun(run_id, parent_run_id);
}

void Exchange::recordJsonRpc(std::string_view method, std::optional<std::string_view> id,
                             std::string_view tool) {
  record_.setJsonRpc(method, id, tool);
}

void Exchange::recordUsage(const AttemptUsage& usage) { record_.addUsage(usage); }

bool Exchange::holdUntilRead(std::unique_ptr<ReadReceipt>& receipt) {
  // A cut the client caused (it left, it stalled) has nobody left to ask.
  const std::optional<CancelReason> why = receipt->reason();
  if (downstream_ == nullptr || read_receipt_ || !downstream_->confirmsReads() ||
      (why && !clientStillListening(*why))) {
    return false;
  }
  read_receipt_ = std::move(receipt);
  return true;
}

void Exchange::logAccess(int status_code, MonotonicTime now) {
  AccessLogBuffer* log = host_.accessLog();
  if (log == nullptr || !log->enabled()) {
    if (read_receipt_) holdSpend(nullptr, nullptr);
    return;
  }
  const auto age = now - start_;
  AccessRecord r;
  r.start = clock().systemNow() - std::chrono::duration_cast<SystemTime::duration>(age);
  r.request_id = identity_.request_id;
  r.trace_id = identity_.trace_id;
  r.route = route_->name();
  // The last attempt's upstream and endpoint: who answered (or failed last).
  const UpstreamRuntime* upstream =
      attempt_.upstream != nullptr ? attempt_.upstream : route_->upstream;
  r.upstream = upstream != nullptr ? std::string_view(upstream->name()) : "none";
  if (attempt_.endpoint != nullptr) r.endpoint = attempt_.endpoint->name();
  r.fallbacks = router_.fallbacks();
  r.method = request_.method;
  r.path = request_.pathOnly();
  r.protocol = request_.version_major == 2   ? "HTTP/2"
               : request_.version_minor == 0 ? "HTTP/1.0"
                                             : "HTTP/1.1";
  r.status = status_code;
  r.attempts = attempts_sent_;
  r.duration_ms = std::chrono::duration<double, std::milli>(age).count();
  r.cancel_reason = cancel_reason_;
  r.bytes_in = intake_.bytesIn();
  record_.fill(r, start_);
  if (read_receipt_) {
    holdSpend(&r, log);  // the line is written once the spend is booked
    return;
  }
  log->append(r);
}

void Exchange::holdSpend(const AccessRecord* record, AccessLogBuffer* log) {
  auto hold = std::make_unique<DeliveryHold>(runtime_, std::move(read_receipt_), record, log);
  if (downstream_ != nullptr) {
    downstream_->holdUntilRead(std::move(hold));
  } else {
    hold->settle(0);
  }
}

// --- timers (ExchangeTimers: one wake at the earliest) ----------------------------------

TimerId Exchange::armTimer(MonotonicTime at, std::function<void()> cb) {
  return timers_.armCallback(at, std::move(cb));
}

void Exchange::disarmTimer(TimerId id) { timers_.disarmCallback(id); }

void Exchange::setDeadline(MonotonicTime deadline) {
  deadline_ = deadline;
  deadline_reason_ = CancelReason::BudgetExhausted;
  timers_.arm(ExchangeSlot::Deadline, deadline);
}

void Exchange::lowerDeadline(MonotonicTime deadline, CancelReason reason) {
  if (deadline >= deadline_) return;
  deadline_ = deadline;
  deadline_reason_ = reason;
  timers_.arm(ExchangeSlot::Deadline, deadline);
}

void Exchange::onSlot(ExchangeSlot slot) {
  switch (slot) {
    case ExchangeSlot::Deadline:
      cancel(deadline_reason_);
      return;
    case ExchangeSlot::Connect:
      failAttempt(AttemptOutcome::connectError(),
                  makeProblem(problems::kUpstreamConnectTimeout,
                              "no connection to upstream " + attempt_.upstream->name() + " (" +
                                  attempt_.endpoint->name() + ") within connect_timeout"));
      return;
    case ExchangeSlot::FirstByte:
      onAttemptTimeout();
      return;
    case ExchangeSlot::Idle: {
      if (relay_.paused() || attempt_.stream == nullptr) return;
      const MonotonicTime due = attempt_.last_upstream_byte + route_->config->idle_timeout;
      if (clock().now() >= due) {
        onAttemptTimeout();
      } else {
        armIdleTimer();  // bytes arrived since: sleep until the new due time
      }
      return;
    }
    case ExchangeSlot::RetryDelay:
      startAttempt(retry_target_);
      return;
    case ExchangeSlot::FinishGrace:
      cancel(cancel_reason_.value_or(CancelReason::ClientDisconnect));
      return;
  }
}

// --- introspection -----------------------------------------------------------------------

ExchangeSnapshot Exchange::snapshot() const {
  ExchangeSnapshot s;
  const MonotonicTime now = clock().now();
  s.id = id_;
  s.request_id = identity_.request_id;
  s.route = route_->name();
  const UpstreamRuntime* upstream =
      attempt_.upstream != nullptr ? attempt_.upstream : route_->upstream;
  s.upstream = upstream != nullptr ? upstream->name() : "none";
  if (attempt_.endpoint != nullptr) s.endpoint = attempt_.endpoint->name();
  s.fallbacks = router_.fallbacks();
  s.method = request_.method;
  s.path = std::string(request_.pathOnly());
  s.state = std::string(toString(state_));
  s.cancel_reason = cancel_reason_ ? std::string(toString(*cancel_reason_)) : "";
  s.attempts = attempts_;
  s.age_seconds = seconds(now - start_);
  s.budget_left_seconds = deadline_ == MonotonicTime::max() ? -1 : seconds(deadline_ - now);
  s.client_attached = downstream_ != nullptr;
  s.upstream_paused = relay_.paused();
  s.downstream_buffered_bytes = downstream_ != nullptr ? downstream_->bufferedBytes() : 0;
  s.response_bytes = response_bytes_;
  return s;
}

}  // namespace sluice
