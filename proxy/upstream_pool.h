#pragma once

// Per-worker keep-alive pool for one upstream. Owns every UpstreamConnection
// to that upstream on this worker. An attempt acquires a connection (idle or
// new), and ends it one of two ways: release() after a clean, reusable
// response, or destroy() — cancel, error, timeout — which closes the socket at
// once so the upstream sees the close and stops generating (and billing).

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "proxy/dispatcher.h"
#include "proxy/tls.h"
#include "proxy/upstream_connection.h"

namespace sluice {

class UpstreamPool {
 public:
  UpstreamPool(Dispatcher& dispatcher, const config::UpstreamConfig& upstream, SslCtxPtr ssl_ctx);
  ~UpstreamPool();

  /** An idle keep-alive connection if one is up, else a new one (connecting). */
  UpstreamConnection* acquire();
  /** Returns `conn` for reuse if reusable(), else destroys it. */
  void release(UpstreamConnection* conn);
  /** Closes `conn` now and never reuses it. */
  void destroy(UpstreamConnection* conn);

  size_t idleCount() const { return idle_.size(); }
  size_t totalCount() const { return conns_.size(); }
  /** Connections ever opened by this pool (for keep-alive tests). */
  uint64_t connectionsOpened() const { return next_id_ - 1; }

  /** The most idle connections kept per upstream per worker. */
  static constexpr size_t kMaxIdle = 128;

 private:
  Dispatcher& dispatcher_;
  const config::UpstreamConfig& upstream_;
  SslCtxPtr ssl_ctx_;
  uint64_t next_id_ = 1;
  std::unordered_map<UpstreamConnection*, std::unique_ptr<UpstreamConnection>> conns_;
  std::vector<UpstreamConnection*> idle_;  // LIFO: the warmest connection first
};

}  // namespace sluice
