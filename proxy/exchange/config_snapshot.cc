#include "proxy/exchange/config_snapshot.h"

#include <fnmatch.h>

#include "filters/runs/run_cancel_request.h"
#include "proxy/observability/log.h"
#include "proxy/shared_state/shared_state.h"

namespace sluice {

namespace {

bool sameRateLimit(const config::RateLimitConfig& a, const config::RateLimitConfig& b) {
  return a.key.kind == b.key.kind && a.key.header == b.key.header && a.reserve == b.reserve &&
         a.max_queue == b.max_queue;
}

/** The running upstream a reloaded one inherits state from: the same name. */
const UpstreamRuntime* predecessor(const ConfigSnapshot* previous,
                                   const config::UpstreamConfig& up) {
  if (previous == nullptr) return nullptr;
  for (const auto& old : previous->upstreams()) {
    if (old.config->name == up.name) return &old;
  }
  return nullptr;
}

/** Its endpoint a reloaded one inherits state from: the same name and URL. */
const EndpointRuntime* predecessor(const UpstreamRuntime* before,
                                   const config::EndpointConfig& endpoint) {
  if (before == nullptr) return nullptr;
  for (const auto& old : before->endpoints) {
    const config::EndpointConfig& e = *old.config;
    if (e.name == endpoint.name && e.url.scheme == endpoint.url.scheme &&
        e.url.host == endpoint.url.host && e.url.port == endpoint.url.port) {
      return &old;
    }
  }
  return nullptr;
}

int gaugeValue(CircuitState state) { return static_cast<int>(state); }

/**
 * A new circuit breaker for one endpoint. Its listener outlives this ConfigSnapshot
 * when a reload carries the breaker over: it holds the registry's metric
 * handles (alive as long as Metrics) and the upstream's shared
 * UpstreamCircuitState, never this ConfigSnapshot's UpstreamMetrics.
 */
std::shared_ptr<CircuitBreaker> makeBreaker(const config::UpstreamConfig& up,
                                            const config::EndpointConfig& endpoint,
                                            UpstreamMetrics& metrics,
                                            EndpointMetrics& endpoint_metrics,
                                            std::shared_ptr<UpstreamCircuitState> upstream_state,
                                            const Clock& clock) {
  prometheus::Gauge* state = &endpoint_metrics.circuitState();
  prometheus::Counter* to_closed = &metrics.circuitTransitions("closed");
  prometheus::Counter* to_open = &metrics.circuitTransitions("open");
  prometheus::Counter* to_half_open = &metrics.circuitTransitions("half_open");
  return std::make_shared<CircuitBreaker>(
      up.circuit_breaker, clock,
      // Under the breaker's lock: metrics only, so the gauge follows the transition order.
      [state, to_closed, to_open, to_half_open, upstream_state = std::move(upstream_state)](
          CircuitState, CircuitState to) {
        state->Set(gaugeValue(to));
        upstream_state->refresh();
        (to == CircuitState::Open       ? to_open
         : to == CircuitState::HalfOpen ? to_half_open
                                        : to_closed)
            ->Increment();
      },
      // After the lock is released: the log line (never logged under the breaker's lock).
      [name = up.name, endpoint = endpoint.name](CircuitState from, CircuitState to) {
        logEvent(to == CircuitState::Open ? LogLevel::Warn : LogLevel::Info,
                 "sluice: circuit of upstream " + name + " endpoint " + endpoint + " is now " +
                     std::string(toString(to)),
                 {{"event", "circuit_transition"},
                  {"upstream", name},
                  {"endpoint", endpoint},
                  {"from", toString(from)},
                  {"to", toString(to)}});
      });
}

}  // namespace

std::shared_ptr<const ConfigSnapshot> ConfigSnapshot::build(config::ConfigPtr config,
                                                            Metrics& metrics, const Clock& clock,
                                                            std::string* error,
                                                            const ConfigSnapshot* previous,
                                                            SharedState* shared) {
  auto rt = std::make_shared<ConfigSnapshot>();
  rt->config_ = std::move(config);
  rt->metrics_ = &metrics;
  rt->body_memory_ = previous != nullptr
                         ? previous->body_memory_
                         : std::make_shared<BodyMemory>(&metrics.requestBodyBuffered());
  const config::Config& cfg = *rt->config_;
  rt->warnings_ = cfg.warnings;  // the loader's advice, logged with the runtime's own
  if (cfg.runs) {
    RunTable::Limits limits;
    limits.budget = cfg.runs->budget;
    limits.idle_expiry = cfg.runs->idle_expiry;
    limits.tombstone = cfg.runs->tombstone;
    limits.max_runs = cfg.runs->max_runs;
    limits.max_usd = cfg.runs->max_usd;
    if (previous != nullptr && previous->runs_) {
      rt->runs_ = previous->runs_;
      rt->runs_->setLimits(limits);
    } else {
      rt->runs_ = std::make_shared<RunTable>(clock, limits);
      Metrics* m = &metrics;
      rt->runs_->setEndingListener(
          [m](RunTable::Ending e) { m->runEndings(RunTable::toString(e)).Increment(); });
      rt->runs_->setActiveListener(
          [m](size_t active) { m->runsActive().Set(static_cast<double>(active)); });
      if (shared != nullptr) {
        // A cancel here reaches the peers; theirs reach this table (the
        // shared state outlives the runtimes: it is the server's).
        // Tombstones and capped runs' spend are kept in Redis for the fleet.
        shared->linkRuns(rt->runs_);
      }
    }
  }

  rt->listener_tls_.reserve(cfg.listeners.size());
  for (const auto& listener : cfg.listeners) {
    SslCtxPtr ctx;
    if (listener.tls) {
      TlsError tls_error;
      ctx = makeServerSslCtx(*listener.tls, &tls_error);
      if (!ctx) {
        if (error) *error = "listener " + listener.address.toString() + ": " + tls_error.message;
        return nullptr;
      }
    }
    rt->listener_tls_.push_back(std::move(ctx));
  }

  std::vector<std::pair<CircuitBreaker*, const config::CircuitBreakerConfig*>> carried_breakers;
  rt->upstreams_.reserve(cfg.upstreams.size());
  for (const auto& up : cfg.upstreams) {
    UpstreamRuntime u;
    u.config = &up;
    u.metrics = std::make_unique<UpstreamMetrics>(metrics, up.name);
    bool any_tls = false;
    for (const auto& endpoint : up.endpoints) any_tls = any_tls || endpoint.url.isTls();
    if (any_tls) {
      TlsError tls_error;
      u.ssl_ctx = makeUpstreamSslCtx(up.tls, up.http2, &tls_error);
      if (!u.ssl_ctx) {
        if (error) *error = "upstream " + up.name + ": " + tls_error.message;
        return nullptr;
      }
    }
    for (const auto& endpoint : up.endpoints) {
      if (endpoint.url.isTls() && !up.tls.verify) {
        rt->warnings_.push_back("upstream " + up.name +
                                ": tls.verify is false: " + endpoint.url.authority() +
                                "'s certificate is not checked (anyone on the path can read the "
                                "traffic and its API keys)");
      }
    }
    const UpstreamRuntime* before = predecessor(previous, up);
    u.circuit_state = before != nullptr
                          ? before->circuit_state
                          : std::make_shared<UpstreamCircuitState>(&u.metrics->circuitState());
    u.tool_annotations =
        before != nullptr ? before->tool_annotations : std::make_shared<ToolAnnotationTable>();
    u.mcp_sessions = before != nullptr ? before->mcp_sessions : std::make_shared<McpSessionTable>();
    if (shared != nullptr) {  // sessions learned here reach the peers, and theirs come here
      std::vector<std::string> names;
      for (const auto& endpoint : up.endpoints) names.push_back(endpoint.name);
      shared->linkSessions(u.mcp_sessions, up.name, names);
    }
    std::vector<prometheus::Gauge*> endpoint_gauges;
    for (const auto& endpoint : up.endpoints) {
      EndpointRuntime e;
      e.config = &endpoint;
      e.metrics = std::make_unique<EndpointMetrics>(metrics, up.name, endpoint.name);
      const EndpointRuntime* old = predecessor(before, endpoint);
      if (old != nullptr) {
        e.breaker = old->breaker;  // new thresholds applied once the build cannot fail
        carried_breakers.emplace_back(e.breaker.get(), &up.circuit_breaker);
      } else {
        e.breaker = makeBreaker(up, endpoint, *u.metrics, *e.metrics, u.circuit_state, clock);
        if (shared != nullptr) {
          e.breaker->setGlobal(shared->circuit(e.breaker, up.name, endpoint.name));
        }
      }
      prometheus::Gauge* gauge = &e.metrics->circuitState();
      gauge->Set(gaugeValue(e.breaker->state()));
      endpoint_gauges.push_back(gauge);
      if (up.rate_limit) {
        if (old != nullptr && old->quota && before->config->rate_limit &&
            sameRateLimit(*before->config->rate_limit, *up.rate_limit)) {
          e.quota = old->quota;
        } else {
          e.quota = std::make_shared<QuotaTracker>(*up.rate_limit, clock);
        }
        if (shared != nullptr) {
          e.global_quota = shared->quota(up.name, endpoint.name, up.rate_limit->reserve);
        }
      }
      u.endpoints.push_back(std::move(e));
    }
    u.circuit_state->setEndpoints(std::move(endpoint_gauges));
    rt->upstreams_.push_back(std::move(u));
  }
  // Now that nothing moves any more: the filters' view of each endpoint, and
  // the flat pool numbering.
  for (auto& u : rt->upstreams_) {
    for (auto& e : u.endpoints) {
      e.pool_index = rt->pool_endpoints_.size();
      rt->pool_endpoints_.emplace_back(&u, &e);
      e.destination = AttemptDestination{
          .upstream = u.config->name,
          .endpoint = e.config->name,
          .breaker = e.breaker.get(),
          .quota = e.quota.get(),
          .rate_limit = u.config->rate_limit ? &*u.config->rate_limit : nullptr,
          .global_quota = e.global_quota.get(),
          .metrics = u.metrics.get(),
          .endpoint_metrics = e.metrics.get(),
          .model = {},
      };
    }
  }

  rt->routes_.reserve(cfg.routes.size());
  for (const auto& route : cfg.routes) {
    RouteRuntime r;
    r.runtime = rt.get();
    r.config = &route;
    r.upstream = &rt->upstreams_.at(route.upstream_index);
    r.chain.push_back(r.upstream);
    for (const auto& fallback : route.fallback) {
      r.chain.push_back(&rt->upstreams_.at(fallback.upstream_index));
    }
    r.name_ = route.name;
    r.metrics = std::make_unique<RouteMetrics>(metrics, route.name, route.upstream);
    r.retry_budget = std::make_unique<RetryBudget>(route.retry.budget_percent);
    if (route.protocol == config::RouteProtocol::Mcp) {
      r.tools = std::make_unique<ToolRoute>(route.tools, metrics, route.name);
      for (const UpstreamRuntime* up : r.chain)
        r.tools->addUpstream(up->name(), up->tool_annotations, up->mcp_sessions);
    }
    rt->routes_.push_back(std::move(r));
  }
  for (auto [breaker, breaker_config] : carried_breakers) breaker->updateConfig(*breaker_config);
  for (auto& u : rt->upstreams_) u.circuit_state->refresh();
  rt->prices_ = PriceTable(cfg.pricing);
  rt->no_route_.runtime = rt.get();
  rt->no_route_.name_ = "none";
  rt->no_route_.metrics = std::make_unique<RouteMetrics>(metrics, "none", "none");
  return rt;
}

void UpstreamCircuitState::setEndpoints(std::vector<prometheus::Gauge*> endpoint_gauges) {
  std::lock_guard lock(mu_);
  endpoints_ = std::move(endpoint_gauges);
}

void UpstreamCircuitState::refresh() {
  std::lock_guard lock(mu_);
  bool any_closed = false, any_half_open = false;
  for (const prometheus::Gauge* g : endpoints_) {
    const auto state = static_cast<CircuitState>(static_cast<int>(g->Value()));
    any_closed = any_closed || state == CircuitState::Closed;
    any_half_open = any_half_open || state == CircuitState::HalfOpen;
  }
  const CircuitState upstream = any_closed      ? CircuitState::Closed
                                : any_half_open ? CircuitState::HalfOpen
                                                : CircuitState::Open;
  upstream_->Set(gaugeValue(upstream));
}

const RouteRuntime* ConfigSnapshot::match(std::string_view method, std::string_view path,
                                          const std::string* model) const {
  for (const auto& route : routes_) {
    const auto& m = route.config->match;
    if (path.substr(0, m.path_prefix.size()) != m.path_prefix) continue;
    if (!m.methods.empty()) {
      bool ok = false;
      for (const auto& allowed : m.methods) ok = ok || allowed == method;
      if (!ok) continue;
    }
    // A shell glob, as the pricing table's (fnmatch(3)).
    if (model != nullptr && !m.model.empty() && fnmatch(m.model.c_str(), model->c_str(), 0) != 0) {
      continue;
    }
    return &route;
  }
  return nullptr;
}

std::optional<LocalReply> ConfigSnapshot::answerRunCancel(const RequestHead& request) const {
  if (runs_ == nullptr) return std::nullopt;
  return answerRunCancelRequest(request, *config().runs, *runs_);
}

}  // namespace sluice
