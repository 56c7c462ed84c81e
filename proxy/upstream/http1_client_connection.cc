#include "proxy/upstream/http1_client_connection.h"

#include <arpa/inet.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <charconv>
#include <cstdio>

#include "common/http_message.h"
#include "proxy/event/tls.h"
#include "proxy/http/http1_head_writer.h"
#include "proxy/upstream/upstream_pool.h"

namespace sluice {

std::string_view toString(UpstreamError e) {
  switch (e) {
    case UpstreamError::ConnectError:
      return "connect_error";
    case UpstreamError::Reset:
      return "reset";
    case UpstreamError::Protocol:
      return "protocol_error";
    case UpstreamError::Refused:
      return "refused";
  }
  return "reset";
}

BufferEventPtr connectUpstream(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                               const config::UpstreamUrl& url, SSL_CTX* ssl_ctx) {
  return connectClient(dispatcher, url.host, url.port, ssl_ctx, upstream.tls);
}

std::string upstreamTlsFailure(bufferevent* bev) {
  if (bev == nullptr) return "";
  SSL* ssl = bufferevent_openssl_get_ssl(bev);
  if (ssl == nullptr) return "";
  std::string out;
  // libevent moves OpenSSL's errors off the thread's queue into the bufferevent.
  while (const unsigned long err = bufferevent_get_openssl_error(bev)) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    if (!out.empty()) out += "; ";
    out += std::string("certificate verification failed: ") + X509_verify_cert_error_string(verify);
  }
  return out.empty() ? lastSslError() : out;
}

std::string connectFailureDetail(bufferevent* bev, const config::UpstreamUrl& url) {
  std::string detail = "connect to " + url.authority() + " failed";
  if (bev == nullptr) return detail;
  if (const int dns_err = bufferevent_socket_get_dns_error(bev); dns_err != 0) {
    detail += ": " + std::string(evutil_gai_strerror(dns_err));
  } else if (const std::string ssl = upstreamTlsFailure(bev); !ssl.empty()) {
    detail += ": TLS: " + ssl;
  } else if (EVUTIL_SOCKET_ERROR() != 0) {
    detail += ": " + std::string(evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  }
  return detail;
}

std::string_view negotiatedAlpn(bufferevent* bev) {
  SSL* ssl = bev != nullptr ? bufferevent_openssl_get_ssl(bev) : nullptr;
  if (ssl == nullptr) return "";
  const unsigned char* proto = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &proto, &len);
  return std::string_view(reinterpret_cast<const char*>(proto), proto != nullptr ? len : 0);
}

Http1ClientConnection::Http1ClientConnection(Dispatcher& dispatcher,
                                             const config::UpstreamConfig& upstream,
                                             const config::UpstreamUrl& url, SSL_CTX* ssl_ctx,
                                             UpstreamPool& pool, uint64_t id, bool negotiating)
    : dispatcher_(dispatcher),
      upstream_(upstream),
      url_(url),
      pool_(pool),
      id_(id),
      negotiating_(negotiating) {
  parser_ = newLlhttp();  // started anew for each response (sendRequest)
  llhttp_init(parser_.get(), HTTP_RESPONSE, &parserSettings());

  BufferEventPtr bev = connectUpstream(dispatcher, upstream, url, ssl_ctx);
  if (!bev) {
    // Reported to the holder on sendRequest (connect_error), never synchronously here.
    closed_ = true;
    return;
  }
  // On its bufferevent until connected (onIoEvent), then a plain socket leaves it.
  io_ = std::make_unique<SocketIo>(dispatcher.base(), std::move(bev),
                                   static_cast<SocketIoCallbacks&>(*this),
                                   &dispatcher.writeFlusher());
  // The write callback fires once the socket drained to the low watermark: more body.
  io_->setWriteLowWatermark(kOutputLowWatermark);
}

Http1ClientConnection::~Http1ClientConnection() = default;

const llhttp_settings_t& Http1ClientConnection::parserSettings() {
  static const llhttp_settings_t settings = [] {
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_status = &Http1ClientConnection::onStatus;
    s.on_header_field = &Http1ClientConnection::onHeaderField;
    s.on_header_field_complete = &Http1ClientConnection::onHeaderFieldComplete;
    s.on_header_value = &Http1ClientConnection::onHeaderValue;
    s.on_headers_complete = &Http1ClientConnection::onHeadersComplete;
    s.on_body = &Http1ClientConnection::onBody;
    s.on_message_complete = &Http1ClientConnection::onMessageComplete;
    return s;
  }();
  return settings;
}

void Http1ClientConnection::sendRequest(const RequestHead& head, RequestBody& body,
                                        UpstreamCallbacks* callbacks) {
  callbacks_ = callbacks;
  idle_ = false;
  reusable_ = false;
  message_done_ = false;
  dropHeldHead();
  // Every per-message parser state starts anew: nothing of the last response
  // (a trailer field still pending, say) may reach this one's head.
  head_ = ResponseHead{};
  header_fields_.reset();
  trailers_.clear();
  interim_ = false;
  awaiting_response_ = true;
  head_request_ = head.method == "HEAD";
  body_ = &body;
  body_sent_ = 0;
  chunked_request_ = false;
  request_written_ = false;
  ++request_count_;
  if (closed_ || !io_) {
    fail(UpstreamError::ConnectError, "cannot connect to " + url_.authority());
    return;
  }
  llhttp_init(parser_.get(), HTTP_RESPONSE, &parserSettings());
  parser_->data = this;
  // HTTP/1.x with any minor version is read as HTTP/1.1 (RFC 9112 §2.3), as
  // http-parser did; llhttp alone refuses anything but 0.9, 1.0, 1.1, 2 and 3.
  parser_->lenient_flags |= LENIENT_VERSION;
  head_bytes_ = 0;
  field_name_bytes_ = 0;

  Http1HeadWriter out;
  out.add(head.method);
  out.add(" ");
  out.add(head.path);
  out.add(" HTTP/1.1\r\n");
  for (const auto& [name, value] : head.headers) out.addField(name, value);
  if (const auto length = upstreamContentLength(head.method, body)) {
    char digits[24];
    const auto written = std::to_chars(digits, digits + sizeof(digits), *length);
    out.addField("content-length", std::string_view(digits, written.ptr - digits));
  } else if (!body.complete()) {
    chunked_request_ = true;  // a streamed body of unknown length
    out.add("transfer-encoding: chunked\r\n");
  }
  out.add("\r\n");
  evbuffer_add(io_->output(), out.data(), out.size());
  if (connected_ && callbacks_ != nullptr) {
    // A pooled connection is already up: report it so the attempt's
    // connect timer stops the same way as for a fresh connection.
    callbacks_->onUpstreamConnected();
  }
  writeBody();
}

void Http1ClientConnection::writeBody() {
  // Not before the connection is up: a connect error must leave a streamed
  // body untouched, so the attempt can still be retried.
  if (body_ == nullptr || request_written_ || !connected_ || closed_ || !io_) return;
  evbuffer* output = io_->output();
  const uint64_t before = body_sent_;
  while (evbuffer_get_length(output) < kOutputHighWatermark) {
    std::string_view piece = body_->peek(body_sent_);
    if (piece.empty()) break;
    piece = piece.substr(0, kOutputHighWatermark - evbuffer_get_length(output));
    if (chunked_request_) {
      char size_line[32];
      const int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
      evbuffer_add(output, size_line, static_cast<size_t>(n));
      evbuffer_add(output, piece.data(), piece.size());
      evbuffer_add(output, "\r\n", 2);
    } else {
      evbuffer_add(output, piece.data(), piece.size());
    }
    body_sent_ += piece.size();
  }
  if (body_->complete() && body_sent_ == body_->size()) {
    if (chunked_request_) evbuffer_add(output, "0\r\n\r\n", 5);
    request_written_ = true;
  }
  if (body_sent_ != before && callbacks_ != nullptr) callbacks_->onUpstreamBodySent(body_sent_);
}

bool Http1ClientConnection::requestFlushed() const {
  return request_written_ && io_ && evbuffer_get_length(io_->output()) == 0;
}

void Http1ClientConnection::pauseReading() {
  if (io_ && !closed_) io_->disableRead();
}

void Http1ClientConnection::resumeReading() {
  if (io_ && !closed_) io_->enableRead();
}

void Http1ClientConnection::close() {
  if (closed_) return;
  closed_ = true;
  callbacks_ = nullptr;
  body_ = nullptr;
  if (io_) {
    const evutil_socket_t fd = io_->fd();
    // shutdown() sends the FIN now, whatever libevent's deferred machinery
    // does with the bufferevent: the upstream must see the close at once.
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    io_.reset();
  }
}

void Http1ClientConnection::markIdle() {
  idle_ = true;
  callbacks_ = nullptr;
  body_ = nullptr;
  if (io_) io_->enableRead();
}

void Http1ClientConnection::release() { pool_.release(this); }

void Http1ClientConnection::reset() { pool_.destroy(this); }

BufferEventPtr Http1ClientConnection::takeBufferEvent() {
  closed_ = true;
  callbacks_ = nullptr;
  body_ = nullptr;
  BufferEventPtr bev = io_ ? io_->takeBufferEvent() : nullptr;
  io_.reset();
  return bev;
}

void Http1ClientConnection::fail(UpstreamError error, const std::string& detail) {
  if (negotiating_) {
    negotiating_ = false;
    pool_.onNegotiationFailed(this, detail);  // fails the streams that waited for it
    return;
  }
  UpstreamCallbacks* cb = callbacks_;
  callbacks_ = nullptr;
  awaiting_response_ = false;
  reusable_ = false;
  dropHeldHead();  // never reported: the attempt failed before its response started
  if (cb != nullptr) {
    cb->onUpstreamError(error, detail);  // the holder destroys us through the pool
  } else {
    pool_.destroy(this);
  }
}

void Http1ClientConnection::onIoRead() {
  if (closed_ || !io_) return;
  evbuffer* input = io_->input();
  if (idle_ || !awaiting_response_) {
    // Bytes on an idle connection are a protocol violation: never reuse it.
    evbuffer_drain(input, evbuffer_get_length(input));
    fail(UpstreamError::Protocol, "unexpected bytes from upstream on an idle connection");
    return;
  }
  // Feed the parser straight from libevent's chunks (no copy), draining what it consumed.
  while (!closed_ && awaiting_response_ && evbuffer_get_length(input) > 0) {
    evbuffer_iovec vec;
    if (evbuffer_peek(input, -1, nullptr, &vec, 1) < 1) break;
    const size_t len = vec.iov_len;
    const char* data = static_cast<const char*>(vec.iov_base);
    const llhttp_errno_t err = llhttp_execute(parser_.get(), data, len);
    if (closed_) {             // a callback tore us down
      header_fields_.reset();  // drops what the header callbacks borrowed, unread
      return;
    }
    header_fields_.keepBorrowed();  // the header callbacks borrowed from `data`, soon drained
    if (err == HPE_PAUSED) {
      evbuffer_drain(input, static_cast<size_t>(llhttp_get_error_pos(parser_.get()) - data));
      llhttp_resume(parser_.get());
      // Response complete. Anything left over means the upstream is confused.
      if (evbuffer_get_length(input) > 0) reusable_ = false;
      break;
    }
    if (err != HPE_OK) {
      fail(UpstreamError::Protocol, std::string("invalid HTTP response from upstream: ") +
                                        llhttp_get_error_reason(parser_.get()));
      return;
    }
    evbuffer_drain(input, len);
  }
  reportHeldHead();  // the whole read parsed cleanly
  if (closed_) return;
  if (message_done_) {
    message_done_ = false;
    if (!trailers_.empty() && callbacks_ != nullptr) {
      HeaderMap trailers = std::move(trailers_);
      trailers_.clear();
      callbacks_->onUpstreamTrailers(std::move(trailers));
      if (closed_) return;
    }
    UpstreamCallbacks* cb = callbacks_;
    callbacks_ = nullptr;
    if (cb != nullptr) cb->onUpstreamComplete();  // the holder releases or destroys us
  }
}

void Http1ClientConnection::onIoEvent(short events) {
  if (closed_) return;
  if (events & BEV_EVENT_CONNECTED) {
    connected_ = true;
    // Requests and SSE events are small writes whose latency matters: no
    // Nagle delay behind an unacknowledged segment (nginx does the same for
    // upstream keep-alive connections; downstream sockets have it already).
    if (const evutil_socket_t fd = io_->fd(); fd >= 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    io_->useSocketIfPlain();  // plain TCP: off the bufferevent from here on
    if (negotiating_) {
      negotiating_ = false;
      reusable_ = true;  // up and unused: the pool may hand it out
      pool_.onNegotiated(this, negotiatedAlpn(io_->bufferEvent()) == "h2");  // may take our socket
      return;
    }
    if (callbacks_ != nullptr) callbacks_->onUpstreamConnected();
    writeBody();
    return;
  }
  if (!(events & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;

  if (!connected_) {
    fail(UpstreamError::ConnectError, connectFailureDetail(io_->bufferEvent(), url_));
    return;
  }
  if (awaiting_response_ && (events & BEV_EVENT_EOF)) {
    // EOF may legitimately end a close-delimited body: tell the parser.
    onIoRead();  // drain whatever arrived with the FIN first
    if (closed_ || !awaiting_response_) return;
    llhttp_finish(parser_.get());  // completes a close-delimited body; else an error
    if (closed_) return;
    if (message_done_) {
      message_done_ = false;
      reusable_ = false;
      UpstreamCallbacks* cb = callbacks_;
      callbacks_ = nullptr;
      if (cb != nullptr) cb->onUpstreamComplete();
      return;
    }
  }
  if (awaiting_response_) {
    fail(UpstreamError::Reset, "upstream closed the connection mid-response");
  } else {
    pool_.destroy(this);  // idle connection closed by the upstream
  }
}

bool Http1ClientConnection::countHeadBytes(size_t len) {
  head_bytes_ += len;
  if (head_bytes_ <= kMaxHeadBytes) return true;
  fail(UpstreamError::Protocol, "invalid HTTP response from upstream: header overflow (more than " +
                                    std::to_string(kMaxHeadBytes) + " bytes)");
  return false;
}

int Http1ClientConnection::onStatus(llhttp_t* p, const char*, size_t len) {
  auto* self = static_cast<Http1ClientConnection*>(p->data);
  return self->countHeadBytes(len) ? 0 : -1;
}

int Http1ClientConnection::onHeaderField(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<Http1ClientConnection*>(p->data);
  if (!self->countHeadBytes(len)) return -1;
  // After the last chunk the fields are trailers (RFC 9110 §6.5): never the head's.
  self->header_fields_.flush((p->flags & F_TRAILING) ? self->trailers_ : self->head_.headers);
  self->header_fields_.borrowField({at, len});
  self->field_name_bytes_ += len;
  return 0;
}

int Http1ClientConnection::onHeaderFieldComplete(llhttp_t* p) {
  auto* self = static_cast<Http1ClientConnection*>(p->data);
  // ": value" — llhttp 8.1 takes it as a field with an empty name; http-parser refused it.
  if (self->field_name_bytes_ == 0) {
    self->fail(UpstreamError::Protocol,
               "invalid HTTP response from upstream: a header field without a name");
    return -1;
  }
  self->field_name_bytes_ = 0;
  return 0;
}

int Http1ClientConnection::onHeaderValue(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<Http1ClientConnection*>(p->data);
  if (!self->countHeadBytes(len)) return -1;
  self->header_fields_.borrowValue({at, len});
  return 0;
}

int Http1ClientConnection::onHeadersComplete(llhttp_t* p) {
  auto* self = static_cast<Http1ClientConnection*>(p->data);
  self->head_bytes_ = 0;  // the next head (after a 1xx) or the trailer section counts anew
  self->header_fields_.flush(self->head_.headers);
  self->head_.status = static_cast<int>(p->status_code);
  if (p->status_code == 101) {
    // sluice never forwards an upgrade offer (Upgrade is hop-by-hop), so a
    // 101 answers a question nobody asked: the bytes after it are not HTTP.
    self->fail(UpstreamError::Protocol,
               "upstream answered 101 Switching Protocols to a request that did not ask to "
               "upgrade");
    return -1;
  }
  if (p->status_code >= 100 && p->status_code < 200) {
    self->interim_ = true;  // 100 Continue & co: swallowed
    self->head_ = ResponseHead{};
    return 0;
  }
  const bool no_body = !mayHaveBody(self->head_request_, p->status_code);
  const bool end_stream = no_body || (!(p->flags & F_CHUNKED) && p->content_length == 0);
  // Held (in head_) until the rest of this read parsed (reportHeldHead).
  self->head_held_ = true;
  self->held_end_stream_ = end_stream;
  self->held_body_.clear();
  return no_body ? 1 : 0;  // 1 = skip the body (HEAD)
}

int Http1ClientConnection::onBody(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<Http1ClientConnection*>(p->data);
  if (self->head_held_) {
    self->held_body_.append(at, len);
    if (self->held_body_.size() > kMaxHeldBodyInRead) self->reportHeldHead();
  } else if (self->callbacks_ != nullptr) {
    self->callbacks_->onUpstreamData(at, len);
  }
  return self->closed_ ? -1 : 0;  // abort parsing: we were torn down
}

void Http1ClientConnection::dropHeldHead() {
  if (head_held_) {
    head_held_ = false;
    head_ = ResponseHead{};
  }
  held_body_.clear();
}

void Http1ClientConnection::reportHeldHead() {
  if (!head_held_) return;
  head_held_ = false;
  ResponseHead head = std::move(head_);
  head_ = ResponseHead{};
  std::string body;
  body.swap(held_body_);
  if (callbacks_ != nullptr) callbacks_->onUpstreamHeaders(std::move(head), held_end_stream_);
  if (!closed_ && !body.empty() && callbacks_ != nullptr) {
    callbacks_->onUpstreamData(body.data(), body.size());
  }
}

int Http1ClientConnection::onMessageComplete(llhttp_t* p) {
  auto* self = static_cast<Http1ClientConnection*>(p->data);
  if (self->interim_) {
    self->interim_ = false;
    return 0;
  }
  if (p->flags & F_TRAILING) self->header_fields_.flush(self->trailers_);  // the last trailer
  // An upstream that answered before it had the whole request (it did not
  // read a big body, say) must not get the next request behind the rest.
  self->reusable_ = llhttp_should_keep_alive(p) != 0 && self->requestFlushed();
  self->awaiting_response_ = false;
  self->message_done_ = true;
  return HPE_PAUSED;  // onIoRead takes it from here
}

}  // namespace sluice
