#pragma once

// One HTTP/1.1 connection to an upstream, plain or TLS, owned by an
// UpstreamPool. It connects (async DNS, TCP, TLS handshake with SNI and
// verification), writes one request at a time, parses the response with
// http-parser and reports it to whoever holds it through UpstreamCallbacks.
// Reading can be paused: that is how a slow client pushes back on the
// upstream (watermarks, see Exchange).

#include <http_parser.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "config/config.h"
#include "proxy/dispatcher.h"
#include "proxy/http_message.h"

namespace sluice {

/** How an attempt failed below HTTP. */
enum class UpstreamError {
  ConnectError,  // DNS, TCP connect or TLS handshake failed
  Reset,         // the connection broke after it was established
  Protocol,      // the upstream sent something that is not a valid HTTP/1.1 response
};

std::string_view toString(UpstreamError e);

/** Receives one response. Calls stop once the connection is released or destroyed. */
class UpstreamCallbacks {
 public:
  virtual ~UpstreamCallbacks() = default;
  /** TCP (and TLS) is up; the request is being written. */
  virtual void onUpstreamConnected() = 0;
  /** The final response head (1xx interim responses are swallowed). */
  virtual void onUpstreamHeaders(ResponseHead&& head, bool end_stream) = 0;
  /** A slice of the response body (de-chunked). */
  virtual void onUpstreamData(const char* data, size_t len) = 0;
  /** The response ended cleanly. */
  virtual void onUpstreamComplete() = 0;
  /** The attempt failed; the connection is dead and must be destroyed. */
  virtual void onUpstreamError(UpstreamError error, const std::string& detail) = 0;
};

class UpstreamPool;

class UpstreamConnection : public DeferredDeletable {
 public:
  /** Creates and starts connecting to `upstream`; `ssl_ctx` is null for http://. */
  UpstreamConnection(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                     SSL_CTX* ssl_ctx, UpstreamPool& pool, uint64_t id);
  ~UpstreamConnection() override;

  /**
   * Writes `head` (already rewritten for the upstream) and `body`, framed with
   * Content-Length, and routes the response to `callbacks`.
   */
  void sendRequest(const RequestHead& head, std::string_view body, UpstreamCallbacks* callbacks);

  /** Stops / resumes reading the response (backpressure from a slow client). */
  void pauseReading();
  void resumeReading();

  /** True when the last response completed cleanly and the upstream allows keep-alive. */
  bool reusable() const { return reusable_ && !closed_; }
  bool connected() const { return connected_; }
  bool closed() const { return closed_; }
  uint64_t id() const { return id_; }
  /** Requests this connection has carried. */
  uint32_t requestCount() const { return request_count_; }

  /** Closes the socket now (FIN) and stops all callbacks; idempotent. */
  void close();
  /** Forgets the current callbacks (the holder is gone). */
  void detach() { callbacks_ = nullptr; }
  /** Becomes idle in the pool: watch for the upstream closing it. */
  void markIdle();

 private:
  static void onReadCb(bufferevent*, void* arg);
  static void onEventCb(bufferevent*, short events, void* arg);
  void onRead();
  void onEvent(short events);
  void parse(const char* data, size_t len);
  void fail(UpstreamError error, const std::string& detail);
  /** Why a TLS handshake failed, in words ("" when it did not). */
  std::string tlsFailure();

  // http_parser callbacks.
  static int onHeaderField(http_parser*, const char*, size_t);
  static int onHeaderValue(http_parser*, const char*, size_t);
  static int onStatus(http_parser*, const char*, size_t);
  static int onHeadersComplete(http_parser*);
  static int onBody(http_parser*, const char*, size_t);
  static int onMessageComplete(http_parser*);

  Dispatcher& dispatcher_;
  const config::UpstreamConfig& upstream_;
  UpstreamPool& pool_;
  const uint64_t id_;
  BufferEventPtr bev_;
  UpstreamCallbacks* callbacks_ = nullptr;

  http_parser parser_{};
  http_parser_settings settings_{};
  ResponseHead head_;
  std::string field_;
  std::string value_;
  bool in_value_ = false;
  bool head_request_ = false;  // the response to HEAD has no body
  bool interim_ = false;       // parsing a 1xx response
  bool awaiting_response_ = false;
  bool message_done_ = false;

  bool connected_ = false;
  bool closed_ = false;
  bool reusable_ = false;
  bool idle_ = false;
  uint32_t request_count_ = 0;
};

}  // namespace sluice
