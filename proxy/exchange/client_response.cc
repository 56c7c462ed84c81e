#include "proxy/exchange/client_response.h"

#include <chrono>

#include "proxy/exchange/delivery_hold.h"
#include "proxy/http/header_rewrite.h"

namespace sluice {

void ClientResponse::clientLeft() {
  if (client_ != nullptr) relay_.clientLeft(client_->bufferedBytes());
  client_ = nullptr;
}

void ClientResponse::noteRequest(const RequestHead& request) {
  // Looked up only where trailers can be carried (HTTP/2): HTTP/1.1 pays nothing.
  takes_trailers_ =
      client_ != nullptr && client_->carriesTrailers() && acceptsTrailers(request.headers);
}

void ClientResponse::sendHead(ResponseHead& head, SseDialect dialect,
                              prometheus::Histogram& time_to_first_byte, MonotonicTime start,
                              MonotonicTime now) {
  stampRequestId(head, identity_.request_id, /*from_upstream=*/true);
  if (record_.noteFirstByte(now)) {
    time_to_first_byte.Observe(
        std::chrono::duration<double>(*record_.firstByteAt() - start).count());
  }
  relay_.sendHead(*client_, std::move(head), dialect);  // not read after: handed over
}

void ClientResponse::noteRoute(const RouteRuntime& route) { route_ = &route; }

void ClientResponse::sendHead(ResponseHead& head, MonotonicTime now) {
  const bool mcp =
      route_->config != nullptr && route_->config->protocol == config::RouteProtocol::Mcp;
  const SseDialect dialect =
      responseDialect(request_.pathOnly(), head.headers.get("content-type").value_or(""), mcp,
                      record_.jsonRpcId().has_value());
  sendHead(head, dialect, route_->metrics->timeToFirstByte(), start_, now);
}

void ClientResponse::sendReply(LocalReply& reply, MonotonicTime now) {
  stampRequestId(reply.head, identity_.request_id, /*from_upstream=*/false);
  record_.noteFirstByte(now);
  record_.addBytesOut(reply.body.size());
  relay_.sendReply(*client_, std::move(reply.head), reply.body);
}

void ClientResponse::sendHeldBody(std::string_view body, bool end_stream) {
  if (!listening()) return;
  record_.addBytesOut(body.size());
  relay_.sendBody(*client_, body.data(), body.size(), end_stream);
}

bool ClientResponse::forward(const char* data, size_t len) {
  if (!listening()) return false;
  record_.addBytesOut(len);
  return relay_.forward(*client_, data, len);
}

void ClientResponse::keepTrailers(HeaderMap&& trailers) {
  // Never merged into a head (RFC 9110 §6.5.1): the client gets them as
  // trailers, at the response's end, or not at all.
  if (!takes_trailers_) return;
  rewriteTrailersForDownstream(trailers);
  if (trailers.empty()) return;
  relay_.keepTrailers(std::move(trailers));
}

std::string ClientResponse::finalEventFor(const Problem& problem) {
  if (!listening() || !relay_.started()) return "";
  return relay_.finalEventFor(*client_, problem, record_.jsonRpcId());
}

void ClientResponse::cut(const std::string& final_event) {
  if (client_ != nullptr) ResponseRelay::cut(*client_, final_event);
}

bool ClientResponse::holdUntilRead(std::unique_ptr<ReadReceipt>& receipt) {
  // A cut the client caused (it left, it stalled) has nobody left to ask.
  const std::optional<CancelReason> why = receipt->reason();
  if (!listening() || read_receipt_ || !client_->confirmsReads() ||
      (why && !clientStillListening(*why))) {
    return false;
  }
  read_receipt_ = std::move(receipt);
  return true;
}

void ClientResponse::handOverSpend(ConfigSnapshotPtr snapshot, const AccessRecord* record,
                                   AccessLogBuffer* log) {
  auto hold =
      std::make_unique<DeliveryHold>(std::move(snapshot), std::move(read_receipt_), record, log);
  if (client_ != nullptr) {
    client_->holdUntilRead(std::move(hold));
  } else {
    hold->settle(0);
  }
}

void ClientResponse::closeBooks(const ConfigSnapshotPtr& snapshot, const AccessRecord* record,
                                AccessLogBuffer* log) {
  if (read_receipt_) {
    handOverSpend(snapshot, record, log);
  } else if (record != nullptr) {
    log->append(*record);
  }
}

void ClientResponse::done(bool resume_upload) {
  DownstreamStream* client = client_;
  if (client == nullptr) return;
  client_ = nullptr;
  if (resume_upload) client->resumeRequestBody();
  client->onExchangeDone();
}

}  // namespace sluice
