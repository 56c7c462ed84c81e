#pragma once

// The sluice process in one object: config → ConfigSnapshot, the listening sockets
// (one SO_REUSEPORT socket per worker per listener), the workers, the admin
// server and the metrics registry. main() builds one; integration tests build
// one in-process on port 0 and read the bound ports back.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "config/config.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/in_flight_gauge.h"
#include "proxy/observability/access_log.h"
#include "proxy/server/admin_server.h"
#include "proxy/server/worker.h"
#include "proxy/shared_state/shared_state.h"

namespace sluice {

class Server {
 public:
  explicit Server(config::ConfigPtr config, const Clock& clock = RealClock::instance());
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /**
   * Binds every socket, opens the access log and starts the workers and
   * admin. False + `error` on failure. Ignores SIGPIPE for the whole process: a write to a client
   * that reset its connection must be an EPIPE sluice handles, not a signal that kills it (library
   * users need not know). Logs the config's warnings (e.g. `tls.verify: false`) to stderr.
   */
  bool start(std::string* error);
  /**
   * `--check-config`: everything start() would load from files, loaded the
   * same way (TLS certificates, keys and CA files of listeners, upstreams and
   * shared_state, the access log's file), binding nothing. False + the
   * message start() would give.
   */
  static bool check(const config::ConfigPtr& config, std::string* error);
  /**
   * Stops everything at once (in-flight exchanges are cancelled with
   * `draining`). The access log's last lines get until the drain deadline
   * (drain()'s start + drain_timeout; without a drain, now + drain_timeout)
   * to reach a slow reader; what is left then is dropped and counted.
   */
  void stop();
  /** When shutdown gives up on slow log readers: set by drain(), else now + drain_timeout. */
  std::chrono::steady_clock::time_point shutdownDeadline() const;

  /**
   * Graceful drain (docs/design.md §3): /ready turns 503, listeners close, in-flight
   * exchanges get `drain_timeout` to finish, the rest are cancelled with
   * `draining`. Returns when no exchange is left, with the number of
   * exchanges that were still in flight at the deadline and got cancelled.
   * Thread-safe; only the first call drains (later ones return 0 at once).
   */
  size_t drain();
  /** Asks the owner's wait loop to drain and exit (signal handlers, POST /drain). */
  void requestShutdown();
  /** Blocks until requestShutdown() (used by main). */
  void waitForShutdownRequest();

  /**
   * Applies a new, already validated config to new requests; TLS listeners
   * serve its (freshly loaded) certificates to new connections while live
   * ones keep theirs. Refused (false + `error`) when the certificates cannot
   * be loaded, or when `listen` (addresses, count, TLS on/off), `admin` or
   * `workers` changed: those need a restart, and `error` names the key.
   */
  bool reload(config::ConfigPtr config, std::string* error);
  /**
   * SIGHUP: reopens the access log file (logrotate), then re-reads `path`
   * and applies it with reload(). An invalid file (its FILE:LINE:COL error in
   * `error`) or a refused reload leaves the running config in force. Either
   * way the attempt is counted in sluice_config_reloads_total{result}, after
   * the access log was reopened.
   */
  bool reloadFile(const std::string& path, std::string* error);

  /** The port listener `i` actually bound (port 0 in config = any free port). */
  uint16_t listenerPort(size_t i = 0) const { return listener_ports_.at(i); }
  uint16_t adminPort() const { return admin_.port(); }
  /**
   * /ready: not draining, and with `shared_state.required` the shared store
   * is up (sluice_shared_state_up).
   */
  bool ready() const;

  Metrics& metrics() { return metrics_; }
  ConfigSnapshotPtr runtime() const;
  /** In-flight exchanges across all workers. */
  std::vector<ExchangeSnapshot> exchanges();
  size_t activeExchanges() const;

 private:
  const Clock& clock_;
  Metrics metrics_;
  // Before runtime_: the runtimes' breakers and quotas hold references to it.
  std::unique_ptr<SharedState> shared_;
  AccessLog access_log_;
  mutable std::mutex mu_;
  ConfigSnapshotPtr runtime_;
  std::string init_error_;
  InFlightGauge in_flight_;         // before workers_: they update it until they stop
  InFlightGauge open_connections_;  // downstream connections, likewise
  // How long drain() waits for the connections to write their last bytes.
  static constexpr std::chrono::seconds kDrainFlush{1};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<uint16_t> listener_ports_;
  AdminServer admin_;
  std::atomic<bool> draining_{false};       // /ready is 503
  std::atomic<bool> drain_started_{false};  // drain() ran (requestShutdown only flips draining_)
  // drain()'s start + drain_timeout (steady clock ticks; 0 = no drain yet).
  std::atomic<std::chrono::steady_clock::rep> drain_deadline_{0};
  std::atomic<bool> started_{false};
  std::mutex shutdown_mu_;
  std::condition_variable shutdown_cv_;
  bool shutdown_requested_ = false;
};

}  // namespace sluice
