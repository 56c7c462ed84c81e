#pragma once

// Per-worker connections to one upstream. An attempt acquires an
// UpstreamStream and ends it one of two ways: release() after a clean
// response, or reset() — cancel, error, timeout — which tears it down at once
// so the upstream sees it and stops generating (and billing).
//
// The pool speaks the upstream's protocol (`http2`, docs/design.md §2):
//   off                  HTTP/1.1 keep-alive connections, one request each at a time.
//   on                   HTTP/2: h2c with prior knowledge on http://, ALPN h2 on https://.
//   auto, http://        HTTP/1.1 (there is no ALPN to ask).
//   auto, https://       learned from the first connection's ALPN (h2 or http/1.1); until
//                        then streams wait in the pool (PendingStream) and are bound to a
//                        real stream once the answer is in.
// HTTP/2 streams are multiplexed on one session per upstream per worker; a
// session that is full (the peer's max concurrent streams) or going away
// makes the pool open another.
//
// A reload retires the pools of the config it replaced (Worker): a retired
// pool keeps nothing for reuse. Its idle connections close at once, busy
// ones and HTTP/2 sessions when their last stream ends, and once it holds
// nothing it tells its owner, who deletes it.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/tls.h"
#include "proxy/upstream/http1_client_connection.h"
#include "proxy/upstream/http2_client_session.h"

namespace sluice {

class PendingStream;

class UpstreamPool final : public UpstreamStreamSource {
 public:
  enum class Protocol { Http1, Http2, Negotiating };

  /** The pool of one endpoint of `upstream`; `ssl_ctx` is the upstream's (used for https:// only).
   */
  UpstreamPool(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
               const config::EndpointConfig& endpoint, SslCtxPtr ssl_ctx);
  ~UpstreamPool();

  /** A stream for one attempt: an idle connection, room on a session, or a new one. */
  UpstreamStream* acquire() override;

  /** Returns `conn` for reuse if reusable(), else destroys it. */
  void release(Http1ClientConnection* conn);
  /** Closes `conn` now and never reuses it. */
  void destroy(Http1ClientConnection* conn);

  // --- from the connections and sessions this pool owns -------------------------
  /** A negotiating connection is up and ALPN chose `h2` (or not). */
  void onNegotiated(Http1ClientConnection* conn, bool h2);
  /** A negotiating connection failed: the streams waiting for it fail too. */
  void onNegotiationFailed(Http1ClientConnection* conn, const std::string& detail);
  /** A session closed (error, GOAWAY drained, PING timeout): delete it. */
  void onSessionClosed(Http2ClientSession* session);
  /** A PendingStream was released or reset by its holder. */
  void forgetPending(PendingStream* pending);

  /**
   * The config this pool belongs to was replaced by a reload: close what is
   * idle now, close the rest as its streams end, keep nothing for reuse.
   * Attempts of exchanges still on the old config may acquire meanwhile;
   * what they open closes after them. `on_drained` runs (maybe more than
   * once, maybe at once) whenever the pool is found holding nothing; it must
   * not delete the pool synchronously.
   */
  void retire(std::function<void()> on_drained);
  bool retired() const { return retired_; }
  /** Retired and holding no connection, session or waiting stream. */
  bool drained() const {
    return retired_ && conns_.empty() && sessions_.empty() && pending_.empty();
  }
  /** True when acquire() would hand out a stream that is connected already (no wait). */
  bool hasReadyStream() const override;

  Protocol protocol() const { return protocol_; }
  size_t idleCount() const { return idle_.size(); }
  size_t totalCount() const { return conns_.size() + sessions_.size(); }
  /** Connections and sessions ever opened by this pool (for keep-alive tests). */
  uint64_t connectionsOpened() const { return opened_; }

  /** The most idle HTTP/1.1 connections kept per upstream per worker. */
  static constexpr size_t kMaxIdle = 128;

 private:
  UpstreamStream* acquireHttp1();
  UpstreamStream* acquireHttp2();
  UpstreamStream* acquirePending();
  void bindPending();
  /** Retired: closes idle connections and sessions, drains busy sessions, reports drained. */
  void shedIdle();

  Dispatcher& dispatcher_;
  const config::UpstreamConfig& upstream_;
  const config::UpstreamUrl& url_;  // the endpoint's
  SslCtxPtr ssl_ctx_;
  Protocol protocol_;
  uint64_t opened_ = 0;
  bool destroying_ = false;
  bool retired_ = false;
  std::function<void()> on_drained_;
  std::unordered_map<Http1ClientConnection*, std::unique_ptr<Http1ClientConnection>> conns_;
  std::vector<Http1ClientConnection*> idle_;  // LIFO: the warmest connection first
  std::unordered_map<Http2ClientSession*, std::unique_ptr<Http2ClientSession>> sessions_;
  Http1ClientConnection* negotiator_ = nullptr;  // the connection asking ALPN, if any
  std::unordered_map<PendingStream*, std::unique_ptr<PendingStream>> pending_;
};

}  // namespace sluice
