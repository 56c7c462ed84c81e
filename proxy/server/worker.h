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

#include "proxy/downstream/downstream_connection.h"
#include "proxy/event/dispatcher.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/in_flight_gauge.h"
#include "proxy/exchange/tool_cancel_notifier.h"
#include "proxy/http/request_id.h"
#include "proxy/observability/access_log.h"
#include "proxy/server/host_registry.h"
#include "proxy/upstream/upstream_pool.h"

namespace sluice {

/** One bound, listening, non-blocking socket and the `listen` entry it serves. */
struct ListenSocket {
  evutil_socket_t fd = -1;
  size_t listener_index = 0;  // index into config `listen` (and ConfigSnapshot::listenerTls())
};

class Worker final : public ExchangeHost, public DownstreamConnectionHost {
 public:
  /**
   * `listen_sockets` are the sockets this worker accepts on (it closes them);
   * `access_log` receives this worker's access log lines in chunks.
   */
  /**
   * `in_flight` and `open_connections`: the process's exchange and
   * downstream connection counts, which this worker keeps current.
   */
  Worker(size_t index, const Clock& clock, ConfigSnapshotPtr runtime,
         std::vector<ListenSocket> listen_sockets, AccessLog& access_log, InFlightGauge& in_flight,
         InFlightGauge& open_connections);
  ~Worker() override;

  /** Starts the thread. */
  void start();
  /** Stops accepting, closes everything, joins the thread. */
  void stop();

  /**
   * Applies a new config to requests that start from now on (thread-safe).
   * The future is ready once this worker's loop took it: a request accepted
   * after that sees the new config.
   */
  std::shared_future<void> setRuntime(ConfigSnapshotPtr runtime);
  /** Stops accepting new connections; idle keep-alive connections are closed (thread-safe). */
  void stopAccepting();
  /** Cancels every in-flight Exchange with `reason` (thread-safe). */
  void cancelAll(CancelReason reason);
  /** In-flight exchanges (thread-safe; waits for the worker to answer, up to 1 s). */
  std::vector<ExchangeSnapshot> snapshotExchanges();

  // ExchangeHost
  Dispatcher& dispatcher() override { return dispatcher_; }
  UpstreamPool& pool(const ConfigSnapshot& runtime, size_t index) override;
  void retire(Exchange& exchange) override;
  bool alive(uint64_t id) const override { return registry_.alive(id); }
  IdGenerator& ids() override { return ids_; }
  AccessLogBuffer* accessLog() override { return access_log_.enabled() ? &access_log_ : nullptr; }
  ToolCancelNotifier* toolCancels() override { return &tool_cancels_; }

  // DownstreamConnectionHost
  RequestDecoder& newStream(RequestHead& head, DownstreamStream& downstream,
                            MonotonicTime start) override;
  void countUnparsedRequest(int status) override;
  void countRejection(Rejection reason) override;
  void connectionClosed(DownstreamConnection& conn) override;
  void replaceConnection(DownstreamConnection& from, DownstreamConnectionPtr to) override;
  PeerUnreadProbe* peerUnreadProbe() override { return &peer_unread_; }

 private:
  static void onAccept(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int len, void* arg);
  /**
   * A new client on `listen` entry `listener_index`: TLS listeners use the
   * CURRENT runtime's context (a reload's new certificate) and the current
   * `limits`, then protocol detection picks HTTP/1.1 or HTTP/2. Beyond
   * `limits.max_connections_per_worker` the socket is closed at once (as
   * Envoy's connection limit does), so the kernel's backlog never hides a
   * client that waits for nothing.
   */
  void accept(evutil_socket_t fd, sockaddr* addr, size_t listener_index);
  std::vector<DownstreamConnection*> allConnections() const;

  Dispatcher dispatcher_;
  InFlightGauge& in_flight_;
  std::thread thread_;
  ConfigSnapshotPtr runtime_;  // touched only on the worker thread after start()
  std::vector<ListenSocket> listen_sockets_;
  std::vector<ListenerPtr> listeners_;  // same order as listen_sockets_
  PeerUnreadProbe peer_unread_;         // outlives the connections that use it
  HostRegistry registry_;               // the live exchanges and connections
  /**
   * Pools of a runtime that is no longer the current one are retired: they
   * close what they hold as it goes idle, and collectDrainedPools() deletes
   * them (and lets go of their runtime) once they hold nothing.
   */
  void retirePools(const ConfigSnapshot* key);
  /** Deletes the retired runtimes' pools that hold nothing any more (posted, never on a pool's
   * stack). */
  void collectDrainedPools();

  struct RuntimePools {
    ConfigSnapshotPtr runtime;  // keeps the configs the pools reference alive
    std::vector<std::unique_ptr<UpstreamPool>> pools;
    bool retired = false;
  };
  std::map<const ConfigSnapshot*, RuntimePools> pools_;
  bool collect_posted_ = false;
  IdGenerator ids_;
  AccessLogBuffer access_log_;
  // notifications/cancelled to session-ful MCP servers, on this worker's pools.
  ToolCancelNotifier tool_cancels_;
};

}  // namespace sluice
