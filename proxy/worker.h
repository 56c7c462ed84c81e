#pragma once

// A worker thread: its own event_base (Dispatcher), its own SO_REUSEPORT
// listening sockets, its own upstream connection pools, and every connection
// and Exchange accepted on it. Nothing here is shared with other workers;
// other threads talk to a worker only by posting work to its Dispatcher.

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "proxy/dispatcher.h"
#include "proxy/exchange.h"
#include "proxy/http1_server_connection.h"
#include "proxy/runtime.h"
#include "proxy/upstream_pool.h"

namespace sluice {

class Worker final : public ExchangeHost, public Http1ConnectionHost {
 public:
  /** `listen_fds` are bound, listening, non-blocking sockets this worker accepts on. */
  Worker(size_t index, const Clock& clock, RuntimePtr runtime,
         std::vector<evutil_socket_t> listen_fds);
  ~Worker() override;

  /** Starts the thread. */
  void start();
  /** Stops accepting, closes everything, joins the thread. */
  void stop();

  /** Applies a new config to requests that start from now on (thread-safe). */
  void setRuntime(RuntimePtr runtime);
  /** Stops accepting new connections; idle keep-alive connections are closed (thread-safe). */
  void stopAccepting();
  /** Cancels every in-flight Exchange with `reason` (thread-safe). */
  void cancelAll(CancelReason reason);
  /** In-flight exchanges (thread-safe; waits for the worker to answer, up to 1 s). */
  std::vector<ExchangeSnapshot> snapshotExchanges();
  /** Number of in-flight exchanges (thread-safe, approximate). */
  size_t activeExchanges() const { return active_exchanges_.load(); }

  // ExchangeHost
  Dispatcher& dispatcher() override { return dispatcher_; }
  UpstreamPool& pool(const Runtime& runtime, size_t index) override;
  void retire(Exchange& exchange) override;
  bool alive(uint64_t id) const override { return exchanges_.count(id) != 0; }

  // Http1ConnectionHost
  Exchange& newExchange(RequestHead& head, DownstreamStream& downstream,
                        MonotonicTime start) override;
  void countUnparsedRequest(int status) override;
  void connectionClosed(Http1ServerConnection& conn) override;

 private:
  static void onAccept(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int len, void* arg);
  void accept(evutil_socket_t fd, sockaddr* addr);

  const size_t index_;
  Dispatcher dispatcher_;
  std::thread thread_;
  RuntimePtr runtime_;  // touched only on the worker thread after start()
  std::vector<evutil_socket_t> listen_fds_;
  std::vector<ListenerPtr> listeners_;
  std::unordered_map<Http1ServerConnection*, std::unique_ptr<Http1ServerConnection>> connections_;
  std::unordered_map<uint64_t, std::unique_ptr<Exchange>> exchanges_;
  struct RuntimePools {
    RuntimePtr runtime;  // keeps the configs the pools reference alive
    std::vector<std::unique_ptr<UpstreamPool>> pools;
  };
  std::map<const Runtime*, RuntimePools> pools_;
  uint64_t next_exchange_id_;
  std::atomic<size_t> active_exchanges_{0};
};

}  // namespace sluice
