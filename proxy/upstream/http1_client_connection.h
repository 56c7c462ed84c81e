#pragma once

// One HTTP/1.1 connection to an upstream, plain or TLS, owned by an
// UpstreamPool. It connects (async DNS, TCP, TLS handshake with SNI and
// verification), writes one request at a time, parses the response with
// llhttp and reports it to whoever holds it through UpstreamCallbacks.
// Connecting runs on a bufferevent (evdns, connect errors); once connected a
// plain socket leaves it for SocketIo's own reads and writes
// (proxy/event/socket_io.h), TLS stays on bufferevent_openssl.
// Reading can be paused: that is how a slow client pushes back on the
// upstream (watermarks, see Exchange).
//
// With `http2: auto` on an https:// upstream whose protocol the pool has not
// learned yet, the connection is opened "negotiating": it offers h2 and
// http/1.1 by ALPN, carries no request, and reports the server's choice to
// the pool, which either keeps it as HTTP/1.1 or hands its socket to an
// Http2ClientSession (takeBufferEvent).

#include <openssl/ssl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/http1_header_accumulator.h"
#include "common/http_message.h"
#include "config/config.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"
#include "proxy/event/socket_io.h"
#include "proxy/http/llhttp_parser.h"
#include "proxy/upstream/upstream_stream.h"

namespace sluice {

class UpstreamPool;

/**
 * Opens a TCP (and, with `ssl_ctx`, TLS) connection to `url`, an endpoint of
 * `upstream` (whose `tls` settings apply), connecting asynchronously.
 */
BufferEventPtr connectUpstream(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                               const config::UpstreamUrl& url, SSL_CTX* ssl_ctx);

/** Why a TLS handshake on `bev` failed, in words ("" when it did not). */
std::string upstreamTlsFailure(bufferevent* bev);

/** Why connecting `bev` to `url` failed, for a problem's detail. */
std::string connectFailureDetail(bufferevent* bev, const config::UpstreamUrl& url);

/** The ALPN protocol the server chose on `bev` ("" for plain TCP or none). */
std::string_view negotiatedAlpn(bufferevent* bev);

class Http1ClientConnection : public DeferredDeletable,
                              public UpstreamStream,
                              private SocketIoCallbacks {
 public:
  /**
   * Creates and starts connecting to `upstream`; `ssl_ctx` is null for
   * http://. A `negotiating` connection reports its ALPN result to the pool.
   */
  Http1ClientConnection(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                        const config::UpstreamUrl& url, SSL_CTX* ssl_ctx, UpstreamPool& pool,
                        uint64_t id, bool negotiating = false);
  ~Http1ClientConnection() override;

  /** Writes the head, then the body as it comes (UpstreamStream). */
  void sendRequest(const RequestHead& head, RequestBody& body,
                   UpstreamCallbacks* callbacks) override;
  void onRequestBodyData() override { writeBody(); }

  /** Stops / resumes reading the response (backpressure from a slow client). */
  void pauseReading() override;
  void resumeReading() override;

  /**
   * True when the last response completed cleanly, the upstream allows
   * keep-alive, and the whole request had left for the socket before the
   * response ended: a connection still owing (or never sending) part of a
   * body is never reused, or the next request would queue behind it.
   */
  bool reusable() const { return reusable_ && !closed_; }
  bool connected() const { return connected_; }
  bool closed() const { return closed_; }
  uint64_t id() const { return id_; }
  /** Requests this connection has carried. */
  uint32_t requestCount() const { return request_count_; }

  /** Closes the socket now (FIN) and stops all callbacks; idempotent. */
  void close();
  /** Forgets the current callbacks (the holder is gone). */
  void detach() override { callbacks_ = nullptr; }
  /** Back to the pool: kept for reuse if reusable(), else closed. */
  void release() override;
  /** Closes the connection now (through the pool). */
  void reset() override;
  /** Gives up the (connected) socket to an HTTP/2 session; this connection is then closed. */
  BufferEventPtr takeBufferEvent();
  /** Becomes idle in the pool: watch for the upstream closing it. */
  void markIdle();

 private:
  // SocketIoCallbacks
  void onIoRead() override;
  void onIoWrite() override { writeBody(); }
  void onIoEvent(short events) override;
  /** Moves request body bytes into the socket's output while it is below kOutputHighWatermark. */
  void writeBody();
  /** Every request byte, body end included, has left our output buffer. */
  bool requestFlushed() const;
  void parse(const char* data, size_t len);
  void fail(UpstreamError error, const std::string& detail);
  /**
   * Reports the head held back while its read was parsed, with the body
   * bytes that came after it in that read: only once the read parsed
   * cleanly, so an upstream that breaks in the same read as its head is an
   * attempt failure (502 or a retry), never a committed response.
   */
  void reportHeldHead();
  /** Forgets a held head unreported (a new request, a failure). */
  void dropHeldHead();

  // llhttp callbacks (one settings object for every connection).
  static const llhttp_settings_s& parserSettings();
  static int onStatus(llhttp__internal_s*, const char*, size_t);
  static int onHeaderField(llhttp__internal_s*, const char*, size_t);
  static int onHeaderFieldComplete(llhttp__internal_s*);
  static int onHeaderValue(llhttp__internal_s*, const char*, size_t);
  static int onHeadersComplete(llhttp__internal_s*);
  static int onBody(llhttp__internal_s*, const char*, size_t);
  static int onMessageComplete(llhttp__internal_s*);
  /** Counts a response head's bytes: false (and failed) past kMaxHeadBytes. */
  bool countHeadBytes(size_t len);

  /** Request bytes queued on the socket before the body waits for it to drain. */
  static constexpr size_t kOutputHighWatermark = 64 * 1024;
  static constexpr size_t kOutputLowWatermark = 16 * 1024;
  /**
   * The most body held back with a head while its read is parsed: past it
   * the head and that body are reported at once (a long first chunk).
   */
  static constexpr size_t kMaxHeldBodyInRead = 64 * 1024;
  /** The longest response head (proxy/http/llhttp_parser.h). Longer: a 502. */
  static constexpr size_t kMaxHeadBytes = kHttp1MaxHeadBytes;

  Dispatcher& dispatcher_;
  const config::UpstreamConfig& upstream_;
  const config::UpstreamUrl& url_;  // the endpoint's
  UpstreamPool& pool_;
  const uint64_t id_;
  SocketIoPtr io_;  // null once closed
  UpstreamCallbacks* callbacks_ = nullptr;

  LlhttpPtr parser_;
  size_t head_bytes_ = 0;        // of the response head being parsed (countHeadBytes)
  size_t field_name_bytes_ = 0;  // of the header name being read (llhttp allows an empty one)
  ResponseHead head_;
  Http1HeaderAccumulator header_fields_;
  // The chunked response's trailer section (RFC 9110 §6.5), kept apart from
  // head_ and reported just before the response completes.
  HeaderMap trailers_;
  bool head_request_ = false;  // the response to HEAD has no body
  bool interim_ = false;       // parsing a 1xx response
  bool awaiting_response_ = false;
  bool message_done_ = false;
  // head_ is a final response head parsed in this read, not reported yet. It
  // waits in head_ itself: no other head is parsed before it is reported
  // (the parser pauses at the message's end, and reportHeldHead runs first).
  bool head_held_ = false;
  bool held_end_stream_ = false;
  std::string held_body_;  // body after the held head in the same read

  // The request body being written: the holder's, valid until release/reset.
  RequestBody* body_ = nullptr;
  uint64_t body_sent_ = 0;        // body bytes moved into the output buffer
  bool chunked_request_ = false;  // streamed without a declared length
  bool request_written_ = false;  // the last body byte (and chunked end) is in the output

  bool negotiating_ = false;
  bool connected_ = false;
  bool closed_ = false;
  bool reusable_ = false;
  bool idle_ = false;
  uint32_t request_count_ = 0;
};

}  // namespace sluice
