#pragma once

// The client's side of one Exchange, as one of its parts: the client's
// stream (until it leaves), the relay that carries the response to it
// (ResponseRelay: the held head, the SSE tail and final event, cuts,
// backpressure, delivered bytes), the finish-mode drain (the client left,
// the upstream's answer is read and dropped), whether it takes trailers,
// and the spend held until the client has read what it was sent
// (docs/reference/metrics.md, "Delivered means read"). Every byte the
// client gets is written here, and counted in the request's record (bytes
// out, the first byte). The Exchange decides what to send; this part knows
// whether anybody is there to send it to.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/http_message.h"
#include "common/metrics.h"
#include "common/problem.h"
#include "filters/filter.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange_problem.h"
#include "proxy/exchange/exchange_record.h"
#include "proxy/exchange/response_relay.h"
#include "proxy/http/request_id.h"
#include "proxy/observability/access_log.h"

namespace sluice {

class ClientResponse {
 public:
  /**
   * `client` may be null (a request whose client is already gone); `record`,
   * `identity` and `request` outlive it; `start` is when the request came.
   */
  ClientResponse(DownstreamStream* client, ExchangeRecord& record, const RequestIdentity& identity,
                 const RequestHead& request, MonotonicTime start)
      : client_(client), record_(record), identity_(identity), request_(request), start_(start) {}
  ClientResponse(const ClientResponse&) = delete;
  ClientResponse& operator=(const ClientResponse&) = delete;

  /** The client's stream; null once it left (never written again). */
  DownstreamStream* stream() const { return client_; }
  /** The client's address and transport; empty once it left. */
  const ClientInfo& clientInfo() const {
    static const ClientInfo kNoClient{};
    return client_ != nullptr ? client_->clientInfo() : kNoClient;
  }
  /**
   * Somebody reads what is forwarded: the client is attached and the
   * Exchange is not draining the upstream's answer for nobody.
   */
  bool listening() const { return client_ != nullptr && !draining_; }
  /** Finish mode (on_client_disconnect: finish): the client left, the answer is read and dropped.
   */
  void drain() { draining_ = true; }
  bool draining() const { return draining_; }
  /**
   * The client went away: what sluice still buffered for it never reached
   * it (the relay's delivered bytes), and it is never written again.
   */
  void clientLeft();
  /**
   * The request's head arrived: the upstream's trailers go to the client
   * only where they can be carried (HTTP/2) and were asked for (`te: trailers`).
   */
  void noteRequest(const RequestHead& request);
  /**
   * The request's route (again when it changes): whether it speaks MCP
   * (the SSE dialect of its responses) and its time-to-first-byte histogram.
   */
  void noteRoute(const RouteRuntime& route);

  ResponseRelay& relay() { return relay_; }
  const ResponseRelay& relay() const { return relay_; }

  // --- writing -----------------------------------------------------------------------
  /**
   * Sends an upstream response's head (decorated by the caller) whose body
   * is in `dialect`: stamped with the request's x-request-id, its first byte
   * observed in `time_to_first_byte`. Only while listening().
   */
  void sendHead(ResponseHead& head, SseDialect dialect, prometheus::Histogram& time_to_first_byte,
                MonotonicTime start, MonotonicTime now);
  /**
   * The same for the noted request and route: the dialect from the
   * request's path, the head's content-type and the route's protocol.
   */
  void sendHead(ResponseHead& head, MonotonicTime now);
  /** Sends a reply of sluice's own, whole (nothing was sent yet; the client is there). */
  void sendReply(LocalReply& reply, MonotonicTime now);
  /** Sends the body of a released held response; `end_stream` ends the response. */
  void sendHeldBody(std::string_view body, bool end_stream);
  /**
   * Forwards upstream body bytes while listening(). True when the caller must
   * stop reading the upstream until the client drains (ResponseRelay::forward).
   */
  bool forward(const char* data, size_t len);
  /** The upstream's trailers: kept for the response's end when the client takes them. */
  void keepTrailers(HeaderMap&& trailers);
  /** Ends the response (with the kept trailers, when there are). */
  void end() { relay_.end(*client_); }
  /**
   * The final SSE error event a cut of the response under way may append
   * (ResponseRelay::finalEventFor); "" when none, or when no response is under way.
   */
  std::string finalEventFor(const Problem& problem);
  /** Ends the response under way truncated, after `final_event` if there is one. */
  void cut(const std::string& final_event);

  // --- the spend, booked once read ---------------------------------------------------
  /**
   * Takes `receipt` when the client's reading can be learnt (FilterCallbacks::holdUntilRead):
   * the client is there, its connection confirms reads, and it was not the
   * client that ended the response (it left, it stalled).
   */
  bool holdUntilRead(std::unique_ptr<ReadReceipt>& receipt);
  bool holdsSpend() const { return read_receipt_ != nullptr; }
  /**
   * Hands the held spend, and the access log line (`record`, null when the
   * log is off) with it, to the client's connection, which books it once
   * the client's reading is known; settled at once when the client is gone.
   */
  void handOverSpend(ConfigSnapshotPtr snapshot, const AccessRecord* record, AccessLogBuffer* log);
  /**
   * The request's books close: a held spend is handed over with the access
   * log line (`record` and `log`, null while the log is off), the line then
   * written once the spend is booked; with none held, the line is written now.
   */
  void closeBooks(const ConfigSnapshotPtr& snapshot, const AccessRecord* record,
                  AccessLogBuffer* log);

  /**
   * The request ended: the client's stream is told and let go. `resume_upload`:
   * the answer came before the upload ended, the codec reads (and drops) the rest.
   */
  void done(bool resume_upload);

 private:
  DownstreamStream* client_;
  ExchangeRecord& record_;
  const RequestIdentity& identity_;
  const RequestHead& request_;
  const MonotonicTime start_;
  const RouteRuntime* route_ = nullptr;  // noteRoute()
  ResponseRelay relay_;
  std::unique_ptr<ReadReceipt> read_receipt_;  // the last attempt's spend, booked once read
  bool draining_ = false;
  bool takes_trailers_ = false;
};

}  // namespace sluice
