#include "proxy/upstream/http2_client_session.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/clock.h"
#include "common/http_headers.h"
#include "proxy/upstream/http1_client_connection.h"
#include "proxy/upstream/upstream_pool.h"

namespace sluice {

namespace {

/** Fields that are connection-specific and never appear in HTTP/2 (RFC 9113 §8.2.2). */
bool connectionSpecific(std::string_view lower_name) {
  return lower_name == "connection" || lower_name == "keep-alive" ||
         lower_name == "proxy-connection" || lower_name == "transfer-encoding" ||
         lower_name == "upgrade" || lower_name == "host" || lower_name == "content-length";
}

nghttp2_nv makeNv(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

// --- Http2ClientStream --------------------------------------------------------------

void Http2ClientStream::sendRequest(const RequestHead& head, RequestBody& body,
                                    UpstreamCallbacks* callbacks) {
  callbacks_ = callbacks;
  body_ = &body;
  session_.submit(*this, head);
}

void Http2ClientStream::onRequestBodyData() { session_.resumeBody(*this); }

void Http2ClientStream::pauseReading() { paused_ = true; }

void Http2ClientStream::resumeReading() {
  if (!paused_) return;
  paused_ = false;
  session_.deliverHeld(*this);
}

void Http2ClientStream::release() { session_.letGo(*this, /*reset=*/false); }

void Http2ClientStream::reset() { session_.letGo(*this, /*reset=*/true); }

// --- Http2ClientSession: setup --------------------------------------------------------

Http2ClientSession::Http2ClientSession(Dispatcher& dispatcher,
                                       const config::UpstreamConfig& upstream,
                                       const config::UpstreamUrl& url, SSL_CTX* ssl_ctx,
                                       UpstreamPool& pool)
    : dispatcher_(dispatcher),
      upstream_(upstream),
      url_(url),
      pool_(pool),
      ping_timer_(dispatcher.base(), [this] { onPingTimer(); }) {
  require_alpn_h2_ = ssl_ctx != nullptr;
  bev_ = connectUpstream(dispatcher, upstream, url, ssl_ctx);
  init();
  if (!bev_) closed_ = true;  // streams fail with connect_error when submitted
}

Http2ClientSession::Http2ClientSession(Dispatcher& dispatcher,
                                       const config::UpstreamConfig& upstream,
                                       const config::UpstreamUrl& url, BufferEventPtr connected,
                                       UpstreamPool& pool)
    : dispatcher_(dispatcher),
      upstream_(upstream),
      url_(url),
      pool_(pool),
      bev_(std::move(connected)),
      ping_timer_(dispatcher.base(), [this] { onPingTimer(); }) {
  init();
  onConnected();
}

Http2ClientSession::~Http2ClientSession() { close("session destroyed"); }

void Http2ClientSession::init() {
  const Nghttp2CallbacksPtr callbacks = newNghttp2Callbacks();
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks.get(), &onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks.get(), &onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks.get(), &onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks.get(), &onDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks.get(), &onStreamClose);

  const Nghttp2OptionPtr option = newNghttp2Option();
  // No automatic WINDOW_UPDATE: we acknowledge what the client took.
  nghttp2_option_set_no_auto_window_update(option.get(), 1);

  nghttp2_session* session = nullptr;
  nghttp2_session_client_new2(&session, callbacks.get(), this, option.get());
  session_.reset(session);

  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
  };
  nghttp2_submit_settings(session_.get(), NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_.get(), NGHTTP2_FLAG_NONE, 0, kConnectionWindow);

  if (bev_) {
    bufferevent_setcb(bev_.get(), &Http2ClientSession::onReadCb, &Http2ClientSession::onWriteCb,
                      &Http2ClientSession::onEventCb, this);
    bufferevent_enable(bev_.get(), EV_READ | EV_WRITE);
  }
}

// --- streams ------------------------------------------------------------------------------

Http2ClientStream* Http2ClientSession::newStream() {
  auto stream = std::make_unique<Http2ClientStream>(*this);
  Http2ClientStream* raw = stream.get();
  streams_.emplace(raw, std::move(stream));
  ping_timer_.disarm();
  return raw;
}

bool Http2ClientSession::hasCapacity() const {
  if (closed_ || goaway_ || draining_ || !session_) return false;
  const uint32_t max =
      nghttp2_session_get_remote_settings(session_.get(), NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  return streams_.size() < max;
}

void Http2ClientSession::submit(Http2ClientStream& stream, const RequestHead& head) {
  if (closed_) {
    stream.ended_ = true;
    UpstreamCallbacks* cb = stream.callbacks_;
    if (cb != nullptr)
      cb->onUpstreamError(UpstreamError::ConnectError, "cannot connect to " + url_.authority());
    return;
  }
  std::vector<nghttp2_nv> nva;
  std::vector<std::string> lowered;  // owns lower-cased names until submit copies them
  lowered.reserve(head.headers.size());
  nva.reserve(head.headers.size() + 5);
  const std::string_view scheme = url_.isTls() ? "https" : "http";
  const auto host = head.headers.get("host");
  const std::string authority = host ? std::string(*host) : url_.authority();
  nva.push_back(makeNv(":method", head.method));
  nva.push_back(makeNv(":scheme", scheme));
  nva.push_back(makeNv(":authority", authority));
  nva.push_back(makeNv(":path", head.path));
  for (const auto& [name, value] : head.headers) {
    lowered.push_back(toLower(name));
    const std::string& n = lowered.back();
    if (connectionSpecific(n)) continue;
    if (n == "te" && !equalsIgnoreCase(trimOws(value), "trailers")) continue;
    nva.push_back(makeNv(n, value));
  }
  std::string length;
  if (const auto n = upstreamContentLength(head.method, *stream.body_)) {
    length = std::to_string(*n);
    nva.push_back(makeNv("content-length", length));
  }
  const bool no_body = stream.body_->complete() && stream.body_->size() == 0;
  nghttp2_data_provider provider{};
  provider.read_callback = &Http2ClientSession::readBody;
  const int32_t id = nghttp2_submit_request(session_.get(), nullptr, nva.data(), nva.size(),
                                            no_body ? nullptr : &provider, &stream);
  if (id < 0) {
    stream.ended_ = true;
    if (stream.callbacks_ != nullptr) {
      stream.callbacks_->onUpstreamError(
          UpstreamError::Refused,
          std::string("cannot open an HTTP/2 stream: ") + nghttp2_strerror(id));
    }
    return;
  }
  stream.id_ = id;
  flush();
  if (connected_ && !stream.ended_ && stream.callbacks_ != nullptr) {
    stream.callbacks_->onUpstreamConnected();
  }
}

ssize_t Http2ClientSession::readBody(nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                                     size_t length, uint32_t* data_flags, nghttp2_data_source*,
                                     void* user) {
  auto* self = static_cast<Http2ClientSession*>(user);
  auto* stream =
      static_cast<Http2ClientStream*>(nghttp2_session_get_stream_user_data(session, stream_id));
  // The holder let go: its body may be gone. Resetting the stream is all that is left.
  if (stream == nullptr || stream->let_go_ || stream->body_ == nullptr) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  // No body byte before the connection is up: a connect error must leave a
  // streamed body untouched, so the attempt can still be retried.
  if (!self->connected_) {
    stream->body_deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const RequestBody& body = *stream->body_;
  const std::string_view piece = body.peek(stream->body_sent_);
  const size_t n = std::min(length, piece.size());
  if (n > 0) std::memcpy(buf, piece.data(), n);
  stream->body_sent_ += n;
  if (body.complete() && stream->body_sent_ == body.size()) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  } else if (n == 0) {
    stream->body_deferred_ = true;  // a streamed body: onRequestBodyData wakes us
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n > 0 && stream->callbacks_ != nullptr)
    stream->callbacks_->onUpstreamBodySent(stream->body_sent_);
  return static_cast<ssize_t>(n);
}

void Http2ClientSession::resumeBody(Http2ClientStream& stream) {
  if (!stream.body_deferred_ || !connected_ || closed_ || stream.let_go_ || stream.id_ <= 0 ||
      !session_) {
    return;
  }
  stream.body_deferred_ = false;
  nghttp2_session_resume_data(session_.get(), stream.id_);
  flush();
}

void Http2ClientSession::letGo(Http2ClientStream& stream, bool reset) {
  if (stream.let_go_) return;
  stream.let_go_ = true;
  stream.callbacks_ = nullptr;
  const bool request_sent = stream.body_ == nullptr ||
                            (stream.body_->complete() && stream.body_sent_ == stream.body_->size());
  stream.body_ = nullptr;
  stream.head_pending_ = false;
  if (!stream.held_.empty()) {
    // Never handed over: give the connection window back.
    if (session_) nghttp2_session_consume_connection(session_.get(), stream.held_.size());
    stream.held_.clear();
  }
  if (stream.id_ > 0 && !stream.h2_closed_ && session_ && !closed_) {
    nghttp2_session_set_stream_user_data(session_.get(), stream.id_, nullptr);
    // A stream whose response ended and whose request was all sent closes by
    // itself; anything else still open is torn down, with CANCEL when the
    // holder gave up (RFC 9113 §8.7) and NO_ERROR when it simply stopped
    // sending a body the upstream no longer needs.
    if (!(stream.ended_ && request_sent)) {
      nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, stream.id_,
                                reset ? NGHTTP2_CANCEL : NGHTTP2_NO_ERROR);
    }
    stream.h2_closed_ = true;  // no more callbacks reach it
    flush();
  }
  forget(stream);
}

void Http2ClientSession::forget(Http2ClientStream& stream) {
  auto it = streams_.find(&stream);
  if (it == streams_.end()) return;
  // The stream may be on the stack (its own release()): delete it later.
  dispatcher_.deferredDelete(std::move(it->second));
  streams_.erase(it);
  maybeRetire();
}

void Http2ClientSession::deliverHeld(Http2ClientStream& stream) {
  if (stream.head_pending_) return;  // reportPendingHeads delivers it, after the read
  while (!stream.paused_ && !stream.let_go_ && !stream.held_.empty()) {
    std::string chunk;
    chunk.swap(stream.held_);
    if (session_ && !closed_) {
      nghttp2_session_consume(session_.get(), stream.id_, chunk.size());
    }
    if (stream.callbacks_ != nullptr) stream.callbacks_->onUpstreamData(chunk.data(), chunk.size());
  }
  if (!stream.paused_ && !stream.let_go_ && stream.end_held_) {
    stream.end_held_ = false;
    endStream(stream);
  }
  flush();
}

void Http2ClientSession::reportHead(Http2ClientStream& stream, bool end_stream) {
  if (!stream.head_received_ || stream.head_reported_) return;
  stream.head_reported_ = true;
  ResponseHead head = std::move(stream.head_);
  stream.head_ = ResponseHead{};
  if (stream.callbacks_ != nullptr)
    stream.callbacks_->onUpstreamHeaders(std::move(head), end_stream);
}

void Http2ClientSession::endStream(Http2ClientStream& stream) {
  if (stream.ended_) return;
  stream.ended_ = true;
  if (stream.trailers_ != nullptr && stream.callbacks_ != nullptr) {
    const std::unique_ptr<HeaderMap> trailers = std::move(stream.trailers_);
    stream.callbacks_->onUpstreamTrailers(std::move(*trailers));
  }
  if (stream.callbacks_ != nullptr) stream.callbacks_->onUpstreamComplete();
}

void Http2ClientSession::reportPendingHeads() {
  std::vector<Http2ClientStream*> pending;
  pending.swap(pending_heads_);
  for (Http2ClientStream* s : pending) {
    // A stream let go meanwhile is still allocated (deferred delete) but no longer ours.
    if (streams_.count(s) == 0 || !s->head_pending_) continue;
    s->head_pending_ = false;
    if (s->let_go_ || s->ended_) continue;
    reportHead(*s, /*end_stream=*/false);  // its DATA waits in held_
    if (streams_.count(s) != 0) deliverHeld(*s);
  }
}

void Http2ClientSession::dropPendingHead(Http2ClientStream& stream) {
  if (!stream.head_pending_) return;
  stream.head_pending_ = false;
  if (session_ && !closed_ && !stream.held_.empty()) {
    nghttp2_session_consume_connection(session_.get(), stream.held_.size());
  }
  stream.held_.clear();
  stream.end_held_ = false;
}

Http2ClientStream* Http2ClientSession::streamFor(int32_t stream_id) const {
  if (!session_) return nullptr;
  return static_cast<Http2ClientStream*>(
      nghttp2_session_get_stream_user_data(session_.get(), stream_id));
}

// --- I/O -------------------------------------------------------------------------------------

void Http2ClientSession::flush() {
  if (in_io_ || closed_ || !bev_ || !session_) return;
  evbuffer* out = bufferevent_get_output(bev_.get());
  in_io_ = true;
  // Stop at a few hundred KiB in the socket buffer; onWriteCb resumes.
  while (evbuffer_get_length(out) < 256 * 1024) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_.get(), &data);
    if (n < 0) {
      in_io_ = false;
      failAll(UpstreamError::Protocol,
              std::string("HTTP/2 send: ") + nghttp2_strerror(static_cast<int>(n)));
      return;
    }
    if (n == 0) break;
    evbuffer_add(out, data, static_cast<size_t>(n));
  }
  in_io_ = false;
  maybeRetire();
}

void Http2ClientSession::onReadCb(bufferevent*, void* arg) {
  const EventTimeScope event_time;
  static_cast<Http2ClientSession*>(arg)->onRead();
}

void Http2ClientSession::onWriteCb(bufferevent*, void* arg) {
  const EventTimeScope event_time;
  static_cast<Http2ClientSession*>(arg)->flush();
}

void Http2ClientSession::onEventCb(bufferevent*, short events, void* arg) {
  const EventTimeScope event_time;
  static_cast<Http2ClientSession*>(arg)->onEvent(events);
}

void Http2ClientSession::onRead() {
  if (closed_ || !bev_) return;
  evbuffer* input = bufferevent_get_input(bev_.get());
  in_io_ = true;
  while (!closed_ && evbuffer_get_length(input) > 0) {
    evbuffer_iovec vec;
    if (evbuffer_peek(input, -1, nullptr, &vec, 1) < 1) break;
    const ssize_t n = nghttp2_session_mem_recv(
        session_.get(), static_cast<const uint8_t*>(vec.iov_base), vec.iov_len);
    if (closed_) break;
    if (n < 0) {
      in_io_ = false;
      failAll(UpstreamError::Protocol, std::string("invalid HTTP/2 from upstream: ") +
                                           nghttp2_strerror(static_cast<int>(n)));
      return;
    }
    evbuffer_drain(input, static_cast<size_t>(n));
  }
  in_io_ = false;
  if (closed_) return;
  if (!pending_heads_.empty()) reportPendingHeads();  // the whole read parsed cleanly
  if (closed_) return;
  flush();
}

void Http2ClientSession::onEvent(short events) {
  if (closed_) return;
  if (events & BEV_EVENT_CONNECTED) {
    if (require_alpn_h2_ && negotiatedAlpn(bev_.get()) != "h2") {
      alpn_refused_ = true;
      failAll(UpstreamError::ConnectError,
              "upstream " + url_.authority() + " did not negotiate HTTP/2 (ALPN)");
      return;
    }
    onConnected();
    return;
  }
  if (!(events & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
  if (!connected_) {
    failAll(UpstreamError::ConnectError, connectFailureDetail(bev_.get(), url_));
    return;
  }
  onRead();  // whatever arrived with the FIN (a GOAWAY, final DATA) first
  if (closed_) return;
  failAll(UpstreamError::Reset, "upstream closed the HTTP/2 connection");
}

void Http2ClientSession::onConnected() {
  connected_ = true;
  flush();
  // Copy: a callback may end streams (and erase them from the map).
  std::vector<Http2ClientStream*> waiting;
  for (auto& [raw, stream] : streams_) waiting.push_back(raw);
  for (Http2ClientStream* s : waiting) {
    if (streams_.count(s) == 0 || s->ended_ || s->id_ < 0) continue;
    if (s->callbacks_ != nullptr) s->callbacks_->onUpstreamConnected();
    if (streams_.count(s) != 0) resumeBody(*s);  // bodies wait for the connection
  }
  if (streams_.empty()) armPing();
}

void Http2ClientSession::close(const std::string& why) {
  if (closed_) return;
  failAll(UpstreamError::Reset, why);
}

void Http2ClientSession::failAll(UpstreamError error, const std::string& detail) {
  if (closed_) return;
  closed_ = true;
  ping_timer_.disarm();
  if (bev_) {
    const evutil_socket_t fd = bufferevent_getfd(bev_.get());
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // the upstream sees the close at once
    bufferevent_setcb(bev_.get(), nullptr, nullptr, nullptr, nullptr);
    bev_.reset();
  }
  pending_heads_.clear();  // their streams fail below, before anything was reported
  // A stream the peer never saw (GOAWAY'd, or not yet written) was not processed.
  std::vector<Http2ClientStream*> open;
  for (auto& [raw, stream] : streams_) open.push_back(raw);
  for (Http2ClientStream* s : open) {
    if (streams_.count(s) == 0 || s->ended_ || s->let_go_) continue;
    s->ended_ = true;
    s->h2_closed_ = true;
    s->head_pending_ = false;
    s->held_.clear();
    if (UpstreamCallbacks* cb = s->callbacks_) {
      const bool refused = error == UpstreamError::Reset && goaway_ && s->id_ > goaway_last_stream_;
      cb->onUpstreamError(refused ? UpstreamError::Refused : error, detail);
    }
  }
  pool_.onSessionClosed(this);
}

void Http2ClientSession::drain() {
  draining_ = true;
  maybeRetire();
}

void Http2ClientSession::maybeRetire() {
  if (closed_ || in_io_) return;
  if (streams_.empty()) {
    if (goaway_ || draining_) {
      close(goaway_ ? "upstream sent GOAWAY" : "retired by a config reload");
      return;
    }
    if (!ping_timer_.armed()) armPing();
  }
}

void Http2ClientSession::armPing() {
  ping_timer_.arm(ping_outstanding_
                      ? std::chrono::duration_cast<std::chrono::nanoseconds>(kPingTimeout)
                      : std::chrono::duration_cast<std::chrono::nanoseconds>(kIdlePingInterval));
}

void Http2ClientSession::onPingTimer() {
  if (closed_) return;
  if (ping_outstanding_) {
    close("upstream did not answer an HTTP/2 PING within " + std::to_string(kPingTimeout.count()) +
          "s");
    return;
  }
  if (!streams_.empty()) return;  // busy: traffic proves liveness
  ping_outstanding_ = true;
  nghttp2_submit_ping(session_.get(), NGHTTP2_FLAG_NONE, nullptr);
  flush();
  armPing();
}

// --- nghttp2 callbacks -------------------------------------------------------------------------

int Http2ClientSession::onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<Http2ClientSession*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  Http2ClientStream* s = self->streamFor(frame->hd.stream_id);
  if (s != nullptr && !s->head_received_) s->head_ = ResponseHead{};  // a 1xx went before
  return 0;
}

int Http2ClientSession::onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                                 size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                                 void* user) {
  auto* self = static_cast<Http2ClientSession*>(user);
  Http2ClientStream* s = self->streamFor(frame->hd.stream_id);
  if (s == nullptr) return 0;
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  if (s->head_received_) {
    // The trailer section (nghttp2 refused pseudo-headers in it): kept apart
    // from the head, reported as trailers when the stream ends.
    if (s->trailers_ == nullptr) s->trailers_ = std::make_unique<HeaderMap>();
    s->trailers_->addLowerCase(n, v);
    return 0;
  }
  if (n == ":status") {
    int status = 0;
    for (char c : v) status = status * 10 + (c - '0');  // nghttp2 validated 3 digits
    s->head_.status = status;
    return 0;
  }
  if (!n.empty() && n[0] == ':') return 0;
  s->head_.headers.add(std::string(n), std::string(v));
  return 0;
}

int Http2ClientSession::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<Http2ClientSession*>(user);
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS: {
      Http2ClientStream* s = self->streamFor(frame->hd.stream_id);
      if (s == nullptr || s->ended_) return 0;
      const bool end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
      if (!s->head_received_) {
        if (s->head_.status >= 100 && s->head_.status < 200) return 0;  // interim
        s->head_received_ = true;
      }
      if (end && s->head_pending_) {
        s->end_held_ = true;  // ends once its head and DATA are reported (reportPendingHeads)
        return 0;
      }
      if (end) {
        self->reportHead(*s, /*end_stream=*/true);  // no body byte came: it ends here
        if (s->let_go_) return 0;
        if (s->paused_ && !s->held_.empty()) {
          s->end_held_ = true;
        } else {
          self->endStream(*s);
        }
      }
      return 0;
    }
    case NGHTTP2_DATA: {
      Http2ClientStream* s = self->streamFor(frame->hd.stream_id);
      if (s == nullptr || s->ended_ || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
      if (s->head_pending_) {
        s->end_held_ = true;  // ends once its head and DATA are reported (reportPendingHeads)
        return 0;
      }
      self->reportHead(*s, /*end_stream=*/true);  // every DATA frame was empty
      if (s->let_go_) return 0;
      if (s->paused_ && !s->held_.empty()) {
        s->end_held_ = true;
      } else {
        self->endStream(*s);
      }
      return 0;
    }
    case NGHTTP2_GOAWAY:
      self->goaway_ = true;
      self->goaway_last_stream_ = frame->goaway.last_stream_id;
      return 0;
    case NGHTTP2_PING:
      if (frame->hd.flags & NGHTTP2_FLAG_ACK) {
        self->ping_outstanding_ = false;
        if (self->streams_.empty()) self->armPing();
      }
      return 0;
    default:
      return 0;
  }
}

int Http2ClientSession::onDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id,
                                    const uint8_t* data, size_t len, void* user) {
  auto* self = static_cast<Http2ClientSession*>(user);
  Http2ClientStream* s = self->streamFor(stream_id);
  if (s != nullptr && !s->let_go_ && !s->ended_ && len > 0 && !s->head_reported_ &&
      !s->head_pending_ && s->head_received_) {
    // The first body byte commits the head, once the rest of this read
    // parsed: a RST_STREAM or GOAWAY behind it still fails the attempt.
    s->head_pending_ = true;
    self->pending_heads_.push_back(s);
  }
  if (s == nullptr || s->let_go_ || s->ended_) {
    nghttp2_session_consume(session, stream_id, len);  // nobody wants it: keep the window open
    return 0;
  }
  if (s->paused_ || s->head_pending_) {
    s->held_.append(reinterpret_cast<const char*>(data), len);  // bounded by kStreamWindow
    return 0;
  }
  nghttp2_session_consume(session, stream_id, len);
  if (s->callbacks_ != nullptr) {
    s->callbacks_->onUpstreamData(reinterpret_cast<const char*>(data), len);
  }
  return 0;
}

int Http2ClientSession::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                                      void* user) {
  auto* self = static_cast<Http2ClientSession*>(user);
  Http2ClientStream* s = self->streamFor(stream_id);
  if (s == nullptr) return 0;
  s->h2_closed_ = true;
  if (s->ended_ || s->end_held_) return 0;
  s->ended_ = true;
  self->dropPendingHead(*s);  // broke in the read that carried its head: nothing was reported
  if (s->callbacks_ == nullptr) return 0;
  const bool refused = error_code == NGHTTP2_REFUSED_STREAM ||
                       (self->goaway_ && stream_id > self->goaway_last_stream_);
  if (refused) {
    s->callbacks_->onUpstreamError(UpstreamError::Refused,
                                   "upstream refused the HTTP/2 stream (nothing was processed)");
  } else {
    s->callbacks_->onUpstreamError(
        UpstreamError::Reset,
        std::string("upstream reset the HTTP/2 stream: ") + nghttp2_http2_strerror(error_code));
  }
  return 0;
}

}  // namespace sluice
