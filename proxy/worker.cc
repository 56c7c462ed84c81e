#include "proxy/worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <chrono>

namespace sluice {

Worker::Worker(size_t index, const Clock& clock, RuntimePtr runtime,
               std::vector<evutil_socket_t> listen_fds)
    : index_(index),
      dispatcher_(clock),
      runtime_(std::move(runtime)),
      listen_fds_(std::move(listen_fds)),
      // Exchange ids are unique across workers: the worker index in the top bits.
      next_exchange_id_((static_cast<uint64_t>(index) << 48) + 1) {
  for (evutil_socket_t fd : listen_fds_) {
    listeners_.emplace_back(evconnlistener_new(dispatcher_.base(), &Worker::onAccept, this,
                                               LEV_OPT_CLOSE_ON_FREE, -1, fd));
  }
}

Worker::~Worker() { stop(); }

void Worker::start() {
  thread_ = std::thread([this] { dispatcher_.run(); });
}

void Worker::stop() {
  if (!thread_.joinable()) return;
  dispatcher_.post([this] {
    listeners_.clear();
    // Shutdown cancels with `draining` before the connections close (so
    // they are not counted as client disconnects). cancel() retires the
    // Exchange from exchanges_: iterate over a copy.
    std::vector<Exchange*> all;
    for (auto& [id, ex] : exchanges_) all.push_back(ex.get());
    for (auto* ex : all) ex->cancel(CancelReason::Draining);
    std::vector<Http1ServerConnection*> conns;
    for (auto& [raw, conn] : connections_) conns.push_back(raw);
    for (auto* conn : conns) conn->close();
    dispatcher_.exit();
  });
  thread_.join();
  // The loop is gone: destroy what is left on this (now single) thread.
  exchanges_.clear();
  connections_.clear();
  pools_.clear();
}

void Worker::setRuntime(RuntimePtr runtime) {
  dispatcher_.post([this, runtime = std::move(runtime)]() mutable { runtime_ = std::move(runtime); });
}

void Worker::stopAccepting() {
  dispatcher_.post([this] {
    listeners_.clear();
    std::vector<Http1ServerConnection*> conns;
    for (auto& [raw, conn] : connections_) conns.push_back(raw);
    for (auto* conn : conns) conn->closeWhenIdle();
  });
}

void Worker::cancelAll(CancelReason reason) {
  dispatcher_.post([this, reason] {
    std::vector<Exchange*> all;
    for (auto& [id, ex] : exchanges_) all.push_back(ex.get());
    for (auto* ex : all) ex->cancel(reason);
  });
}

std::vector<ExchangeSnapshot> Worker::snapshotExchanges() {
  auto promise = std::make_shared<std::promise<std::vector<ExchangeSnapshot>>>();
  auto future = promise->get_future();
  dispatcher_.post([this, promise] {
    std::vector<ExchangeSnapshot> out;
    out.reserve(exchanges_.size());
    for (auto& [id, ex] : exchanges_) {
      if (!isTerminal(ex->state())) out.push_back(ex->snapshot());
    }
    promise->set_value(std::move(out));
  });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return {};
  return future.get();
}

UpstreamPool& Worker::pool(const Runtime& runtime, size_t index) {
  auto it = pools_.find(&runtime);
  if (it == pools_.end()) {
    RuntimePools entry;
    // The pools reference this runtime's upstream configs: keep it alive with them.
    entry.runtime = runtime.shared_from_this();
    for (const auto& up : runtime.upstreams()) {
      entry.pools.push_back(std::make_unique<UpstreamPool>(dispatcher_, *up.config, up.ssl_ctx));
    }
    it = pools_.emplace(&runtime, std::move(entry)).first;
  }
  return *it->second.pools.at(index);
}

Exchange& Worker::newExchange(RequestHead& head, DownstreamStream& downstream,
                              MonotonicTime start) {
  const RouteRuntime* route = runtime_->match(head.method, head.pathOnly());
  const uint64_t id = next_exchange_id_++;
  auto ex = std::make_unique<Exchange>(*this, id, runtime_, route, &downstream, start);
  Exchange& ref = *ex;
  exchanges_.emplace(id, std::move(ex));
  active_exchanges_.store(exchanges_.size());
  return ref;
}

void Worker::retire(Exchange& exchange) {
  auto it = exchanges_.find(exchange.id());
  if (it == exchanges_.end()) return;
  dispatcher_.deferredDelete(std::move(it->second));
  exchanges_.erase(it);
  active_exchanges_.store(exchanges_.size());
}

void Worker::countUnparsedRequest(int status) {
  runtime_->noRoute().metrics->requests(status).Increment();
}

void Worker::connectionClosed(Http1ServerConnection& conn) {
  auto it = connections_.find(&conn);
  if (it == connections_.end()) return;
  dispatcher_.deferredDelete(std::move(it->second));
  connections_.erase(it);
}

void Worker::onAccept(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int, void* arg) {
  static_cast<Worker*>(arg)->accept(fd, addr);
}

void Worker::accept(evutil_socket_t fd, sockaddr* addr) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char ip[INET6_ADDRSTRLEN] = "";
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(addr)->sin_addr, ip, sizeof(ip));
  } else if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(addr)->sin6_addr, ip, sizeof(ip));
  }
  auto conn = std::make_unique<Http1ServerConnection>(*this, fd, ip);
  Http1ServerConnection* raw = conn.get();
  connections_.emplace(raw, std::move(conn));
}

}  // namespace sluice
