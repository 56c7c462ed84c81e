#include "proxy/exchange.h"

#include <algorithm>
#include <cassert>
#include <charconv>

#include "proxy/access_log.h"
#include "filters/retry/retry_decision.h"
#include "proxy/filter_chain.h"
#include "proxy/header_rewrite.h"
#include "proxy/upstream_pool.h"

namespace sluice {

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

constexpr int kClientClosedRequest = 499;  // nginx's code for "the client went away"

/** The request's Content-Length (the codecs validated it), if it has one. */
std::optional<uint64_t> declaredContentLength(const RequestHead& request) {
  const auto value = request.headers.get("content-length");
  if (!value) return std::nullopt;
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), n);
  if (ec != std::errc() || end != value->data() + value->size()) return std::nullopt;
  return n;
}

// Whether a client that sees its response cut for `reason` is still there to
// read a final error event. client_disconnect: it left; client_stalled: it
// stopped reading.
bool clientStillListening(CancelReason reason) {
  switch (reason) {
    case CancelReason::ClientDisconnect:
    case CancelReason::ClientStalled:
      return false;
    case CancelReason::BudgetExhausted:
    case CancelReason::CircuitOpen:
    case CancelReason::RateLimited:
    case CancelReason::Overloaded:
    case CancelReason::UpstreamTimeout:
    case CancelReason::Draining:
      return true;
  }
  return false;
}

// The last bytes of an SSE stream that ends on an event boundary: a blank
// line after LF, CR or CRLF line ends. The tail holds the last four bytes.
bool atEventBoundary(uint32_t tail) {
  const uint32_t last2 = tail & 0xffff;
  return tail == 0 || last2 == 0x0a0a || last2 == 0x0d0d || tail == 0x0d0a0d0a;
}

}  // namespace

Exchange::Exchange(ExchangeHost& host, uint64_t id, RuntimePtr runtime, const RouteRuntime* route,
                   DownstreamStream* downstream, MonotonicTime start)
    : host_(host),
      id_(id),
      runtime_(std::move(runtime)),
      route_(route != nullptr ? route : &runtime_->noRoute()),
      downstream_(downstream),
      start_(start),
      body_(&runtime_->bodyMemory(), runtime_->config().limits.max_buffered_body_bytes),
      wake_(host.dispatcher().base(), [this] { onWake(); }) {
  route_->metrics->active().Increment();
  if (route_->config != nullptr) {
    filters_ = buildFilterChain(*route_);
    for (auto& filter : filters_) filter->setCallbacks(*this);
  }
}

Exchange::~Exchange() {
  // finish() normally ran; this is the safety net for a worker shutting down.
  if (stream_ != nullptr) {
    stream_->detach();
    stream_->reset();
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
  identity_ = establishIdentity(request_.headers, host_.ids());
  if (route_->config == nullptr) {
    answer(makeProblem(problems::kNoRoute, "no route matches " + request_.method + " " +
                                               std::string(request_.pathOnly())),
           ExchangeState::Completed);
    return;
  }
  if (declaredBodyTooLarge()) {
    rejectBodyTooLarge();
    return;
  }
  if (!planBody()) return;
  phase_ = Phase::DecodeHeaders;
  runChain(0);
}

bool Exchange::planBody() {
  stream_above_ = streamAbove();
  const auto declared = declaredContentLength(request_);
  if (!declared) return true;  // chunked: decided as the bytes come
  body_.declareLength(*declared);
  if (*declared > stream_above_) {
    body_.startStreaming();  // the attempt starts with the head (runChain)
    return true;
  }
  // Buffered whole: its room is taken now, so a body the process cannot
  // hold is refused before any of it is read.
  if (*declared > 0 && !body_.reserveWhole(*declared)) {
    refuseBody();
    return false;
  }
  return true;
}

uint64_t Exchange::streamAbove() const {
  const config::RetryConfig& retry = route_->config->retry;
  if (isRetrySafe(retry.idempotent, request_.method, request_.headers.has("idempotency-key"))) {
    return retry.max_body;
  }
  return std::min(retry.max_body, kAlwaysBufferedBytes);
}

void Exchange::decodeData(const char* data, size_t len) {
  if (finished_) return;
  if (body_.size() + len > runtime_->config().limits.max_body) {
    rejectBodyTooLarge();
    return;
  }
  if (!body_.append(data, len)) {
    refuseBody();
    return;
  }
  bytes_in_ += len;
  if (!body_.streaming()) {
    if (body_.size() <= stream_above_) return;
    // Too big to replay: stop buffering and start the attempt now.
    body_.startStreaming();
    if (phase_ == Phase::DecodeComplete && !held_) runChain(0);
    if (finished_) return;
  }
  if (stream_ != nullptr) stream_->onRequestBodyData();
  applyBodyBackpressure();
}

bool Exchange::declaredBodyTooLarge() const {
  // The codecs validated the value (digits only, one value); a body that says
  // up front it will not fit is refused before a byte of it is read (and
  // before an HTTP/1.1 client is told `100 Continue`).
  const auto declared = declaredContentLength(request_);
  return declared && *declared > runtime_->config().limits.max_body;
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
  request_complete_ = true;
  body_.markComplete();
  if (client_paused_) {
    // The codec read the end with the bytes that paused it: let it read
    // again, so a client that leaves is seen at once.
    client_paused_ = false;
    if (downstream_ != nullptr) downstream_->resumeRequestBody();
  }
  if (finished_) return;
  if (stream_ != nullptr) {
    // A streamed body's end: the upstream has it all, so its time to answer starts now.
    stream_->onRequestBodyData();
    if (finished_ || stream_ == nullptr) return;
    last_upstream_byte_ = clock().now();
    armFirstByteTimer();
    if (first_byte_timer_ == 0 && attempt_connected_) armIdleTimer();
    return;
  }
  if (held_) return;
  if (phase_ == Phase::DecodeComplete) runChain(0);
}

void Exchange::applyBodyBackpressure() {
  if (!body_.streaming() || request_complete_ || downstream_ == nullptr || finished_) return;
  if (!client_paused_ && body_.held() > kBodyHighWatermark) {
    client_paused_ = true;
    downstream_->pauseRequestBody();
  } else if (client_paused_ && body_.held() < kBodyLowWatermark) {
    client_paused_ = false;
    downstream_->resumeRequestBody();
  }
}

void Exchange::refuseBody() {
  const uint64_t cap = runtime_->config().limits.max_buffered_body_bytes;
  cancelWith(CancelReason::Overloaded,
             makeProblem(problems::kOverloaded,
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
      case Phase::DecodeHeaders: status = filter.decodeHeaders(request_); break;
      case Phase::DecodeComplete: status = filter.decodeComplete(body_.prefix()); break;
      case Phase::BeforeAttempt: status = filter.beforeAttempt(upstream_request_); break;
      case Phase::Done: return;
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
      if (request_complete_ || body_.streaming()) runChain(0);
      return;
    case Phase::DecodeComplete:
      startAttempt();
      return;
    case Phase::BeforeAttempt:
      sendAttempt();
      return;
    case Phase::Done:
      return;
  }
}

void Exchange::continueDecoding() {
  if (finished_ || !held_) return;
  held_ = false;
  runChain(resume_index_);
}

// --- attempts ---------------------------------------------------------------------

void Exchange::startAttempt() {
  ++attempts_;
  retry_scheduled_ = false;
  held_head_.reset();
  held_body_.clear();
  assert(body_.replayable() && "a retry needs the whole body");
  attempt_forwarded_bytes_ = 0;
  upstream_request_ = request_;
  rewriteRequestForUpstream(upstream_request_, *route_->upstream->config,
                            downstream_ != nullptr ? downstream_->clientInfo() : ClientInfo{});
  upstream_request_.headers.remove("expect");  // sluice answered it (or reads the body anyway)
  phase_ = Phase::BeforeAttempt;
  runChain(0);
}

void Exchange::sendAttempt() {
  phase_ = Phase::Done;
  if (!transition(ExchangeState::Running)) return;
  const config::UpstreamConfig& uc = *route_->upstream->config;
  const MonotonicTime now = clock().now();

  attempt_connected_ = false;
  upstream_headers_ = false;
  upstream_paused_ = false;
  response_status_ = 0;
  last_upstream_byte_ = now;
  connect_timer_ = armTimer(now + uc.connect_timeout, [this] {
    connect_timer_ = 0;
    failAttempt(AttemptResult::ConnectError,
                makeProblem(problems::kUpstreamConnectTimeout,
                            "no connection to upstream " + route_->upstream->config->name +
                                " within connect_timeout"));
  });
  armFirstByteTimer();

  attempt_unprocessed_ = false;
  UpstreamPool& pool = host_.pool(*runtime_, route_->upstream_index);
  // Waiting for a connection (none idle, or still connecting) takes one of the
  // upstream's max_pending slots until the stream is connected.
  if (!pool.hasReadyStream() && !connect_wait_.acquire(*route_->upstream->breaker)) {
    cancel(CancelReason::Overloaded, kOverloadedRetryAfter);
    return;
  }
  stream_ = pool.acquire();
  stream_->sendRequest(upstream_request_, body_, this);  // may report back synchronously
}

void Exchange::endAttempt(AttemptResult result, bool reuse) {
  connect_wait_.release();
  disarmTimer(connect_timer_);
  disarmTimer(first_byte_timer_);
  disarmTimer(idle_timer_);
  connect_timer_ = first_byte_timer_ = idle_timer_ = 0;
  route_->upstream->metrics->attempts(result).Increment();
  attempt_cut_ = result == AttemptResult::ConnectError || result == AttemptResult::Reset ||
                 result == AttemptResult::Timeout || result == AttemptResult::Cancelled;
  AttemptEnd outcome{result, response_status_, response_started_};
  outcome.unprocessed = attempt_unprocessed_ || result == AttemptResult::ConnectError;
  for (auto& filter : filters_) filter->onAttemptEnd(outcome);
  if (stream_ != nullptr) {
    UpstreamStream* stream = stream_;
    stream_ = nullptr;
    stream->detach();
    if (reuse) {
      stream->release();
    } else {
      stream->reset();  // closes the connection / resets the stream now: generation stops
    }
  }
  upstream_paused_ = false;
}

void Exchange::failAttempt(AttemptResult result, const Problem& problem) {
  if (finished_) return;
  // A response under way is never retried: it will be cut, after one final
  // error event if the client can take it (decided before the spend meter reads).
  const std::string final_event = response_started_ ? finalEventFor(problem) : std::string();
  endAttempt(result, false);  // the retry filter may schedule another attempt
  if (finished_ || retry_scheduled_) return;
  if (response_started_) {
    cutResponse(final_event);
    transition(ExchangeState::Failed);
    finish(response_status_);
    return;
  }
  if (discarding_) {
    transition(ExchangeState::Failed);
    finish(kClientClosedRequest);
    return;
  }
  answer(problem, ExchangeState::Failed);
}

void Exchange::onAttemptTimeout(bool first_byte) {
  if (finished_) return;
  (void)first_byte;
  if (response_started_ || discarding_ || held_head_) {
    cancel(CancelReason::UpstreamTimeout);
    return;
  }
  // Nothing reached the client: the attempt failed with `timeout`, which the
  // retry filter may retry. Otherwise the exchange stops with upstream_timeout.
  const MonotonicTime decided = clock().now();
  endAttempt(AttemptResult::Timeout, /*reuse=*/false);
  route_->upstream->metrics->cancelPropagation().Observe(seconds(clock().now() - decided));
  if (finished_ || retry_scheduled_) return;
  cancel(CancelReason::UpstreamTimeout);
}

void Exchange::armFirstByteTimer() {
  // A streamed upload is not the upstream's time to answer: it runs once
  // the upstream has the whole request.
  const auto timeout = route_->config->first_byte_timeout;
  if (timeout.count() <= 0 || !request_complete_ || upstream_headers_) return;
  disarmTimer(first_byte_timer_);
  first_byte_timer_ = armTimer(clock().now() + timeout, [this] {
    first_byte_timer_ = 0;
    onAttemptTimeout(true);
  });
}

void Exchange::armIdleTimer() {
  // Nor is a stalled upload a stalled upstream (body_read_timeout is the client's).
  if (route_->config == nullptr || upstream_paused_ || stream_ == nullptr || !request_complete_) {
    return;
  }
  const auto idle = route_->config->idle_timeout;
  if (idle.count() <= 0) return;
  disarmTimer(idle_timer_);
  idle_timer_ = armTimer(last_upstream_byte_ + idle, [this, idle] {
    idle_timer_ = 0;
    if (upstream_paused_ || stream_ == nullptr) return;
    const MonotonicTime due = last_upstream_byte_ + idle;
    if (clock().now() >= due) {
      onAttemptTimeout(false);
    } else {
      armIdleTimer();  // bytes arrived since: sleep until the new due time
    }
  });
}

// --- UpstreamCallbacks --------------------------------------------------------------

void Exchange::onUpstreamConnected() {
  attempt_connected_ = true;
  connect_wait_.release();
  disarmTimer(connect_timer_);
  connect_timer_ = 0;
  if (first_byte_timer_ == 0) armIdleTimer();  // waiting for the first byte counts as idle
}

void Exchange::onUpstreamBodySent(uint64_t offset) {
  body_.discardBefore(offset);  // a streamed body frees what the upstream took
  applyBodyBackpressure();
}

void Exchange::onUpstreamHeaders(ResponseHead&& head, bool end_stream) {
  if (finished_) return;
  disarmTimer(first_byte_timer_);
  first_byte_timer_ = 0;
  upstream_headers_ = true;
  response_status_ = head.status;
  last_upstream_byte_ = clock().now();
  rewriteResponseForDownstream(head);
  // Every filter sees every response head (the spend meter must know a held
  // 503 is not billable); StopIteration from any of them holds the response.
  bool hold = false;
  for (auto& filter : filters_) {
    hold = filter->encodeHeaders(head, end_stream) == FilterStatus::StopIteration || hold;
    if (finished_) return;
  }
  if (hold) {
    // Held back until the attempt ends: maybe retried, maybe released.
    held_head_ = std::move(head);
    armIdleTimer();
    return;
  }
  sendResponseHead(head);
  armIdleTimer();
}

void Exchange::sendResponseHead(ResponseHead& head) {
  head.headers.set("x-sluice-attempts", std::to_string(attempts_));
  if (!discarding_ && downstream_ != nullptr) {
    response_started_ = true;
    beginResponse(head, /*from_upstream=*/true);
    sse_dialect_ =
        sseDialectFor(request_.pathOnly(), head.headers.get("content-type").value_or(""));
    forwarded_tail_ = 0;
    downstream_->encodeHeaders(head, false);
  }
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
  if (first_byte_at_) return;
  first_byte_at_ = clock().now();
  if (from_upstream) route_->metrics->timeToFirstByte().Observe(seconds(*first_byte_at_ - start_));
}

void Exchange::releaseHeldResponse(bool end_stream) {
  ResponseHead head = std::move(*held_head_);
  held_head_.reset();
  std::string body;
  body.swap(held_body_);
  sendResponseHead(head);
  if (!discarding_ && downstream_ != nullptr) {
    noteForwarded(body.data(), body.size());
    downstream_->encodeData(body.data(), body.size(), end_stream);
  }
}

void Exchange::onUpstreamData(const char* data, size_t len) {
  if (finished_) return;
  last_upstream_byte_ = clock().now();
  response_bytes_ += len;
  for (auto& filter : filters_) filter->encodeData(data, len, false);
  if (held_head_) {
    if (held_body_.size() + len <= kMaxHeldBody) {
      held_body_.append(data, len);
      return;
    }
    releaseHeldResponse(false);  // too big to be an error worth retrying: stream it
  }
  if (discarding_ || downstream_ == nullptr) return;
  noteForwarded(data, len);
  downstream_->encodeData(data, len, false);
  pauseUpstreamIfClientSlow();
}

void Exchange::pauseUpstreamIfClientSlow() {
  if (discarding_ || downstream_ == nullptr) return;
  if (!upstream_paused_ && stream_ != nullptr && downstream_->aboveHighWatermark()) {
    // The client is slower than the upstream: stop reading the upstream until
    // the client drains (onDownstreamWritable). Memory per stream stays bounded.
    upstream_paused_ = true;
    stream_->pauseReading();
    disarmTimer(idle_timer_);
    idle_timer_ = 0;
  }
}

void Exchange::onUpstreamComplete() {
  if (finished_) return;
  for (auto& filter : filters_) filter->encodeData(nullptr, 0, true);
  endAttempt(attemptResultForStatus(response_status_), /*reuse=*/true);  // may schedule a retry
  if (finished_ || retry_scheduled_) return;
  if (held_head_) {
    releaseHeldResponse(true);
    transition(ExchangeState::Completed);
    finish(discarding_ || downstream_ == nullptr ? kClientClosedRequest : response_status_);
    return;
  }
  if (discarding_ || downstream_ == nullptr) {
    transition(ExchangeState::Completed);
    finish(kClientClosedRequest);
    return;
  }
  downstream_->encodeData(nullptr, 0, true);
  transition(ExchangeState::Completed);
  finish(response_status_);
}

void Exchange::onUpstreamError(UpstreamError error, const std::string& detail) {
  if (finished_) return;
  attempt_unprocessed_ = unprocessed(error);
  const AttemptResult result =
      error == UpstreamError::ConnectError ? AttemptResult::ConnectError : AttemptResult::Reset;
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
  failAttempt(result, makeProblem(*kind, detail));
}

// --- downstream events ----------------------------------------------------------------

void Exchange::onDownstreamDisconnect(CancelReason reason) {
  if (downstream_ != nullptr) undelivered_at_disconnect_ = downstream_->bufferedBytes();
  downstream_ = nullptr;  // never write to the client again
  if (finished_) return;
  const bool finish_mode =
      route_->config != nullptr &&
      route_->config->on_client_disconnect == config::ClientDisconnectMode::Finish;
  // A streamed request cut short cannot complete upstream: cancel it instead.
  if (finish_mode && stream_ != nullptr && state_ == ExchangeState::Running &&
      request_complete_) {
    // Let the side-effecting call complete, within finish_grace; its output is leaked.
    discarding_ = true;
    if (!cancel_reason_) cancel_reason_ = reason;
    route_->metrics->cancellations(*cancel_reason_).Increment();
    cancel_counted_ = true;
    if (upstream_paused_) {
      upstream_paused_ = false;
      stream_->resumeReading();
      last_upstream_byte_ = clock().now();
      armIdleTimer();
    }
    grace_timer_ = armTimer(clock().now() + route_->config->finish_grace, [this, reason] {
      grace_timer_ = 0;
      cancel(reason);
    });
    return;
  }
  cancel(reason);
}

void Exchange::onDownstreamWritable() {
  if (finished_ || !upstream_paused_ || stream_ == nullptr) return;
  upstream_paused_ = false;
  stream_->resumeReading();
  last_upstream_byte_ = clock().now();
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
  const MonotonicTime decided = clock().now();
  const bool had_attempt = stream_ != nullptr;
  transition(ExchangeState::Cancelling);
  clearTimers();  // wakes nothing: every sleep of this request ends here
  Problem problem;
  std::string final_event;
  if (downstream_ != nullptr) {
    problem = answer_with ? std::move(*answer_with) : problemFor(*cancel_reason_, retry_after);
    // Decided before the attempt ends: the spend meter must know whether what
    // is buffered for the client will still be delivered.
    if (response_started_ && clientStillListening(*cancel_reason_)) {
      final_event = finalEventFor(problem);
    }
  }
  if (had_attempt) {
    endAttempt(*cancel_reason_ == CancelReason::UpstreamTimeout ? AttemptResult::Timeout
                                                                : AttemptResult::Cancelled,
               /*reuse=*/false);
    route_->upstream->metrics->cancelPropagation().Observe(seconds(clock().now() - decided));
  }
  if (!cancel_counted_) {
    route_->metrics->cancellations(*cancel_reason_).Increment();
    cancel_counted_ = true;
  }
  int code = kClientClosedRequest;
  if (downstream_ != nullptr) {
    if (!response_started_) {
      sendProblem(problem);
      code = problem.status;
    } else {
      cutResponse(final_event);
      code = response_status_;
    }
  }
  transition(ExchangeState::Cancelled);
  finish(code);
}

void Exchange::sendLocalReply(const Problem& problem) {
  if (finished_) return;
  if (stream_ != nullptr) endAttempt(AttemptResult::Cancelled, false);
  answer(problem, ExchangeState::Completed);
}

void Exchange::answer(Problem problem, ExchangeState terminal) {
  if (finished_) return;
  sendProblem(problem);
  transition(terminal);
  finish(problem.status);
}

void Exchange::sendProblem(Problem& problem) {
  for (auto& filter : filters_) filter->encodeLocalReply(problem);
  if (downstream_ == nullptr || response_started_) return;
  LocalReply reply = makeProblemReply(problem);
  if (attempts_ > 0) reply.head.headers.set("x-sluice-attempts", std::to_string(attempts_));
  response_started_ = true;
  beginResponse(reply.head, /*from_upstream=*/false);
  bytes_out_ += reply.body.size();
  downstream_->encodeHeaders(reply.head, false);
  downstream_->encodeData(reply.body.data(), reply.body.size(), true);
}

std::string Exchange::finalEventFor(const Problem& problem) {
  if (downstream_ == nullptr || discarding_ || sse_dialect_ == SseDialect::None ||
      !atEventBoundary(forwarded_tail_)) {
    return "";  // an event appended inside another would garble both
  }
  std::string event = sseErrorEvent(sse_dialect_, problem);
  if (!downstream_->canWriteWithoutWaiting(event.size())) return "";
  cut_flushes_ = true;
  return event;
}

void Exchange::cutResponse(const std::string& final_event) {
  if (downstream_ == nullptr) return;
  if (final_event.empty()) {
    downstream_->resetStream();
  } else {
    downstream_->resetStreamAfter(final_event);
  }
}

void Exchange::noteForwarded(const char* data, size_t len) {
  attempt_forwarded_bytes_ += len;
  bytes_out_ += len;
  if (sse_dialect_ == SseDialect::None) return;
  for (size_t i = len > 4 ? len - 4 : 0; i < len; ++i) {
    forwarded_tail_ = forwarded_tail_ << 8 | static_cast<uint8_t>(data[i]);
  }
}

Problem Exchange::problemFor(CancelReason reason,
                             std::optional<std::chrono::milliseconds> retry_after) const {
  const std::string upstream = route_->upstream ? route_->upstream->config->name : "none";
  switch (reason) {
    case CancelReason::BudgetExhausted: {
      std::string budget;
      if (deadline_ != MonotonicTime::max()) {
        budget = " of " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - start_)
                         .count()) +
                 " ms";
      }
      return makeProblem(problems::kBudgetExhausted,
                         "the request's time budget" + budget + " ran out after " +
                             std::to_string(attempts_) + " attempt(s)",
                         reason);
    }
    case CancelReason::UpstreamTimeout:
      return makeProblem(problems::kUpstreamTimeout,
                         "upstream " + upstream +
                             " stopped sending (first_byte_timeout/idle_timeout)",
                         reason);
    case CancelReason::CircuitOpen:
      return makeProblem(problems::kCircuitOpen,
                         "upstream " + upstream +
                             " is failing; sluice is not calling it for now",
                         reason, retry_after);
    case CancelReason::RateLimited:
      return makeProblem(problems::kRateLimited,
                         "upstream " + upstream +
                             " quota would be exceeded; wait for its reset",
                         reason, retry_after);
    case CancelReason::Overloaded:
      return makeProblem(problems::kOverloaded,
                         "too many requests in flight or waiting for upstream " + upstream, reason,
                         retry_after);
    case CancelReason::Draining:
      return makeProblem(problems::kDraining,
                         "this sluice instance is draining; retry on another", reason,
                         retry_after);
    case CancelReason::ClientDisconnect:
      return makeProblem(problems::kClientDisconnect, "the client went away", reason);
    case CancelReason::ClientStalled:
      return makeProblem(problems::kClientStalled,
                         "the client accepted no byte for limits.send_timeout", reason);
  }
  return makeProblem(problems::kClientDisconnect, "the client went away", reason);
}

void Exchange::finish(int status_code) {
  if (finished_) return;
  finished_ = true;
  phase_ = Phase::Done;
  clearTimers();
  connect_wait_.release();
  if (stream_ != nullptr) endAttempt(AttemptResult::Cancelled, false);
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
    if (client_paused_) d->resumeRequestBody();
    client_paused_ = false;
    d->onExchangeDone();
  }
  host_.retire(*this);
}

void Exchange::retryAttempt(std::chrono::milliseconds delay, const std::string& cause) {
  if (finished_ || state_ != ExchangeState::Running || response_started_) return;
  retry_scheduled_ = true;
  held_head_.reset();
  held_body_.clear();
  route_->metrics->retries(cause).Increment();
  retry_causes_.push_back(cause);
  transition(ExchangeState::BackingOff);
  // The sleep is a timer of this Exchange: a cancel (client gone, budget)
  // clears it and no further attempt is made.
  backoff_timer_ = armTimer(clock().now() + delay, [this] {
    backoff_timer_ = 0;
    startAttempt();
  });
}

uint64_t Exchange::deliveredBodyBytes() const {
  // While the client is attached everything handed over counts (what is still
  // buffered will be written) unless the attempt was cut: then the response is
  // cut too and its buffer dropped — except when a final SSE error event goes
  // out first, after what is buffered. Once the client left, what was stuck in
  // sluice did not reach it.
  uint64_t stuck = undelivered_at_disconnect_;
  if (downstream_ != nullptr) {
    stuck = attempt_cut_ && !cut_flushes_ ? downstream_->bufferedBytes() : 0;
  }
  return attempt_forwarded_bytes_ > stuck ? attempt_forwarded_bytes_ - stuck : 0;
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

void Exchange::recordUsage(const AttemptUsage& usage) {
  if (!usage.model.empty()) model_ = std::string(usage.model);
  usage_.input_tokens += usage.input_tokens;
  usage_.output_tokens += usage.output_tokens;
  usage_.spend_usd += usage.spend_usd;
  usage_.leaked_usd += usage.leaked_usd;
}

void Exchange::logAccess(int status_code, MonotonicTime now) const {
  AccessLogBuffer* log = host_.accessLog();
  if (log == nullptr) return;
  const auto age = now - start_;
  AccessRecord r;
  r.start = clock().systemNow() - std::chrono::duration_cast<SystemTime::duration>(age);
  r.request_id = identity_.request_id;
  r.trace_id = identity_.trace_id;
  r.route = route_->name();
  r.upstream = route_->upstream ? std::string_view(route_->upstream->config->name) : "none";
  if (route_->upstream) r.endpoint = route_->upstream->endpoint;
  r.method = request_.method;
  r.path = request_.pathOnly();
  r.protocol = request_.version_major == 2   ? "HTTP/2"
               : request_.version_minor == 0 ? "HTTP/1.0"
                                             : "HTTP/1.1";
  r.status = status_code;
  r.attempts = attempts_;
  r.retry_causes = retry_causes_;
  r.duration_ms = std::chrono::duration<double, std::milli>(age).count();
  if (first_byte_at_) {
    r.ttfb_ms = std::chrono::duration<double, std::milli>(*first_byte_at_ - start_).count();
  }
  r.cancel_reason = cancel_reason_;
  r.model = model_;
  r.input_tokens = usage_.input_tokens;
  r.output_tokens = usage_.output_tokens;
  r.spend_usd = usage_.spend_usd;
  r.leaked_usd = usage_.leaked_usd;
  r.bytes_in = bytes_in_;
  r.bytes_out = bytes_out_;
  log->append(r);
}

// --- timers -----------------------------------------------------------------------------

TimerId Exchange::armTimer(MonotonicTime at, std::function<void()> cb) {
  const TimerId id = next_timer_id_++;
  timers_.push_back(PendingTimer{id, at, std::move(cb)});
  rearmWake();
  return id;
}

void Exchange::disarmTimer(TimerId id) {
  if (id == 0) return;
  timers_.erase(std::remove_if(timers_.begin(), timers_.end(),
                               [id](const PendingTimer& t) { return t.id == id; }),
                timers_.end());
  // The wake event may now fire early; onWake() finds nothing due and re-arms.
}

void Exchange::setDeadline(MonotonicTime deadline) {
  deadline_ = deadline;
  disarmTimer(deadline_timer_);
  deadline_timer_ = armTimer(deadline, [this] {
    deadline_timer_ = 0;
    cancel(CancelReason::BudgetExhausted);
  });
}

void Exchange::clearTimers() {
  timers_.clear();
  wake_.disarm();
}

void Exchange::rearmWake() {
  if (timers_.empty()) {
    wake_.disarm();
    return;
  }
  MonotonicTime earliest = MonotonicTime::max();
  for (const auto& t : timers_) earliest = std::min(earliest, t.at);
  wake_.arm(earliest - clock().now());
}

void Exchange::onWake() {
  // Run every due timer; each callback may arm, disarm or end the exchange.
  while (!finished_) {
    const MonotonicTime now = clock().now();
    auto it = std::find_if(timers_.begin(), timers_.end(),
                           [now](const PendingTimer& t) { return t.at <= now; });
    if (it == timers_.end()) break;
    std::function<void()> cb = std::move(it->cb);
    timers_.erase(it);
    cb();
  }
  if (!finished_) rearmWake();
}

// --- introspection -----------------------------------------------------------------------

ExchangeSnapshot Exchange::snapshot() const {
  ExchangeSnapshot s;
  const MonotonicTime now = clock().now();
  s.id = id_;
  s.request_id = identity_.request_id;
  s.route = route_->name();
  s.upstream = route_->upstream ? route_->upstream->config->name : "none";
  s.method = request_.method;
  s.path = std::string(request_.pathOnly());
  s.state = std::string(toString(state_));
  s.cancel_reason = cancel_reason_ ? std::string(toString(*cancel_reason_)) : "";
  s.attempts = attempts_;
  s.age_seconds = seconds(now - start_);
  s.budget_left_seconds = deadline_ == MonotonicTime::max() ? -1 : seconds(deadline_ - now);
  s.client_attached = downstream_ != nullptr;
  s.upstream_paused = upstream_paused_;
  s.downstream_buffered_bytes = downstream_ != nullptr ? downstream_->bufferedBytes() : 0;
  s.response_bytes = response_bytes_;
  return s;
}

}  // namespace sluice
