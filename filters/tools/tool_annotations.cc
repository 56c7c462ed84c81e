#include "filters/tools/tool_annotations.h"

#include <nlohmann/json.hpp>

namespace sluice {

namespace {

std::optional<bool> hint(const nlohmann::json& annotations, const char* key) {
  const auto it = annotations.find(key);
  if (it == annotations.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

}  // namespace

bool hintsMakeResendSafe(const ToolHints& hints) {
  if (hints.read_only.value_or(false)) return true;
  if (hints.destructive.value_or(false)) return false;
  return hints.idempotent.value_or(false);
}

size_t ToolAnnotationTable::learnFromToolsList(std::string_view body, bool event_stream) {
  if (!event_stream) return learnMessage(body);
  // SSE: each event's data lines joined by '\n' (the HTML living standard's
  // rule); MCP servers write one JSON message per event.
  size_t learned = 0;
  std::string data;
  auto flush = [&] {
    if (!data.empty()) learned += learnMessage(data);
    data.clear();
  };
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string_view::npos) end = body.size();
    std::string_view line = body.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      flush();
    } else if (line.substr(0, 5) == "data:") {
      std::string_view value = line.substr(5);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (!data.empty()) data.push_back('\n');
      data.append(value);
    }
    pos = end + 1;
  }
  flush();
  return learned;
}

size_t ToolAnnotationTable::learnMessage(std::string_view json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (!j.is_object()) return 0;
  const auto result = j.find("result");
  if (result == j.end() || !result->is_object()) return 0;
  const auto tools = result->find("tools");
  if (tools == result->end() || !tools->is_array()) return 0;
  size_t learned = 0;
  for (const auto& tool : *tools) {
    if (!tool.is_object()) continue;
    const auto name = tool.find("name");
    if (name == tool.end() || !name->is_string()) continue;
    ToolHints hints;
    const auto annotations = tool.find("annotations");
    if (annotations != tool.end() && annotations->is_object()) {
      hints.read_only = hint(*annotations, "readOnlyHint");
      hints.destructive = hint(*annotations, "destructiveHint");
      hints.idempotent = hint(*annotations, "idempotentHint");
    }
    learn(name->get<std::string>(), hints);
    ++learned;
  }
  return learned;
}

void ToolAnnotationTable::learn(const std::string& name, const ToolHints& hints) {
  if (max_tools_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = hints_.find(name);
  if (it != hints_.end()) {
    it->second = hints;
    return;
  }
  while (hints_.size() >= max_tools_ && !order_.empty()) {
    hints_.erase(order_.front());
    order_.pop_front();
  }
  hints_.emplace(name, hints);
  order_.push_back(name);
}

std::optional<ToolHints> ToolAnnotationTable::lookup(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = hints_.find(std::string(name));
  if (it == hints_.end()) return std::nullopt;
  return it->second;
}

size_t ToolAnnotationTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hints_.size();
}

}  // namespace sluice
