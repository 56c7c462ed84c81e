// Decodes `routes[]`: name, match (path_prefix, methods, model), upstream,
// fallback and the per-route timeouts; `budget`, `retry` and the MCP keys
// (`protocol`, `tools`, `tool_retry`) through their filters' decoders.

#include <algorithm>
#include <set>

#include "config/sections.h"

namespace sluice::config::detail {

RouteConfig Decoder::route(const Field& f) {
  RouteConfig r;
  std::optional<Field> name_field, upstream_field, prefix_field, tools_field;
  std::vector<Field> fallback_fields;
  decodeMap(
      f,
      {
          {"name",
           [&](const Field& v) {
             r.name = labelName(v);
             name_field.emplace(v);
           }},
          {"match", [&](const Field& v) { r.match = routeMatch(v, prefix_field); }},
          {"upstream",
           [&](const Field& v) {
             r.upstream = nonEmptyString(v);
             upstream_field.emplace(v);
           }},
          {"budget", [&](const Field& v) { r.budget = decodeBudget(*this, v); }},
          {"retry", [&](const Field& v) { r.retry = decodeRetry(*this, v); }},
          {"first_byte_timeout", [&](const Field& v) { r.first_byte_timeout = duration(v, true); }},
          {"idle_timeout", [&](const Field& v) { r.idle_timeout = duration(v, true); }},
          {"on_client_disconnect",
           [&](const Field& v) {
             r.on_client_disconnect =
                 oneOf<ClientDisconnectMode>(v, {{"cancel", ClientDisconnectMode::Cancel},
                                                 {"finish", ClientDisconnectMode::Finish}});
           }},
          {"finish_grace", [&](const Field& v) { r.finish_grace = duration(v, true); }},
          {"fallback", [&](const Field& v) { r.fallback = fallback(v, fallback_fields); }},
          {"fallback_on", [&](const Field& v) { r.fallback_on = fallbackOn(v); }},
          {"fallback_wait",
           [&](const Field& v) {
             r.fallback_wait = oneOf<FallbackWait>(
                 v, {{"prefer", FallbackWait::Prefer}, {"avoid", FallbackWait::Avoid}});
           }},
          {"protocol", [&](const Field& v) { r.protocol = decodeRouteProtocol(*this, v); }},
          {"tools",
           [&](const Field& v) {
             r.tools.tools = decodeToolRules(*this, v);
             tools_field.emplace(v);
           }},
          {"tool_retry",
           [&](const Field& v) {
             r.tools.tool_retry = decodeToolRetry(*this, v);
             tools_field.emplace(v);
           }},
          {"allowed_hosts",
           [&](const Field& v) {
             r.tools.allowed_hosts = hostNames(v);
             tools_field.emplace(v);
           }},
      },
      {"name", "match", "upstream"});
  if (tools_field && r.protocol != RouteProtocol::Mcp) {
    const std::string& path = tools_field->path;
    fail(*tools_field, "only a route with protocol: mcp has " + path.substr(path.rfind('.') + 1));
  }
  const auto [it, inserted] = route_lines_.emplace(r.name, name_field->mark.line + 1);
  if (!inserted) {
    fail(*name_field, "duplicate route name " + inQuotes(r.name) + " (first defined at line " +
                          std::to_string(it->second) + ")");
  }
  route_upstream_fields_.push_back(*upstream_field);
  route_prefix_fields_.push_back(prefix_field);
  route_fallback_fields_.push_back(std::move(fallback_fields));
  return r;
}

std::vector<FallbackTarget> Decoder::fallback(const Field& f, std::vector<Field>& upstream_fields) {
  std::vector<FallbackTarget> out;
  for (const Field& item : items(f)) {
    FallbackTarget t;
    decodeMap(item,
              {
                  {"upstream",
                   [&](const Field& v) {
                     t.upstream = nonEmptyString(v);
                     upstream_fields.push_back(v);
                   }},
                  {"model",
                   [&](const Field& v) {
                     t.model = nonEmptyString(v);
                     for (const char c : t.model) {
                       if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
                         fail(v,
                              "a model name must not contain quotes, backslashes or control "
                              "characters");
                       }
                     }
                   }},
              },
              {"upstream"});
    out.push_back(std::move(t));
  }
  return out;
}

FallbackOn Decoder::fallbackOn(const Field& f) {
  FallbackOn on;
  on.circuit_open = on.rate_limited = on.overloaded = false;
  on.outcomes = OutcomeSet{};
  std::set<std::string> seen;
  for (const Field& item : items(f)) {
    const std::string s = scalar(item, "a status code, outcome or refusal name");
    if (!seen.insert(s).second) fail(item, "duplicate entry " + inQuotes(s));
    if (s == "circuit_open") {
      on.circuit_open = true;
    } else if (s == "rate_limited") {
      on.rate_limited = true;
    } else if (s == "overloaded") {
      on.overloaded = true;
    } else if (!addOutcome(*this, item, s, on.outcomes)) {
      fail(item, "unknown cause " + inQuotes(s) +
                     " (expected circuit_open, rate_limited, overloaded, a status code 100..599, "
                     "4xx, 5xx, connect_error, reset or timeout)");
    }
  }
  return on;
}

RouteMatch Decoder::routeMatch(const Field& f, std::optional<Field>& prefix_field) {
  RouteMatch m;
  decodeMap(f,
            {
                {"path_prefix",
                 [&](const Field& v) {
                   prefix_field.emplace(v);
                   m.path_prefix = scalar(v, "a path");
                   if (m.path_prefix.empty() || m.path_prefix[0] != '/') {
                     fail(v, "must start with \"/\" (got " + inQuotes(m.path_prefix) + ")");
                   }
                   if (m.path_prefix.find_first_of("?# \t\r\n") != std::string::npos) {
                     fail(v, "must be a plain path (no query, fragment or whitespace)");
                   }
                 }},
                {"methods",
                 [&](const Field& v) {
                   for (const Field& item : items(v)) {
                     const std::string s = scalar(item, "an HTTP method");
                     if (!isToken(s)) fail(item, "invalid HTTP method " + inQuotes(s));
                     const std::string method = toUpper(s);
                     if (std::find(m.methods.begin(), m.methods.end(), method) != m.methods.end()) {
                       fail(item, "duplicate method " + inQuotes(method));
                     }
                     m.methods.push_back(method);
                   }
                 }},
                {"model", [&](const Field& v) { m.model = nonEmptyString(v); }},
            });
  return m;
}

}  // namespace sluice::config::detail
