#include "proxy/upstream/upstream_pool.h"

#include <algorithm>

namespace sluice {

/**
 * A stream waiting for the pool to learn the upstream's protocol. It records
 * what the Exchange asks of it and replays that on the real stream once bound;
 * from then on it only forwards. Lives in the pool until its holder lets go.
 */
class PendingStream final : public DeferredDeletable, public UpstreamStream {
 public:
  explicit PendingStream(UpstreamPool& pool) : pool_(pool) {}

  void sendRequest(const RequestHead& head, RequestBody& body,
                   UpstreamCallbacks* callbacks) override {
    head_ = &head;
    body_ = &body;
    callbacks_ = callbacks;
    if (bound_ != nullptr) bound_->sendRequest(head, body, callbacks);
  }
  void onRequestBodyData() override {
    // Until bound the body just grows in the holder's RequestBody; the real
    // stream reads it from the start once it exists.
    if (bound_ != nullptr) bound_->onRequestBodyData();
  }
  void pauseReading() override {
    paused_ = true;
    if (bound_ != nullptr) bound_->pauseReading();
  }
  void resumeReading() override {
    paused_ = false;
    if (bound_ != nullptr) bound_->resumeReading();
  }
  void detach() override {
    callbacks_ = nullptr;
    if (bound_ != nullptr) bound_->detach();
  }
  void release() override {
    if (bound_ != nullptr) bound_->release();
    pool_.forgetPending(this);
  }
  void reset() override {
    if (bound_ != nullptr) bound_->reset();
    pool_.forgetPending(this);
  }

  bool bound() const { return bound_ != nullptr; }
  /** The protocol is known: run on `stream` from now on. */
  void bind(UpstreamStream* stream) {
    bound_ = stream;
    if (paused_) stream->pauseReading();
    if (callbacks_ != nullptr) stream->sendRequest(*head_, *body_, callbacks_);
  }
  /** The negotiating connection failed. */
  void fail(const std::string& detail) {
    if (UpstreamCallbacks* cb = callbacks_)
      cb->onUpstreamError(UpstreamError::ConnectError, detail);
  }

 private:
  UpstreamPool& pool_;
  UpstreamStream* bound_ = nullptr;
  const RequestHead* head_ = nullptr;
  RequestBody* body_ = nullptr;
  UpstreamCallbacks* callbacks_ = nullptr;
  bool paused_ = false;
};

namespace {

UpstreamPool::Protocol initialProtocol(const config::UpstreamConfig& upstream,
                                       const config::UpstreamUrl& url) {
  switch (upstream.http2) {
    case config::Http2Mode::Off:
      return UpstreamPool::Protocol::Http1;
    case config::Http2Mode::On:
      return UpstreamPool::Protocol::Http2;
    case config::Http2Mode::Auto:
      return url.isTls() ? UpstreamPool::Protocol::Negotiating : UpstreamPool::Protocol::Http1;
  }
  return UpstreamPool::Protocol::Http1;
}

}  // namespace

UpstreamPool::UpstreamPool(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                           const config::EndpointConfig& endpoint, SslCtxPtr ssl_ctx)
    : dispatcher_(dispatcher),
      upstream_(upstream),
      url_(endpoint.url),
      ssl_ctx_(endpoint.url.isTls() ? std::move(ssl_ctx) : nullptr),
      protocol_(initialProtocol(upstream, endpoint.url)) {}

UpstreamPool::~UpstreamPool() {
  destroying_ = true;
  for (auto& [raw, conn] : conns_) conn->close();
  for (auto& [raw, session] : sessions_) session->close("worker shutting down");
}

UpstreamStream* UpstreamPool::acquire() {
  switch (protocol_) {
    case Protocol::Http1:
      return acquireHttp1();
    case Protocol::Http2:
      return acquireHttp2();
    case Protocol::Negotiating:
      return acquirePending();
  }
  return acquireHttp1();
}

UpstreamStream* UpstreamPool::acquireHttp1() {
  while (!idle_.empty()) {
    Http1ClientConnection* conn = idle_.back();
    idle_.pop_back();
    if (conn->reusable()) return conn;
    destroy(conn);
  }
  auto conn = std::make_unique<Http1ClientConnection>(dispatcher_, upstream_, url_, ssl_ctx_.get(),
                                                      *this, ++opened_);
  Http1ClientConnection* raw = conn.get();
  conns_.emplace(raw, std::move(conn));
  return raw;
}

UpstreamStream* UpstreamPool::acquireHttp2() {
  for (auto& [raw, session] : sessions_) {
    if (session->hasCapacity()) return session->newStream();
  }
  ++opened_;
  auto session =
      std::make_unique<Http2ClientSession>(dispatcher_, upstream_, url_, ssl_ctx_.get(), *this);
  Http2ClientSession* raw = session.get();
  sessions_.emplace(raw, std::move(session));
  Http2ClientStream* stream = raw->newStream();
  if (retired_) raw->drain();  // closes after this one stream
  return stream;
}

bool UpstreamPool::hasReadyStream() const {
  switch (protocol_) {
    case Protocol::Http1:
      for (const Http1ClientConnection* conn : idle_) {
        if (conn->reusable()) return true;
      }
      return false;
    case Protocol::Http2:
      for (const auto& [raw, session] : sessions_) {
        if (session->connected() && session->hasCapacity()) return true;
      }
      return false;
    case Protocol::Negotiating:
      return false;
  }
  return false;
}

void UpstreamPool::retire(std::function<void()> on_drained) {
  retired_ = true;
  on_drained_ = std::move(on_drained);
  shedIdle();
}

void UpstreamPool::shedIdle() {
  if (!retired_ || destroying_) return;
  while (!idle_.empty()) destroy(idle_.back());
  if (negotiator_ != nullptr && pending_.empty()) destroy(negotiator_);
  // drain() closes an idle session at once, which erases it from sessions_.
  std::vector<Http2ClientSession*> sessions;
  for (auto& [raw, session] : sessions_) sessions.push_back(raw);
  for (Http2ClientSession* s : sessions) {
    if (sessions_.count(s) != 0) s->drain();
  }
  if (drained() && on_drained_) on_drained_();
}

UpstreamStream* UpstreamPool::acquirePending() {
  if (negotiator_ == nullptr) {
    auto conn = std::make_unique<Http1ClientConnection>(
        dispatcher_, upstream_, url_, ssl_ctx_.get(), *this, ++opened_, /*negotiating=*/true);
    negotiator_ = conn.get();
    conns_.emplace(negotiator_, std::move(conn));
    if (negotiator_->closed()) {
      // Could not even start (e.g. DNS setup failed): the stream fails on sendRequest.
      Http1ClientConnection* failed = negotiator_;
      negotiator_ = nullptr;
      destroy(failed);
      return acquireHttp1();
    }
  }
  auto pending = std::make_unique<PendingStream>(*this);
  PendingStream* raw = pending.get();
  pending_.emplace(raw, std::move(pending));
  return raw;
}

void UpstreamPool::onNegotiated(Http1ClientConnection* conn, bool h2) {
  if (conn != negotiator_) return;
  negotiator_ = nullptr;
  if (h2) {
    protocol_ = Protocol::Http2;
    BufferEventPtr bev = conn->takeBufferEvent();
    destroy(conn);
    auto session =
        std::make_unique<Http2ClientSession>(dispatcher_, upstream_, url_, std::move(bev), *this);
    sessions_.emplace(session.get(), std::move(session));
  } else {
    protocol_ = Protocol::Http1;
    conn->markIdle();
    idle_.push_back(conn);
  }
  bindPending();
  shedIdle();  // retired meanwhile: what the waiting streams did not take closes now
}

void UpstreamPool::bindPending() {
  std::vector<PendingStream*> waiting;
  for (auto& [raw, pending] : pending_) {
    if (!raw->bound()) waiting.push_back(raw);
  }
  for (PendingStream* p : waiting) {
    if (pending_.count(p) != 0) p->bind(acquire());
  }
}

void UpstreamPool::onNegotiationFailed(Http1ClientConnection* conn, const std::string& detail) {
  if (conn == negotiator_) negotiator_ = nullptr;
  destroy(conn);
  std::vector<PendingStream*> waiting;
  for (auto& [raw, pending] : pending_) {
    if (!raw->bound()) waiting.push_back(raw);
  }
  // Each failure may retry at once and queue a new PendingStream: only these fail.
  for (PendingStream* p : waiting) {
    if (pending_.count(p) != 0) p->fail(detail);
  }
  shedIdle();
}

void UpstreamPool::forgetPending(PendingStream* pending) {
  auto it = pending_.find(pending);
  if (it == pending_.end()) return;
  // The PendingStream may be on the stack (its own release()): delete it later.
  dispatcher_.deferredDelete(std::move(it->second));
  pending_.erase(it);
  shedIdle();
}

void UpstreamPool::onSessionClosed(Http2ClientSession* session) {
  if (destroying_) return;
  if (session->alpnRefused() && upstream_.http2 == config::Http2Mode::Auto) {
    protocol_ = Protocol::Negotiating;  // the upstream changed its mind: ask again
  }
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  dispatcher_.deferredDelete(std::move(it->second));
  sessions_.erase(it);
  shedIdle();
}

void UpstreamPool::release(Http1ClientConnection* conn) {
  if (conn == nullptr) return;
  if (retired_ || !conn->reusable() || idle_.size() >= kMaxIdle) {
    destroy(conn);
    return;
  }
  conn->markIdle();
  idle_.push_back(conn);
}

void UpstreamPool::destroy(Http1ClientConnection* conn) {
  if (destroying_) return;
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  conn->close();
  idle_.erase(std::remove(idle_.begin(), idle_.end(), conn), idle_.end());
  if (conn == negotiator_) negotiator_ = nullptr;
  // The connection may be on the stack (its own callback); delete it later.
  dispatcher_.deferredDelete(std::move(it->second));
  conns_.erase(it);
  if (retired_ && drained() && on_drained_) on_drained_();
}

}  // namespace sluice
