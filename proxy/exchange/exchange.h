#pragma once

// The Exchange: the single owner of one client request (docs/design.md §1).
//
// It owns the cancel token (cancel(), first cause wins), the deadline, every
// timer of the request (one libevent timer armed at the earliest of them, as
// HAProxy does per stream), the filter chain and the in-flight upstream
// attempt. The downstream codec feeds it the request and is told about the
// response; the upstream connection reports to its AttemptLoop, which keeps
// the attempt's books and leaves it the decisions. Nothing asynchronous that
// belongs to a request outlives its Exchange.
//
// Lifecycle: an explicit state machine (exchange_state.h). Every state change
// goes through transition(), which refuses illegal edges.
//
// Its parts, held by value: RequestIntake (the request and its body on the
// way in), ChainRunner (the filters and the request path's phase through
// them), AttemptLoop (the attempts: where each goes, its stream and timers,
// the verdict at its end), AttemptRouter, ClientResponse (the client's
// side: the response on its way out through its ResponseRelay, and the
// spend held until the client read it), ExchangeTimers (with the deadline)
// and ExchangeRecord (what the access log gets); its access log line and
// /exchanges row are views of them (exchange_views.h). The Exchange keeps
// the lifecycle, cancel (first cause wins), starting the chain's phases,
// acting on the verdicts, and finish(), the one path that ends a request.
//
// The attempt loop: startAttempt(target) runs the per-attempt chain and sends
// the attempt; whatever ends it (response end, transport error, timer,
// cancel) goes through AttemptLoop::end(), which describes the ending in one
// AttemptEnd, asks the chain for an AttemptVerdict (Deliver | Retry | Fail,
// proposed by the Exchange or the loop, decided by the filters:
// common/attempt.h), reports it to every filter and returns it; the Exchange
// acts on it (AttemptLoop::Owner). A Retry backs off on a timer of this
// Exchange, then startAttempt(verdict's target).

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/attempt.h"
#include "common/cancel_reason.h"
#include "common/problem.h"
#include "filters/filter.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/downstream/request_decoder.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"
#include "proxy/exchange/attempt_loop.h"
#include "proxy/exchange/attempt_router.h"
#include "proxy/exchange/chain_runner.h"
#include "proxy/exchange/client_response.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange_host.h"
#include "proxy/exchange/exchange_record.h"
#include "proxy/exchange/exchange_state.h"
#include "proxy/exchange/exchange_timers.h"
#include "proxy/exchange/exchange_views.h"
#include "proxy/exchange/filter_chain.h"
#include "proxy/exchange/request_intake.h"
#include "proxy/exchange/response_relay.h"
#include "proxy/exchange/tool_cancel_notifier.h"
#include "proxy/http/request_body.h"
#include "proxy/http/request_id.h"
#include "proxy/upstream/upstream_stream.h"

namespace sluice {

class Exchange final : public DeferredDeletable,
                       public RequestDecoder,
                       public FilterCallbacks,
                       private ExchangeTimers::Owner,
                       private AttemptLoop::Owner,
                       private ChainRunner::Owner {
 public:
  /**
   * `route` is null when no route matched (the Exchange answers 404).
   * `start` is when the request headers arrived: the budget's origin.
   */
  Exchange(ExchangeHost& host, uint64_t id, ConfigSnapshotPtr runtime, const RouteRuntime* route,
           DownstreamStream* downstream, MonotonicTime start);
  ~Exchange() override;

  // --- from the downstream codec ----------------------------------------------
  /**
   * The request head. Runs decodeHeaders; may answer at once (404, 400, 503
   * when its declared body would pass `limits.max_buffered_body_bytes`).
   */
  void decodeHeaders(RequestHead&& head) override;
  /**
   * A slice of the request body; 413 above `limits.max_body`, 503
   * `overloaded` when the process holds too much body already. A body a
   * retry may replay is buffered whole before the first attempt; one that
   * cannot be replayed (above RequestIntake::streamAbove()) is streamed: the attempt starts
   * once that is known and each byte is freed when the upstream took it,
   * the client paused while more than kBodyHighWatermark waits.
   */
  void decodeData(const char* data, size_t len) override;
  /** The request is complete: the first attempt may start (a streamed one is under way). */
  void decodeComplete() override;
  /**
   * The client went away (EOF, reset, RST_STREAM: `client_disconnect`), or
   * sluice dropped it for not reading (send_timeout: `client_stalled`).
   */
  void onDownstreamDisconnect(CancelReason reason = CancelReason::ClientDisconnect) override;
  /** The client drained its buffer below the low watermark: resume the upstream. */
  void onDownstreamWritable() override;

  // --- FilterCallbacks ------------------------------------------------------------
  void continueDecoding() override {
    if (!finished_) chain_.resume();
  }
  void resolveAttempt(const Admission& admission) override {
    if (!finished_) chain_.resolve(admission);
  }
  void sendLocalReply(const Problem& problem) override;
  void cancel(CancelReason reason,
              std::optional<std::chrono::milliseconds> retry_after = std::nullopt) override;
  // Every timer of the request is one of ExchangeTimers' (one wake at the earliest).
  TimerId armTimer(MonotonicTime at, std::function<void()> cb) override {
    return timers_.armCallback(at, std::move(cb));
  }
  void disarmTimer(TimerId id) override { timers_.disarmCallback(id); }
  const Clock& clock() const override { return host_.dispatcher().clock(); }
  MonotonicTime deadline() const override { return timers_.deadline(); }
  void setDeadline(MonotonicTime deadline) override { timers_.setDeadline(deadline); }
  void lowerDeadline(MonotonicTime deadline, CancelReason reason) override {
    timers_.lowerDeadline(deadline, reason);
  }
  MonotonicTime startTime() const override { return start_; }
  const RequestHead& request() const override { return request_; }
  uint32_t attemptNumber() const override { return attempts_.started(); }
  bool requestBodyReplayable() const override { return intake_.body().replayable(); }
  std::function<void()> crossThreadWaker(std::function<void()> fn) override {
    return host_.wakerFor(id_, std::move(fn));
  }

  // --- introspection ----------------------------------------------------------
  uint64_t id() const { return id_; }
  ExchangeState state() const { return state_; }
  /** The first cause of a cancel, if any (the record's: RequestRecord::cancelReason). */
  std::optional<CancelReason> cancelReason() const override { return record_.cancelReason(); }
  RequestRecord& record() override { return record_; }
  void setSentResendable(bool resendable) override { attempts_.setSentResendable(resendable); }
  bool holdUntilRead(std::unique_ptr<ReadReceipt>& receipt) override {
    return client_.holdUntilRead(receipt);
  }
  void setRunSpend(RunSpend* spend) override { run_spend_ = spend; }
  RunSpend* runSpend() const override { return run_spend_; }
  ExchangeSnapshot snapshot() const;
  /** The request's x-request-id (kept from the client or generated). */
  const std::string& requestId() const { return identity_.request_id; }

 private:
  /** Every state change goes through the lifecycle table (exchange_state.h). */
  bool transition(ExchangeState to) { return sluice::transition(state_, to); }
  /**
   * Matches the route again with the body's top-level "model" (docs/design.md §5,
   * `match.model`), switches to the route that matches (or answers 404),
   * then runs the request's filters from the start.
   */
  void routeOnModel();
  // ChainRunner::Owner
  bool chainStopped() const override { return finished_ || state_ == ExchangeState::Cancelling; }
  void onPhaseDone(ChainRunner::Phase phase) override;
  void onAttemptRefused(CancelReason reason,
                        std::optional<std::chrono::milliseconds> retry_after) override {
    refuseAttempt(reason, retry_after);
  }
  /**
   * The attempt being prepared was refused (Admission::refuse): the next
   * fallback upstream takes the request when the route falls back on
   * `reason` and it may be sent again; otherwise the exchange is cancelled.
   */
  void refuseAttempt(CancelReason reason, std::optional<std::chrono::milliseconds> retry_after);
  /** Pauses or resumes the client's upload around the body watermarks. */
  void applyBodyBackpressure();
  /**
   * cancel(), answering `answer_with` (if nothing was sent yet) instead of
   * the first cause's own problem.
   */
  void cancelWith(CancelReason reason, std::optional<Problem> answer_with,
                  std::optional<std::chrono::milliseconds> retry_after = std::nullopt);
  /**
   * Starts the next attempt toward `target` (AttemptLoop::begin: where it
   * goes, the request rewritten for that endpoint) and runs the per-attempt
   * chain (beforeAttempt), which sends it.
   */
  void startAttempt(const AttemptTarget& target);
  /**
   * The request may still be sent again (docs/design.md §5): nothing reached
   * the client, the whole body is held, the method is safe to repeat, and
   * budget is left. What a retry and a spill-over both need.
   */
  bool mayReplay() const override;
  AttemptLoop::ExchangeFacts attemptFacts() const override;
  /** The body the attempt sends: the client's, or a copy naming the fallback's `model`. */
  RequestBody& attemptBody() { return attempts_.body(intake_.body()); }
  void sendAttempt();
  /** A `protocol: mcp` route: sluice answers in JSON-RPC (common/jsonrpc_error.h). */
  bool mcpRoute() const {
    return route_->config != nullptr && route_->config->protocol == config::RouteProtocol::Mcp;
  }
  // AttemptLoop::Owner: what the attempts leave to decide.
  bool attemptsStopped() const override { return finished_; }
  void onAttemptBodySent(uint64_t offset) override;
  void onResponseUnderWay() override { releaseReplayState(); }
  /** A failed attempt: retried, or the response under way cut, or the client answered. */
  void onAttemptFailed(AttemptOutcome outcome, const Problem& problem) override;
  /** A silent upstream: retried while nothing reached the client, else cancelled. */
  void onAttemptTimedOut() override;
  /** Acts on a Retry: the loop's bookkeeping (AttemptLoop::scheduleRetry), then backing off. */
  void onAttemptRetry(const AttemptVerdict::Retry& retry) override;
  void onResponseDelivered(int status) override;
  void onHeldResponseRefused(const Problem& problem) override {
    answer(problem, ExchangeState::Failed);
  }
  void answer(Problem problem, ExchangeState terminal);
  /** Answers with `reply` (not a problem: sluice's own endpoint on the listeners) and completes. */
  void answerLocally(LocalReply reply);
  /** Passes `problem` through the filters (encodeLocalReply) and sends it if nothing was sent. */
  void sendProblem(Problem& problem);
  /**
   * The body is refused: 413 body-too-large (`too_large`, counted in the
   * downstream rejections), or 503 `overloaded` when it does not fit under
   * `limits.max_buffered_body_bytes`.
   */
  void refuseBody(bool too_large);
  /**
   * The one path that ends a request, in state `terminal`: metrics, the
   * access log line, the codec told, retired.
   */
  void finish(ExchangeState terminal, int status_code);
  /** sluice_cancellations_total counts the first cause, once. */
  void countCancel();
  Problem problemFor(CancelReason reason,
                     std::optional<std::chrono::milliseconds> retry_after) const;
  /** One access log line for the finished request, when the log is on. */
  void logAccess(int status_code, MonotonicTime now);
  /** What the access log line and the snapshot read (exchange_views.h). */
  ExchangeView view() const;
  /**
   * Once the upstream's response is under way no retry or fallback can
   * replay the request: frees what only a replay reads (the request
   * headers, the attempt's rewritten copy) and, once the transport took all
   * of it, the body. Kept: the method, path and ids (access log, snapshot).
   */
  void releaseReplayState();

  // ExchangeTimers::Owner
  void onSlot(ExchangeSlot slot) override;
  bool timersLive() const override { return !finished_; }

  ExchangeHost& host_;
  const uint64_t id_;
  ConfigSnapshotPtr runtime_;  // pinned: a reload never changes an in-flight request
  const RouteRuntime* route_;
  const MonotonicTime start_;

  ExchangeState state_ = ExchangeState::Queued;
  bool cancel_counted_ = false;
  bool finished_ = false;

  RequestHead request_;
  RequestIdentity identity_;
  RequestIntake intake_;  // the body: its plan, the bytes, the client's upload paused or not
  // The filters and where the request path is in them (its phase, a filter holding it).
  ChainRunner chain_;

  AttemptRouter router_;  // where each attempt goes: the chain position, failed endpoints

  // For the access log (docs/design.md §7): ttfb, retry causes, bytes out,
  // usage, the run, the JSON-RPC call (whose id sluice's own answers use)
  // and the cancel reason (first cause wins). The filters' RequestRecord.
  ExchangeRecord record_;
  // The client's side: its stream, the response on its way (held head, SSE
  // tail, backpressure, delivered bytes), the spend held until read.
  ClientResponse client_;
  // The run filter's, while the request is a task of a run.
  RunSpend* run_spend_ = nullptr;

  /** A cancel of a sent MCP request of a session: tells the server (ToolCancelNotifier). */
  void notifyMcpCancel();

  // Every timer of this request: the named slots and the filters' timers,
  // served by one scheduler timer at the earliest; the deadline and its reason.
  ExchangeTimers timers_;
  // The attempts: the one in flight, how many were started and sent. Last:
  // destroyed first, a stream still held (a worker shutting down) is reset.
  AttemptLoop attempts_;
};

using ExchangePtr = std::unique_ptr<Exchange>;

}  // namespace sluice
