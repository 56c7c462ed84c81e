#include "proxy/exchange/attempt_loop.h"

#include "common/json_fields.h"
#include "common/random.h"
#include "filters/attempt_outcome.h"
#include "proxy/exchange/exchange_problem.h"
#include "proxy/http/header_rewrite.h"

namespace sluice {

AttemptLoop::~AttemptLoop() {
  if (attempt_.stream != nullptr) {
    attempt_.stream->detach();
    attempt_.stream->reset();
  }
}

void AttemptLoop::begin(const AttemptTarget& target, const Request& request) {
  ++started_;
  // A retry prefers another endpoint than the one the last attempt failed on.
  const EndpointRuntime* last = attempt_.endpoint;
  attempt_ = Attempt{};
  relay_.resetAttempt();
  attempt_.target = target;
  const RouteRuntime& route = router_.route();
  if (started_ == 1 && route.config->protocol == config::RouteProtocol::Mcp) {
    mcp_session_ = McpSession::find(route, request.head, now());
  }
  // The quota key as the throttle filter will compute it: from the head rewritten per endpoint.
  const auto key_for = [&request](const UpstreamRuntime& up, const EndpointRuntime& e) {
    return quotaKeyAt(request.head, up, e, request.client);
  };
  const AttemptRouter::Placement placement =
      router_.place(target, last, owner_.mayReplay(), QuotaAsk{key_for, request.body.prefix()},
                    threadLocalUniform(), mcp_session_ ? mcp_session_->endpoint : nullptr);
  attempt_.upstream = placement.upstream;
  attempt_.endpoint = placement.endpoint;
  attempt_.request = std::make_unique<RequestHead>(requestForUpstream(
      request.head, *attempt_.upstream->config, attempt_.endpoint->config->url, request.client));
  attempt_.request->headers.remove("expect");  // sluice answered it (or reads the body anyway)
  attempt_.destination = attempt_.endpoint->destination;
  rewritten_body_.reset();
  if (router_.chainIndex() == 0) return;
  const std::string& model = router_.fallbackModel();
  if (model.empty()) return;
  const std::optional<std::string> body = withTopLevelString(request.body.prefix(), "model", model);
  if (!body) return;
  // The same bytes with another model: counted against the process-wide cap as well.
  auto rewritten = std::make_unique<RequestBody>(
      &request.runtime.bodyMemory(), request.runtime.config().limits.max_buffered_body_bytes);
  if (!rewritten->append(body->data(), body->size())) return;
  rewritten->markComplete();
  rewritten_body_ = std::move(rewritten);
  attempt_.destination.model = model;
}

bool AttemptLoop::send(UpstreamStreamSource& pool, RequestBody& body,
                       const config::RouteConfig& route, bool request_complete, MonotonicTime now) {
  attempt_.last_upstream_byte = now;
  timers_.arm(ExchangeSlot::Connect, now + attempt_.upstream->config->connect_timeout);
  armFirstByte(route, request_complete, now);
  // Waiting for a connection (none idle, or still connecting) takes one of the
  // endpoint's max_pending slots until the stream is connected.
  if (!pool.hasReadyStream() && !connect_wait_.acquire(*attempt_.endpoint->breaker)) return false;
  attempt_.stream = pool.acquire();
  ++sent_;
  // May report back synchronously.
  attempt_.stream->sendRequest(*attempt_.request, body, this);
  return true;
}

void AttemptLoop::onTimer(ExchangeSlot slot) {
  switch (slot) {
    case ExchangeSlot::Connect:
      owner_.onAttemptFailed(
          AttemptOutcome::connectError(),
          connectTimeoutProblem(attempt_.upstream->name(), attempt_.endpoint->name()));
      return;
    case ExchangeSlot::FirstByte:
      owner_.onAttemptTimedOut();
      return;
    case ExchangeSlot::Idle:
      if (idleExpired(*router_.route().config, owner_.attemptFacts().request_complete, now())) {
        owner_.onAttemptTimedOut();
      }
      return;
    default:
      return;  // not an attempt's
  }
}

// --- UpstreamCallbacks ------------------------------------------------------------------

void AttemptLoop::onUpstreamConnected() {
  connected(router_.route().config, owner_.attemptFacts().request_complete);
}

void AttemptLoop::onUpstreamBodySent(uint64_t offset) {
  attempt_.body_sent = offset;
  owner_.onAttemptBodySent(offset);
}

void AttemptLoop::onUpstreamHeaders(ResponseHead&& head, bool end_stream) {
  if (owner_.attemptsStopped()) return;
  headArrived(head.status, now());
  rewriteResponseForDownstream(head);
  // Every filter sees every response head (the spend meter must know a held
  // 503 is not billable); StopIteration from any of them holds the response.
  bool hold = false;
  for (auto& filter : filters_) {
    hold = filter->encodeHeaders(head, end_stream) == FilterStatus::StopIteration || hold;
    if (owner_.attemptsStopped()) return;
  }
  // An answer the route falls back on waits too: the next upstream may replace it.
  hold = hold ||
         router_.fallsBackOn(AttemptOutcome::fromStatus(head.status), started_, owner_.mayReplay());
  if (hold) {
    relay_.hold(std::move(head));  // until the attempt ends: maybe retried, maybe released
  } else {
    sendHead(head);
  }
  armIdle(router_.route().config, owner_.attemptFacts().request_complete);
}

void AttemptLoop::sendHead(ResponseHead& head) {
  head.headers.set("x-sluice-attempts", std::to_string(sent_));
  head.headers.set("x-sluice-upstream", attempt_.upstream->name());
  if (!client_.listening()) return;
  client_.sendHead(head, now());
  owner_.onResponseUnderWay();
}

void AttemptLoop::releaseHeld(bool end_stream) {
  const std::unique_ptr<ResponseRelay::Held> held = relay_.takeHeld();
  sendHead(held->head);
  client_.sendHeldBody(held->body, end_stream);
}

void AttemptLoop::onUpstreamData(const char* data, size_t len) {
  if (owner_.attemptsStopped()) return;
  attempt_.last_upstream_byte = now();
  response_bytes_ += len;
  for (auto& filter : filters_) filter->encodeData(data, len, false);
  if (relay_.holding()) {
    if (relay_.holdData(data, len)) return;
    releaseHeld(false);  // too big to be an error worth retrying: stream it
  }
  // The relay says whether to stop reading the upstream: not when the write lost the client.
  if (client_.forward(data, len) && inFlight()) {
    // The client is slower than the upstream: stop reading the upstream until
    // the client drains (resumed()). Memory per stream stays bounded.
    attempt_.stream->pauseReading();
    timers_.disarm(ExchangeSlot::Idle);
  }
}

void AttemptLoop::onUpstreamTrailers(HeaderMap&& trailers) {
  if (!owner_.attemptsStopped()) client_.keepTrailers(std::move(trailers));
}

void AttemptLoop::onUpstreamComplete() {
  if (owner_.attemptsStopped()) return;
  for (auto& filter : filters_) filter->encodeData(nullptr, 0, true);
  const int status = attempt_.status;
  const AttemptVerdict verdict =
      end(AttemptOutcome::fromStatus(status), /*reuse=*/true, AttemptVerdict::deliver());
  if (owner_.attemptsStopped()) return;
  if (const auto* retry = verdict.asRetry()) {
    owner_.onAttemptRetry(*retry);
    return;
  }
  if (relay_.holding()) {
    if (const auto* fail = verdict.asFail()) {
      relay_.dropHeld();  // a filter refused the held answer
      owner_.onHeldResponseRefused(fail->problem);
      return;
    }
    if (verdict.asDeliver()->discourage_client_retry) {
      relay_.heldHead()->headers.set("x-should-retry", "false");
    }
    releaseHeld(true);
  } else if (client_.listening()) {
    client_.end();
  }
  owner_.onResponseDelivered(status);
}

void AttemptLoop::onUpstreamError(UpstreamError error, const std::string& detail) {
  if (owner_.attemptsStopped()) return;
  attempt_.unprocessed = unprocessed(error);
  owner_.onAttemptFailed(error == UpstreamError::ConnectError ? AttemptOutcome::connectError()
                                                              : AttemptOutcome::reset(),
                         upstreamErrorProblem(error, detail));
}

AttemptVerdict AttemptLoop::end(AttemptOutcome outcome, bool reuse, AttemptVerdict proposed) {
  connect_wait_.release();
  timers_.disarm(ExchangeSlot::Connect);
  timers_.disarm(ExchangeSlot::FirstByte);
  timers_.disarm(ExchangeSlot::Idle);
  attempt_.endpoint->metrics->attempts(attemptResultFor(outcome)).Increment();
  relay_.markCut(!outcome.isStatus());
  attempt_.outcome = outcome;
  const AttemptEnd end = describe(outcome);
  AttemptVerdict verdict = proposed;
  for (auto& filter : filters_) verdict = filter->decideAttempt(end, std::move(verdict));
  // A sent call the upstream may not see twice (a tool that is not safe to
  // repeat) is neither retried nor moved to a fallback.
  const bool may_retry = mayRetry(outcome) && (sent_resendable_ || end.unprocessed);
  if (verdict.isRetry() && !may_retry) verdict = std::move(proposed);
  verdict = router_.afterFailure(end, std::move(verdict), attempt_.endpoint, may_retry, started_,
                                 owner_.mayReplay());
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

AttemptVerdict AttemptLoop::tearDown(AttemptOutcome outcome, AttemptVerdict proposed,
                                     MonotonicTime decided) {
  AttemptVerdict verdict = end(outcome, /*reuse=*/false, std::move(proposed));
  attempt_.upstream->metrics->cancelPropagation().Observe(
      std::chrono::duration<double>(timers_.clock().preciseNow() - decided).count());
  return verdict;
}

void AttemptLoop::abandon(const Problem& answer) {
  if (inFlight()) end(AttemptOutcome::cancelled(), /*reuse=*/false, AttemptVerdict::fail(answer));
}

void AttemptLoop::spillOverRefused(CancelReason reason) {
  AttemptEnd end = describe(AttemptOutcome::cancelled());
  end.sent = false;
  const std::string cause(toString(reason));
  const AttemptVerdict verdict =
      AttemptVerdict::retry(std::chrono::milliseconds(0), cause, AttemptTarget::nextFallback());
  for (auto& filter : filters_) filter->onAttemptDone(end, verdict);
  router_.countFallback(cause);
  --started_;
}

CancelContext AttemptLoop::cancelContext() const {
  const UpstreamRuntime* upstream =
      attempt_.upstream != nullptr ? attempt_.upstream : router_.route().upstream;
  CancelContext context;
  context.upstream = upstream != nullptr ? std::string_view(upstream->name()) : "none";
  context.attempts = sent_;
  return context;
}

AttemptEnd AttemptLoop::describe(const AttemptOutcome& outcome) const {
  const ExchangeFacts facts = owner_.attemptFacts();
  AttemptEnd end;
  end.outcome = outcome;
  end.attempt = started_;
  end.status = attempt_.status;
  end.held_response = relay_.heldHead();
  end.held_body = relay_.heldBody();
  end.response_started = relay_.started();
  // Never connected: not a byte of the request reached the upstream.
  end.unprocessed =
      attempt_.unprocessed || outcome.kind == OutcomeKind::ConnectError || !attempt_.connected;
  end.delivered_body_bytes = relay_.deliveredBodyBytes(facts.client);
  end.cancel_reason = facts.cancel_reason;
  end.finish_draining = facts.finish_draining;
  return end;
}

bool AttemptLoop::mayRetry(const AttemptOutcome& outcome) const {
  // Not an attempt sluice tore down itself, not while cancelling, and never
  // once something of the response went to the client.
  return outcome.kind != OutcomeKind::Cancelled && owner_.attemptFacts().running &&
         !relay_.started();
}

void AttemptLoop::scheduleRetry(const AttemptVerdict::Retry& retry, RouteMetrics& metrics,
                                ExchangeRecord& record, MonotonicTime now) {
  relay_.dropHeld();  // the answer this retry replaces is never sent
  if (retry.target.kind == AttemptTarget::Kind::NextFallback) {
    router_.countFallback(retry.cause);  // a spill-over, not a retry of this upstream
  } else {
    metrics.retries(retry.cause).Increment();
  }
  // The access log speaks sluice_retries_total's vocabulary for a spill-over too.
  record.noteRetry(causeLabel(attempt_.outcome));
  // The sleep is a timer of the Exchange: a cancel (client gone, budget)
  // clears it and no further attempt is made.
  retry_target_ = retry.target;
  timers_.arm(ExchangeSlot::RetryDelay, now + retry.delay);
}

void AttemptLoop::armFirstByte(const config::RouteConfig& route, bool request_complete,
                               MonotonicTime now) {
  // A streamed upload is not the upstream's time to answer: it runs once
  // the upstream has the whole request.
  const auto timeout = route.first_byte_timeout;
  if (timeout.count() <= 0 || !request_complete || attempt_.status != 0) return;
  timers_.arm(ExchangeSlot::FirstByte, now + timeout);
}

void AttemptLoop::armIdle(const config::RouteConfig* route, bool request_complete) {
  // Nor is a stalled upload a stalled upstream (body_read_timeout is the client's).
  if (route == nullptr || relay_.paused() || attempt_.stream == nullptr || !request_complete) {
    return;
  }
  const auto idle = route->idle_timeout;
  if (idle.count() <= 0) return;
  timers_.arm(ExchangeSlot::Idle, attempt_.last_upstream_byte + idle);
}

bool AttemptLoop::idleExpired(const config::RouteConfig& route, bool request_complete,
                              MonotonicTime now) {
  if (relay_.paused() || attempt_.stream == nullptr) return false;
  if (now >= attempt_.last_upstream_byte + route.idle_timeout) return true;
  armIdle(&route, request_complete);  // bytes arrived since: sleep until the new due time
  return false;
}

void AttemptLoop::connected(const config::RouteConfig* route, bool request_complete) {
  attempt_.connected = true;
  connect_wait_.release();
  timers_.disarm(ExchangeSlot::Connect);
  // Waiting for the first byte counts as idle.
  if (!timers_.armed(ExchangeSlot::FirstByte)) armIdle(route, request_complete);
}

void AttemptLoop::requestSent(const config::RouteConfig& route, MonotonicTime now) {
  attempt_.last_upstream_byte = now;
  armFirstByte(route, /*request_complete=*/true, now);
  // Connected (its connect timer is gone) and no first-byte timer: idle time counts.
  if (!timers_.armed(ExchangeSlot::FirstByte) && !timers_.armed(ExchangeSlot::Connect)) {
    armIdle(&route, /*request_complete=*/true);
  }
}

void AttemptLoop::resumed(const config::RouteConfig* route, bool request_complete,
                          MonotonicTime now) {
  attempt_.stream->resumeReading();
  attempt_.last_upstream_byte = now;
  armIdle(route, request_complete);
}

void AttemptLoop::clientDrained() {
  if (!inFlight() || !relay_.resume()) return;
  resumed(router_.route().config, owner_.attemptFacts().request_complete, now());
}

void AttemptLoop::bodyEnded() {
  attempt_.stream->onRequestBodyData();
  if (owner_.attemptsStopped() || !inFlight()) return;  // it may report back at once
  requestSent(*router_.route().config, now());
}

void AttemptLoop::headArrived(int status, MonotonicTime now) {
  timers_.disarm(ExchangeSlot::FirstByte);
  attempt_.status = status;
  attempt_.last_upstream_byte = now;
}

void AttemptLoop::releaseReplayState(RequestBody& client_body) {
  attempt_.request.reset();  // UpstreamStream::sendRequest sent it
  RequestBody& sent = body(client_body);
  // The transport reads it still.
  if (!sent.complete() || attempt_.body_sent < sent.size()) return;
  sent.releaseAll();
  if (&sent != &client_body && client_body.complete()) client_body.releaseAll();
}

}  // namespace sluice
