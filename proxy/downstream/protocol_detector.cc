#include "proxy/downstream/protocol_detector.h"

#include <event2/bufferevent_ssl.h>

#include <algorithm>

#include "common/clock.h"
#include "proxy/event/tls_server.h"

namespace sluice {

ProtocolDetector::ProtocolDetector(DownstreamConnectionHost& host, BufferEventPtr bev,
                                   std::string peer_address, bool tls, Http1Limits http1_limits,
                                   Http2Limits http2_limits)
    : host_(host),
      bev_(std::move(bev)),
      peer_address_(std::move(peer_address)),
      tls_(tls),
      http1_limits_(http1_limits),
      http2_limits_(http2_limits),
      accepted_at_(host.dispatcher().clock().now()),
      timer_(host.dispatcher().base(), [this] { onTimeout(); }) {
  // TLS: the handshake completes with BEV_EVENT_CONNECTED. Plain: the first
  // bytes arrive through the read callback.
  bufferevent_setcb(bev_.get(), tls_ ? nullptr : &ProtocolDetector::onReadCb, nullptr,
                    &ProtocolDetector::onEventCb, this);
  bufferevent_enable(bev_.get(), EV_READ | EV_WRITE);
  if (http1_limits_.header_read_timeout.count() > 0) timer_.arm(http1_limits_.header_read_timeout);
}

void ProtocolDetector::onTimeout() {
  if (closed_) return;
  host_.countRejection(Rejection::HeaderTimeout);
  close();
}

ProtocolDetector::Verdict ProtocolDetector::classify(std::string_view first_bytes) {
  const size_t n = std::min(first_bytes.size(), kHttp2Preface.size());
  if (first_bytes.substr(0, n) != kHttp2Preface.substr(0, n)) return Verdict::Http1;
  return n == kHttp2Preface.size() ? Verdict::Http2 : Verdict::NeedMore;
}

void ProtocolDetector::onReadCb(bufferevent*, void* arg) {
  const EventTimeScope event_time;
  static_cast<ProtocolDetector*>(arg)->onRead();
}

void ProtocolDetector::onRead() {
  if (closed_) return;
  evbuffer* input = bufferevent_get_input(bev_.get());
  const size_t have = std::min(evbuffer_get_length(input), kHttp2Preface.size());
  char first[kHttp2Preface.size()];
  const ev_ssize_t copied = evbuffer_copyout(input, first, have);
  if (copied < 0) return;
  switch (classify(std::string_view(first, static_cast<size_t>(copied)))) {
    case Verdict::NeedMore:
      return;  // a prefix of the preface so far: wait for the next bytes
    case Verdict::Http1:
      handOff(false);
      return;
    case Verdict::Http2:
      handOff(true);
      return;
  }
}

void ProtocolDetector::onEventCb(bufferevent*, short events, void* arg) {
  const EventTimeScope event_time;
  static_cast<ProtocolDetector*>(arg)->onEvent(events);
}

void ProtocolDetector::onEvent(short events) {
  if (closed_) return;
  if (tls_ && (events & BEV_EVENT_CONNECTED)) {
    SSL* ssl = bufferevent_openssl_get_ssl(bev_.get());
    handOff(ssl != nullptr && negotiatedAlpn(ssl) == "h2");
    return;
  }
  if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) close();  // gone, or a failed handshake
}

void ProtocolDetector::handOff(bool http2) {
  closed_ = true;
  timer_.disarm();
  bufferevent_setcb(bev_.get(), nullptr, nullptr, nullptr, nullptr);
  DownstreamConnectionPtr next;
  if (http2) {
    next = std::make_unique<Http2ServerConnection>(host_, std::move(bev_), peer_address_, tls_,
                                                   http2_limits_);
  } else {
    next = std::make_unique<Http1ServerConnection>(host_, std::move(bev_), peer_address_, tls_,
                                                   http1_limits_, accepted_at_);
  }
  host_.replaceConnection(*this, std::move(next));
}

void ProtocolDetector::close() {
  if (closed_) return;
  closed_ = true;
  timer_.disarm();
  if (bev_) {
    bufferevent_disable(bev_.get(), EV_READ | EV_WRITE);
    bufferevent_setcb(bev_.get(), nullptr, nullptr, nullptr, nullptr);
  }
  host_.connectionClosed(*this);
}

}  // namespace sluice
