#pragma once

// What a host of Exchanges and downstream connections keeps: the live
// Exchanges by id and the open connections. Both are destroyed through the
// dispatcher's deferred delete, so a callback still on the stack never loses
// its object. The Worker and the fuzz harness (fuzz/support/proxy_harness.*)
// both host the request path; this is the one copy of that bookkeeping (as
// nghttpx keeps its connection handler apart from the worker thread).

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "proxy/downstream/downstream_connection.h"
#include "proxy/event/dispatcher.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/in_flight_gauge.h"

namespace sluice {

class HostRegistry {
 public:
  /**
   * `first_id`: exchange ids count up from it (the Worker puts its index in
   * the top bits). `open_connections`, when given, counts the connections
   * held here (the process's drain waits for it).
   */
  explicit HostRegistry(Dispatcher& dispatcher, uint64_t first_id = 1,
                        InFlightGauge* open_connections = nullptr)
      : dispatcher_(dispatcher), next_exchange_id_(first_id), open_connections_(open_connections) {}

  /** A new Exchange for `head`, on the route `runtime` matches, owned here. */
  Exchange& newExchange(ExchangeHost& host, const ConfigSnapshotPtr& runtime, RequestHead& head,
                        DownstreamStream& downstream, MonotonicTime start) {
    const RouteRuntime* route = runtime->match(head.method, head.pathOnly());
    const uint64_t id = next_exchange_id_++;
    auto ex = std::make_unique<Exchange>(host, id, runtime, route, &downstream, start);
    Exchange& ref = *ex;
    if (!spare_node_.empty()) {
      // The last retired Exchange's map node: no allocation per request.
      spare_node_.key() = id;
      spare_node_.mapped() = std::move(ex);
      exchanges_.insert(std::move(spare_node_));  // ids are unique: always inserted
    } else {
      exchanges_.emplace(id, std::move(ex));
    }
    return ref;
  }
  /** Deletes `exchange` once the stack unwinds; false when it is not held here. */
  bool retire(Exchange& exchange) {
    auto it = exchanges_.find(exchange.id());
    if (it == exchanges_.end()) return false;
    auto node = exchanges_.extract(it);
    dispatcher_.deferredDelete(std::move(node.mapped()));
    spare_node_ = std::move(node);  // kept for the next Exchange
    return true;
  }
  bool alive(uint64_t id) const { return exchanges_.count(id) != 0; }
  size_t exchangeCount() const { return exchanges_.size(); }
  /** The live Exchanges (a copy: cancelling one retires it from the map). */
  std::vector<Exchange*> exchanges() const {
    std::vector<Exchange*> all;
    all.reserve(exchanges_.size());
    for (const auto& [id, ex] : exchanges_) all.push_back(ex.get());
    return all;
  }

  void addConnection(DownstreamConnectionPtr conn) {
    DownstreamConnection* raw = conn.get();
    connections_.emplace(raw, std::move(conn));
    if (open_connections_ != nullptr) open_connections_->add();
  }
  void connectionClosed(DownstreamConnection& conn) {
    auto it = connections_.find(&conn);
    if (it == connections_.end()) return;
    dispatcher_.deferredDelete(std::move(it->second));
    connections_.erase(it);
    if (open_connections_ != nullptr) open_connections_->remove();
  }
  /** A connection handed over to another codec (protocol detection). */
  void replaceConnection(DownstreamConnection& from, DownstreamConnectionPtr to) {
    connectionClosed(from);
    addConnection(std::move(to));
  }
  size_t connectionCount() const { return connections_.size(); }
  /** The open connections (a copy: closing one removes it from the map). */
  std::vector<DownstreamConnection*> connections() const {
    std::vector<DownstreamConnection*> all;
    all.reserve(connections_.size());
    for (const auto& [raw, conn] : connections_) all.push_back(raw);
    return all;
  }

  /** Destroys everything now (the loop has stopped; nothing is on the stack). */
  void clear() {
    exchanges_.clear();
    if (open_connections_ != nullptr) open_connections_->remove(connections_.size());
    connections_.clear();
  }

 private:
  Dispatcher& dispatcher_;
  uint64_t next_exchange_id_;
  InFlightGauge* const open_connections_;
  // Exchanges after connections: destroyed first (an Exchange points at its
  // connection's stream, never the other way round).
  std::unordered_map<DownstreamConnection*, DownstreamConnectionPtr> connections_;
  using ExchangeMap = std::unordered_map<uint64_t, std::unique_ptr<Exchange>>;
  ExchangeMap exchanges_;
  ExchangeMap::node_type spare_node_;  // a retired Exchange's node (its pointer already handed off)
};

}  // namespace sluice
