#pragma once

// sluice's own answers in the MCP dialect (docs/design.md §8, §10). On a
// `protocol: mcp` route a client speaks JSON-RPC 2.0, and an MCP SDK turns a
// JSON-RPC error into a tool error the agent can plan around, where a
// problem+json response would be a transport exception. So when sluice
// answers a JSON-RPC request itself it answers
//   200 application/json
//   {"jsonrpc":"2.0","id":<the request's id>,
//    "error":{"code":-32001|-32000,"message":"sluice <slug>: <detail>","data":<problem>}}
// with -32001 for timeouts (status 504: budget, run deadline, upstream
// timeouts), -32000 otherwise, and `data` the problem+json object sluice
// answers elsewhere. A body that is not JSON-RPC gets 400 with -32700 (parse
// error) or -32600 (invalid request) and the id it had, else null. A
// notification has no id to answer: it gets the problem+json response.

#include <optional>
#include <string>
#include <string_view>

#include "common/problem.h"

namespace sluice {

/** JSON-RPC error codes sluice answers with. */
namespace jsonrpc_codes {
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kServerError = -32000;  // sluice refused or failed the call
inline constexpr int kTimeout = -32001;      // the call ran out of time (budget, deadline)
}  // namespace jsonrpc_codes

/** The JSON-RPC error code for `p`. */
int jsonRpcErrorCode(const Problem& p);

/**
 * The JSON-RPC error response for `p`, one line of JSON without a newline:
 * `id` is the request's id as JSON text; nullopt writes `null`.
 */
std::string jsonRpcErrorResponse(const Problem& p, std::optional<std::string_view> id);

/**
 * The whole answer in the MCP dialect: 400 for the JSON-RPC problems
 * (parse error, invalid request) and 403 for host-not-allowed, each with a
 * JSON-RPC error body; 200 with the JSON-RPC error when the request has an
 * `id`; else (a notification) makeProblemReply(p).
 */
LocalReply makeMcpReply(const Problem& p, std::optional<std::string_view> id);

/**
 * The final SSE event of an MCP response sluice cuts (docs/design.md §8):
 * `event: message` with the JSON-RPC error for `id` as its data.
 */
std::string mcpErrorEvent(const Problem& p, std::string_view id);

}  // namespace sluice
