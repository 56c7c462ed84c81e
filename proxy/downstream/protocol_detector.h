#pragma once

// The first moments of an accepted connection, before sluice knows which
// codec serves it:
//   TLS listener:   wait for the handshake; ALPN decides — "h2" → HTTP/2,
//                   "http/1.1" or no ALPN → HTTP/1.1.
//   plain listener: read until the bytes either differ from the HTTP/2 client
//                   preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", RFC 9113 §3.4:
//                   h2c with prior knowledge) or complete it. HTTP/1.1 and h2c
//                   share the port; nothing is consumed, the chosen codec
//                   reads the same bytes from the same bufferevent.
// Both must finish within header_read_timeout (Http1Limits) from accept, or
// the connection is closed without a word (no protocol to answer in yet).
// HTTP/1.1 then gets the rest of that same deadline for its first request head.
// Then the bufferevent moves to Http2ServerConnection or Http1ServerConnection
// and the host replaces this object with it.

#include <string>
#include <string_view>

#include "proxy/downstream/downstream_connection.h"
#include "proxy/downstream/http1_server_connection.h"
#include "proxy/downstream/http2_server_connection.h"
#include "proxy/event/event_util.h"

namespace sluice {

class ProtocolDetector final : public DownstreamConnection {
 public:
  /**
   * `bev` is a plain socket bufferevent, or an OpenSSL one in the accepting
   * state when `tls`. Detection starts at once; the outcome is handed to
   * `host.replaceConnection()` from a libevent callback, never from here.
   */
  ProtocolDetector(DownstreamConnectionHost& host, BufferEventPtr bev, std::string peer_address,
                   bool tls, Http1Limits http1_limits = {}, Http2Limits http2_limits = {});
  ~ProtocolDetector() override = default;

  // DownstreamConnection: nothing is in flight yet, so both close at once.
  void closeWhenIdle() override { close(); }
  void close() override;

  /** The HTTP/2 client connection preface (RFC 9113 §3.4). */
  static constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

  enum class Verdict { NeedMore, Http1, Http2 };
  /** What the first bytes of a plain connection say (pure; unit-tested). */
  static Verdict classify(std::string_view first_bytes);

 private:
  static void onReadCb(bufferevent*, void* arg);
  static void onEventCb(bufferevent*, short events, void* arg);
  void onRead();
  void onEvent(short events);
  void handOff(bool http2);
  void onTimeout();

  DownstreamConnectionHost& host_;
  BufferEventPtr bev_;
  std::string peer_address_;
  const bool tls_;
  Http1Limits http1_limits_;
  Http2Limits http2_limits_;
  const MonotonicTime accepted_at_;
  Timer timer_;  // header_read_timeout: handshake / preface too slow
  bool closed_ = false;
};

}  // namespace sluice
