#pragma once

// Request → ResponsePlan. The router decides everything about an answer up
// front — status, headers, body or SSE encoder, and the fault script (stalls,
// resets, garbage) — so the Connection only has to play the plan out on the
// wire. Nothing here touches sockets or the event loop.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tools/mock-llm/fault_counters.h"
#include "tools/mock-llm/header_list.h"
#include "tools/mock-llm/ledger.h"
#include "tools/mock-llm/schedule.h"
#include "tools/mock-llm/wire_format.h"

namespace mockllm {

/** State shared by every worker thread of one server. */
struct SharedState {
  explicit SharedState(size_t ledger_limit) : ledger(ledger_limit) {}

  /** The scheduled fault in force now, or null (no schedule, or between windows). */
  const ScheduledFault* scheduledFault() const;

  Ledger ledger;
  std::optional<FaultSchedule> schedule;  // --schedule; set before start(), then read-only
  // The schedule's epoch (steady_clock, microseconds): start(), or the last POST /_schedule.
  std::atomic<int64_t> schedule_epoch_us{0};
  FailCounter fail_counter;
  QuotaBook quotas;
  std::atomic<uint64_t> next_connection_id{1};
  std::atomic<uint64_t> next_request_id{1};
};

/** What the mock reads from a provider request body (a JSON object). */
struct BodyInfo {
  bool valid_json = false;  // the body parsed as a JSON object
  std::string model;        // "" when absent
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<int64_t> max_tokens;  // max_tokens / max_completion_tokens / max_output_tokens
};

/** The protocol a request arrived over. */
enum class Protocol { kHttp1, kHttp2 };

/** One parsed request: an HTTP/1.1 message or an HTTP/2 stream. */
struct Request {
  std::string method;
  std::string target;  // as received: path and query (h2: :path)
  HeaderList headers;  // lower-case names (h2: no pseudo-headers; :authority as `host`)
  std::string body;    // de-chunked
  bool keep_alive = true;
  bool http10 = false;
  bool malformed = false;   // the parser rejected the connection's bytes here
  int64_t received_us = 0;  // when the request's headers were complete
  Protocol protocol = Protocol::kHttp1;
  int32_t stream_id = 0;  // HTTP/2 stream id (0 for HTTP/1.1)
  BodyInfo info;          // filled by inspectBody()
  LedgerEntryPtr entry;   // null for control endpoints (/_ledger, /_health)

  /** The first value of header `name` (lower-case), or nullptr. */
  const std::string* header(std::string_view name) const;
  /** The path without the query string. */
  std::string_view path() const;
};

/**
 * How an HTTP/2 stream is turned away before any response: nothing was
 * processed, so a client may retry it safely. HTTP/1.1 has no such thing.
 */
enum class Refusal {
  kNone,
  kRefuseStream,  // x-mock-refuse-stream: RST_STREAM(REFUSED_STREAM)
  kGoaway,        // x-mock-goaway: GOAWAY whose last-stream-id is below this stream
};

/**
 * How to answer one request, independent of the protocol: status, headers
 * and (non-streaming) body are final; the timing fields script the delivery.
 * Each connection type renders the head in its own framing.
 */
struct ResponsePlan {
  int status = 200;
  HeaderList headers;      // in order; no hop-by-hop fields (those are HTTP/1.1's business)
  std::string body;        // the whole body when not streaming
  SseStreamPtr sse;        // non-null: stream this SSE encoder after the head
  bool chunked = false;    // HTTP/1.1: send the body with chunked transfer-encoding
  bool keep_alive = true;  // HTTP/1.1: keep the connection open afterwards
  bool usage_in_body = false;

  int64_t tokens = 0;  // content tokens generated (0 for non-LLM answers)
  std::chrono::milliseconds token_interval{0};
  int64_t stall_before_headers_ms = 0;  // -1 = never answer
  int64_t stall_after_tokens = -1;      // -1 = no mid-stream stall
  int64_t stall_ms = 0;                 // -1 = forever
  int64_t reset_after_tokens = -1;      // -1 = no reset
  bool close_after_headers = false;
  bool garbage = false;
  Refusal refusal = Refusal::kNone;  // HTTP/2 only; when set, nothing else applies
};

/**
 * True for the mock's own endpoints (`/_health`, `/_ledger`, `/_schedule`),
 * which the ledger does not record.
 */
bool isControlPath(std::string_view path);

/** Parses the body (once) into `req.info`. */
void inspectBody(Request& req);

/**
 * Creates the ledger entry for a freshly parsed request (not for control
 * endpoints): id, method, path, model, stream, input tokens, headers.
 */
LedgerEntryPtr makeLedgerEntry(const Request& req, uint64_t connection_id, SharedState& state);

/**
 * Decides the answer to `req`, consulting and updating the shared fail and
 * quota counters, and records the status (and attempt) in the ledger entry.
 */
ResponsePlan planResponse(const Request& req, SharedState& state);

/** The HTTP/1.1 status line and header block (blank line included) for `plan`. */
std::string http1Head(const ResponsePlan& plan);

}  // namespace mockllm
