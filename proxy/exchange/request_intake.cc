#include "proxy/exchange/request_intake.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "filters/retry/retry_decision.h"

namespace sluice {

std::optional<uint64_t> declaredContentLength(const RequestHead& request) {
  const auto value = request.headers.get("content-length");
  if (!value) return std::nullopt;
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), n);
  if (ec != std::errc() || end != value->data() + value->size()) return std::nullopt;
  return n;
}

uint64_t RequestIntake::streamAbove(const config::RetryConfig& retry, const RequestHead& request) {
  if (isRetrySafe(retry.idempotent, request.method, request.headers.has("idempotency-key"))) {
    return retry.max_body;
  }
  return std::min(retry.max_body, kAlwaysBufferedBytes);
}

RequestIntake::Plan RequestIntake::plan(const RequestHead& request, uint64_t max_body,
                                        uint64_t stream_above) {
  stream_above_ = stream_above;
  const auto declared = declaredContentLength(request);
  if (!declared) return Plan::Ok;  // chunked: decided as the bytes come
  // A body that says up front it will not fit is refused before a byte of it
  // is read (and before an HTTP/1.1 client is told `100 Continue`).
  if (*declared > max_body) return Plan::TooLarge;
  body_.declareLength(*declared);
  if (*declared > stream_above_) {
    body_.startStreaming();  // the attempt starts with the head
    return Plan::Ok;
  }
  // Buffered whole: its room is taken now, so a body the process cannot
  // hold is refused before any of it is read.
  if (*declared > 0 && !body_.reserveWhole(*declared)) return Plan::Refused;
  return Plan::Ok;
}

RequestIntake::Intake RequestIntake::append(const char* data, size_t len, uint64_t max_body) {
  if (body_.size() + len > max_body) return Intake::TooLarge;
  if (!body_.append(data, len)) return Intake::Refused;
  bytes_in_ += len;
  if (body_.streaming()) return Intake::Streamed;
  if (body_.size() <= stream_above_) return Intake::Held;
  // Too big to replay: stop buffering and start the attempt now.
  body_.startStreaming();
  return Intake::StartStreaming;
}

bool RequestIntake::complete() {
  complete_ = true;
  body_.markComplete();
  return takeClientPaused();
}

RequestIntake::Flow RequestIntake::flow() {
  if (!body_.streaming() || complete_) return Flow::Keep;
  if (!client_paused_ && body_.held() > kBodyHighWatermark) {
    client_paused_ = true;
    return Flow::Pause;
  }
  if (client_paused_ && body_.held() < kBodyLowWatermark) {
    client_paused_ = false;
    return Flow::Resume;
  }
  return Flow::Keep;
}

bool RequestIntake::takeClientPaused() {
  const bool was = client_paused_;
  client_paused_ = false;
  return was;
}

void RequestIntake::steer(DownstreamStream& client) {
  switch (flow()) {
    case Flow::Keep:
      break;
    case Flow::Pause:
      client.pauseRequestBody();
      break;
    case Flow::Resume:
      client.resumeRequestBody();
      break;
  }
}

std::string RequestIntake::takeModel() {
  awaiting_model_ = false;
  std::string model;
  scanTopLevelMembers(body_.prefix(), [&](std::string_view key, std::string_view value) {
    if (key != "model") return true;
    if (const auto plain = plainString(value)) {
      model = std::string(*plain);
    } else {
      const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
      model = j.is_string() ? j.get<std::string>() : std::string();
    }
    return true;  // the last one wins, as in a parse
  });
  return model;
}

}  // namespace sluice
