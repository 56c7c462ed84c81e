// Decodes `routes[].protocol`, `routes[].tools` and `routes[].tool_retry`.

#include "filters/tools/tools_config.h"

#include <set>

namespace sluice::config {

using detail::Field;

RouteProtocol decodeRouteProtocol(detail::FieldReader& reader, const Field& f) {
  return reader.oneOf<RouteProtocol>(f,
                                     {{"http", RouteProtocol::Http}, {"mcp", RouteProtocol::Mcp}});
}

std::vector<ToolRule> decodeToolRules(detail::FieldReader& reader, const Field& f) {
  std::vector<ToolRule> out;
  std::set<std::string> seen;
  for (const Field& item : reader.items(f)) {
    ToolRule rule;
    reader.decodeMap(
        item,
        {
            {"name",
             [&](const Field& v) {
               rule.name = reader.nonEmptyString(v);
               if (!seen.insert(rule.name).second) {
                 reader.fail(v, "duplicate tool pattern " + detail::inQuotes(rule.name));
               }
             }},
            {"budget", [&](const Field& v) { rule.budget = reader.duration(v, false); }},
            {"retry",
             [&](const Field& v) {
               rule.retry = reader.oneOf<ToolRetry>(
                   v, {{"never", ToolRetry::Never}, {"safe", ToolRetry::Safe}});
             }},
        },
        {"name"});
    out.push_back(std::move(rule));
  }
  return out;
}

ToolRetry decodeToolRetry(detail::FieldReader& reader, const Field& f) {
  return reader.oneOf<ToolRetry>(f, {{"annotations", ToolRetry::Annotations},
                                     {"safe", ToolRetry::Safe},
                                     {"never", ToolRetry::Never}});
}

}  // namespace sluice::config
