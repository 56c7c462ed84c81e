#pragma once

// Reading the one JSON-RPC 2.0 message an MCP request body carries
// (docs/design.md §10): its `method`, its `id` and, for `tools/call`, the
// tool's name. The envelope is read the way Envoy's MCP filter reads it:
// those members are located and decoded, the rest (a call's `arguments`,
// which can be a whole file) is skipped without decoding; the body's framing
// (strings, nesting) is checked, its scalars inside `arguments` are the
// server's to parse. Anything unusual in the envelope (escapes, an id that is
// not a plain string or integer) is decided by a full parse
// (nlohmann::json), which also tells a parse error from an invalid request.

#include <optional>
#include <string>
#include <string_view>

namespace sluice {

/** What readJsonRpcRequest() found. */
struct JsonRpcRequest {
  enum class Status {
    Ok,              // a request (with an id) or a notification (without)
    ParseError,      // not JSON: -32700
    InvalidRequest,  // JSON, but not a JSON-RPC 2.0 request (or a batch): -32600
  };
  Status status = Status::Ok;
  std::string method;
  // The id as JSON text (`7`, `"abc"`), to be echoed in an answer; nullopt
  // for a notification. For an invalid request: its id when it had a valid
  // one, else nullopt (answered with `null`).
  std::optional<std::string> id;
  std::string tool;    // tools/call params.name; "" otherwise
  std::string detail;  // why it is invalid, for the error's message
  // A JSON-RPC response (`result` or `error`, no `method`): the client's
  // answer to a request the server sent it on a stream (sampling,
  // elicitation, roots). It passes through; `method` is "" and `id` nullopt
  // (sluice never answers it in its stead: a failure gets problem+json).
  bool is_response = false;

  bool isNotification() const { return status == Status::Ok && !id && !is_response; }
};

/**
 * Reads `body` as one JSON-RPC 2.0 message: an object with "jsonrpc":"2.0"
 * and a string `method`; `id`, when present, a string or a number (null is
 * refused as MCP does). A JSON array (a batch, dropped from MCP in
 * 2025-06-18) is an invalid request. A JSON-RPC response (no method, one of
 * `result` or `error`, an id that is a string or a number, or null for an
 * error) is fine: MCP clients POST their answers to the server's requests
 * (Streamable HTTP). A `tools/call` needs `params.name` as a string.
 */
JsonRpcRequest readJsonRpcRequest(std::string_view body);

}  // namespace sluice
