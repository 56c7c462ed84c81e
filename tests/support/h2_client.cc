#include "tests/support/h2_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace sluice::test {

namespace {

nghttp2_nv makeNv(const std::string& name, const std::string& value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

bool waitFd(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd pfd{fd, events, 0};
  return ::poll(&pfd, 1, static_cast<int>(timeout.count())) > 0;
}

}  // namespace

H2Connection::H2Connection(uint16_t port, H2ClientOptions options)
    : options_(std::move(options)), port_(port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (options_.receive_buffer > 0) {
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &options_.receive_buffer,
               sizeof(options_.receive_buffer));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "connect to 127.0.0.1:" << port << " failed: " << strerror(errno);
    ::close(fd_);
    fd_ = -1;
    return;
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  if (options_.tls) {
    ssl_ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ssl_ctx_, SSL_VERIFY_NONE, nullptr);  // throwaway test certificates
    if (!options_.alpn.empty()) {
      std::string wire;
      for (const auto& p : options_.alpn) {
        wire.push_back(static_cast<char>(p.size()));
        wire += p;
      }
      SSL_CTX_set_alpn_protos(ssl_ctx_, reinterpret_cast<const unsigned char*>(wire.data()),
                              static_cast<unsigned int>(wire.size()));
    }
    ssl_ = SSL_new(ssl_ctx_);
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1) {  // blocking: the socket is still blocking here
      char buf[256];
      ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
      ADD_FAILURE() << "TLS handshake with 127.0.0.1:" << port << " failed: " << buf;
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);

  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &H2Connection::onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &H2Connection::onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks,
                                                            &H2Connection::onDataChunkRecv);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &H2Connection::onStreamClose);
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_no_auto_window_update(option, options_.manual_window ? 1 : 0);
  // Tests send oversized header lists on purpose: let them leave this client.
  nghttp2_option_set_max_send_header_block_length(option, 1 << 20);
  nghttp2_option_set_peer_max_concurrent_streams(option, options_.assumed_peer_max_streams);
  nghttp2_session_client_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);

  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(options_.initial_window)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 2);
  if (options_.connection_window > 0) {
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                          options_.connection_window);
  }
}

H2Connection::~H2Connection() {
  if (session_ != nullptr) nghttp2_session_del(session_);
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
  if (fd_ >= 0) ::close(fd_);
}

std::string H2Connection::alpn() const {
  if (ssl_ == nullptr) return "";
  const unsigned char* proto = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &proto, &len);
  return proto == nullptr ? "" : std::string(reinterpret_cast<const char*>(proto), len);
}

std::string H2Connection::peerCommonName() const {
  if (ssl_ == nullptr) return "";
  X509* cert = SSL_get1_peer_certificate(ssl_);
  if (cert == nullptr) return "";
  char cn[256] = "";
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  X509_free(cert);
  return cn;
}

int32_t H2Connection::submit(const std::string& method, const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& headers,
                             std::string body) {
  return submitWith(method, path, headers, std::move(body), std::nullopt, false);
}

int32_t H2Connection::submitStalled(const std::string& path, std::string sent,
                                    size_t declared_length) {
  return submitWith("POST", path, {}, std::move(sent), declared_length, true);
}

int32_t H2Connection::submitWith(const std::string& method, const std::string& path,
                                 const std::vector<std::pair<std::string, std::string>>& headers,
                                 std::string body, std::optional<size_t> declared_length,
                                 bool stall) {
  if (!connected()) return -1;
  const std::string scheme = options_.tls ? "https" : "http";
  const std::string authority = "127.0.0.1:" + std::to_string(port_);
  const std::string m = ":method", s = ":scheme", a = ":authority", p = ":path";
  std::vector<std::string> lower;  // nghttp2 wants lower-case names
  lower.reserve(headers.size());
  for (const auto& [name, value] : headers) lower.push_back(toLower(name));
  std::vector<nghttp2_nv> nv{makeNv(m, method), makeNv(s, scheme), makeNv(a, authority),
                             makeNv(p, path)};
  for (size_t i = 0; i < headers.size(); ++i) nv.push_back(makeNv(lower[i], headers[i].second));
  const std::string length = std::to_string(declared_length.value_or(body.size()));
  const std::string cl = "content-length";
  if (!body.empty() || declared_length) nv.push_back(makeNv(cl, length));

  int32_t id;
  if (body.empty() && !stall && (method == "GET" || method == "HEAD")) {
    id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), nullptr, nullptr);
  } else {
    nghttp2_data_provider provider{};
    provider.read_callback = &H2Connection::onUploadRead;
    id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), &provider, nullptr);
    if (id > 0) {
      uploads_[id].body = std::move(body);
      uploads_[id].stall = stall;
    }
  }
  if (id > 0) responses_[id];
  flush();
  return id;
}

void H2Connection::reset(int32_t stream, uint32_t code) {
  if (!connected()) return;
  responses_[stream].reset_by_us = true;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, code);
  flush();
}

void H2Connection::resetAfter(int32_t stream, size_t bytes) { reset_after_[stream] = bytes; }

void H2Connection::hold(int32_t stream) { held_[stream] = true; }

void H2Connection::release(int32_t stream) {
  held_[stream] = false;
  const size_t unconsumed = unconsumed_[stream];
  unconsumed_[stream] = 0;
  if (unconsumed > 0) nghttp2_session_consume_stream(session_, stream, unconsumed);
  flush();
}

void H2Connection::goaway() {
  if (!connected()) return;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, nullptr, 0);
  flush();
}

void H2Connection::drop() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void H2Connection::abort() {
  if (fd_ >= 0) {
    const linger lg{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  }
  drop();
}

bool H2Connection::writeAll(const uint8_t* data, size_t len) {
  size_t off = 0;
  while (off < len) {
    size_t want = len - off;
    if (first_write_ && options_.first_write_chunk > 0) {
      want = std::min(want, options_.first_write_chunk);
    }
    ssize_t n;
    if (ssl_ != nullptr) {
      n = SSL_write(ssl_, data + off, static_cast<int>(want));
      if (n <= 0) {
        const int err = SSL_get_error(ssl_, static_cast<int>(n));
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
          waitFd(fd_, err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN, std::chrono::seconds(1));
          continue;
        }
        return false;
      }
    } else {
      n = ::send(fd_, data + off, want, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          waitFd(fd_, POLLOUT, std::chrono::seconds(1));
          continue;
        }
        return false;
      }
    }
    off += static_cast<size_t>(n);
  }
  first_write_ = false;
  return true;
}

bool H2Connection::flush() {
  if (!connected()) return false;
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) return false;
    if (n == 0) return true;
    if (!writeAll(data, static_cast<size_t>(n))) return false;
  }
}

bool H2Connection::readOnce(std::chrono::milliseconds timeout) {
  if (!connected() || peer_closed_) return false;
  const bool buffered = ssl_ != nullptr && SSL_pending(ssl_) > 0;
  if (!buffered && !waitFd(fd_, POLLIN, timeout)) return false;
  uint8_t buf[65536];
  ssize_t n;
  if (ssl_ != nullptr) {
    n = SSL_read(ssl_, buf, sizeof(buf));
    if (n <= 0) {
      const int err = SSL_get_error(ssl_, static_cast<int>(n));
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return true;
      peer_closed_ = true;
      return false;
    }
  } else {
    n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      peer_closed_ = true;
      return false;
    }
  }
  if (nghttp2_session_mem_recv(session_, buf, static_cast<size_t>(n)) < 0) {
    peer_closed_ = true;
    return false;
  }
  flush();
  return true;
}

bool H2Connection::runUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  flush();
  while (!done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (!readOnce(std::min(left, std::chrono::milliseconds(100))) && (peer_closed_ || fd_ < 0)) {
      return done();
    }
  }
  return true;
}

bool H2Connection::waitForStream(int32_t stream, std::chrono::milliseconds timeout) {
  return runUntil([&] { return responses_[stream].closed; }, timeout);
}

bool H2Connection::waitForClose(std::chrono::milliseconds timeout) {
  return runUntil([&] { return peer_closed_; }, timeout);
}

// --- nghttp2 callbacks ------------------------------------------------------------------

int H2Connection::onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                           size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                           void* user_data) {
  auto* self = static_cast<H2Connection*>(user_data);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  H2Response& r = self->responses_[frame->hd.stream_id];
  const std::string n(reinterpret_cast<const char*>(name), namelen);
  const std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":status") {
    r.status = std::stoi(v);
  } else if (r.final_head_received) {
    r.trailers.add(n, v);  // after the final head: the trailer section
  } else {
    r.headers.add(n, v);
  }
  return 0;
}

int H2Connection::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  auto* self = static_cast<H2Connection*>(user_data);
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
      self->responses_[frame->hd.stream_id].headers_received = true;
      if (self->responses_[frame->hd.stream_id].status >= 200) {
        self->responses_[frame->hd.stream_id].final_head_received = true;
      }
      [[fallthrough]];
    case NGHTTP2_DATA:
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        self->responses_[frame->hd.stream_id].complete = true;
      }
      break;
    case NGHTTP2_RST_STREAM: {
      H2Response& r = self->responses_[frame->hd.stream_id];
      r.reset_by_peer = true;
      r.error_code = frame->rst_stream.error_code;
      break;
    }
    case NGHTTP2_GOAWAY:
      self->goaway_received_ = true;
      self->goaway_last_stream_id_ = frame->goaway.last_stream_id;
      self->goaway_error_code_ = frame->goaway.error_code;
      break;
    default:
      break;
  }
  return 0;
}

int H2Connection::onDataChunkRecv(nghttp2_session* session, uint8_t, int32_t stream_id,
                                  const uint8_t* data, size_t len, void* user_data) {
  auto* self = static_cast<H2Connection*>(user_data);
  H2Response& r = self->responses_[stream_id];
  r.body.append(reinterpret_cast<const char*>(data), len);
  if (self->options_.manual_window) {
    if (self->held_[stream_id]) {
      nghttp2_session_consume_connection(session, len);  // the stream's own window stays shut
      self->unconsumed_[stream_id] += len;
    } else {
      nghttp2_session_consume(session, stream_id, len);
    }
  }
  auto it = self->reset_after_.find(stream_id);
  if (it != self->reset_after_.end() && r.body.size() >= it->second && !r.reset_by_us) {
    r.reset_by_us = true;
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
  }
  return 0;
}

int H2Connection::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                                void* user_data) {
  auto* self = static_cast<H2Connection*>(user_data);
  H2Response& r = self->responses_[stream_id];
  r.closed = true;
  if (r.error_code == 0) r.error_code = error_code;
  return 0;
}

ssize_t H2Connection::onUploadRead(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                   uint32_t* data_flags, nghttp2_data_source*, void* user_data) {
  auto* self = static_cast<H2Connection*>(user_data);
  Upload& up = self->uploads_[stream_id];
  const size_t n = std::min(length, up.body.size() - up.offset);
  std::memcpy(buf, up.body.data() + up.offset, n);
  up.offset += n;
  if (up.offset == up.body.size()) {
    if (up.stall && n == 0) return NGHTTP2_ERR_DEFERRED;  // never resumed: a stalled upload
    if (!up.stall) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  return static_cast<ssize_t>(n);
}

}  // namespace sluice::test
