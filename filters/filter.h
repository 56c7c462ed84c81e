#pragma once

// The filter chain interface, after Envoy's StreamFilter: filters see the
// request on the way in (decode*) and each attempt's response on the way out
// (encode*), return a small status, and resume asynchronous work through the
// callbacks the Exchange gives them. Filters never own sockets or timers:
// they ask the Exchange (armTimer), so cancelling the Exchange stops
// everything a filter started.
//
// Order of calls for one request (docs/design.md §1):
//   decodeHeaders → decodeComplete                  once per request
//   { beforeAttempt (an Admission) → encodeHeaders → encodeData*
//     → decideAttempt (each filter, table order) → onAttemptDone }   per attempt
//   encodeLocalReply                                when sluice answers itself
//   onDestroy                                       once, always last
//
// When an attempt ends the Exchange describes it in one AttemptEnd value and
// folds it through decideAttempt: each filter gets the verdict so far and
// returns it or a replacement (common/attempt.h). The Exchange acts on the
// result, then reports it to every filter in onAttemptDone.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "common/attempt.h"
#include "common/cancel_reason.h"
#include "common/clock.h"
#include "common/http_message.h"
#include "common/metrics.h"
#include "common/problem.h"

namespace sluice {

namespace config {
struct RateLimitConfig;
}
class CircuitBreaker;
class GlobalQuota;
class QuotaTracker;

/**
 * Where one attempt goes (docs/design.md §5): an endpoint of an upstream, and the
 * shared state the filters consult for it — its circuit, its quota — which
 * is kept per endpoint. The Exchange chooses it before the per-attempt chain
 * runs (proxy/upstream/endpoint_picker.h); it may differ from attempt to attempt
 * (another endpoint after a failure, a fallback upstream).
 */
struct AttemptDestination {
  std::string_view upstream;  // the upstream's name
  std::string_view endpoint;  // the endpoint's name
  CircuitBreaker* breaker = nullptr;
  QuotaTracker* quota = nullptr;                        // null without `rate_limit`
  const config::RateLimitConfig* rate_limit = nullptr;  // null without `rate_limit`
  GlobalQuota* global_quota = nullptr;                  // null without `shared_state`
  UpstreamMetrics* metrics = nullptr;                   // the upstream's handles
  EndpointMetrics* endpoint_metrics = nullptr;          // the endpoint's (quota gauges)
  // The model the attempt's body names when sluice rewrote it for a fallback
  // (`fallback[].model`); "" = the body is the client's.
  std::string_view model;
};

/** What a filter returns: go on to the next filter, or stop here until resumed. */
enum class FilterStatus { Continue, StopIteration };

/** The facts of one attempt, handed to every filter's beforeAttempt. */
struct AttemptContext {
  uint32_t number = 1;             // 1 for the first attempt (a refused one is not counted)
  AttemptDestination destination;  // where it goes: its endpoint, circuit and quota
};

/**
 * A filter's answer to an attempt about to go upstream (beforeAttempt):
 *  - Continue: the next filter is asked (after the last, the attempt is sent);
 *  - Wait: the attempt waits until the filter resolves it, once, with
 *    FilterCallbacks::resolveAttempt (Continue or Refuse) from a later
 *    event: a timer, a waker, a permit;
 *  - Refuse{reason, retry_after}: the attempt cannot go to its upstream
 *    now — its circuit is open (`circuit_open`), its quota is spent beyond
 *    the budget (`rate_limited`), it is full (`overloaded`), the budget ran
 *    out while it waited (`budget_exhausted`). The Exchange moves the
 *    request to the route's next fallback upstream when one remains and
 *    the route falls back on `reason`; otherwise it cancels with `reason`
 *    (answering its problem, with `retry_after` as its Retry-After).
 */
struct Admission {
  enum class Kind { Continue, Wait, Refuse };
  Kind kind = Kind::Continue;
  CancelReason reason = CancelReason::Overloaded;  // of a Refuse
  std::optional<std::chrono::milliseconds> retry_after;

  static Admission proceed() { return {}; }
  static Admission wait() { return {Kind::Wait, CancelReason::Overloaded, std::nullopt}; }
  static Admission refuse(CancelReason reason,
                          std::optional<std::chrono::milliseconds> retry_after) {
    return {Kind::Refuse, reason, retry_after};
  }
  bool proceeds() const { return kind == Kind::Continue; }
  bool waits() const { return kind == Kind::Wait; }
  bool refuses() const { return kind == Kind::Refuse; }
};

/** Identifies a timer armed through FilterCallbacks::armTimer. 0 is never used. */
using TimerId = uint64_t;

/** One attempt's billed usage as the spend filter booked it, for the access log. */
struct AttemptUsage {
  std::string_view model;  // as the request or response named it; "" when unknown
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  double spend_usd = 0;  // delivered + leaked
  double leaked_usd = 0;
};

/**
 * The spend of the run a request is a task of (docs/design.md §9): the run
 * filter offers it, the spend filter feeds it USD as it meters each attempt
 * (a chunk at a time; negative when a final count corrects an estimate).
 * Called on the request's worker thread.
 */
class RunSpend {
 public:
  virtual void addRunSpend(double usd) = 0;

 protected:
  ~RunSpend() = default;
};

/**
 * What a request leaves behind for the access log (docs/design.md §7), as
 * its filters write and read it: each attempt's usage (the spend meter),
 * the run (the run filter), the JSON-RPC call (the tools filter), and the
 * request's cancel reason so far, which the Exchange writes (first cause
 * wins). One per request, for its whole life.
 */
class RequestRecord {
 public:
  /**
   * One attempt's usage once the spend filter booked it: tokens and spend
   * are summed over the attempts; its model, when it names one, replaces the last.
   */
  virtual void addUsage(const AttemptUsage& usage) = 0;
  /** The request's run (and its parent run). */
  virtual void setRun(std::string_view run_id, std::string_view parent_run_id) = 0;
  /**
   * The request's JSON-RPC message: its `method`, its `id` as JSON text
   * (nullopt: a notification, or an invalid message that had none) and the
   * tool of a `tools/call` ("" otherwise). The access log shows method and
   * tool; sluice's own answers go to that id in JSON-RPC.
   */
  virtual void setJsonRpc(std::string_view method, std::optional<std::string_view> id,
                          std::string_view tool) = 0;
  /**
   * The request's cancel_reason so far (first cause), if any. (An ended
   * attempt carries it in its AttemptEnd; this is for onDestroy.)
   */
  virtual std::optional<CancelReason> cancelReason() const = 0;

 protected:
  ~RequestRecord() = default;
};

/**
 * An attempt's spend, booked once the client's reading is known
 * (docs/reference/metrics.md, "Delivered means read": delivered means read
 * by the client, not written to its socket). The downstream connection settles it exactly once.
 */
class ReadReceipt {
 public:
  virtual ~ReadReceipt() = default;
  /**
   * Books the attempt: the client did not read the last `unread_body_bytes`
   * bytes of the response body (0: it read everything). The leak goes under
   * `unread_reason` when given (client_stalled), else under the reason the
   * attempt ended with (a cut: budget_exhausted, upstream_timeout, ...), else
   * client_abandoned. Returns the usage booked; its `model` stays valid while
   * the receipt lives.
   */
  virtual AttemptUsage settle(uint64_t unread_body_bytes,
                              std::optional<CancelReason> unread_reason = std::nullopt) = 0;
  /** The reason the attempt ended with (a cut's), if any. */
  virtual std::optional<CancelReason> reason() const = 0;
};

/** What the Exchange offers the filters it runs. */
class FilterCallbacks {
 public:
  virtual ~FilterCallbacks() = default;

  /** Resumes the request's chain after a filter returned StopIteration. */
  virtual void continueDecoding() = 0;
  /**
   * Resolves the attempt a filter's beforeAttempt answered Admission::wait()
   * for: Continue resumes the chain after that filter, Refuse refuses the
   * attempt (see Admission). Call once, from a later event than
   * beforeAttempt itself; a Wait changes nothing.
   */
  virtual void resolveAttempt(const Admission& admission) = 0;
  /** Answers the client with `problem` and ends the exchange (no upstream call). */
  virtual void sendLocalReply(const Problem& problem) = 0;
  /**
   * Cancels the exchange for `reason` (first cause wins), answering with the
   * reason's problem if nothing was sent yet; `retry_after` becomes its
   * Retry-After when a wait is known.
   */
  virtual void cancel(CancelReason reason,
                      std::optional<std::chrono::milliseconds> retry_after = std::nullopt) = 0;

  /** Arms a one-shot timer owned by the Exchange; it dies with the Exchange. */
  virtual TimerId armTimer(MonotonicTime at, std::function<void()> cb) = 0;
  virtual void disarmTimer(TimerId id) = 0;
  virtual const Clock& clock() const = 0;

  /** The request's deadline (budget); MonotonicTime::max() when unbounded. */
  virtual MonotonicTime deadline() const = 0;
  /** Sets the deadline; the Exchange cancels with budget_exhausted when it passes. */
  virtual void setDeadline(MonotonicTime deadline) = 0;
  /**
   * Lowers the deadline to one that is not the request's own budget (its
   * run's, docs/design.md §9): reaching it cancels with `reason` instead of
   * budget_exhausted. A later deadline than the current one changes nothing.
   */
  virtual void lowerDeadline(MonotonicTime deadline, CancelReason reason) {
    (void)reason;
    if (deadline < this->deadline()) setDeadline(deadline);
  }
  /** When the request headers arrived: the budget's origin. */
  virtual MonotonicTime startTime() const = 0;

  /**
   * The client's request as received (before upstream rewriting). Its
   * headers are released once the upstream's response is under way (no
   * retry can replay it then); the method and path stay.
   */
  virtual const RequestHead& request() const = 0;
  /**
   * Attempts started so far: the current (or last) one's number, 0 before
   * the first. A filter's own attempt facts come in beforeAttempt's
   * AttemptContext; this is for the request-wide answers (encodeLocalReply).
   */
  virtual uint32_t attemptNumber() const = 0;

  /**
   * True while another attempt could send the request body again: always
   * for a buffered body; for a streamed one (README "Decisions") only until
   * its first bytes went upstream.
   */
  virtual bool requestBodyReplayable() const = 0;
  /**
   * Wraps `fn` into a callback any thread may call: it runs `fn` on this
   * Exchange's worker thread, and not at all if the Exchange has ended by
   * then. Shared state (quota trackers) wakes waiters with it. The wrapping
   * itself may happen on any thread while the Exchange is alive (the run
   * table makes a task's waker when the run ends, under its lock).
   */
  virtual std::function<void()> crossThreadWaker(std::function<void()> fn) = 0;

  /** The request's record: usage, run, JSON-RPC call, cancel reason (RequestRecord). */
  virtual RequestRecord& record() = 0;

  // --- for MCP routes (docs/design.md §10) ------------------------------------
  /**
   * Whether an attempt that went upstream may be sent again, by a retry or
   * a fallback (default: yes). An attempt that never reached the upstream
   * (connect error, refused stream) may always be sent again. The tools
   * filter says no for a `tools/call` that is not safe to repeat; called
   * per attempt, from beforeAttempt.
   */
  virtual void setSentResendable(bool /*resendable*/) {}
  /**
   * The run filter hands over the spend of the request's run (null: none);
   * the spend filter reads it. It stays valid until onDestroy.
   */
  virtual void setRunSpend(RunSpend* /*spend*/) {}
  virtual RunSpend* runSpend() const { return nullptr; }
  /**
   * For an attempt whose response (whole, or cut by sluice) went to a client
   * that is still connected: the Exchange takes `receipt` and has the client's connection
   * settle it once it knows whether the response was read (the access log
   * line waits for it). Returns false (and drops nothing: `receipt` is left
   * as it was) when the Exchange cannot wait: book at once.
   */
  virtual bool holdUntilRead(std::unique_ptr<ReadReceipt>& /*receipt*/) { return false; }
};

/** The most body sluice buffers for a held (maybe-retried) response. */
inline constexpr size_t kMaxHeldBody = 64 * 1024;

/** One filter instance per Exchange. Default methods pass everything through. */
class StreamFilter {
 public:
  virtual ~StreamFilter() = default;

  /** A stable name for logs and the chain table ("budget", "retry", ...). */
  virtual std::string_view name() const = 0;

  void setCallbacks(FilterCallbacks& callbacks) { callbacks_ = &callbacks; }

  /** Once per request: the client's request headers. */
  virtual FilterStatus decodeHeaders(RequestHead&) { return FilterStatus::Continue; }
  /**
   * Once per request, before the first attempt: the whole body when it is
   * buffered; for a streamed body (too big to replay, README "Decisions")
   * only what is held when its attempt starts — possibly nothing.
   */
  virtual FilterStatus decodeComplete(std::string_view /*body*/) { return FilterStatus::Continue; }
  /**
   * Per attempt, before it goes upstream, with the request as the upstream
   * will see it and the attempt's facts (its number, its destination):
   * whether it may go (Admission). A filter that needs the destination
   * later in the attempt keeps it from here.
   */
  virtual Admission beforeAttempt(RequestHead& /*upstream_request*/,
                                  const AttemptContext& /*attempt*/) {
    return Admission::proceed();
  }
  /**
   * Per attempt: the upstream's response head, before it goes to the client.
   * StopIteration holds the response back (the retry filter does this for
   * answers it may retry): it is buffered until the attempt ends. Unlike
   * the request path, every filter still sees the head (observers such as
   * the spend meter need it even when the response is never released).
   */
  virtual FilterStatus encodeHeaders(ResponseHead&, bool /*end_stream*/) {
    return FilterStatus::Continue;
  }
  /** Per attempt: a slice of the response body (observe only). */
  virtual void encodeData(const char* /*data*/, size_t /*len*/, bool /*end_stream*/) {}
  /**
   * Per attempt, however it ended: the filter's say on what happens next.
   * `proposed` is the verdict so far — the Exchange's default (Deliver for a
   * response, Fail for an error, timeout or teardown), then whatever the
   * filters before this one returned. Return it unchanged to have no say.
   * The retry filter turns an ending it may retry into Retry. Decide only:
   * act on what was decided in onAttemptDone. A Retry of an attempt sluice
   * tore down itself (cancel, local reply) is not acted on: the Exchange
   * reports Fail instead.
   */
  virtual AttemptVerdict decideAttempt(const AttemptEnd& /*end*/, AttemptVerdict proposed) {
    return proposed;
  }
  /** Per attempt, after the decision: how it ended and what the Exchange does next. */
  virtual void onAttemptDone(const AttemptEnd& /*end*/, const AttemptVerdict& /*verdict*/) {}
  /**
   * sluice is about to answer with `problem` itself (a cancel, a failed
   * attempt, a filter's own reply), as Envoy passes local replies through
   * the encoder filters. A filter may amend it: the retry filter clears
   * `is_retriable` when a client retry cannot help (docs/design.md §3, §8).
   */
  virtual void encodeLocalReply(Problem& /*problem*/) {}
  /** The Exchange is ending: drop anything asynchronous. Always called, once. */
  virtual void onDestroy() {}

 protected:
  FilterCallbacks* callbacks_ = nullptr;
};

using StreamFilterPtr = std::unique_ptr<StreamFilter>;

}  // namespace sluice
