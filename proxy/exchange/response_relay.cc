#include "proxy/exchange/response_relay.h"

#include "common/jsonrpc_error.h"
#include "filters/filter.h"

namespace sluice {

namespace {

// The last bytes of an SSE stream that ends on an event boundary: a blank
// line after LF, CR or CRLF line ends. The tail holds the last four bytes.
bool atEventBoundary(uint32_t tail) {
  const uint32_t last2 = tail & 0xffff;
  return tail == 0 || last2 == 0x0a0a || last2 == 0x0d0d || tail == 0x0d0a0d0a;
}

}  // namespace

bool clientStillListening(CancelReason reason) {
  switch (reason) {
    case CancelReason::ClientDisconnect:
    case CancelReason::ClientStalled:
    case CancelReason::ClientAbandoned:
      return false;
    case CancelReason::BudgetExhausted:
    case CancelReason::CircuitOpen:
    case CancelReason::RateLimited:
    case CancelReason::Overloaded:
    case CancelReason::UpstreamTimeout:
    case CancelReason::Draining:
    case CancelReason::UpstreamReset:
    case CancelReason::RunCancelled:
    case CancelReason::RunDeadline:
    case CancelReason::RunSpendCap:
      return true;
  }
  return false;
}

SseDialect responseDialect(std::string_view request_path, std::string_view content_type,
                           bool mcp_route, bool has_jsonrpc_id) {
  if (!mcp_route) return sseDialectFor(request_path, content_type);
  // A JSON-RPC stream: its final event answers the request's id.
  const bool stream = content_type.find("text/event-stream") != std::string_view::npos;
  return stream && has_jsonrpc_id ? SseDialect::Mcp : SseDialect::None;
}

void ResponseRelay::resetAttempt() {
  held_.reset();
  trailers_.reset();
  forwarded_bytes_ = 0;
  tail_ = 0;
  dialect_ = SseDialect::None;
  paused_ = false;
  cut_ = false;
  cut_flushes_ = false;
}

void ResponseRelay::hold(ResponseHead&& head) {
  held_ = std::make_unique<Held>();
  held_->head = std::move(head);
}

bool ResponseRelay::holdData(const char* data, size_t len) {
  if (held_->body.size() + len > kMaxHeldBody) return false;
  held_->body.append(data, len);
  return true;
}

void ResponseRelay::sendHead(DownstreamStream& client, ResponseHead&& head, SseDialect dialect) {
  started_ = true;
  dialect_ = dialect;
  tail_ = 0;
  client.encodeHeaders(std::move(head), false);
}

void ResponseRelay::sendReply(DownstreamStream& client, ResponseHead&& head,
                              std::string_view body) {
  started_ = true;
  client.encodeHeaders(std::move(head), false);
  client.encodeData(body.data(), body.size(), true);
}

void ResponseRelay::sendBody(DownstreamStream& client, const char* data, size_t len,
                             bool end_stream) {
  forwarded_bytes_ += len;
  if (dialect_ != SseDialect::None) {
    for (size_t i = len > 4 ? len - 4 : 0; i < len; ++i) {
      tail_ = tail_ << 8 | static_cast<uint8_t>(data[i]);
    }
  }
  const bool trailers = end_stream && trailers_ != nullptr;
  client.encodeData(data, len, end_stream && !trailers);
  if (trailers) end(client);
}

bool ResponseRelay::forward(DownstreamStream& client, const char* data, size_t len) {
  sendBody(client, data, len, false);
  if (client_gone_) return false;  // `client` may be gone with it: not read again
  return pauseIfClientSlow(client);
}

void ResponseRelay::keepTrailers(HeaderMap&& trailers) {
  trailers_ = std::make_unique<HeaderMap>(std::move(trailers));
}

void ResponseRelay::end(DownstreamStream& client) {
  if (trailers_ == nullptr) {
    client.encodeData(nullptr, 0, true);
    return;
  }
  const std::unique_ptr<HeaderMap> trailers = std::move(trailers_);
  client.encodeTrailers(std::move(*trailers));
}

bool ResponseRelay::pauseIfClientSlow(const DownstreamStream& client) {
  if (paused_ || !client.aboveHighWatermark()) return false;
  paused_ = true;
  return true;
}

bool ResponseRelay::resume() {
  if (!paused_) return false;
  paused_ = false;
  return true;
}

std::string ResponseRelay::finalEventFor(const DownstreamStream& client, const Problem& problem,
                                         std::optional<std::string_view> jsonrpc_id) {
  if (dialect_ == SseDialect::None || !atEventBoundary(tail_)) {
    return "";  // an event appended inside another would garble both
  }
  if (dialect_ == SseDialect::Mcp && !jsonrpc_id) return "";
  std::string event = dialect_ == SseDialect::Mcp ? mcpErrorEvent(problem, *jsonrpc_id)
                                                  : sseErrorEvent(dialect_, problem);
  if (!client.canWriteWithoutWaiting(event.size())) return "";
  cut_flushes_ = true;
  return event;
}

void ResponseRelay::cut(DownstreamStream& client, const std::string& final_event) {
  if (final_event.empty()) {
    client.resetStream();
  } else {
    client.resetStreamAfter(final_event);
  }
}

uint64_t ResponseRelay::deliveredBodyBytes(const DownstreamStream* client) const {
  // While the client is attached everything handed over counts (what is still
  // buffered will be written) unless the attempt was cut: then the response is
  // cut too and its buffer dropped — except when a final SSE error event goes
  // out first, after what is buffered. Once the client left, what was stuck in
  // sluice did not reach it.
  uint64_t stuck = undelivered_at_disconnect_;
  if (client != nullptr) stuck = cut_ && !cut_flushes_ ? client->bufferedBytes() : 0;
  return forwarded_bytes_ > stuck ? forwarded_bytes_ - stuck : 0;
}

}  // namespace sluice
