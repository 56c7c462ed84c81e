#include "filters/tools/tool_answer.h"

#include "common/json_fields.h"
#include "filters/spend/sse_parser.h"

namespace sluice {

ToolAnswer classifyToolAnswer(std::string_view message) {
  bool has_method = false;
  std::string_view result, error;
  const bool scanned = scanTopLevelMembers(message, [&](std::string_view key, std::string_view v) {
    if (key == "method") has_method = true;
    if (key == "result") result = v;
    if (key == "error") error = v;
    return true;
  });
  if (!scanned || has_method) return ToolAnswer::Unknown;
  if (!error.empty()) return ToolAnswer::JsonRpcError;
  if (result.empty()) return ToolAnswer::Unknown;
  bool is_error = false;
  scanTopLevelMembers(result, [&](std::string_view key, std::string_view v) {
    if (key == "isError") is_error = v == "true";
    return true;
  });
  return is_error ? ToolAnswer::ToolError : ToolAnswer::Result;
}

ToolAnswerReader::ToolAnswerReader(bool event_stream) {
  if (!event_stream) return;
  sse_ = std::make_unique<SseParser>(
      [this](const SseEvent& event) {
        if (event.oversized || answer_ != ToolAnswer::Unknown) return;
        answer_ = classifyToolAnswer(event.data);
      },
      kMaxMessageBytes);
}

ToolAnswerReader::~ToolAnswerReader() = default;

void ToolAnswerReader::feed(const char* data, size_t len) {
  if (sse_) {
    if (answer_ == ToolAnswer::Unknown) sse_->feed(data, len);
    return;
  }
  if (too_big_) return;
  if (body_.size() + len > kMaxMessageBytes) {
    too_big_ = true;
    body_ = std::string();
    return;
  }
  body_.append(data, len);
}

void ToolAnswerReader::finish() {
  if (sse_ || too_big_) return;
  answer_ = classifyToolAnswer(body_);
  body_ = std::string();
}

}  // namespace sluice
