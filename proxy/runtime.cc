#include "proxy/runtime.h"

namespace sluice {

std::shared_ptr<const Runtime> Runtime::build(config::ConfigPtr config, Metrics& metrics,
                                              const Clock& clock, std::string* error) {
  auto rt = std::make_shared<Runtime>();
  rt->config_ = std::move(config);
  rt->metrics_ = &metrics;
  const config::Config& cfg = *rt->config_;

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

  rt->upstreams_.reserve(cfg.upstreams.size());
  for (const auto& up : cfg.upstreams) {
    UpstreamRuntime u;
    u.config = &up;
    u.metrics = std::make_unique<UpstreamMetrics>(metrics, up.name);
    if (up.url.isTls()) {
      TlsError tls_error;
      u.ssl_ctx = makeUpstreamSslCtx(up.tls, up.http2, &tls_error);
      if (!u.ssl_ctx) {
        if (error) *error = "upstream " + up.name + ": " + tls_error.message;
        return nullptr;
      }
    }
    UpstreamMetrics* um = u.metrics.get();
    um->circuitState().Set(0);
    u.breaker = std::make_unique<CircuitBreaker>(
        up.circuit_breaker, clock, [um](CircuitState, CircuitState to) {
          um->circuitState().Set(static_cast<double>(static_cast<int>(to)));
          um->circuitTransitions(toString(to)).Increment();
        });
    if (up.rate_limit) u.quota = std::make_unique<QuotaTracker>(*up.rate_limit, clock);
    rt->upstreams_.push_back(std::move(u));
  }

  rt->routes_.reserve(cfg.routes.size());
  for (const auto& route : cfg.routes) {
    RouteRuntime r;
    r.runtime = rt.get();
    r.config = &route;
    r.upstream_index = route.upstream_index;
    r.upstream = &rt->upstreams_.at(route.upstream_index);
    r.name_ = route.name;
    r.metrics = std::make_unique<RouteMetrics>(metrics, route.name, route.upstream);
    r.retry_budget = std::make_unique<RetryBudget>(route.retry.budget_percent);
    rt->routes_.push_back(std::move(r));
  }
  rt->prices_ = PriceTable(cfg.pricing);
  rt->no_route_.runtime = rt.get();
  rt->no_route_.name_ = "none";
  rt->no_route_.metrics = std::make_unique<RouteMetrics>(metrics, "none", "none");
  return rt;
}

const RouteRuntime* Runtime::match(std::string_view method, std::string_view path) const {
  for (const auto& route : routes_) {
    const auto& m = route.config->match;
    if (path.substr(0, m.path_prefix.size()) != m.path_prefix) continue;
    if (!m.methods.empty()) {
      bool ok = false;
      for (const auto& allowed : m.methods) ok = ok || allowed == method;
      if (!ok) continue;
    }
    return &route;
  }
  return nullptr;
}

}  // namespace sluice
