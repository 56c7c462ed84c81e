#pragma once

// Errors sluice makes itself (docs/design.md §3, §8). Every one is an RFC 9457
// `application/problem+json` body —
//   {"type","title","status","detail","cancel_reason","is_retriable","error"}
// — whose `error` member has the provider SDKs' shape,
//   "error": {"message", "type": <slug>, "code": <cancel_reason or null>},
// because the `openai` SDKs read `body.error` and `@anthropic-ai/sdk` prints
// the body: either way sluice's reason reaches the exception's message.
// `Retry-After` / `retry-after-ms` go with it when a useful wait is known, and
// `x-should-retry: false` when a client retry cannot help (is_retriable false).
//
// The kinds of problem are a catalogue (`problems::kBudgetExhausted`, ...):
// status, slug and title are written once, call sites add the detail.
//
// When sluice cuts a server-sent-event response that already started, the
// same `error` member becomes one final SSE event in the route's dialect
// (sseErrorEvent), so an SDK raises its API error instead of a bare
// "terminated".

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/cancel_reason.h"
#include "common/http_message.h"

namespace sluice {

/** What every occurrence of one kind of problem shares. */
struct ProblemKind {
  int status;
  std::string_view slug;   // short machine name: the `type` URN "urn:sluice:problem:<slug>"
  std::string_view title;  // short, human, stable per slug
  // Whether a client's retry may help, before the request's own state is
  // considered (sluice already retried; the wait does not fit the budget).
  bool retriable;
};

/** The catalogue: every kind of problem sluice answers with. */
namespace problems {
// The client's request.
inline constexpr ProblemKind kBadRequest{400, "bad-request", "Bad request", false};
inline constexpr ProblemKind kMalformedRequest{400, "malformed-request", "Malformed HTTP request",
                                               false};
inline constexpr ProblemKind kInvalidBudget{400, "invalid-budget", "Invalid budget header", false};
// An MCP route's body is not one JSON-RPC 2.0 request (docs/design.md §10):
// answered as JSON-RPC -32700 / -32600 (common/jsonrpc_error.h).
inline constexpr ProblemKind kJsonRpcParseError{400, "jsonrpc-parse-error", "JSON-RPC parse error",
                                                false};
inline constexpr ProblemKind kJsonRpcInvalidRequest{400, "jsonrpc-invalid-request",
                                                    "JSON-RPC invalid request", false};
inline constexpr ProblemKind kUnauthorized{401, "unauthorized", "Unauthorized", false};
// An MCP route's request whose Host or Origin names a host the route does not
// know (DNS rebinding, docs/guide/tools.md): answered 403 with a JSON-RPC error.
inline constexpr ProblemKind kHostNotAllowed{403, "host-not-allowed", "Host not allowed", false};
inline constexpr ProblemKind kNoRoute{404, "no-route", "No route", false};
inline constexpr ProblemKind kMethodNotAllowed{405, "method-not-allowed", "Method not allowed",
                                               false};
inline constexpr ProblemKind kRequestTimeout{408, "request-timeout", "Request timeout", false};
inline constexpr ProblemKind kBodyTooLarge{413, "body-too-large", "Request body too large", false};
inline constexpr ProblemKind kUriTooLong{414, "uri-too-long", "Request target too long", false};
inline constexpr ProblemKind kHeaderTooLarge{431, "header-too-large",
                                             "Request header fields too large", false};
inline constexpr ProblemKind kClientDisconnect{499, "client-disconnect", "Client disconnected",
                                               false};
inline constexpr ProblemKind kClientStalled{499, "client-stalled", "Client stopped reading", false};
// A request Transfer-Encoding other than chunked alone (gzip, chunked): HTTP/1.x only.
inline constexpr ProblemKind kNotImplemented{501, "not-implemented", "Not implemented", false};
// Only the HTTP/1.x codec answers it: a request line naming a version it does not serve.
inline constexpr ProblemKind kHttpVersionNotSupported{505, "http-version-not-supported",
                                                      "HTTP version not supported", false};
// The upstream.
inline constexpr ProblemKind kUpstreamConnectError{502, "upstream-connect-error",
                                                   "Upstream connect error", true};
inline constexpr ProblemKind kUpstreamReset{502, "upstream-reset", "Upstream reset", true};
inline constexpr ProblemKind kUpstreamProtocolError{502, "upstream-protocol-error",
                                                    "Invalid upstream response", true};
inline constexpr ProblemKind kUpstreamRefused{502, "upstream-refused",
                                              "Upstream refused the request", true};
inline constexpr ProblemKind kUpstreamConnectTimeout{504, "upstream-connect-timeout",
                                                     "Upstream connect timeout", true};
inline constexpr ProblemKind kUpstreamTimeout{504, "upstream-timeout", "Upstream timed out", true};
// sluice's own policies.
inline constexpr ProblemKind kBudgetExhausted{504, "budget-exhausted", "Request budget exhausted",
                                              false};
inline constexpr ProblemKind kCircuitOpen{503, "circuit-open", "Upstream circuit open", true};
inline constexpr ProblemKind kRateLimited{429, "rate-limited", "Upstream quota exhausted", true};
inline constexpr ProblemKind kOverloaded{503, "overloaded", "Upstream overloaded", true};
inline constexpr ProblemKind kDraining{503, "draining", "sluice is shutting down", true};
// The request's run (docs/design.md §9): never worth retrying as it is.
inline constexpr ProblemKind kRunCancelled{409, "run-cancelled", "Run cancelled", false};
inline constexpr ProblemKind kRunDeadlineExceeded{504, "run-deadline-exceeded",
                                                  "Run deadline exceeded", false};
inline constexpr ProblemKind kRunSpendExhausted{402, "run-spend-exhausted", "Run spend cap reached",
                                                false};
inline constexpr ProblemKind kInvalidRunMaxUsd{400, "invalid-run-max-usd",
                                               "Invalid run spend cap header", false};
inline constexpr ProblemKind kInvalidRunBudget{400, "invalid-run-budget",
                                               "Invalid run budget header", false};
}  // namespace problems

/** One problem sluice reports to a client. */
struct Problem {
  int status = 500;
  std::string slug;    // short machine name, becomes the `type` URN: "urn:sluice:problem:<slug>"
  std::string title;   // short, human, stable per slug
  std::string detail;  // this occurrence
  std::optional<CancelReason> cancel_reason;
  bool is_retriable = false;
  std::optional<std::chrono::milliseconds> retry_after;  // sets Retry-After and retry-after-ms
};

/** An occurrence of `kind`: its status, slug, title and retriability, plus what is particular. */
Problem makeProblem(const ProblemKind& kind, std::string detail,
                    std::optional<CancelReason> cancel_reason = std::nullopt,
                    std::optional<std::chrono::milliseconds> retry_after = std::nullopt);

/** A complete response sluice answers with itself. */
struct LocalReply {
  ResponseHead head;
  std::string body;
};

/** Renders `p` as a problem+json response (content-type, content-length, retry headers). */
LocalReply makeProblemReply(const Problem& p);

/**
 * The `error` member's `message`: "sluice <slug>: <detail>", so an SDK's
 * exception ("504 sluice budget-exhausted: ...") says who stopped the request and why.
 */
std::string errorMessage(const Problem& p);

/** The wire format of a route's server-sent events, which decides how an error event looks. */
enum class SseDialect {
  None,       // unknown: a cut stream gets no error event
  OpenAI,     // Chat Completions, Responses, legacy Completions: data: {"error": {...}}
  Anthropic,  // Messages: event: error / data: {"type": "error", "error": {...}}
  // An MCP route's JSON-RPC stream: event: message / data: a JSON-RPC error
  // for the request's id (common/jsonrpc_error.h: mcpErrorEvent, which needs
  // the id; sseErrorEvent writes nothing for it).
  Mcp,
};

/**
 * The dialect of a response: None unless its `content_type` is
 * text/event-stream; then from the API the request path names:
 * `.../chat/completions`, `.../completions` and `.../responses` are OpenAI's
 * (Azure's deployment paths included), `.../messages` Anthropic's; any other
 * path (an MCP server's SSE, say) has none. The query is ignored.
 */
SseDialect sseDialectFor(std::string_view request_path, std::string_view content_type);

/**
 * One final SSE event carrying `p` in `dialect` ("" for SseDialect::None),
 * starting and ending on an event boundary:
 *   OpenAI:    data: {"error":{"message","type","code"}}\n\n
 *   Anthropic: event: error\ndata: {"type":"error","error":{"type","message"}}\n\n
 */
std::string sseErrorEvent(SseDialect dialect, const Problem& p);

}  // namespace sluice
