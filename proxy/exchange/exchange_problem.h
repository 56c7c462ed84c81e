#pragma once

// The problems an Exchange answers with (docs/design.md §3, §8), and its
// local replies: one catalogue entry per cancel reason, with a detail
// naming what the client can act on, the answers to a request sluice
// refuses (no route, a body too large) or an attempt that broke, and the
// reply a problem becomes on the wire. Pure functions of what the Exchange
// knows at that moment, so every answer is table-tested without an Exchange.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/cancel_reason.h"
#include "common/http_message.h"
#include "common/problem.h"
#include "proxy/upstream/upstream_stream.h"

namespace sluice {

/** What the answer to a cancel may name. */
struct CancelContext {
  std::string_view upstream = "none";  // the current attempt's upstream, else the route's
  std::optional<std::chrono::milliseconds> budget;  // the request's whole budget, if bounded
  uint32_t attempts = 0;                            // attempts sent so far
};

/** The problem for a request cancelled with `reason`; `retry_after` where a wait is known. */
Problem problemForCancel(CancelReason reason, const CancelContext& context,
                         std::optional<std::chrono::milliseconds> retry_after);

/** 404: no route matches the request (`model`: the body's, when the route depended on it). */
Problem noRouteProblem(const RequestHead& request, const std::string* model = nullptr);
/** 413: the body passes limits.max_body (`max_body`). */
Problem bodyTooLargeProblem(uint64_t max_body);
/** 503 overloaded: the body does not fit under limits.max_buffered_body_bytes (`cap`). */
Problem bodyOverloadedProblem(uint64_t cap);
/** An attempt's transport error, as the client is told when it is not retried. */
Problem upstreamErrorProblem(UpstreamError error, const std::string& detail);
/** The attempt found no connection to `upstream` (`endpoint`) within connect_timeout. */
Problem connectTimeoutProblem(std::string_view upstream, std::string_view endpoint);

/**
 * The reply `problem` becomes: JSON-RPC on an MCP route (to `jsonrpc_id`,
 * else problem+json), problem+json otherwise; with x-sluice-attempts when
 * attempts were sent.
 */
LocalReply problemReply(const Problem& problem, bool mcp_route,
                        const std::optional<std::string>& jsonrpc_id, uint32_t attempts_sent);
/**
 * Every response head to the client carries the request's x-request-id (and
 * `request-id`, which the Anthropic SDKs read, on sluice's own answers); a
 * provider's own id moves to x-sluice-upstream-request-id.
 */
void stampRequestId(ResponseHead& head, const std::string& request_id, bool from_upstream);

}  // namespace sluice
