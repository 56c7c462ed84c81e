#pragma once

// The spend meter's pure logic: how many tokens one upstream attempt consumed,
// and how many of its output tokens reached the client (docs/design.md §4).
//
// The proxy creates one UsageMeter per attempt and feeds it the response as it
// streams — headers, then body slices, then the end — and, separately, how far
// the client has got. No sockets, timers or threads here; all calls come from
// the attempt's worker thread.
//
// Where the counts come from:
//   - The provider's own usage when it reports it: a JSON body's `usage`; the
//     final OpenAI chat SSE chunk with `usage` (stream_options.include_usage);
//     the Responses API's `response.completed` (also `.incomplete`/`.failed`);
//     Anthropic's `message_start` (input) and `message_delta` (output — a
//     CUMULATIVE count, so each one replaces the last, never adds). Every
//     provider count replaces the previous one, which also makes providers that
//     repeat running usage on every chunk come out right.
//   - Otherwise an estimate: one output token per streamed content delta, and
//     ceil(request body bytes / 4) input tokens. A JSON body without `usage`
//     estimates output as ceil(generated text bytes / 4).
//
// Memory is bounded: SSE is parsed event by event (one event ≤ 1 MiB, larger
// ones are skipped and counted); a JSON body is buffered up to 4 MiB, beyond
// which only its last 64 KiB is kept to find a trailing `usage` object.
//
// ---- Mapping delivered bytes to delivered tokens ---------------------------
// The proxy cannot see tokens, only bytes: it knows how many response body
// bytes reached the client (written to the client socket / HTTP/2 stream, as
// opposed to still sitting in sluice's output buffer when the client left).
// It reports that count with onBytesDelivered(); offsets are positions in the
// exact byte stream fed to onResponseData(): the de-framed body (no chunked
// framing, no HTTP/2 frames), starting at 0.
//
// The meter remembers, for every content delta it counted, the offset at which
// the SSE event carrying it ended. An event counts as delivered once every byte
// up to that offset is delivered — a client cannot use half an event, so an
// event cut by the disconnect is NOT delivered. Then:
//
//   deliveredOutputTokens() = outputTokens()                      all deltas delivered
//                           = outputTokens() · d / D  (rounded)  d of D deltas delivered
//                           = outputTokens() or 0                 no deltas (JSON, ...):
//                                                                 all-or-nothing, on the
//                                                                 whole body delivered
//
// With no provider usage outputTokens() == D, so this is exactly "deltas
// delivered". When usage did arrive (the final chunk raced the disconnect),
// scaling by the delivered fraction keeps multi-token deltas (Anthropic) and
// uncounted events from showing up as phantom leaks. When usage never arrives
// (the usual cancel: the upstream is torn down first), the total is the
// estimate and leaked = total − delivered. Pending offsets are kept only for
// deltas not yet delivered, so memory is bounded by the bytes in flight (the
// backpressure watermark) if onBytesDelivered() is called as writes drain; if
// the caller reports only once at the end (sluice's spend filter does), the
// list is still capped: its newest quarter stays exact and the older entries
// are coalesced into entries of at most coalesce_span_ deltas (a span that
// grows in proportion to D / cap). A cut among the newest cap/4 deltas — where a
// client's cut falls, at most sluice's own buffer behind the end — is counted
// exactly; an older one can be undercounted, never overcounted, by less than
// one merged entry's span.
// "Delivered" means handed to the client's socket: bytes in the kernel's send
// buffer when the peer vanished are counted as delivered; sluice cannot know.
//
// Non-2xx responses are not billed by providers: they meter 0 tokens. Before
// response headers (e.g. an attempt abandoned while waiting for the first
// byte) the input estimate stands, since the provider may already be working.
// Generic (unrecognised) endpoints are only assumed to bill what they report
// (embeddings, legacy completions) — /v1/models, count_tokens, file uploads
// must not show up as spend — unless they answer with an SSE stream, which is
// metered like an LLM stream (estimated input, one token per data event).
//
// The body must be identity-encoded for parsing; a compressed body just yields
// estimates. Not copyable or movable (the SSE parser calls back into it): hold
// it by UsageMeterPtr.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/json_fields.h"
#include "filters/spend/pending_deltas.h"
#include "filters/spend/spend_split.h"
#include "filters/spend/sse_parser.h"

namespace sluice {

/** Which provider API a request speaks: decides how its response is metered. */
enum class ApiKind {
  OpenAiChat,         // POST /v1/chat/completions
  OpenAiResponses,    // POST /v1/responses
  AnthropicMessages,  // POST /v1/messages
  Generic,            // anything else: only reported usage, or SSE events as deltas
};

/**
 * The API kind of a request path. The query string and a trailing "/" are
 * ignored and any prefix is allowed (Azure's /openai/deployments/x/chat/completions,
 * gateway prefixes): the path must END in "/chat/completions", "/responses" or
 * "/v1/messages" (not just "/messages": OpenAI's /v1/threads/{id}/messages is
 * not Anthropic). Sub-resources (/v1/messages/count_tokens, /v1/responses/{id})
 * are Generic.
 */
ApiKind apiKindForPath(std::string_view path);

/** A short name for logs: "openai_chat", "openai_responses", "anthropic_messages", "generic". */
std::string_view toString(ApiKind kind);

/**
 * What the meter needs from the request. Compute it once per request and
 * build each attempt's meter from it, so a large body is scanned only once.
 */
struct MeteredRequest {
  ApiKind kind = ApiKind::Generic;
  /** The body's top-level "model" string; "" if absent, not a string or not JSON. */
  std::string model;
  /** ceil(body bytes / 4): the input estimate used until the provider reports. */
  uint64_t input_token_estimate = 0;

  /** Kind from `path` (apiKindForPath), model and estimate from `body`. */
  static MeteredRequest fromRequest(std::string_view path, std::string_view body);
  /** Model and estimate from `body` for a known kind. */
  static MeteredRequest fromBody(ApiKind kind, std::string_view body);
};

class UsageMeter {
 public:
  /** A non-streaming JSON body is buffered up to this size for its `usage`. */
  static constexpr size_t kMaxJsonBodyBytes = 4 * 1024 * 1024;
  /** Past kMaxJsonBodyBytes, only this tail is kept to find a trailing `usage`. */
  static constexpr size_t kJsonTailBytes = 64 * 1024;
  /** One SSE event's cap; larger events are skipped (see eventsSkipped()). */
  static constexpr size_t kMaxSseEventBytes = 1024 * 1024;
  /** Cap on remembered undelivered delta offsets before the older ones are coalesced. */
  static constexpr size_t kMaxPendingDeltaEntries = 4096;

  /** Meters one attempt of a request of `kind` whose body is `request_body`. */
  UsageMeter(ApiKind kind, std::string_view request_body);
  /** Meters one attempt of an already-inspected request. */
  explicit UsageMeter(MeteredRequest request);

  UsageMeter(const UsageMeter&) = delete;
  UsageMeter& operator=(const UsageMeter&) = delete;

  // ---- fed by the proxy, in order ----------------------------------------

  /**
   * The final (non-1xx) response status and its Content-Type (any case,
   * parameters allowed). `text/event-stream` is parsed as SSE,
   * `application/json` / `*+json` buffered as JSON, anything else only counted
   * in bytes. Only the first call counts.
   */
  void onResponseHeaders(int status, std::string_view content_type);
  /** The next slice of the response body, as received from the upstream. */
  void onResponseData(const char* data, size_t len);
  void onResponseData(std::string_view data) { onResponseData(data.data(), data.size()); }
  /**
   * The body arrived completely. Not called for an attempt torn down midway:
   * the accessors are valid at any time and reflect what was seen so far.
   */
  void onResponseEnd();
  /**
   * The first `body_bytes` bytes of the body (offsets as fed to
   * onResponseData) have reached the client. Cumulative; a smaller value than
   * before is ignored. May run ahead of onResponseData (counted on arrival).
   */
  void onBytesDelivered(uint64_t body_bytes);

  // ---- what was consumed ---------------------------------------------------

  ApiKind kind() const { return request_.kind; }
  /** The request's model, else the one the response named, else "". */
  const std::string& model() const;
  /**
   * Provider-reported input tokens if any were reported, else the estimate
   * (0 for a Generic request unless its response is SSE; 0 for non-2xx).
   */
  uint64_t inputTokens() const;
  /** Provider-reported output tokens if reported, else the estimate. */
  uint64_t outputTokens() const;
  /** inputTokens() is the provider's count (not an estimate). */
  bool inputReported() const { return billable_ && input_reported_; }
  /** outputTokens() is the provider's final count (not an estimate). */
  bool outputReported() const { return billable_ && output_reported_; }
  /** Content deltas counted in the stream so far. */
  uint64_t deltasSeen() const { return deltas_; }
  /** SSE events skipped for exceeding kMaxSseEventBytes (each counted as a delta). */
  uint64_t eventsSkipped() const;
  /** The response status is not 2xx: nothing is billed. */
  bool billable() const { return billable_; }
  /** onResponseEnd() was called. */
  bool responseComplete() const { return complete_; }
  /** The response is an SSE stream (known from its headers). */
  bool streaming() const { return sse_.has_value(); }
  /** Body bytes fed so far. */
  uint64_t bodyBytesSeen() const { return body_bytes_; }

  // ---- what reached the client --------------------------------------------

  /** Body bytes reported delivered (onBytesDelivered). */
  uint64_t bodyBytesDelivered() const { return bytes_delivered_; }
  /** Deltas whose whole event reached the client. */
  uint64_t deltasDelivered() const { return deltas_delivered_; }
  /** The response is complete and every byte of it reached the client. */
  bool deliveredAll() const { return complete_ && bytes_delivered_ >= body_bytes_; }
  /** Output tokens in the delivered part of the response (see the mapping above). */
  uint64_t deliveredOutputTokens() const;
  /** The client received some output: a delivered delta, or the whole response. */
  bool anyOutputDelivered() const;
  /** The snapshot splitSpend() takes. */
  AttemptTokens tokenCounts() const;
  /** Remembered undelivered-delta entries (never above kMaxPendingDeltaEntries). */
  size_t pendingDeltaEntries() const { return pending_.size(); }

 private:
  enum class BodyFormat { Unknown, Sse, Json, Other };

  void onSseEvent(const SseEvent& event);
  void onChatEvent(const SseEvent& event);
  void onResponsesEvent(const SseEvent& event);
  void onAnthropicEvent(const SseEvent& event);
  void onGenericEvent(const SseEvent& event);
  void bufferJson(const char* data, size_t len);
  void finishJson();
  void recordDeltas(uint64_t end_offset, uint64_t count);
  void coalescePending();
  /** Provider counts replace earlier ones (they are cumulative everywhere). */
  void report(std::optional<uint64_t> input, std::optional<uint64_t> output);
  void noteResponseModel(std::string_view model);

  MeteredRequest request_;
  BodyFormat format_ = BodyFormat::Unknown;
  bool billable_ = true;
  bool complete_ = false;
  bool stream_done_ = false;  // OpenAI chat's `data: [DONE]`

  std::optional<SseParser> sse_;
  ChatChunkScanner chat_scanner_;  // OpenAI chat chunks
  std::string json_body_;
  bool json_overflowed_ = false;
  std::string response_model_;

  uint64_t reported_input_ = 0;
  uint64_t reported_output_ = 0;
  bool input_reported_ = false;
  bool output_reported_ = false;
  uint64_t partial_output_ = 0;        // Anthropic message_start's running output count
  uint64_t text_output_estimate_ = 0;  // JSON body without usage: generated text / 4

  uint64_t deltas_ = 0;
  uint64_t deltas_delivered_ = 0;
  uint64_t body_bytes_ = 0;
  uint64_t bytes_delivered_ = 0;
  PendingDeltaList pending_;    // ascending end_offset, all > bytes_delivered_ (~2 bytes a delta)
  uint64_t coalesce_span_ = 2;  // most deltas one coalesced entry may hold
};

using UsageMeterPtr = std::unique_ptr<UsageMeter>;

}  // namespace sluice
