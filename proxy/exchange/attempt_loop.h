#pragma once

// The attempts of one request, as one part of its Exchange (after Envoy's
// router UpstreamRequest + RetryState): the attempt in flight — where it
// went, the request as that upstream sees it, its stream, its timers (the
// slots Connect, FirstByte, Idle and RetryDelay of the Exchange's timers),
// its max_pending slot —, how many attempts were started and sent, and the
// bookkeeping at each end: the AttemptEnd that describes it, the filters'
// verdict on it (decideAttempt, then the router's spill-over, then
// onAttemptDone), the stream released or reset.
//
// It is the attempt's stream's UpstreamCallbacks: it keeps the attempt's
// own books (connected, status, bytes, timers), runs the response through
// the filters (encodeHeaders, encodeData), holds a head a retry or a
// fallback may replace or hands it to the client (ClientResponse), and
// stops reading the upstream while the client is slower. What is left to
// decide goes to its Owner, the Exchange: a failure, a timeout, a Retry,
// a response delivered or a held answer refused. The Exchange acts on
// those and owns whether the request may be sent again at all
// (Owner::mayReplay).

#include <cstdint>
#include <memory>
#include <optional>

#include "common/attempt.h"
#include "common/cancel_reason.h"
#include "common/clock.h"
#include "common/http_message.h"
#include "common/problem.h"
#include "filters/circuit_breaker/circuit_breaker.h"
#include "filters/filter.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/exchange/attempt_router.h"
#include "proxy/exchange/client_response.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange_problem.h"
#include "proxy/exchange/exchange_record.h"
#include "proxy/exchange/exchange_timers.h"
#include "proxy/exchange/filter_chain.h"
#include "proxy/exchange/response_relay.h"
#include "proxy/exchange/tool_cancel_notifier.h"
#include "proxy/http/request_body.h"
#include "proxy/upstream/upstream_stream.h"

namespace sluice {

class AttemptLoop final : private UpstreamCallbacks {
 public:
  /** What the Exchange knows when an attempt ends. */
  struct ExchangeFacts {
    std::optional<CancelReason> cancel_reason;  // the first cause so far
    bool finish_draining = false;               // finish mode: the client left, draining
    const DownstreamStream* client = nullptr;   // null once the client left
    bool running = false;                       // running and not finished: a Retry is actionable
    bool request_complete = false;              // the client's whole request is in
  };
  /** The Exchange, as its attempts see it. */
  class Owner {
   public:
    virtual ~Owner() = default;
    /** The request may still be sent again (nothing reached the client, the body is held, ...). */
    virtual bool mayReplay() const = 0;
    virtual ExchangeFacts attemptFacts() const = 0;
    /** The request finished: what the upstream still reports is dropped. */
    virtual bool attemptsStopped() const = 0;

    // What is left to decide, after the loop's own books:
    /** The transport took the body the attempt sends up to `offset`. */
    virtual void onAttemptBodySent(uint64_t offset) = 0;
    /** The response's head went to the client: no retry or fallback will replay the request. */
    virtual void onResponseUnderWay() = 0;
    /** The attempt failed: a transport error, a connect timeout. */
    virtual void onAttemptFailed(AttemptOutcome outcome, const Problem& problem) = 0;
    /** The upstream was silent past first_byte_timeout or idle_timeout. */
    virtual void onAttemptTimedOut() = 0;
    /** The response ended and the verdict is a Retry. */
    virtual void onAttemptRetry(const AttemptVerdict::Retry& retry) = 0;
    /** The response ended and went to the client (when it is still there); `status` its head's. */
    virtual void onResponseDelivered(int status) = 0;
    /** The response ended held and a filter refused it: the client gets `problem` instead. */
    virtual void onHeldResponseRefused(const Problem& problem) = 0;
  };

  // The attempt in flight (or the last one, until the next starts). Plain
  // values, reset in one place: begin(). Its live resources — the stream,
  // the timers, the max_pending slot — are torn down by end().
  struct Attempt {
    AttemptTarget target;                       // what begin() was asked for
    const UpstreamRuntime* upstream = nullptr;  // where it went: an upstream of the chain
    const EndpointRuntime* endpoint = nullptr;  // and one of its endpoints
    AttemptDestination destination;             // the endpoint's, as the filters see it
    UpstreamStream* stream = nullptr;           // from this worker's pool for the endpoint
    // The request as the upstream sees it: from begin() until the response
    // is under way (Exchange::releaseReplayState). Out of line: a held
    // stream keeps its Exchange, not this (~130 bytes inline).
    std::unique_ptr<RequestHead> request;
    bool unprocessed = false;  // the upstream said it did not process the attempt
    bool connected = false;    // the request went on the wire
    int status = 0;            // the response head's status; 0 until it arrived
    uint64_t body_sent = 0;    // body() bytes the transport took
    AttemptOutcome outcome;    // how it ended (end())
    MonotonicTime last_upstream_byte{};
  };

  AttemptLoop(Owner& owner, ExchangeTimers& timers, ClientResponse& client, AttemptRouter& router,
              FilterChain& filters)
      : owner_(owner),
        timers_(timers),
        client_(client),
        relay_(client.relay()),
        router_(router),
        filters_(filters) {}
  /** A safety net for a worker shutting down: a stream still held is detached and reset. */
  ~AttemptLoop();
  AttemptLoop(const AttemptLoop&) = delete;
  AttemptLoop& operator=(const AttemptLoop&) = delete;

  Attempt& current() { return attempt_; }
  const Attempt& current() const { return attempt_; }
  /** An attempt holds an upstream stream. */
  bool inFlight() const { return attempt_.stream != nullptr; }
  /** Attempts started; the current one's number. */
  uint32_t started() const { return started_; }
  /**
   * Attempts handed to an upstream connection (x-sluice-attempts, the access
   * log): not one refused or dropped before it was sent (circuit, throttle).
   */
  uint32_t sent() const { return sent_; }
  /** Response body bytes the upstreams sent, over all attempts. */
  uint64_t responseBytes() const { return response_bytes_; }

  /** The request, as a new attempt needs it. */
  struct Request {
    const RequestHead& head;  // the client's
    const ClientInfo& client;
    RequestBody& body;  // the client's, held whole
    const ConfigSnapshot& runtime;
  };
  /**
   * Starts the next attempt toward `target`: resets the per-attempt state,
   * asks the router where it goes (AttemptRouter::place), rewrites the
   * request for that endpoint and, on a fallback with a `model`, the body.
   * The first attempt of an MCP request looks up its session (McpSession):
   * a session's attempts go to the endpoint that issued it.
   */
  void begin(const AttemptTarget& target, const Request& request);
  /**
   * The attempt being prepared was refused before it was sent (a filter's
   * Admission) and the route spills over on `reason`: its filters hear that
   * it ended unsent (what they hold for it is returned) with a Retry toward
   * the next fallback, the spill-over is counted, and it is not an attempt.
   * The caller then begins the next one (AttemptTarget::nextFallback()).
   */
  void spillOverRefused(CancelReason reason);
  /** The body the attempt sends: the client's, or a copy naming the fallback's `model`. */
  RequestBody& body(RequestBody& client_body) {
    return rewritten_body_ ? *rewritten_body_ : client_body;
  }
  /**
   * The response is under way: no retry or fallback will replay the
   * request. Frees the attempt's rewritten head (the transport sent it)
   * and, once the transport took all of it, the body it sends (and the
   * client's `client_body`, when that was a rewritten copy's source).
   */
  void releaseReplayState(RequestBody& client_body);

  /**
   * Sends the attempt: arms its connect and first-byte timers, takes a
   * max_pending slot while it waits for a connection, hands the request to
   * a stream of `pool`, which reports to this loop. False when no slot is
   * left (the caller cancels `overloaded`). The stream may report back
   * before this returns.
   */
  bool send(UpstreamStreamSource& pool, RequestBody& body, const config::RouteConfig& route,
            bool request_complete, MonotonicTime now);
  /** One of the attempt's slots fired (Connect, FirstByte, Idle): the Owner hears what it means. */
  void onTimer(ExchangeSlot slot);

  /**
   * What a cancel's problem says of the attempts (exchange_problem.h): the
   * current attempt's upstream (else the route's) and how many were sent.
   */
  CancelContext cancelContext() const;
  /** The AttemptEnd of the attempt in flight, ended with `outcome`. */
  AttemptEnd describe(const AttemptOutcome& outcome) const;
  /**
   * Ends the attempt in flight: its timers, its max_pending slot and its
   * stream (released for reuse when `reuse`, else reset). Folds `proposed`
   * through the filters' decideAttempt and the router's spill-over, reports
   * the verdict to every filter (onAttemptDone) and returns it. A Retry that
   * cannot be acted on (sluice tore the attempt down, the exchange is not
   * running, a response is under way, the call may not be sent twice)
   * becomes `proposed` again.
   */
  AttemptVerdict end(AttemptOutcome outcome, bool reuse, AttemptVerdict proposed);
  /**
   * end() for an attempt sluice stops (a timeout, a cancel decided at
   * `decided`): its stream is reset, and how long the stop took to reach
   * the upstream is observed (sluice_cancel_propagation_seconds).
   */
  AttemptVerdict tearDown(AttemptOutcome outcome, AttemptVerdict proposed, MonotonicTime decided);
  /** An attempt still in flight when the request is answered another way ends `cancelled`. */
  void abandon(const Problem& answer);
  /** The MCP session the request carried (`Mcp-Session-Id`); null: none. */
  McpSession* mcpSession() const { return mcp_session_.get(); }
  /** An attempt that went upstream may be sent again (the tools filter says no for some). */
  void setSentResendable(bool resendable) { sent_resendable_ = resendable; }

  /**
   * A Retry's bookkeeping: drops the held answer, counts the retry (or the
   * spill-over) and its cause, and arms the backoff (RetryDelay); then
   * retryTarget() is where the next attempt goes.
   */
  void scheduleRetry(const AttemptVerdict::Retry& retry, RouteMetrics& metrics,
                     ExchangeRecord& record, MonotonicTime now);
  const AttemptTarget& retryTarget() const { return retry_target_; }

  // --- the attempt's timers and upstream events -----------------------------------
  /** Arms first_byte_timeout: once the upstream has the whole request and until its head. */
  void armFirstByte(const config::RouteConfig& route, bool request_complete, MonotonicTime now);
  /** Arms idle_timeout from the last upstream byte (not while the client holds the upstream). */
  void armIdle(const config::RouteConfig* route, bool request_complete);
  /** The Idle slot fired: true when the attempt is idle past idle_timeout (else re-armed). */
  bool idleExpired(const config::RouteConfig& route, bool request_complete, MonotonicTime now);
  /** The request went on the wire: the connect timer and the max_pending slot end. */
  void connected(const config::RouteConfig* route, bool request_complete);
  /** The request's whole body is with the upstream: its time to answer starts at `now`. */
  void requestSent(const config::RouteConfig& route, MonotonicTime now);
  /** The client drained: the upstream is read again from `now`. */
  void resumed(const config::RouteConfig* route, bool request_complete, MonotonicTime now);
  /** The client drained below its low watermark: an attempt the relay paused is read again. */
  void clientDrained();
  /** A streamed body's end: the upstream has it all, so its time to answer starts now. */
  void bodyEnded();
  /** The response head arrived at `now`. */
  void headArrived(int status, MonotonicTime now);
  /** Releases the max_pending slot (the exchange ends). */
  void releaseSlot() { connect_wait_.release(); }

 private:
  // UpstreamCallbacks: the attempt's stream reports here.
  void onUpstreamConnected() override;
  void onUpstreamBodySent(uint64_t offset) override;
  void onUpstreamHeaders(ResponseHead&& head, bool end_stream) override;
  void onUpstreamData(const char* data, size_t len) override;
  void onUpstreamTrailers(HeaderMap&& trailers) override;
  void onUpstreamComplete() override;
  void onUpstreamError(UpstreamError error, const std::string& detail) override;

  /** True while a Retry verdict can be acted on. */
  bool mayRetry(const AttemptOutcome& outcome) const;
  /** Stamps the head with the attempts and the upstream and sends it, when the client listens. */
  void sendHead(ResponseHead& head);
  /** Sends the held head and body; `end_stream` ends the response. */
  void releaseHeld(bool end_stream);
  MonotonicTime now() const { return timers_.clock().now(); }

  Owner& owner_;
  ExchangeTimers& timers_;
  ClientResponse& client_;
  ResponseRelay& relay_;  // client_'s
  AttemptRouter& router_;
  FilterChain& filters_;

  Attempt attempt_;
  uint32_t started_ = 0;
  uint32_t sent_ = 0;
  uint64_t response_bytes_ = 0;
  // The body naming the current fallback's `model`, when it has one.
  std::unique_ptr<RequestBody> rewritten_body_;
  std::unique_ptr<McpSession> mcp_session_;  // allocated only for a request that carried one
  PendingSlot connect_wait_;    // a max_pending slot while the attempt waits for a connection
  AttemptTarget retry_target_;  // of the RetryDelay slot
  bool sent_resendable_ = true;
};

}  // namespace sluice
