#pragma once

// The immutable, shared form of one loaded config: the config itself plus
// everything resolved from it once — metric handles, TLS contexts, the route
// table. Workers hold a shared_ptr to the current ConfigSnapshot; every Exchange
// pins the ConfigSnapshot it started with, so a reload applies to new requests while
// in-flight ones finish on the old config.

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
#include "filters/filter.h"
#include "filters/retry/retry_decision.h"
#include "filters/runs/run_table.h"
#include "filters/spend/pricing.h"
#include "filters/throttle/global_quota.h"
#include "filters/throttle/quota_tracker.h"
#include "filters/tools/tools_filter.h"
#include "proxy/event/tls.h"
#include "proxy/event/tls_server.h"
#include "proxy/http/request_body.h"

namespace sluice {

/**
 * sluice_circuit_state{upstream}, derived from its endpoints' circuits
 * (README "Endpoints and fallback"): closed while any endpoint is closed,
 * half-open while any is half-open, open only when every endpoint is. One per
 * upstream name, carried over by reloads with the breakers that update it.
 */
class UpstreamCircuitState {
 public:
  explicit UpstreamCircuitState(prometheus::Gauge* upstream_gauge) : upstream_(upstream_gauge) {}
  /** The endpoints' gauges (sluice_endpoint_circuit_state), as the current config lists them. */
  void setEndpoints(std::vector<prometheus::Gauge*> endpoint_gauges);
  /** Recomputes the upstream's gauge from its endpoints'. */
  void refresh();

 private:
  std::mutex mu_;
  prometheus::Gauge* const upstream_;
  std::vector<prometheus::Gauge*> endpoints_;
};

/** One endpoint of an upstream (docs/design.md §5): its state, shared by all workers. */
struct EndpointRuntime {
  const config::EndpointConfig* config = nullptr;
  size_t pool_index = 0;  // this endpoint's pool in each worker (ConfigSnapshot::poolCount())
  // Shared by every worker's attempts, and carried over by a reload to the
  // next ConfigSnapshot when the upstream keeps its name and the endpoint its name
  // and URL (the breaker takes the new thresholds; the quota needs an
  // identical `rate_limit`), so a SIGHUP never closes an open circuit or
  // forgets a spent quota.
  std::shared_ptr<CircuitBreaker> breaker;
  std::shared_ptr<QuotaTracker> quota;  // null when `rate_limit` is absent
  // The fleet's side of `quota` (docs/design.md §6); null without `shared_state`.
  std::shared_ptr<GlobalQuota> global_quota;
  // What the filters see of an attempt sent here (pointers into the above).
  AttemptDestination destination;
  std::unique_ptr<EndpointMetrics> metrics;  // its attempts, by result

  const std::string& name() const { return config->name; }
};

/** Per-upstream state shared by all workers. */
struct UpstreamRuntime {
  const config::UpstreamConfig* config = nullptr;
  std::unique_ptr<UpstreamMetrics> metrics;
  SslCtxPtr ssl_ctx;  // null when no endpoint is https://
  std::vector<EndpointRuntime> endpoints;
  std::shared_ptr<UpstreamCircuitState> circuit_state;
  // What its tools/list answers said about its tools (docs/design.md §10);
  // kept across reloads by upstream name.
  std::shared_ptr<ToolAnnotationTable> tool_annotations;
  // Which endpoint issued each MCP session (docs/design.md §10); kept across
  // reloads by upstream name (a session whose endpoint is gone is placed as usual).
  std::shared_ptr<McpSessionTable> mcp_sessions;

  const std::string& name() const { return config->name; }
};

/** Per-route state shared by all workers. */
class ConfigSnapshot;
class SharedState;

struct RouteRuntime {
  const ConfigSnapshot* runtime = nullptr;      // the runtime this route belongs to
  const config::RouteConfig* config = nullptr;  // null for the "no route" pseudo-route
  const UpstreamRuntime* upstream = nullptr;    // null for the "no route" pseudo-route
  // The upstream, then its `fallback` upstreams in order (docs/design.md §5); empty
  // for the "no route" pseudo-route.
  std::vector<const UpstreamRuntime*> chain;
  std::unique_ptr<RouteMetrics> metrics;
  std::unique_ptr<RetryBudget> retry_budget;  // null for the "no route" pseudo-route
  std::unique_ptr<ToolRoute> tools;           // `protocol: mcp` routes only

  const std::string& name() const { return name_; }
  std::string name_;
};

class ConfigSnapshot : public std::enable_shared_from_this<ConfigSnapshot> {
 public:
  /**
   * Resolves `config` against `metrics`. Returns null with `error` set when a
   * part cannot be built (e.g. an unreadable `ca_file`, a listener's missing
   * certificate). `previous` (the running ConfigSnapshot on a reload, else null)
   * lends its circuit breakers and quota trackers to unchanged upstreams.
   * `shared` (with `shared_state`) links new breakers and quotas to the fleet.
   */
  static std::shared_ptr<const ConfigSnapshot> build(config::ConfigPtr config, Metrics& metrics,
                                                     const Clock& clock, std::string* error,
                                                     const ConfigSnapshot* previous = nullptr,
                                                     SharedState* shared = nullptr);

  /**
   * First route whose path prefix and method match (docs/design.md §2) and, when it
   * has a `match.model` glob, whose glob matches `model` (the body's
   * top-level "model"; "" when it has none), else null. With `model` null
   * (the body is not in yet) a route with a model glob matches on path and
   * method alone: the Exchange asks again once it has the body.
   */
  const RouteRuntime* match(std::string_view method, std::string_view path,
                            const std::string* model = nullptr) const;

  /** The pseudo-route that counts requests no route matched or that failed to parse. */
  const RouteRuntime& noRoute() const { return no_route_; }

  const config::Config& config() const { return *config_; }
  const config::ConfigPtr& configPtr() const { return config_; }
  const std::vector<UpstreamRuntime>& upstreams() const { return upstreams_; }
  /** Every endpoint of every upstream has one connection pool per worker: this many. */
  size_t poolCount() const { return pool_endpoints_.size(); }
  /** The upstream and endpoint of pool `index`. */
  std::pair<const UpstreamRuntime*, const EndpointRuntime*> poolEndpoint(size_t index) const {
    return pool_endpoints_.at(index);
  }
  const std::vector<RouteRuntime>& routes() const { return routes_; }
  /**
   * Server TLS contexts, one per `listen` entry (same index); null for plain
   * listeners. Built from the certificate files at load, so a reload's new
   * ConfigSnapshot carries freshly loaded certificates for new connections.
   */
  const std::vector<SslCtxPtr>& listenerTls() const { return listener_tls_; }
  Metrics& metrics() const { return *metrics_; }
  /** The `pricing` table, for the spend meter. */
  const PriceTable& prices() const { return prices_; }
  /**
   * Request body bytes held by the whole process, against
   * `limits.max_buffered_body_bytes`: one counter for every worker, handed on
   * from ConfigSnapshot to ConfigSnapshot by reloads (bodies in flight keep counting).
   */
  BodyMemory& bodyMemory() const { return *body_memory_; }
  /**
   * Risky settings worth a line in the log at start and reload: the loader's
   * warnings (config::Config::warnings), then `tls.verify: false`.
   */
  const std::vector<std::string>& warnings() const { return warnings_; }
  /**
   * The process's runs (docs/design.md §9), null without `runs`: one table
   * for every worker, handed on from ConfigSnapshot to ConfigSnapshot by reloads (a run
   * and its cancel outlive a SIGHUP).
   */
  RunTable* runs() const { return runs_.get(); }
  /**
   * sluice's own `DELETE /sluice/runs/{id}` (runs.cancel_token), answered
   * before any route; nullopt when `request` is not one or runs are off.
   */
  std::optional<LocalReply> answerRunCancel(const RequestHead& request) const;

 private:
  config::ConfigPtr config_;
  Metrics* metrics_ = nullptr;
  std::vector<UpstreamRuntime> upstreams_;
  std::vector<std::pair<const UpstreamRuntime*, const EndpointRuntime*>> pool_endpoints_;
  std::vector<RouteRuntime> routes_;
  std::vector<SslCtxPtr> listener_tls_;
  RouteRuntime no_route_;
  PriceTable prices_;
  std::shared_ptr<BodyMemory> body_memory_;
  std::shared_ptr<RunTable> runs_;
  std::vector<std::string> warnings_;
};

using ConfigSnapshotPtr = std::shared_ptr<const ConfigSnapshot>;

}  // namespace sluice
