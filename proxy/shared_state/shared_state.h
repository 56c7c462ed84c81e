#pragma once

// Shared state across replicas (docs/design.md §6): the Redis side of GlobalQuota and
// GlobalCircuit, for one sluice process.
//
// One RedisClient per worker, on that worker's own event loop: a request's
// Redis call goes out and comes back on the thread that serves it, never
// blocking it (a thread-local pointer finds the worker's client). Worker 0
// also holds the subscriber connection that receives the peers' circuit
// transitions. Every call is bounded by `shared_state.timeout`; when Redis is
// slow or down each decision falls back to the local state at once.
//
// Keys (nothing secret: the quota key is already a hash of the API key):
//   <prefix>q:<scope>:<quota key>   hash: limit, avail, reset, wend (requests),
//                                   tlimit, tavail, treset, twend (tokens), probe
//   <prefix>c:<scope>:probe         the fleet's half-open probe permit
//   <prefix>c:<scope>:open          an open circuit ("<instance> <ms>"), expiring with
//                                   its cooldown: read back on (re)connect
//   <prefix>r:<run id>:spend        a capped run's spend in USD across the fleet
//                                   (INCRBYFLOAT), expiring runs.idle_expiry after its last change
//   <prefix>r:<run id>:ended        a cancelled run's tombstone ("cancelled" or
//                                   "spend_cap"), expiring after runs.tombstone:
//                                   read for the runs held on (re)subscribing
//   <prefix>circuit                 pub/sub channel of circuit transitions, of
//                                   run endings ("run <instance> cancel <run id>",
//                                   "run <instance> spend_cap <run id>"),
//                                   and of MCP sessions learned
//                                   ("session <instance> <scope> <session key>":
//                                   the key is a hash of the session id)
// <scope> is the first 16 hex chars of SHA-256(upstream "\n" endpoint). Times
// in Redis are Redis's own clock (TIME inside the scripts), so replicas'
// clocks never need to agree.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "config/config.h"
#include "filters/circuit_breaker/circuit_breaker.h"
#include "filters/circuit_breaker/global_circuit.h"
#include "filters/runs/run_table.h"
#include "filters/throttle/global_quota.h"
#include "filters/tools/mcp_sessions.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/tls.h"
#include "proxy/shared_state/redis_client.h"

namespace sluice {

/** The 16-hex-char hash naming one (upstream, endpoint) in Redis keys and messages. */
std::string sharedScope(std::string_view upstream, std::string_view endpoint);

class SharedState {
 public:
  /** `ssl_ctx`: for `rediss://` (null for redis://); `clock` times the quota reports. */
  SharedState(const config::SharedStateConfig& config, Metrics& metrics, const Clock& clock,
              SslCtxPtr ssl_ctx);
  ~SharedState();
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;

  /**
   * Starts one client on each worker loop (posted: each is built and
   * connected on its own thread); loops[0] also gets the subscriber.
   */
  void attach(const std::vector<Dispatcher*>& loops);
  /** Destroys the clients. Call once the loops stopped running. */
  void detach();

  /** The quota of one (upstream, endpoint), shared with the fleet; `reserve` = rate_limit.reserve.
   */
  std::shared_ptr<GlobalQuota> quota(std::string_view upstream, std::string_view endpoint,
                                     int64_t reserve);
  /**
   * Links `breaker` (the circuit of one upstream, endpoint) with its peers:
   * their transitions reach it through applyPeer(). Returns what the breaker
   * takes as setGlobal().
   */
  std::shared_ptr<GlobalCircuit> circuit(const std::shared_ptr<CircuitBreaker>& breaker,
                                         std::string_view upstream, std::string_view endpoint);

  const config::SharedStateConfig& config() const { return config_; }
  /**
   * Links the process's run table with the fleet: its lookups, spend and
   * endings go to Redis (runFleet()), the runs a peer ended reach it
   * (pub/sub: cancel(from_peer) or capFromPeer, on worker 0's thread), and
   * each time the subscription takes effect (the first connect and every
   * reconnect) the runs it holds still running are read against the
   * fleet's tombstones (MGET, kRecheckBatch ids a command) and those ended
   * elsewhere end here: a cancel published while this process could not
   * hear it is not missed. One table: a later call replaces it.
   */
  void linkRuns(const std::shared_ptr<RunTable>& table);
  /** Run ids per MGET of a re-check. */
  static constexpr size_t kRecheckBatch = 500;
  std::shared_ptr<RunTable::Fleet> runFleet();

  /**
   * Links the MCP session table of `upstream` with the peers' (docs/design.md
   * §10): sessions learned here are published (PUBLISH from the calling
   * worker's client; dropped and counted as an error while it is down), and
   * the peers' are learned into `table`, for the endpoints named in
   * `endpoints`. Called again by a reload with the upstream's new endpoints.
   */
  void linkSessions(const std::shared_ptr<McpSessionTable>& table, std::string_view upstream,
                    const std::vector<std::string>& endpoints);

  /** Every connection of this process (and the subscriber) is up: sluice_shared_state_up. */
  bool up() const { return down_count_.load() == 0; }
  /**
   * How often the subscriber PINGs to find out whether its connection still
   * works (its answer is due within max(timeout, interval)); tests shorten it.
   * Call before attach().
   */
  void setSubscriberPing(std::chrono::milliseconds interval) { subscriber_ping_ = interval; }
  /** The subscriber's PING interval unless told otherwise. */
  static constexpr std::chrono::milliseconds kSubscriberPing{1000};
  /** This process's id in messages (a peer's own messages are ignored). */
  const std::string& instance() const { return instance_; }

  /** The calling worker's client when it is up; null otherwise. */
  RedisClient* client() const;
  /** Counts one failed call of `op` that never reached a client. */
  void countError(std::string_view op) const;

  // The Lua scripts' SHA-1s (EVALSHA); loaded on every (re)connect.
  const std::string& reserveSha() const { return reserve_sha_; }
  const std::string& observeSha() const { return observe_sha_; }

  /**
   * Called by the quotas: `resp` (an observe call, formatted) could not be
   * sent; it is kept (the latest per Redis key) and sent when a client is up
   * again.
   */
  void keepForLater(std::string key, std::string resp);

 private:
  struct Loop {
    Dispatcher* dispatcher = nullptr;
    std::unique_ptr<RedisClient> client;
    std::unique_ptr<RedisClient> subscriber;  // loops[0] only
  };

  /**
   * A client came up or went down (`client` null: the subscriber). The
   * command client of worker 0 (`replays_circuits`) also reads the open
   * circuits when it comes up.
   */
  void onClientState(RedisClient* client, bool up, std::string_view reason, bool replays_circuits);
  /** A connect failed: logged when it is the first, or its reason is new, while down. */
  void onConnectFailed(std::string_view reason);
  /** The registered breakers still alive, by scope (all scopes, or only `only_scope`). */
  std::vector<std::pair<std::string, std::vector<std::shared_ptr<CircuitBreaker>>>> liveCircuits(
      const std::string* only_scope);
  /**
   * On worker 0's (re)connect and when the subscription takes effect: announce
   * this process's open circuits, learn the peers' from their open keys.
   */
  void replayCircuits(RedisClient& client);
  /** On the same occasions: the runs held here, against the fleet's tombstones (linkRuns). */
  void recheckRuns(RedisClient& client);
  void applyStoredOpen(const std::string& scope, const redisReply* reply);
  void onMessage(std::string_view message);
  friend class RedisRunFleet;
  /** Runs `fn` on worker 0's loop with its client (null when down or detached: then at once). */
  void onWorker0(std::function<void(RedisClient*)> fn);
  void flushKept(RedisClient& client);

  const config::SharedStateConfig config_;
  const Clock& clock_;
  const SslCtxPtr ssl_ctx_;
  const Metrics::SharedStateSeries& series_;
  const std::string instance_;
  const std::string channel_;
  std::string reserve_sha_;
  std::string observe_sha_;

  std::vector<Loop> loops_;
  std::chrono::milliseconds subscriber_ping_ = kSubscriberPing;
  std::mutex up_mu_;                // down_count_, the up gauge and the log change together
  std::atomic<int> down_count_{0};  // clients (and the subscriber) not up
  std::string logged_reason_;       // the down reason last logged ("" = none since up)

  std::mutex mu_;  // guards circuits_ and kept_
  std::map<std::string, std::vector<std::weak_ptr<CircuitBreaker>>> circuits_;  // by scope
  std::map<std::string, std::string> kept_;  // observe calls (RESP), by Redis key
  std::weak_ptr<RunTable> runs_;             // guarded by mu_
  // The MCP session tables, by the scope of each of their endpoints; guarded by mu_.
  struct SessionTarget {
    std::weak_ptr<McpSessionTable> table;
    std::string endpoint;
  };
  std::map<std::string, SessionTarget> sessions_;
};

}  // namespace sluice
