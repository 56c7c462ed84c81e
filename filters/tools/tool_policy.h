#pragma once

// A route's per-tool policy (docs/design.md §10): which `tools[]` entry a
// `tools/call` matches (shell globs, first match wins), the metric label it
// goes under, and whether a call that already went upstream may be sent
// again. Pure: table-tested without an Exchange.

#include <cstddef>
#include <optional>
#include <string_view>

#include "filters/tools/tool_annotations.h"
#include "filters/tools/tools_config.h"

namespace sluice {

/** Which entry of a route's `tools` a tool name matched. */
struct ToolMatch {
  const config::ToolRule* rule = nullptr;  // null: no entry matched
  size_t index = 0;                        // into `tools`; tools.size() for "other"
  std::string_view label;                  // the pattern as configured, or "other"
};

/**
 * Whether a sent call may be sent again under `mode`: `never` no, `safe`
 * yes, `annotations` only when `hints` are known and say read-only or
 * idempotent (hintsMakeResendSafe()).
 */
bool maySendAgain(config::ToolRetry mode, const std::optional<ToolHints>& hints);

class ToolPolicy {
 public:
  /** `config` must outlive the policy (it lives in the pinned Config). */
  explicit ToolPolicy(const config::ToolsConfig& config) : config_(config) {}

  /** The first `tools[]` entry whose glob (fnmatch(3), no flags) matches `tool`. */
  ToolMatch match(std::string_view tool) const;
  /** The retry mode of a match: its entry's `retry`, else the route's `tool_retry`. */
  config::ToolRetry retryFor(const ToolMatch& match) const;
  /** How many labels there are: one per entry, plus "other". */
  size_t labelCount() const { return config_.tools.size() + 1; }
  /** Label `index` (as ToolMatch::label). */
  std::string_view label(size_t index) const;

 private:
  const config::ToolsConfig& config_;
};

}  // namespace sluice
