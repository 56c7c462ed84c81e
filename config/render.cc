#include "config/render.h"

namespace sluice::config {

namespace {

using nlohmann::json;

const char* toString(Http2Mode m) {
  switch (m) {
    case Http2Mode::Auto:
      return "auto";
    case Http2Mode::On:
      return "on";
    case Http2Mode::Off:
      return "off";
  }
  return "auto";
}

const char* toString(IdempotencyMode m) {
  switch (m) {
    case IdempotencyMode::Auto:
      return "auto";
    case IdempotencyMode::Always:
      return "always";
    case IdempotencyMode::Never:
      return "never";
  }
  return "always";
}

const char* toString(ClientDisconnectMode m) {
  return m == ClientDisconnectMode::Finish ? "finish" : "cancel";
}

const char* toString(TlsVersion v) { return v == TlsVersion::V1_3 ? "1.3" : "1.2"; }

json clientTlsToJson(const UpstreamTlsConfig& tls) {
  return {{"verify", tls.verify},
          {"ca_file", tls.ca_file},
          {"sni", tls.sni},
          {"min_version", toString(tls.min_version)},
          {"ciphers", tls.ciphers}};
}

json listenerToJson(const ListenerConfig& l) {
  json tls = nullptr;
  if (l.tls) {
    tls = {{"cert", l.tls->cert_file},
           {"key", l.tls->key_file},
           {"min_version", toString(l.tls->min_version)},
           {"ciphers", l.tls->ciphers}};
  }
  return {{"address", l.address.toString()}, {"tls", tls}};
}

json endpointsToJson(const std::vector<EndpointConfig>& endpoints) {
  json out = json::array();
  for (const EndpointConfig& e : endpoints) {
    out.push_back(
        {{"name", e.name}, {"url", e.raw_url}, {"weight", e.weight}, {"priority", e.priority}});
  }
  return out;
}

json fallbackOnToJson(const FallbackOn& on) {
  json out = outcomeSetToJson(on.outcomes);
  if (on.circuit_open) out.insert(out.begin(), "circuit_open");
  if (on.rate_limited) out.push_back("rate_limited");
  if (on.overloaded) out.push_back("overloaded");
  return out;
}

json upstreamToJson(const UpstreamConfig& u) {
  json headers = json::object();
  for (const auto& [name, value] : u.headers) headers[name] = "<redacted>";  // they hold API keys

  json rate_limit = nullptr;
  if (u.rate_limit) {
    const RateLimitConfig& r = *u.rate_limit;
    rate_limit = {
        {"key", r.key.kind == RateLimitKey::Kind::None ? "none" : "header:" + r.key.header},
        {"reserve", r.reserve},
        {"max_queue", r.max_queue},
    };
  }

  const CircuitBreakerConfig& cb = u.circuit_breaker;
  return {
      {"name", u.name},
      {"endpoints", endpointsToJson(u.endpoints)},
      {"connect_timeout", formatDuration(u.connect_timeout)},
      {"http2", toString(u.http2)},
      {"tls", clientTlsToJson(u.tls)},
      {"headers", headers},
      {"rate_limit", rate_limit},
      {"circuit_breaker",
       {
           {"consecutive_failures", cb.consecutive_failures},
           {"failure_rate",
            {{"threshold", cb.failure_rate.threshold},
             {"window", formatDuration(cb.failure_rate.window)},
             {"min_requests", cb.failure_rate.min_requests}}},
           {"cooldown", formatDuration(cb.cooldown)},
           {"max_cooldown", formatDuration(cb.max_cooldown)},
           {"half_open_probes", cb.half_open_probes},
           {"failure_on", outcomeSetToJson(cb.failure_on)},
           {"max_requests", cb.max_requests},
           {"max_pending", cb.max_pending},
       }},
  };
}

json matchToJson(const RouteMatch& m) {
  json out = {{"path_prefix", m.path_prefix}, {"methods", m.methods}};
  if (!m.model.empty()) out["model"] = m.model;  // absent = any model
  return out;
}

json fallbackToJson(const std::vector<FallbackTarget>& fallback) {
  json out = json::array();
  for (const FallbackTarget& t : fallback) {
    json entry = {{"upstream", t.upstream}};
    if (!t.model.empty()) entry["model"] = t.model;  // absent = the client's model
    out.push_back(std::move(entry));
  }
  return out;
}

const char* toolRetryName(ToolRetry retry) {
  switch (retry) {
    case ToolRetry::Never:
      return "never";
    case ToolRetry::Safe:
      return "safe";
    case ToolRetry::Annotations:
      return "annotations";
  }
  return "annotations";
}

/** `protocol`, and for an MCP route its `tools` and `tool_retry`. */
void addProtocol(const RouteConfig& r, json& out) {
  out["protocol"] = r.protocol == RouteProtocol::Mcp ? "mcp" : "http";
  if (r.protocol != RouteProtocol::Mcp) return;
  json tools = json::array();
  for (const ToolRule& rule : r.tools.tools) {
    json entry = {{"name", rule.name}};
    if (rule.budget) entry["budget"] = formatDuration(*rule.budget);
    if (rule.retry) entry["retry"] = toolRetryName(*rule.retry);
    tools.push_back(std::move(entry));
  }
  out["tools"] = std::move(tools);
  out["tool_retry"] = toolRetryName(r.tools.tool_retry);
  out["allowed_hosts"] = r.tools.allowed_hosts;
}

json routeToJson(const RouteConfig& r) {
  json out = {
      {"name", r.name},
      {"match", matchToJson(r.match)},
      {"upstream", r.upstream},
      {"fallback", fallbackToJson(r.fallback)},
      {"fallback_on", fallbackOnToJson(r.fallback_on)},
      {"fallback_wait", r.fallback_wait == FallbackWait::Prefer ? "prefer" : "avoid"},
      {"budget",
       {{"header", r.budget.header},
        {"default", formatDuration(r.budget.default_budget)},
        {"max", formatDuration(r.budget.max)},
        {"propagate", r.budget.propagate}}},
      {"retry",
       {{"attempts", r.retry.attempts},
        {"on", outcomeSetToJson(r.retry.on)},
        {"backoff",
         {{"base", formatDuration(r.retry.backoff.base)},
          {"max", formatDuration(r.retry.backoff.max)}}},
        {"respect_retry_after", r.retry.respect_retry_after},
        {"idempotent", toString(r.retry.idempotent)},
        {"budget_percent", r.retry.budget_percent},
        {"max_body", formatSize(r.retry.max_body)}}},
      {"first_byte_timeout", formatDuration(r.first_byte_timeout)},
      {"idle_timeout", formatDuration(r.idle_timeout)},
      {"on_client_disconnect", toString(r.on_client_disconnect)},
      {"finish_grace", formatDuration(r.finish_grace)},
  };
  addProtocol(r, out);
  return out;
}

}  // namespace

nlohmann::json outcomeSetToJson(const OutcomeSet& set) {
  json out = json::array();
  for (int status : set.statuses) out.push_back(status);
  if (set.any_4xx) out.push_back("4xx");
  if (set.any_5xx) out.push_back("5xx");
  if (set.connect_error) out.push_back("connect_error");
  if (set.reset) out.push_back("reset");
  if (set.timeout) out.push_back("timeout");
  return out;
}

nlohmann::json limitsToJson(const LimitsConfig& l) {
  return {
      {"max_header_bytes", formatSize(l.max_header_bytes)},
      {"max_headers", l.max_headers},
      {"max_body", formatSize(l.max_body)},
      {"max_buffered_body_bytes", formatSize(l.max_buffered_body_bytes)},
      {"max_connections_per_worker", l.max_connections_per_worker},
      {"http2_max_concurrent_streams", l.http2_max_concurrent_streams},
      {"header_read_timeout", formatDuration(l.header_read_timeout)},
      {"body_read_timeout", formatDuration(l.body_read_timeout)},
      {"idle_timeout", formatDuration(l.idle_timeout)},
      {"send_timeout", formatDuration(l.send_timeout)},
  };
}

nlohmann::json accessLogToJson(const AccessLogConfig& a) {
  const char* path = a.target == AccessLogConfig::Target::Off      ? "off"
                     : a.target == AccessLogConfig::Target::Stdout ? "stdout"
                                                                   : a.path.c_str();
  return {{"path", path}, {"format", "json"}};
}

nlohmann::json sharedStateToJson(const std::optional<SharedStateConfig>& shared) {
  if (!shared) return nullptr;
  // The URL without its credentials: they are a secret.
  std::string redis = shared->redis.tls ? "rediss://" : "redis://";
  if (!shared->redis.password.empty()) redis += "<redacted>@";
  redis += shared->redis.address() + "/" + std::to_string(shared->redis.db);
  const UpstreamTlsConfig& tls = shared->tls;
  return {{"redis", redis},
          {"prefix", shared->prefix},
          {"timeout", formatDuration(shared->timeout)},
          {"required", shared->required},
          {"tls", clientTlsToJson(tls)}};
}

nlohmann::json toRedactedJson(const Config& config) {
  json listen = json::array();
  for (const ListenerConfig& l : config.listeners) listen.push_back(listenerToJson(l));
  json upstreams = json::array();
  for (const UpstreamConfig& u : config.upstreams) upstreams.push_back(upstreamToJson(u));
  json routes = json::array();
  for (const RouteConfig& r : config.routes) routes.push_back(routeToJson(r));
  json pricing = json::array();
  for (const PriceConfig& p : config.pricing) {
    pricing.push_back({{"model", p.model_glob},
                       {"input", p.input_usd_per_mtok},
                       {"output", p.output_usd_per_mtok}});
  }
  return {
      {"version", config.version},
      {"listen", listen},
      {"admin",
       {{"address", config.admin.toString()}, {"allowed_hosts", config.admin_allowed_hosts}}},
      {"workers", config.workers == 0 ? json("auto") : json(config.workers)},
      {"drain_timeout", formatDuration(config.drain_timeout)},
      {"upstreams", upstreams},
      {"routes", routes},
      {"pricing", pricing},
      {"limits", limitsToJson(config.limits)},
      {"access_log", accessLogToJson(config.access_log)},
      {"shared_state", sharedStateToJson(config.shared_state)},
      {"runs", config.runs
                   ? json{{"header", config.runs->header},
                          {"parent_header", config.runs->parent_header},
                          {"budget", formatDuration(config.runs->budget)},
                          {"idle_expiry", formatDuration(config.runs->idle_expiry)},
                          {"tombstone", formatDuration(config.runs->tombstone)},
                          {"max_runs", config.runs->max_runs},
                          {"max_usd", config.runs->max_usd},
                          {"cancel_token",
                           config.runs->cancel_token.empty() ? json(nullptr) : json("<redacted>")}}
                   : json(nullptr)},
      {"source_path", config.source_path},
  };
}

}  // namespace sluice::config
