#include "proxy/runtime.h"

#include "proxy/log.h"
#include "proxy/shared_state.h"

namespace sluice {

namespace {

bool sameRateLimit(const config::RateLimitConfig& a, const config::RateLimitConfig& b) {
  return a.key.kind == b.key.kind && a.key.header == b.key.header && a.reserve == b.reserve &&
         a.max_queue == b.max_queue;
}

/** The running upstream a reloaded one inherits state from: same name, same URL. */
const UpstreamRuntime* predecessor(const Runtime* previous, const config::UpstreamConfig& up) {
  if (previous == nullptr) return nullptr;
  for (const auto& old : previous->upstreams()) {
    if (old.config->name == up.name && old.config->url.scheme == up.url.scheme &&
        old.config->url.host == up.url.host && old.config->url.port == up.url.port)
      return &old;
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<const Runtime> Runtime::build(config::ConfigPtr config, Metrics& metrics,
                                              const Clock& clock, std::string* error,
                                              const Runtime* previous, SharedState* shared) {
  auto rt = std::make_shared<Runtime>();
  rt->config_ = std::move(config);
  rt->metrics_ = &metrics;
  rt->body_memory_ = previous != nullptr
                         ? previous->body_memory_
                         : std::make_shared<BodyMemory>(&metrics.requestBodyBuffered());
  const config::Config& cfg = *rt->config_;
  rt->warnings_ = cfg.warnings;  // the loader's advice, logged with the runtime's own

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
    u.endpoint =
        (up.url.host.find(':') != std::string::npos ? "[" + up.url.host + "]" : up.url.host) + ":" +
        std::to_string(up.url.port);
    u.metrics = std::make_unique<UpstreamMetrics>(metrics, up.name);
    if (up.url.isTls()) {
      TlsError tls_error;
      u.ssl_ctx = makeUpstreamSslCtx(up.tls, up.http2, &tls_error);
      if (!u.ssl_ctx) {
        if (error) *error = "upstream " + up.name + ": " + tls_error.message;
        return nullptr;
      }
    }
    if (up.url.isTls() && !up.tls.verify) {
      rt->warnings_.push_back("upstream " + up.name +
                              ": tls.verify is false: " + up.url.authority() +
                              "'s certificate is not checked (anyone on the path can read the "
                              "traffic and its API keys)");
    }
    const UpstreamRuntime* before = predecessor(previous, up);
    if (before != nullptr) {
      u.breaker = before->breaker;  // new thresholds applied once the build cannot fail
      carried_breakers.emplace_back(u.breaker.get(), &up.circuit_breaker);
    } else {
      // The listener outlives this Runtime when a reload carries the breaker
      // over: it holds the registry's metric handles (alive as long as
      // Metrics), never this Runtime's UpstreamMetrics.
      prometheus::Gauge* state = &u.metrics->circuitState();
      prometheus::Counter* to_closed = &u.metrics->circuitTransitions("closed");
      prometheus::Counter* to_open = &u.metrics->circuitTransitions("open");
      prometheus::Counter* to_half_open = &u.metrics->circuitTransitions("half_open");
      u.breaker = std::make_shared<CircuitBreaker>(
          up.circuit_breaker, clock,
          [state, to_closed, to_open, to_half_open, name = up.name](CircuitState from,
                                                                    CircuitState to) {
            state->Set(static_cast<double>(static_cast<int>(to)));
            (to == CircuitState::Open       ? to_open
             : to == CircuitState::HalfOpen ? to_half_open
                                            : to_closed)
                ->Increment();
            logEvent(to == CircuitState::Open ? LogLevel::Warn : LogLevel::Info,
                     "sluice: circuit of upstream " + name + " is now " + std::string(toString(to)),
                     {{"event", "circuit_transition"},
                      {"upstream", name},
                      {"from", toString(from)},
                      {"to", toString(to)}});
          });
      // The endpoint is the upstream's one URL until endpoints (DESIGN §5) land.
      if (shared != nullptr) u.breaker->setGlobal(shared->circuit(u.breaker, up.name, u.endpoint));
    }
    u.metrics->circuitState().Set(static_cast<double>(static_cast<int>(u.breaker->state())));
    if (up.rate_limit) {
      if (before != nullptr && before->quota &&
          sameRateLimit(*before->config->rate_limit, *up.rate_limit)) {
        u.quota = before->quota;
      } else {
        u.quota = std::make_shared<QuotaTracker>(*up.rate_limit, clock);
      }
      if (shared != nullptr) {
        u.global_quota = shared->quota(up.name, u.endpoint, up.rate_limit->reserve);
      }
    }
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
  for (auto [breaker, breaker_config] : carried_breakers) breaker->updateConfig(*breaker_config);
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
