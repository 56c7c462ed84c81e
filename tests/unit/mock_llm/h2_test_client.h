#pragma once

// A tiny HTTP/2 client for mock-llm's tests: one nghttp2 client session over a
// non-blocking socket (cleartext h2c with prior knowledge, or TLS with ALPN),
// pumped by run() until a condition holds. It can reset streams, keep its
// receive windows closed (manual flow control) and reports every stream's
// status, headers, body, RST_STREAM code and the server's GOAWAY.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mockllm::test {

/** What the client saw of one stream. */
struct H2Stream {
  int32_t id = 0;
  int status = 0;  // 0: no response HEADERS
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int data_frames = 0;  // non-empty DATA frames received
  bool closed = false;
  uint32_t close_error = 0;              // nghttp2's on_stream_close code
  std::optional<uint32_t> rst_received;  // the server's RST_STREAM code
  bool reset_sent = false;               // reset by this client
  // The request body, served by the data provider.
  std::string request_body;
  size_t request_offset = 0;

  std::optional<std::string> header(const std::string& name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return std::nullopt;
  }
};

/** The GOAWAY frame the server sent. */
struct H2Goaway {
  int32_t last_stream_id = 0;
  uint32_t error_code = 0;
};

/** How an H2Client connects. */
struct H2ClientOptions {
  bool tls = false;
  std::vector<std::string> alpn = {"h2", "http/1.1"};  // offered with TLS
  std::optional<uint32_t> initial_window;              // SETTINGS_INITIAL_WINDOW_SIZE
  bool manual_window = false;  // no automatic WINDOW_UPDATE: call consumeAll()
};

class H2Client {
 public:
  using Options = H2ClientOptions;

  explicit H2Client(uint16_t port, Options options = {}) : port_(port), options_(options) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeval tv{10, 0};  // the blocking TLS handshake fails instead of hanging
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    if (options_.tls && !handshake()) return;
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    connected_ = startSession();
  }

  ~H2Client() {
    if (session_ != nullptr) nghttp2_session_del(session_);
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  H2Client(const H2Client&) = delete;
  H2Client& operator=(const H2Client&) = delete;

  bool connected() const { return connected_; }
  /** The ALPN protocol the server chose ("" without TLS or ALPN). */
  const std::string& alpn() const { return alpn_; }
  /** The connection ended: EOF, a socket or TLS error, or a failed session. */
  bool eof() const { return eof_; }
  const std::optional<H2Goaway>& goaway() const { return goaway_; }
  nghttp2_session* session() { return session_; }

  /** Called for every DATA chunk received (after it was appended to the body). */
  std::function<void(H2Stream&)> on_data;

  /** Submits a request; returns its stream id (negative on error). */
  int32_t submit(const std::string& method, const std::string& path,
                 const std::vector<std::pair<std::string, std::string>>& headers = {},
                 const std::string& body = "") {
    auto stream = std::make_unique<H2Stream>();
    stream->request_body = body;
    const std::string authority = "127.0.0.1:" + std::to_string(port_);
    const std::string scheme = options_.tls ? "https" : "http";
    std::vector<std::pair<std::string, std::string>> fields = {
        {":method", method}, {":path", path}, {":scheme", scheme}, {":authority", authority}};
    if (!body.empty()) fields.emplace_back("content-length", std::to_string(body.size()));
    fields.insert(fields.end(), headers.begin(), headers.end());
    std::vector<nghttp2_nv> nva;
    for (const auto& [n, v] : fields) {
      nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                     reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                     NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider provider{};
    provider.source.ptr = stream.get();
    provider.read_callback = &H2Client::readRequestBody;
    const int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                              body.empty() ? nullptr : &provider, nullptr);
    if (id > 0) {
      stream->id = id;
      streams_[id] = std::move(stream);
    }
    return id;
  }

  /** Resets stream `id` with RST_STREAM(`error_code`). Safe inside on_data. */
  void reset(int32_t id, uint32_t error_code = NGHTTP2_CANCEL) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, error_code);
    if (H2Stream* s = find(id)) s->reset_sent = true;
  }

  /** With manual_window: opens the stream and connection windows by what was read. */
  void consumeAll(int32_t id) {
    H2Stream* s = find(id);
    if (s == nullptr) return;
    const size_t unconsumed = s->body.size() - consumed_[id];
    if (unconsumed > 0) nghttp2_session_consume(session_, id, unconsumed);
    consumed_[id] = s->body.size();
  }

  /** Pumps I/O until `done()` holds (true) or `timeout` passes / the connection ends (false). */
  bool run(const std::function<bool()>& done,
           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (session_ == nullptr || nghttp2_session_send(session_) != 0) {
        eof_ = true;  // the session cannot go on: the connection is over for us
        return done();
      }
      if (done()) return true;
      if (eof_) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      const bool buffered = ssl_ != nullptr && SSL_pending(ssl_) > 0;
      if (!buffered) {
        pollfd p{fd_, POLLIN, 0};
        if (nghttp2_session_want_write(session_)) p.events |= POLLOUT;
        ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
      }
      readAvailable();
    }
  }

  /** Runs until every stream in `ids` is closed. */
  bool runUntilClosed(const std::vector<int32_t>& ids,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    return run(
        [&] {
          return std::all_of(ids.begin(), ids.end(), [&](int32_t id) {
            const H2Stream* s = find(id);
            return s != nullptr && s->closed;
          });
        },
        timeout);
  }

  H2Stream* find(int32_t id) {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second.get();
  }
  const H2Stream* find(int32_t id) const {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second.get();
  }
  H2Stream& stream(int32_t id) { return *find(id); }

  /** Closes the socket abruptly (no GOAWAY). */
  void dropConnection() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    eof_ = true;
  }

 private:
  bool handshake() {
    ssl_ctx_ = SSL_CTX_new(TLS_client_method());
    ssl_ = SSL_new(ssl_ctx_);
    std::string wire;
    for (const std::string& p : options_.alpn) {
      wire += static_cast<char>(p.size());
      wire += p;
    }
    if (!wire.empty()) {
      SSL_set_alpn_protos(ssl_, reinterpret_cast<const unsigned char*>(wire.data()),
                          static_cast<unsigned int>(wire.size()));
    }
    SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1) return false;
    const unsigned char* selected = nullptr;
    unsigned int len = 0;
    SSL_get0_alpn_selected(ssl_, &selected, &len);
    alpn_.assign(reinterpret_cast<const char*>(selected), len);
    return true;
  }

  bool startSession() {
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_send_callback(cbs, &H2Client::onSend);
    nghttp2_session_callbacks_set_on_header_callback(cbs, &H2Client::onHeader);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &H2Client::onFrameRecv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &H2Client::onDataChunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &H2Client::onStreamClose);
    nghttp2_option* option = nullptr;
    nghttp2_option_new(&option);
    if (options_.manual_window) nghttp2_option_set_no_auto_window_update(option, 1);
    const int rv = nghttp2_session_client_new2(&session_, cbs, this, option);
    nghttp2_option_del(option);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0) return false;
    std::vector<nghttp2_settings_entry> settings = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    if (options_.initial_window) {
      settings.push_back({NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, *options_.initial_window});
    }
    return nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size()) ==
           0;
  }

  void readAvailable() {
    uint8_t buf[16384];
    while (fd_ >= 0 && !eof_) {
      ssize_t n;
      if (ssl_ != nullptr) {
        n = SSL_read(ssl_, buf, sizeof(buf));
        if (n <= 0) {
          const int err = SSL_get_error(ssl_, static_cast<int>(n));
          if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
          eof_ = true;
          return;
        }
      } else {
        n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) {
          eof_ = true;
          return;
        }
      }
      if (nghttp2_session_mem_recv(session_, buf, static_cast<size_t>(n)) < 0) {
        eof_ = true;
        return;
      }
    }
  }

  static ssize_t onSend(nghttp2_session*, const uint8_t* data, size_t length, int,
                        void* user_data) {
    auto* self = static_cast<H2Client*>(user_data);
    if (self->fd_ < 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (self->ssl_ != nullptr) {
      const int n = SSL_write(self->ssl_, data, static_cast<int>(length));
      if (n > 0) return n;
      const int err = SSL_get_error(self->ssl_, n);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        return NGHTTP2_ERR_WOULDBLOCK;
      }
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    const ssize_t n = ::send(self->fd_, data, length, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return NGHTTP2_ERR_WOULDBLOCK;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }

  static ssize_t readRequestBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                                 uint32_t* data_flags, nghttp2_data_source* source, void*) {
    auto* s = static_cast<H2Stream*>(source->ptr);
    const size_t n = std::min(length, s->request_body.size() - s->request_offset);
    std::memcpy(buf, s->request_body.data() + s->request_offset, n);
    s->request_offset += n;
    if (s->request_offset == s->request_body.size()) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                      void* user_data) {
    H2Stream* s = static_cast<H2Client*>(user_data)->find(frame->hd.stream_id);
    if (s == nullptr) return 0;
    const std::string n(reinterpret_cast<const char*>(name), namelen);
    const std::string v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":status") {
      s->status = std::stoi(v);
    } else {
      s->headers.emplace_back(n, v);
    }
    return 0;
  }

  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    auto* self = static_cast<H2Client*>(user_data);
    if (frame->hd.type == NGHTTP2_GOAWAY) {
      self->goaway_ = H2Goaway{frame->goaway.last_stream_id, frame->goaway.error_code};
    } else if (frame->hd.type == NGHTTP2_DATA && frame->hd.length > 0) {
      if (H2Stream* s = self->find(frame->hd.stream_id)) ++s->data_frames;
    } else if (frame->hd.type == NGHTTP2_RST_STREAM) {
      if (H2Stream* s = self->find(frame->hd.stream_id)) {
        s->rst_received = frame->rst_stream.error_code;
      }
    }
    return 0;
  }

  static int onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user_data) {
    auto* self = static_cast<H2Client*>(user_data);
    H2Stream* s = self->find(stream_id);
    if (s == nullptr) return 0;
    s->body.append(reinterpret_cast<const char*>(data), len);
    if (self->on_data) self->on_data(*s);
    return 0;
  }

  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                           void* user_data) {
    if (H2Stream* s = static_cast<H2Client*>(user_data)->find(stream_id)) {
      s->closed = true;
      s->close_error = error_code;
    }
    return 0;
  }

  uint16_t port_;
  Options options_;
  int fd_ = -1;
  SSL_CTX* ssl_ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string alpn_;
  nghttp2_session* session_ = nullptr;
  bool connected_ = false;
  bool eof_ = false;
  std::optional<H2Goaway> goaway_;
  std::map<int32_t, std::unique_ptr<H2Stream>> streams_;
  std::map<int32_t, size_t> consumed_;
};

}  // namespace mockllm::test
