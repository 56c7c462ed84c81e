#pragma once

// The immutable, shared form of one loaded config: the config itself plus
// everything resolved from it once — metric handles, TLS contexts, the route
// table. Workers hold a shared_ptr to the current Runtime; every Exchange
// pins the Runtime it started with, so a reload applies to new requests while
// in-flight ones finish on the old config.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "config/config.h"
#include "filters/circuit_breaker/circuit_breaker.h"
#include "filters/retry/retry_decision.h"
#include "filters/spend/pricing.h"
#include "filters/throttle/global_quota.h"
#include "filters/throttle/quota_tracker.h"
#include "proxy/request_body.h"
#include "proxy/tls.h"
#include "proxy/tls_server.h"

namespace sluice {

/** Per-upstream state shared by all workers. */
struct UpstreamRuntime {
  const config::UpstreamConfig* config = nullptr;
  std::string endpoint;  // host:port of the url: the access log's `endpoint` (DESIGN §4, §7)
  std::unique_ptr<UpstreamMetrics> metrics;
  SslCtxPtr ssl_ctx;  // null for http://
  // Shared by every worker's attempts, and carried over by a reload to the
  // next Runtime when the upstream keeps its name and URL (the breaker takes
  // the new thresholds; the quota needs an identical `rate_limit`), so a
  // SIGHUP never closes an open circuit or forgets a spent quota.
  std::shared_ptr<CircuitBreaker> breaker;
  std::shared_ptr<QuotaTracker> quota;  // null when `rate_limit` is absent
  // The fleet's side of `quota` (DESIGN §6); null without `shared_state`.
  std::shared_ptr<GlobalQuota> global_quota;
};

/** Per-route state shared by all workers. */
class Runtime;
class SharedState;

struct RouteRuntime {
  const Runtime* runtime = nullptr;             // the runtime this route belongs to
  const config::RouteConfig* config = nullptr;  // null for the "no route" pseudo-route
  const UpstreamRuntime* upstream = nullptr;    // null for the "no route" pseudo-route
  size_t upstream_index = 0;
  std::unique_ptr<RouteMetrics> metrics;
  std::unique_ptr<RetryBudget> retry_budget;  // null for the "no route" pseudo-route

  const std::string& name() const { return name_; }
  std::string name_;
};

class Runtime : public std::enable_shared_from_this<Runtime> {
 public:
  /**
   * Resolves `config` against `metrics`. Returns null with `error` set when a
   * part cannot be built (e.g. an unreadable `ca_file`, a listener's missing
   * certificate). `previous` (the running Runtime on a reload, else null)
   * lends its circuit breakers and quota trackers to unchanged upstreams.
   * `shared` (with `shared_state`) links new breakers and quotas to the fleet.
   */
  static std::shared_ptr<const Runtime> build(config::ConfigPtr config, Metrics& metrics,
                                              const Clock& clock, std::string* error,
                                              const Runtime* previous = nullptr,
                                              SharedState* shared = nullptr);

  /** First route whose path prefix and method match (DESIGN §2), else null. */
  const RouteRuntime* match(std::string_view method, std::string_view path) const;

  /** The pseudo-route that counts requests no route matched or that failed to parse. */
  const RouteRuntime& noRoute() const { return no_route_; }

  const config::Config& config() const { return *config_; }
  const config::ConfigPtr& configPtr() const { return config_; }
  const std::vector<UpstreamRuntime>& upstreams() const { return upstreams_; }
  const std::vector<RouteRuntime>& routes() const { return routes_; }
  /**
   * Server TLS contexts, one per `listen` entry (same index); null for plain
   * listeners. Built from the certificate files at load, so a reload's new
   * Runtime carries freshly loaded certificates for new connections.
   */
  const std::vector<SslCtxPtr>& listenerTls() const { return listener_tls_; }
  Metrics& metrics() const { return *metrics_; }
  /** The `pricing` table, for the spend meter. */
  const PriceTable& prices() const { return prices_; }
  /**
   * Request body bytes held by the whole process, against
   * `limits.max_buffered_body_bytes`: one counter for every worker, handed on
   * from Runtime to Runtime by reloads (bodies in flight keep counting).
   */
  BodyMemory& bodyMemory() const { return *body_memory_; }
  /**
   * Risky settings worth a line in the log at start and reload: the loader's
   * warnings (config::Config::warnings), then `tls.verify: false`.
   */
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  config::ConfigPtr config_;
  Metrics* metrics_ = nullptr;
  std::vector<UpstreamRuntime> upstreams_;
  std::vector<RouteRuntime> routes_;
  std::vector<SslCtxPtr> listener_tls_;
  RouteRuntime no_route_;
  PriceTable prices_;
  std::shared_ptr<BodyMemory> body_memory_;
  std::vector<std::string> warnings_;
};

using RuntimePtr = std::shared_ptr<const Runtime>;

}  // namespace sluice
