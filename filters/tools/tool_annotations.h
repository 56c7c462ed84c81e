#pragma once

// What an MCP server says about its tools (docs/design.md §10): the
// `annotations` hints of each tool in the `tools/list` results that passed
// through sluice, remembered per upstream so a later `tools/call` can be
// judged safe (or not) to send again.
//
// Bounded: at most kMaxTools names per upstream; past it the name learned
// longest ago is forgotten first (a server listing more tools than that
// leaves the oldest ones unknown, which only means "never retried once sent").
// Thread-safe: every worker learns and looks up in the same table.

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sluice {

/** One tool's `annotations` (MCP ToolAnnotations); absent hints stay nullopt. */
struct ToolHints {
  std::optional<bool> read_only;    // readOnlyHint
  std::optional<bool> destructive;  // destructiveHint
  std::optional<bool> idempotent;   // idempotentHint

  friend bool operator==(const ToolHints&, const ToolHints&) = default;
};

/**
 * True when the hints make a call safe to send again: read-only, or
 * idempotent and not declared destructive. MCP's default for an absent
 * destructiveHint is `true`, but a server that says idempotentHint: true
 * and nothing about destruction is taken at its word on idempotence.
 */
bool hintsMakeResendSafe(const ToolHints& hints);

class ToolAnnotationTable {
 public:
  static constexpr size_t kMaxTools = 4096;

  explicit ToolAnnotationTable(size_t max_tools = kMaxTools) : max_tools_(max_tools) {}

  /**
   * Learns the tools of a `tools/list` response body: one JSON-RPC response
   * (`application/json`), or, when `event_stream`, the JSON-RPC responses
   * in its SSE `data:` lines. Every tool named in `result.tools` is
   * (re)learned with its annotations (none = no hints). Returns how many
   * tools were learned; anything that is not such a response teaches nothing.
   */
  size_t learnFromToolsList(std::string_view body, bool event_stream);

  /** Records `hints` for `name` (replacing what was known). */
  void learn(const std::string& name, const ToolHints& hints);

  /** The hints known for `name`, or nullopt when no tools/list named it. */
  std::optional<ToolHints> lookup(std::string_view name) const;

  size_t size() const;

 private:
  /** Learns one parsed JSON-RPC response text; returns the tools learned. */
  size_t learnMessage(std::string_view json_text);

  const size_t max_tools_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, ToolHints> hints_;
  std::deque<std::string> order_;  // names, oldest learned first (for eviction)
};

}  // namespace sluice
