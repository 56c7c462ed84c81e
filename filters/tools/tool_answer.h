#pragma once

// How an MCP server answered a `tools/call`, read from its response as it
// passes through (docs/design.md §10): a result, a result the tool marked
// `isError: true` (the tool ran and failed: MCP's tool execution error), or a
// JSON-RPC error (the server refused the call: unknown tool, invalid
// arguments, its own failure). `sluice_tool_calls_total{outcome}` tells them
// apart, so a dashboard does not count a failing tool as `ok`.
//
// The answer is the one JSON-RPC response on the call's stream: the whole
// body of an `application/json` answer, or one event of a
// `text/event-stream` one (the server's progress notifications and its own
// requests to the client, which carry a `method`, are skipped). Memory is
// bounded: a message larger than kMaxMessageBytes is not read, and the call
// then counts by its HTTP status alone.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace sluice {

class SseParser;

enum class ToolAnswer {
  Unknown,       // no JSON-RPC response read (yet, or too large, or not JSON)
  Result,        // `result`, without `isError: true`
  ToolError,     // `result` with `isError: true`
  JsonRpcError,  // `error`
};

/** What one JSON-RPC message says about the call; Unknown for a request or notification. */
ToolAnswer classifyToolAnswer(std::string_view message);

class ToolAnswerReader {
 public:
  /** The largest message (JSON body, or one SSE event's data) read. */
  static constexpr size_t kMaxMessageBytes = 1024 * 1024;

  explicit ToolAnswerReader(bool event_stream);
  ~ToolAnswerReader();
  ToolAnswerReader(const ToolAnswerReader&) = delete;
  ToolAnswerReader& operator=(const ToolAnswerReader&) = delete;

  /** The next slice of the response body. */
  void feed(const char* data, size_t len);
  /** The body ended: an `application/json` answer is read now. */
  void finish();

  ToolAnswer answer() const { return answer_; }

 private:
  ToolAnswer answer_ = ToolAnswer::Unknown;
  std::unique_ptr<SseParser> sse_;  // null for an application/json answer
  std::string body_;
  bool too_big_ = false;
};

}  // namespace sluice
