#pragma once

// A small blocking HTTP/2 client for integration tests: nghttp2's client
// session over a real socket on loopback, cleartext with prior knowledge or
// TLS with ALPN. One connection carries any number of streams; a test can
// reset chosen streams (at once or after K response bytes), hold a stream's
// flow-control window shut (a slow reader without TCP backpressure), send
// GOAWAY or drop the socket — the rude things real HTTP/2 agents do.

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/http_headers.h"

namespace sluice::test {

struct H2ClientOptions {
  bool tls = false;
  /** ALPN offered over TLS, in order (empty: no ALPN extension). */
  std::vector<std::string> alpn = {"h2"};
  /** SETTINGS_INITIAL_WINDOW_SIZE this client advertises for response bodies. */
  int32_t initial_window = 65535;
  /** > 0: the connection-level receive window (nghttp2's default is 65535). */
  int32_t connection_window = 0;
  /** > 0: SO_RCVBUF set before connecting (a client that stops reading fills it quickly). */
  int receive_buffer = 0;
  /**
   * Window updates are sent only for streams that are not held (hold()), so a
   * held stream's window stays shut while the socket keeps being read.
   */
  bool manual_window = false;
  /**
   * The server's SETTINGS_MAX_CONCURRENT_STREAMS assumed until its SETTINGS
   * arrive (nghttp2 assumes 100); large, so a test can overrun the real limit.
   */
  uint32_t assumed_peer_max_streams = 1000;
  /** > 0: the first bytes (preface, SETTINGS, ...) go out in writes of this size. */
  size_t first_write_chunk = 0;
};

/** What one stream received. */
struct H2Response {
  int status = 0;
  HeaderMap headers;
  HeaderMap trailers;  // a HEADERS frame after the response head (RFC 9113 §8.1)
  std::string body;
  bool headers_received = false;
  bool final_head_received = false;  // a HEADERS frame with a status >= 200 ended
  bool complete = false;             // END_STREAM received
  bool closed = false;               // the stream is closed, whichever way
  bool reset_by_peer = false;        // RST_STREAM received
  bool reset_by_us = false;
  uint32_t error_code = 0;  // RST_STREAM's code (or the close code)
};

class H2Connection {
 public:
  /** Connects to 127.0.0.1:`port` (TLS handshake included); ADD_FAILURE if it cannot. */
  explicit H2Connection(uint16_t port, H2ClientOptions options = {});
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  bool connected() const { return fd_ >= 0 && session_ != nullptr; }
  /** The ALPN protocol the server chose ("" for cleartext or none). */
  std::string alpn() const;
  /** The server certificate's subject CN (TLS only). */
  std::string peerCommonName() const;

  /** Opens a stream; returns its id (< 0 when nghttp2 refused to submit). */
  int32_t submit(const std::string& method, const std::string& path,
                 const std::vector<std::pair<std::string, std::string>>& headers = {},
                 std::string body = "");
  /**
   * Opens a POST stream that sends `sent` body bytes and then stalls, never
   * ending (content-length says `declared_length`): a slow uploader.
   */
  int32_t submitStalled(const std::string& path, std::string sent, size_t declared_length);
  /** RST_STREAM(`code`) on `stream` now. */
  void reset(int32_t stream, uint32_t code = NGHTTP2_CANCEL);
  /** RST_STREAM(CANCEL) on `stream` as soon as `bytes` body bytes arrived on it. */
  void resetAfter(int32_t stream, size_t bytes);
  /** manual_window: stop re-opening `stream`'s window (it stalls once the window is used). */
  void hold(int32_t stream);
  /** manual_window: return everything received on `stream` to its window, and keep doing so. */
  void release(int32_t stream);
  /** Sends GOAWAY(NO_ERROR) and keeps the socket open. */
  void goaway();
  /** Closes the socket without any HTTP/2 goodbye. */
  void drop();
  /** Closes the socket with RST (SO_LINGER 0), whatever it read: an abortive close. */
  void abort();

  /** Reads and processes frames until `done()` or `timeout`; true if `done()` held. */
  bool runUntil(const std::function<bool()>& done,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /** Runs until `stream` is closed. */
  bool waitForStream(int32_t stream, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /** Runs until the server closed the connection. */
  bool waitForClose(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  H2Response& response(int32_t stream) { return responses_[stream]; }
  bool peerClosed() const { return peer_closed_; }
  bool goawayReceived() const { return goaway_received_; }
  int32_t goawayLastStreamId() const { return goaway_last_stream_id_; }
  uint32_t goawayErrorCode() const { return goaway_error_code_; }

 private:
  struct Upload {
    std::string body;
    size_t offset = 0;
    bool stall = false;  // defer forever after `body` instead of ending the stream
  };
  int32_t submitWith(const std::string& method, const std::string& path,
                     const std::vector<std::pair<std::string, std::string>>& headers,
                     std::string body, std::optional<size_t> declared_length, bool stall);

  bool flush();
  bool writeAll(const uint8_t* data, size_t len);
  bool readOnce(std::chrono::milliseconds timeout);

  static int onHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                      const uint8_t*, size_t, uint8_t, void*);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame*, void*);
  static int onDataChunkRecv(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int onStreamClose(nghttp2_session*, int32_t, uint32_t, void*);
  static ssize_t onUploadRead(nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*,
                              nghttp2_data_source*, void*);

  H2ClientOptions options_;
  uint16_t port_ = 0;
  int fd_ = -1;
  SSL_CTX* ssl_ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, H2Response> responses_;
  std::map<int32_t, Upload> uploads_;
  std::map<int32_t, size_t> reset_after_;
  std::map<int32_t, bool> held_;
  std::map<int32_t, size_t> unconsumed_;  // held streams' bytes not yet returned to the window
  bool first_write_ = true;
  bool peer_closed_ = false;
  bool goaway_received_ = false;
  int32_t goaway_last_stream_id_ = -1;
  uint32_t goaway_error_code_ = 0;
};

}  // namespace sluice::test
