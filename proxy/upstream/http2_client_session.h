#pragma once

// One multiplexed HTTP/2 connection to an upstream (nghttp2 client session
// over a libevent bufferevent, h2c with prior knowledge or TLS with ALPN h2),
// owned by an UpstreamPool. Each attempt is one Http2ClientStream.
//
// Cancellation is per stream: reset() sends RST_STREAM(CANCEL) for that
// stream only and the session stays up for the others. A stream the upstream
// refused (REFUSED_STREAM, or above the last stream id of its GOAWAY) fails
// with UpstreamError::Refused: nothing was processed, so it is safe to retry.
//
// A response head is reported with its first body byte (or the stream's
// end), not with its HEADERS frame: an upstream that resets the stream right
// after its head fails the attempt before anything reached the client.
//
// Backpressure: automatic WINDOW_UPDATEs are off. A stream's DATA is
// acknowledged (nghttp2_session_consume) only once handed to the Exchange;
// while the Exchange is paused (slow client) what arrives is held in the
// stream, bounded by the stream's flow-control window, and the upstream stops.
//
// Liveness: an idle session sends a PING every kIdlePingInterval; no ACK
// within kPingTimeout closes it, so a dead connection is never handed out.

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"
#include "proxy/http/nghttp2_util.h"
#include "proxy/upstream/upstream_stream.h"

namespace sluice {

class Http2ClientSession;
class UpstreamPool;

class Http2ClientStream final : public DeferredDeletable, public UpstreamStream {
 public:
  explicit Http2ClientStream(Http2ClientSession& session) : session_(session) {}

  // UpstreamStream
  void sendRequest(const RequestHead& head, RequestBody& body,
                   UpstreamCallbacks* callbacks) override;
  void onRequestBodyData() override;
  void pauseReading() override;
  void resumeReading() override;
  void detach() override { callbacks_ = nullptr; }
  void release() override;
  void reset() override;

  int32_t streamId() const { return id_; }

 private:
  friend class Http2ClientSession;

  Http2ClientSession& session_;
  UpstreamCallbacks* callbacks_ = nullptr;
  int32_t id_ = -1;
  RequestBody* body_ = nullptr;  // the Exchange's body, valid until release/reset
  uint64_t body_sent_ = 0;       // body bytes handed to nghttp2
  bool body_deferred_ = false;   // the data provider waits for body bytes (or the connection)
  ResponseHead head_;
  bool head_received_ = false;  // the final head is in head_ (held until reportHead)
  bool head_reported_ = false;
  // The head and its first DATA came in the read being processed: both wait
  // (DATA in held_) until that read parsed, so a RST_STREAM or GOAWAY in the
  // same read fails the attempt before anything reached the client.
  bool head_pending_ = false;
  std::unique_ptr<HeaderMap> trailers_;  // the response's trailer section, if any
  bool paused_ = false;
  std::string held_;        // DATA that arrived while paused (within the stream window)
  bool end_held_ = false;   // END_STREAM arrived while paused
  bool ended_ = false;      // complete or error was reported (or the holder let go)
  bool let_go_ = false;     // released or reset by the holder
  bool h2_closed_ = false;  // nghttp2 closed the stream
};

class Http2ClientSession final : public DeferredDeletable {
 public:
  /** Connects a new session; streams may be opened at once (they wait for the connection). */
  Http2ClientSession(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                     const config::UpstreamUrl& url, SSL_CTX* ssl_ctx, UpstreamPool& pool);
  /** Adopts a connected TLS socket whose ALPN chose h2. */
  Http2ClientSession(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                     const config::UpstreamUrl& url, BufferEventPtr connected, UpstreamPool& pool);
  ~Http2ClientSession() override;

  /** A new stream on this session (call sendRequest on it). */
  Http2ClientStream* newStream();
  /** True while another stream fits: open, no GOAWAY, below the peer's max concurrent streams. */
  bool hasCapacity() const;
  size_t activeStreams() const { return streams_.size(); }
  bool closed() const { return closed_; }
  bool connected() const { return connected_; }
  /**
   * Takes no new stream from now on and closes once the last one ends (at
   * once when there is none): the pool was retired by a reload.
   */
  void drain();
  /** The TLS server did not choose h2 by ALPN (`http2: auto` must ask again). */
  bool alpnRefused() const { return alpn_refused_; }
  /** Closes the connection now; streams still running fail with `reset`. */
  void close(const std::string& why);

  static constexpr std::chrono::seconds kIdlePingInterval{30};
  static constexpr std::chrono::seconds kPingTimeout{10};
  /** Our receive window per stream: also the most a paused stream holds. */
  static constexpr int32_t kStreamWindow = 64 * 1024;
  /** Our receive window for the whole connection. */
  static constexpr int32_t kConnectionWindow = 16 * 1024 * 1024;

 private:
  friend class Http2ClientStream;

  void init();
  void submit(Http2ClientStream& stream, const RequestHead& head);
  void letGo(Http2ClientStream& stream, bool reset);
  /** More of `stream`'s request body can be sent: wake its data provider. */
  void resumeBody(Http2ClientStream& stream);
  void deliverHeld(Http2ClientStream& stream);
  /**
   * Reports `stream`'s final head, held since its HEADERS until the first
   * body byte or the stream's end: a reset before any body byte is then an
   * attempt failure (502 or a retry), never a committed response.
   */
  void reportHead(Http2ClientStream& stream, bool end_stream);
  /** Reports the heads held while the read that carried them was parsed (head_pending_). */
  void reportPendingHeads();
  /** Forgets a pending head and its DATA unreported (the stream failed in that read). */
  void dropPendingHead(Http2ClientStream& stream);
  void forget(Http2ClientStream& stream);
  void flush();
  void failAll(UpstreamError error, const std::string& detail);
  void maybeRetire();
  void armPing();
  void onPingTimer();

  static void onReadCb(bufferevent*, void* arg);
  static void onWriteCb(bufferevent*, void* arg);
  static void onEventCb(bufferevent*, short events, void* arg);
  void onRead();
  void onEvent(short events);
  void onConnected();

  static int onBeginHeaders(nghttp2_session*, const nghttp2_frame*, void*);
  static int onHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t flags, void*);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame*, void*);
  static int onDataChunk(nghttp2_session*, uint8_t flags, int32_t stream_id, const uint8_t* data,
                         size_t len, void*);
  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void*);
  static ssize_t readBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source*, void*);

  Http2ClientStream* streamFor(int32_t stream_id) const;
  void endStream(Http2ClientStream& stream);

  Dispatcher& dispatcher_;
  const config::UpstreamConfig& upstream_;
  const config::UpstreamUrl& url_;  // the endpoint's
  UpstreamPool& pool_;
  BufferEventPtr bev_;
  Nghttp2SessionPtr session_;
  std::unordered_map<Http2ClientStream*, std::unique_ptr<Http2ClientStream>> streams_;
  Timer ping_timer_;
  bool ping_outstanding_ = false;
  bool connected_ = false;
  bool require_alpn_h2_ = false;  // TLS: the server must choose h2
  bool alpn_refused_ = false;
  bool goaway_ = false;
  bool draining_ = false;  // drain(): close when the last stream ends
  int32_t goaway_last_stream_ = 0;
  bool in_io_ = false;                             // inside nghttp2 recv/send: flush later
  std::vector<Http2ClientStream*> pending_heads_;  // head_pending_ streams of this read
  bool closed_ = false;
};

}  // namespace sluice
