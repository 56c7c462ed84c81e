#pragma once

// `routes[].protocol`, `routes[].tools` and `routes[].tool_retry`
// (docs/design.md §10): a route that carries MCP (JSON-RPC 2.0 over
// Streamable HTTP) and its per-tool policy, with their YAML decoders.
// config/config.h composes them into RouteConfig.

#include <optional>
#include <string>
#include <vector>

#include "common/yaml/field_reader.h"

namespace sluice::config {

/** `routes[].protocol`: what the route's requests are. */
enum class RouteProtocol {
  Http,  // the default: any HTTP API (LLM providers); spend is metered
  Mcp,   // MCP over Streamable HTTP: the body is one JSON-RPC message
};

/**
 * Whether a `tools/call` that already went upstream may be sent again (a
 * retry or a fallback). A call that never left sluice (connect error, open
 * circuit) may always be sent again.
 */
enum class ToolRetry {
  Never,        // never once sent
  Safe,         // the operator vouches for it: read-only or idempotent
  Annotations,  // as the server's tools/list annotations say; unknown = never
};

/** One `routes[].tools[]` entry. */
struct ToolRule {
  std::string name;                // a shell glob on tools/call params.name (fnmatch)
  std::optional<Duration> budget;  // the call's budget; the request's and run's still apply
  std::optional<ToolRetry> retry;  // absent: the route's tool_retry
};

/** The MCP part of a route. */
struct ToolsConfig {
  std::vector<ToolRule> tools;  // first match wins
  ToolRetry tool_retry = ToolRetry::Annotations;
  // `allowed_hosts`: host names (lower-case, no port) the route accepts in
  // `Host` and `Origin` besides localhost and IP literals (DNS rebinding).
  std::vector<std::string> allowed_hosts;
};

/** Decodes `protocol: http | mcp`. */
RouteProtocol decodeRouteProtocol(detail::FieldReader& reader, const detail::Field& f);
/** Decodes `tools: [{name, budget, retry: never | safe}]`: names unique, budgets above 0s. */
std::vector<ToolRule> decodeToolRules(detail::FieldReader& reader, const detail::Field& f);
/** Decodes `tool_retry: annotations | safe | never`. */
ToolRetry decodeToolRetry(detail::FieldReader& reader, const detail::Field& f);

}  // namespace sluice::config
