#include "proxy/upstream_pool.h"

#include <algorithm>

namespace sluice {

UpstreamPool::UpstreamPool(Dispatcher& dispatcher, const config::UpstreamConfig& upstream,
                           SslCtxPtr ssl_ctx)
    : dispatcher_(dispatcher), upstream_(upstream), ssl_ctx_(std::move(ssl_ctx)) {}

UpstreamPool::~UpstreamPool() {
  for (auto& [raw, conn] : conns_) conn->close();
}

UpstreamConnection* UpstreamPool::acquire() {
  while (!idle_.empty()) {
    UpstreamConnection* conn = idle_.back();
    idle_.pop_back();
    if (conn->reusable()) return conn;
    destroy(conn);
  }
  auto conn = std::make_unique<UpstreamConnection>(dispatcher_, upstream_, ssl_ctx_.get(), *this,
                                                   next_id_++);
  UpstreamConnection* raw = conn.get();
  conns_.emplace(raw, std::move(conn));
  return raw;
}

void UpstreamPool::release(UpstreamConnection* conn) {
  if (conn == nullptr) return;
  if (!conn->reusable() || idle_.size() >= kMaxIdle) {
    destroy(conn);
    return;
  }
  conn->markIdle();
  idle_.push_back(conn);
}

void UpstreamPool::destroy(UpstreamConnection* conn) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  conn->close();
  idle_.erase(std::remove(idle_.begin(), idle_.end(), conn), idle_.end());
  // The connection may be on the stack (its own callback); delete it later.
  dispatcher_.deferredDelete(std::move(it->second));
  conns_.erase(it);
}

}  // namespace sluice
