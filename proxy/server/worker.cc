#include "proxy/server/worker.h"

#include <arpa/inet.h>
#include <event2/bufferevent_ssl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>

#include <chrono>

#include "common/clock.h"
#include "proxy/downstream/protocol_detector.h"

namespace sluice {

namespace {

/** The codecs' limits from the config's `limits` section. */
Http1Limits http1LimitsFrom(const config::LimitsConfig& l) {
  Http1Limits out;
  out.max_header_bytes = l.max_header_bytes;
  out.max_headers = l.max_headers;
  out.header_read_timeout = l.header_read_timeout;
  out.body_read_timeout = l.body_read_timeout;
  out.idle_timeout = l.idle_timeout;
  out.send_timeout = l.send_timeout;
  return out;
}

Http2Limits http2LimitsFrom(const config::LimitsConfig& l) {
  Http2Limits out;
  out.max_concurrent_streams = l.http2_max_concurrent_streams;
  out.max_header_list_bytes = l.max_header_bytes;
  out.max_headers = l.max_headers;
  out.body_read_timeout = l.body_read_timeout;
  out.idle_timeout = l.idle_timeout;
  out.send_timeout = l.send_timeout;
  return out;
}

}  // namespace

Worker::Worker(size_t index, const Clock& clock, ConfigSnapshotPtr runtime,
               std::vector<ListenSocket> listen_sockets, AccessLog& access_log,
               InFlightGauge& in_flight, InFlightGauge& open_connections)
    : dispatcher_(clock),
      in_flight_(in_flight),
      runtime_(std::move(runtime)),
      listen_sockets_(std::move(listen_sockets)),
      // Exchange ids are unique across workers: the worker index in the top bits.
      registry_(dispatcher_, (static_cast<uint64_t>(index) << 48) + 1, &open_connections),
      access_log_(access_log, dispatcher_.base()),
      tool_cancels_(dispatcher_,
                    [this](const ConfigSnapshot& runtime, size_t index) -> UpstreamStreamSource& {
                      return pool(runtime, index);
                    }) {
  for (const ListenSocket& ls : listen_sockets_) {
    listeners_.emplace_back(evconnlistener_new(dispatcher_.base(), &Worker::onAccept, this,
                                               LEV_OPT_CLOSE_ON_FREE, -1, ls.fd));
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
    // Exchange from the registry: exchanges() is a copy.
    for (auto* ex : registry_.exchanges()) ex->cancel(CancelReason::Draining);
    for (auto* conn : allConnections()) conn->close();
    access_log_.flush();  // the cancelled exchanges' lines too
    dispatcher_.exit();
  });
  thread_.join();
  // The loop is gone: destroy what is left on this (now single) thread.
  in_flight_.remove(registry_.exchangeCount());
  registry_.clear();
  tool_cancels_.closeAll();  // before the pools their streams come from
  pools_.clear();
}

std::shared_future<void> Worker::setRuntime(ConfigSnapshotPtr runtime) {
  auto applied = std::make_shared<std::promise<void>>();
  std::shared_future<void> done = applied->get_future().share();
  dispatcher_.post([this, applied, runtime = std::move(runtime)]() mutable {
    runtime_ = std::move(runtime);
    applied->set_value();
    // The replaced config's pools drain: exchanges pinned to it finish on
    // them, new ones use the new pools. Iterate over a copy of the keys.
    std::vector<const ConfigSnapshot*> stale;
    for (const auto& [key, entry] : pools_) {
      if (key != runtime_.get() && !entry.retired) stale.push_back(key);
    }
    for (const ConfigSnapshot* key : stale) retirePools(key);
  });
  return done;
}

void Worker::retirePools(const ConfigSnapshot* key) {
  auto it = pools_.find(key);
  if (it == pools_.end() || it->second.retired) return;
  it->second.retired = true;
  for (auto& pool : it->second.pools) {
    // A pool may report drained from inside its own call stack: collect later.
    pool->retire([this] {
      if (collect_posted_) return;
      collect_posted_ = true;
      dispatcher_.post([this] {
        collect_posted_ = false;
        collectDrainedPools();
      });
    });
  }
}

void Worker::collectDrainedPools() {
  for (auto it = pools_.begin(); it != pools_.end();) {
    bool drained = it->second.retired;
    for (const auto& pool : it->second.pools) drained = drained && pool->drained();
    it = drained ? pools_.erase(it) : std::next(it);
  }
}

void Worker::stopAccepting() {
  dispatcher_.post([this] {
    listeners_.clear();
    for (auto* conn : allConnections()) conn->closeWhenIdle();
  });
}

void Worker::cancelAll(CancelReason reason) {
  dispatcher_.post([this, reason] {
    for (auto* ex : registry_.exchanges()) ex->cancel(reason);
  });
}

std::vector<ExchangeSnapshot> Worker::snapshotExchanges() {
  auto promise = std::make_shared<std::promise<std::vector<ExchangeSnapshot>>>();
  auto future = promise->get_future();
  dispatcher_.post([this, promise] {
    std::vector<ExchangeSnapshot> out;
    out.reserve(registry_.exchangeCount());
    for (Exchange* ex : registry_.exchanges()) {
      if (!isTerminal(ex->state())) out.push_back(ex->snapshot());
    }
    promise->set_value(std::move(out));
  });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return {};
  return future.get();
}

UpstreamPool& Worker::pool(const ConfigSnapshot& runtime, size_t index) {
  auto it = pools_.find(&runtime);
  if (it == pools_.end()) {
    RuntimePools entry;
    // The pools reference this runtime's upstream configs: keep it alive with them.
    entry.runtime = runtime.shared_from_this();
    for (size_t i = 0; i < runtime.poolCount(); ++i) {
      const auto [up, endpoint] = runtime.poolEndpoint(i);
      entry.pools.push_back(
          std::make_unique<UpstreamPool>(dispatcher_, *up->config, *endpoint->config, up->ssl_ctx));
    }
    it = pools_.emplace(&runtime, std::move(entry)).first;
    // A retry of an exchange still on a replaced config, after its pools were
    // collected: they serve it and close after it.
    if (&runtime != runtime_.get()) retirePools(&runtime);
  }
  return *it->second.pools.at(index);
}

RequestDecoder& Worker::newStream(RequestHead& head, DownstreamStream& downstream,
                                  MonotonicTime start) {
  Exchange& ex = registry_.newExchange(*this, runtime_, head, downstream, start);
  in_flight_.add();
  return ex;
}

void Worker::retire(Exchange& exchange) {
  if (registry_.retire(exchange)) in_flight_.remove();
}

void Worker::countUnparsedRequest(int status) {
  runtime_->noRoute().metrics->requests(status).Increment();
}

void Worker::countRejection(Rejection reason) {
  runtime_->metrics().rejections(reason).Increment();
}

void Worker::connectionClosed(DownstreamConnection& conn) { registry_.connectionClosed(conn); }

void Worker::replaceConnection(DownstreamConnection& from, DownstreamConnectionPtr to) {
  registry_.replaceConnection(from, std::move(to));
}

std::vector<DownstreamConnection*> Worker::allConnections() const {
  return registry_.connections();
}

void Worker::onAccept(evconnlistener* listener, evutil_socket_t fd, sockaddr* addr, int,
                      void* arg) {
  const EventTimeScope event_time;
  auto* self = static_cast<Worker*>(arg);
  const evutil_socket_t listen_fd = evconnlistener_get_fd(listener);
  size_t listener_index = 0;
  for (const ListenSocket& ls : self->listen_sockets_) {
    if (ls.fd == listen_fd) listener_index = ls.listener_index;
  }
  self->accept(fd, addr, listener_index);
}

void Worker::accept(evutil_socket_t fd, sockaddr* addr, size_t listener_index) {
  const config::LimitsConfig& limits = runtime_->config().limits;
  if (registry_.connectionCount() >= limits.max_connections_per_worker) {
    countRejection(Rejection::MaxConnections);
    evutil_closesocket(fd);
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char ip[INET6_ADDRSTRLEN] = "";
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(addr)->sin_addr, ip, sizeof(ip));
  } else if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(addr)->sin6_addr, ip, sizeof(ip));
  }
  const int options = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
  const auto& contexts = runtime_->listenerTls();
  SSL_CTX* ssl_ctx = listener_index < contexts.size() ? contexts[listener_index].get() : nullptr;
  BufferEventPtr bev;
  if (ssl_ctx != nullptr) {
    // The SSL object holds its own reference to the context: a reload that
    // replaces the runtime (and its certificate) never touches this connection.
    SSL* ssl = SSL_new(ssl_ctx);
    if (ssl == nullptr) {
      evutil_closesocket(fd);
      return;
    }
    bev.reset(bufferevent_openssl_socket_new(dispatcher_.base(), fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                             options));
    if (!bev) return;  // out of memory; with CLOSE_ON_FREE libevent freed the SSL object
    bufferevent_openssl_set_allow_dirty_shutdown(bev.get(), 1);
  } else {
    bev.reset(bufferevent_socket_new(dispatcher_.base(), fd, options));
    if (!bev) {
      evutil_closesocket(fd);
      return;
    }
  }
  auto conn = std::make_unique<ProtocolDetector>(*this, std::move(bev), ip, ssl_ctx != nullptr,
                                                 http1LimitsFrom(limits), http2LimitsFrom(limits));
  registry_.addConnection(std::move(conn));
}

}  // namespace sluice
