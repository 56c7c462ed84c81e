#include "tools/mock-llm/protocol_detector.h"

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <memory>

#include "tools/mock-llm/http1_connection.h"
#include "tools/mock-llm/http2_connection.h"
#include "tools/mock-llm/worker.h"

namespace mockllm {

namespace {

constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace

PrefaceMatch matchHttp2Preface(std::string_view first_bytes) {
  const size_t n = std::min(first_bytes.size(), kHttp2Preface.size());
  if (first_bytes.substr(0, n) != kHttp2Preface.substr(0, n)) return PrefaceMatch::kHttp1;
  return n == kHttp2Preface.size() ? PrefaceMatch::kHttp2 : PrefaceMatch::kNeedMore;
}

ProtocolDetector::ProtocolDetector(Worker& worker, bufferevent* bev, uint64_t id)
    : worker_(worker), bev_(bev), id_(id) {}

ProtocolDetector::~ProtocolDetector() {
  if (bev_ != nullptr) bufferevent_free(bev_);
}

void ProtocolDetector::start() {
  bufferevent_setcb(bev_, &ProtocolDetector::onReadCb, nullptr, &ProtocolDetector::onEventCb, this);
  bufferevent_enable(bev_, EV_READ | EV_WRITE);
}

void ProtocolDetector::onReadCb(bufferevent*, void* arg) {
  static_cast<ProtocolDetector*>(arg)->onRead();
}

void ProtocolDetector::onEventCb(bufferevent*, short what, void* arg) {
  // The client left before saying anything usable: nothing to record.
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) static_cast<ProtocolDetector*>(arg)->retire();
}

void ProtocolDetector::onRead() {
  if (bev_ == nullptr) return;
  const Decision decision = decide();
  if (decision != Decision::kUndecided) handOver(decision);
}

ProtocolDetector::Decision ProtocolDetector::decide() const {
  if (SSL* ssl = bufferevent_openssl_get_ssl(bev_)) {
    const unsigned char* alpn = nullptr;
    unsigned int alpn_len = 0;
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    const std::string_view selected(reinterpret_cast<const char*>(alpn), alpn_len);
    if (selected == "h2") return Decision::kHttp2;
    if (selected == "http/1.1") return Decision::kHttp1;
  }
  evbuffer* in = bufferevent_get_input(bev_);
  const size_t want = std::min(evbuffer_get_length(in), kHttp2Preface.size());
  const auto* bytes =
      reinterpret_cast<const char*>(evbuffer_pullup(in, static_cast<ssize_t>(want)));
  switch (matchHttp2Preface(std::string_view(bytes, want))) {
    case PrefaceMatch::kHttp2:
      return worker_.http2Settings().enabled ? Decision::kHttp2 : Decision::kHttp1;
    case PrefaceMatch::kHttp1:
      return Decision::kHttp1;
    case PrefaceMatch::kNeedMore:
      break;
  }
  return Decision::kUndecided;
}

void ProtocolDetector::handOver(Decision decision) {
  bufferevent* bev = bev_;
  bev_ = nullptr;
  bufferevent_setcb(bev, nullptr, nullptr, nullptr, nullptr);
  std::unique_ptr<Connection> next;
  if (decision == Decision::kHttp2) {
    next = std::make_unique<Http2Connection>(worker_, bev, id_);
  } else {
    next = std::make_unique<Http1Connection>(worker_, bev, id_);
  }
  worker_.retire(this);
  worker_.adopt(std::move(next));
}

void ProtocolDetector::retire() {
  if (bev_ == nullptr) return;
  bufferevent_free(bev_);
  bev_ = nullptr;
  worker_.retire(this);
}

}  // namespace mockllm
