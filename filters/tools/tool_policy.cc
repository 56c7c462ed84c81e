#include "filters/tools/tool_policy.h"

#include <fnmatch.h>

#include <string>

namespace sluice {

bool maySendAgain(config::ToolRetry mode, const std::optional<ToolHints>& hints) {
  switch (mode) {
    case config::ToolRetry::Never:
      return false;
    case config::ToolRetry::Safe:
      return true;
    case config::ToolRetry::Annotations:
      return hints && hintsMakeResendSafe(*hints);
  }
  return false;
}

ToolMatch ToolPolicy::match(std::string_view tool) const {
  const std::string name(tool);  // fnmatch needs a terminated string
  for (size_t i = 0; i < config_.tools.size(); ++i) {
    const config::ToolRule& rule = config_.tools[i];
    if (fnmatch(rule.name.c_str(), name.c_str(), 0) == 0) return {&rule, i, rule.name};
  }
  return {nullptr, config_.tools.size(), "other"};
}

config::ToolRetry ToolPolicy::retryFor(const ToolMatch& match) const {
  if (match.rule != nullptr && match.rule->retry) return *match.rule->retry;
  return config_.tool_retry;
}

std::string_view ToolPolicy::label(size_t index) const {
  return index < config_.tools.size() ? std::string_view(config_.tools[index].name) : "other";
}

}  // namespace sluice
