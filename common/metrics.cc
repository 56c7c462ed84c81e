#include "common/metrics.h"

#include <prometheus/text_serializer.h>

#include <sstream>

#include "common/build_info.h"

namespace sluice {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

std::string_view toString(AttemptResult r) {
  switch (r) {
    case AttemptResult::Ok:
      return "ok";
    case AttemptResult::Http429:
      return "http_429";
    case AttemptResult::Http5xx:
      return "http_5xx";
    case AttemptResult::Http4xx:
      return "http_4xx";
    case AttemptResult::ConnectError:
      return "connect_error";
    case AttemptResult::Reset:
      return "reset";
    case AttemptResult::Timeout:
      return "timeout";
    case AttemptResult::Cancelled:
      return "cancelled";
  }
  return "ok";
}

std::string_view toString(Rejection r) {
  switch (r) {
    case Rejection::HeaderTimeout:
      return "header_timeout";
    case Rejection::BodyTimeout:
      return "body_timeout";
    case Rejection::IdleTimeout:
      return "idle_timeout";
    case Rejection::MaxConnections:
      return "max_connections";
    case Rejection::HeaderTooLarge:
      return "header_too_large";
    case Rejection::BodyTooLarge:
      return "body_too_large";
    case Rejection::SendTimeout:
      return "send_timeout";
  }
  return "header_timeout";
}

AttemptResult attemptResultFor(const AttemptOutcome& outcome) {
  switch (outcome.kind) {
    case OutcomeKind::Status:
      if (outcome.status == 429) return AttemptResult::Http429;
      if (outcome.status >= 500) return AttemptResult::Http5xx;
      if (outcome.status >= 400) return AttemptResult::Http4xx;
      return AttemptResult::Ok;
    case OutcomeKind::ConnectError:
      return AttemptResult::ConnectError;
    case OutcomeKind::Reset:
      return AttemptResult::Reset;
    case OutcomeKind::Timeout:
      return AttemptResult::Timeout;
    case OutcomeKind::Cancelled:
      return AttemptResult::Cancelled;
  }
  return AttemptResult::Cancelled;
}

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_total(BuildCounter()
                         .Name("sluice_requests_total")
                         .Help("Requests answered, by route, upstream and HTTP status code.")
                         .Register(*registry_)),
      request_duration(BuildHistogram()
                           .Name("sluice_request_duration_seconds")
                           .Help("Time from request headers to the end of the response.")
                           .Register(*registry_)),
      upstream_attempts(BuildCounter()
                            .Name("sluice_upstream_attempts_total")
                            .Help("Upstream attempts by outcome.")
                            .Register(*registry_)),
      retries_total(BuildCounter()
                        .Name("sluice_retries_total")
                        .Help("Retries sluice made, by the cause of the failed attempt.")
                        .Register(*registry_)),
      cancellations_total(BuildCounter()
                              .Name("sluice_cancellations_total")
                              .Help("Exchanges stopped before completion, by cancel_reason.")
                              .Register(*registry_)),
      cancel_propagation(BuildHistogram()
                             .Name("sluice_cancel_propagation_seconds")
                             .Help("Time from a cancel decision to the upstream attempt torn down.")
                             .Register(*registry_)),
      circuit_state(BuildGauge()
                        .Name("sluice_circuit_state")
                        .Help("Circuit breaker state: 0 closed, 1 open, 2 half-open.")
                        .Register(*registry_)),
      circuit_transitions(BuildCounter()
                              .Name("sluice_circuit_transitions_total")
                              .Help("Circuit breaker transitions, by target state.")
                              .Register(*registry_)),
      ratelimit_remaining(BuildGauge()
                              .Name("sluice_ratelimit_remaining")
                              .Help("Quota remaining as last reported by the upstream.")
                              .Register(*registry_)),
      throttle_queue_depth(BuildGauge()
                               .Name("sluice_throttle_queue_depth")
                               .Help("Requests waiting for upstream quota.")
                               .Register(*registry_)),
      throttle_wait(BuildHistogram()
                        .Name("sluice_throttle_wait_seconds")
                        .Help("Time requests waited for upstream quota.")
                        .Register(*registry_)),
      tokens_total(BuildCounter()
                       .Name("sluice_tokens_total")
                       .Help("Tokens billed, by kind and whether a listening client got them.")
                       .Register(*registry_)),
      spend_usd_total(BuildCounter()
                          .Name("sluice_spend_usd_total")
                          .Help("Spend in USD, delivered or leaked.")
                          .Register(*registry_)),
      leaked_spend_usd_total(BuildCounter()
                                 .Name("sluice_leaked_spend_usd_total")
                                 .Help("Spend in USD on work no listening client received.")
                                 .Register(*registry_)),
      active_requests(BuildGauge()
                          .Name("sluice_active_requests")
                          .Help("Requests in flight.")
                          .Register(*registry_)),
      fallbacks_total(BuildCounter()
                          .Name("sluice_fallbacks_total")
                          .Help("Requests moved to the next upstream of their route's fallback "
                                "chain, by cause.")
                          .Register(*registry_)),
      endpoint_circuit_state(BuildGauge()
                                 .Name("sluice_endpoint_circuit_state")
                                 .Help("Circuit breaker state per endpoint: 0 closed, 1 open, 2 "
                                       "half-open.")
                                 .Register(*registry_)),
      time_to_first_byte(
          BuildHistogram()
              .Name("sluice_time_to_first_byte_seconds")
              .Help("Time from the request head in to the first response byte out (upstream "
                    "answers; time to first token for streams).")
              .Register(*registry_)),
      build_info(BuildGauge()
                     .Name("sluice_build_info")
                     .Help("Always 1; the labels say which sluice build this is.")
                     .Register(*registry_)),
      config_reloads(BuildCounter()
                         .Name("sluice_config_reloads_total")
                         .Help("Config reloads (SIGHUP), by result: ok or rejected.")
                         .Register(*registry_)),
      config_last_reload_success(
          BuildGauge()
              .Name("sluice_config_last_reload_success_timestamp_seconds")
              .Help("Unix time of the last config applied (start or accepted reload).")
              .Register(*registry_)),
      downstream_rejections(
          BuildCounter()
              .Name("sluice_downstream_rejections_total")
              .Help("Client connections closed or requests refused by a downstream limit, by "
                    "reason.")
              .Register(*registry_)),
      access_log_dropped(BuildCounter()
                             .Name("sluice_access_log_dropped_total")
                             .Help("Access log lines dropped: the writer fell behind or a write "
                                   "failed.")
                             .Register(*registry_)),
      request_body_buffered(BuildGauge()
                                .Name("sluice_request_body_buffered_bytes")
                                .Help("Request body bytes held by sluice (all workers), against "
                                      "limits.max_buffered_body_bytes.")
                                .Register(*registry_)),
      shared_state_up(BuildGauge()
                          .Name("sluice_shared_state_up")
                          .Help("1 while the shared store (Redis) answers, 0 while sluice runs "
                                "on local state.")
                          .Register(*registry_)),
      shared_state_errors(BuildCounter()
                              .Name("sluice_shared_state_errors_total")
                              .Help("Shared-state (Redis) calls that failed or timed out, by op.")
                              .Register(*registry_)),
      runs_active(BuildGauge()
                      .Name("sluice_runs_active")
                      .Help("Runs with at least one request in flight.")
                      .Register(*registry_)),
      run_endings(BuildCounter()
                      .Name("sluice_run_endings_total")
                      .Help("Runs that ended by a cancel, at their deadline or at their spend cap, "
                            "by reason.")
                      .Register(*registry_)),
      tool_calls(BuildCounter()
                     .Name("sluice_tool_calls_total")
                     .Help("MCP tools/call requests on protocol: mcp routes, by tool pattern and "
                           "outcome.")
                     .Register(*registry_)),
      tool_call_duration(BuildHistogram()
                             .Name("sluice_tool_call_duration_seconds")
                             .Help("MCP tools/call duration, request head in to last byte out, by "
                                   "tool pattern.")
                             .Register(*registry_)),
      tool_cancel_notifications(
          BuildCounter()
              .Name("sluice_tool_cancel_notifications_total")
              .Help("notifications/cancelled sent to session-ful MCP servers for cancelled "
                    "requests, by result (sent, failed, timeout, dropped).")
              .Register(*registry_)) {
  access_log_dropped_ = &access_log_dropped.Add({});
  runs_active_ = &runs_active.Add({});
  run_endings_[0] = &run_endings.Add({{"reason", "cancelled"}});
  run_endings_[1] = &run_endings.Add({{"reason", "deadline"}});
  run_endings_[2] = &run_endings.Add({{"reason", "spend_cap"}});
  build_info.Add({{"version", std::string(buildVersion())}, {"commit", std::string(buildCommit())}})
      .Set(1);
  request_body_buffered_bytes_ = &request_body_buffered.Add({});
  for (size_t i = 0; i < kRejectionCount; ++i) {
    rejections_[i] =
        &downstream_rejections.Add({{"reason", std::string(toString(static_cast<Rejection>(i)))}});
  }
  // Both results exist from the start, so a dashboard sees 0, not "no data".
  config_reloads.Add({{"result", "ok"}});
  config_reloads.Add({{"result", "rejected"}});
  config_last_reload_success.Add({}).SetToCurrentTime();
}

void Metrics::countReload(bool accepted) {
  config_reloads.Add({{"result", accepted ? "ok" : "rejected"}}).Increment();
  if (accepted) config_last_reload_success.Add({}).SetToCurrentTime();
}

std::atomic<uint64_t>& operationalLogDropped() {
  static std::atomic<uint64_t> dropped{0};
  return dropped;
}

std::string Metrics::serialize() const {
  prometheus::TextSerializer serializer;
  std::ostringstream out;
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (auto& family : process_.Collect()) families.push_back(std::move(family));
  // Built here, not registered: the operational count is the process's.
  prometheus::MetricFamily log_dropped;
  log_dropped.name = "sluice_log_dropped_total";
  log_dropped.help =
      "Log lines dropped instead of blocking: the queue was full (a slow reader or disk), a "
      "write failed, or shutdown's deadline passed; by log (access, operational).";
  log_dropped.type = prometheus::MetricType::Counter;
  const std::pair<const char*, double> kLogs[] = {
      {"access", access_log_dropped_->Value()},
      {"operational",
       static_cast<double>(operationalLogDropped().load(std::memory_order_relaxed))}};
  for (const auto& [log, value] : kLogs) {
    prometheus::ClientMetric m;
    m.label.push_back({"log", log});
    m.counter.value = value;
    log_dropped.metric.push_back(std::move(m));
  }
  families.push_back(std::move(log_dropped));
  serializer.Serialize(out, families);
  return out.str();
}

const prometheus::Histogram::BucketBoundaries& Metrics::durationBuckets() {
  static const prometheus::Histogram::BucketBoundaries b{
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
  return b;
}

const prometheus::Histogram::BucketBoundaries& Metrics::propagationBuckets() {
  static const prometheus::Histogram::BucketBoundaries b{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5};
  return b;
}

EndpointMetrics::EndpointMetrics(Metrics& m, const std::string& upstream,
                                 const std::string& endpoint)
    : upstream_(upstream), endpoint_(endpoint), rl_family_(m.ratelimit_remaining) {
  for (size_t i = 0; i < kAttemptResultCount; ++i) {
    attempts_[i] = &m.upstream_attempts.Add(
        {{"upstream", upstream},
         {"endpoint", endpoint},
         {"result", std::string(toString(static_cast<AttemptResult>(i)))}});
  }
  circuit_state_ = &m.endpoint_circuit_state.Add({{"upstream", upstream}, {"endpoint", endpoint}});
  throttle_queue_depth_ =
      &m.throttle_queue_depth.Add({{"upstream", upstream}, {"endpoint", endpoint}});
}

void EndpointMetrics::setRateLimitRemaining(bool tokens, double remaining) {
  std::atomic<prometheus::Gauge*>& slot = rl_remaining_[tokens ? 1 : 0];
  prometheus::Gauge* gauge = slot.load(std::memory_order_acquire);
  if (gauge == nullptr) {
    // Family::Add is thread-safe and returns the existing series for the same labels.
    gauge = &rl_family_.Add({{"upstream", upstream_},
                             {"endpoint", endpoint_},
                             {"kind", tokens ? "tokens" : "requests"}});
    slot.store(gauge, std::memory_order_release);
  }
  gauge->Set(remaining);
}

UpstreamMetrics::UpstreamMetrics(Metrics& m, const std::string& upstream) : name_(upstream) {
  cancel_propagation_ =
      &m.cancel_propagation.Add({{"upstream", upstream}}, Metrics::propagationBuckets());
  circuit_state_ = &m.circuit_state.Add({{"upstream", upstream}});
  to_closed_ = &m.circuit_transitions.Add({{"upstream", upstream}, {"to", "closed"}});
  to_open_ = &m.circuit_transitions.Add({{"upstream", upstream}, {"to", "open"}});
  to_half_open_ = &m.circuit_transitions.Add({{"upstream", upstream}, {"to", "half_open"}});
  throttle_wait_ = &m.throttle_wait.Add({{"upstream", upstream}}, Metrics::durationBuckets());
}

prometheus::Counter& UpstreamMetrics::circuitTransitions(std::string_view to) {
  if (to == "open") return *to_open_;
  if (to == "half_open") return *to_half_open_;
  return *to_closed_;
}

RouteMetrics::RouteMetrics(Metrics& m, const std::string& route, const std::string& upstream)
    : metrics_(m), route_(route), upstream_(upstream) {
  for (CancelReason r : kAllCancelReasons) {
    cancellations_[static_cast<size_t>(r)] = &m.cancellations_total.Add(
        {{"route", route}, {"upstream", upstream}, {"cancel_reason", std::string(toString(r))}});
  }
  duration_ = &m.request_duration.Add({{"route", route}, {"upstream", upstream}},
                                      Metrics::durationBuckets());
  ttfb_ = &m.time_to_first_byte.Add({{"route", route}, {"upstream", upstream}},
                                    Metrics::durationBuckets());
  active_ = &m.active_requests.Add({{"route", route}});
}

prometheus::Counter& RouteMetrics::requests(int code) {
  if (code < 100 || code > 599) code = 500;
  auto& slot = by_code_[static_cast<size_t>(code)];
  if (auto* c = slot.load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto* c = slot.load(std::memory_order_relaxed)) return *c;
  auto* c = &metrics_.requests_total.Add(
      {{"route", route_}, {"upstream", upstream_}, {"code", std::to_string(code)}});
  slot.store(c, std::memory_order_release);
  return *c;
}

prometheus::Counter& RouteMetrics::lookup(prometheus::Family<prometheus::Counter>& family,
                                          const prometheus::Labels& extra, bool with_upstream) {
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(&family));
  for (const auto& [k, v] : extra) key += "\x1f" + k + "=" + v;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lazy_.find(key);
  if (it != lazy_.end()) return *it->second;
  prometheus::Labels labels = extra;
  labels["route"] = route_;
  if (with_upstream) labels["upstream"] = upstream_;
  auto* c = &family.Add(labels);
  lazy_.emplace(std::move(key), c);
  return *c;
}

prometheus::Counter& RouteMetrics::retries(const std::string& cause) {
  return lookup(metrics_.retries_total, {{"cause", cause}});
}

prometheus::Counter& RouteMetrics::fallbacks(const std::string& from, const std::string& to,
                                             const std::string& cause) {
  return lookup(metrics_.fallbacks_total, {{"from", from}, {"to", to}, {"cause", cause}},
                /*with_upstream=*/false);
}

RouteMetrics::ModelSeries* RouteMetrics::modelSeries(const std::string& model) {
  size_t n = model_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    if (models_[i].label == model) return &models_[i];
  }
  std::lock_guard<std::mutex> lock(mu_);
  n = model_count_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    if (models_[i].label == model) return &models_[i];
  }
  if (n == kMaxCachedModels) return nullptr;
  models_[n].label = model;
  model_count_.store(n + 1, std::memory_order_release);
  return &models_[n];
}

prometheus::Counter& RouteMetrics::cached(std::atomic<prometheus::Counter*>& slot,
                                          prometheus::Family<prometheus::Counter>& family,
                                          const prometheus::Labels& extra) {
  if (auto* c = slot.load(std::memory_order_acquire)) return *c;
  prometheus::Counter& c = lookup(family, extra);
  slot.store(&c, std::memory_order_release);
  return c;
}

prometheus::Counter& RouteMetrics::tokens(const std::string& model, bool output, Disposition d) {
  const bool leaked = d == Disposition::Leaked;
  ModelSeries* m = modelSeries(model);
  std::atomic<prometheus::Counter*>* slot =
      m != nullptr ? &m->tokens[(output ? 2 : 0) + (leaked ? 1 : 0)] : nullptr;
  if (slot != nullptr) {
    if (auto* c = slot->load(std::memory_order_acquire)) return *c;
  }
  const prometheus::Labels labels{{"model", model},
                                  {"kind", output ? "output" : "input"},
                                  {"disposition", leaked ? "leaked" : "delivered"}};
  if (slot == nullptr) return lookup(metrics_.tokens_total, labels);
  return cached(*slot, metrics_.tokens_total, labels);
}

prometheus::Counter& RouteMetrics::spend(const std::string& model, Disposition d) {
  const bool leaked = d == Disposition::Leaked;
  ModelSeries* m = modelSeries(model);
  if (m != nullptr) {
    if (auto* c = m->spend[leaked ? 1 : 0].load(std::memory_order_acquire)) return *c;
  }
  const prometheus::Labels labels{{"model", model},
                                  {"disposition", leaked ? "leaked" : "delivered"}};
  if (m == nullptr) return lookup(metrics_.spend_usd_total, labels);
  return cached(m->spend[leaked ? 1 : 0], metrics_.spend_usd_total, labels);
}

prometheus::Counter& RouteMetrics::leakedSpend(const std::string& model,
                                               std::string_view cancel_reason) {
  static_assert(std::size(kAllCancelReasons) <=
                std::tuple_size_v<decltype(ModelSeries::leaked_spend)>);
  std::atomic<prometheus::Counter*>* slot = nullptr;
  if (ModelSeries* m = modelSeries(model)) {
    for (size_t i = 0; i < std::size(kAllCancelReasons); ++i) {
      if (toString(kAllCancelReasons[i]) == cancel_reason) slot = &m->leaked_spend[i];
    }
  }
  if (slot != nullptr) {
    if (auto* c = slot->load(std::memory_order_acquire)) return *c;
  }
  const prometheus::Labels labels{{"model", model}, {"cancel_reason", std::string(cancel_reason)}};
  if (slot == nullptr) return lookup(metrics_.leaked_spend_usd_total, labels);
  return cached(*slot, metrics_.leaked_spend_usd_total, labels);
}

prometheus::Counter& Metrics::SharedStateSeries::errors(std::string_view op) const {
  if (op == "quota") return *quota_errors;
  if (op == "circuit") return *circuit_errors;
  if (op == "protocol") return *protocol_errors;
  if (op == "runs") return *runs_errors;
  if (op == "sessions") return *sessions_errors;
  return *connect_errors;
}

const Metrics::SharedStateSeries& Metrics::sharedState() {
  std::call_once(shared_state_once_, [this] {
    shared_state_.up = &shared_state_up.Add({});
    shared_state_.quota_errors = &shared_state_errors.Add({{"op", "quota"}});
    shared_state_.circuit_errors = &shared_state_errors.Add({{"op", "circuit"}});
    shared_state_.connect_errors = &shared_state_errors.Add({{"op", "connect"}});
    shared_state_.protocol_errors = &shared_state_errors.Add({{"op", "protocol"}});
    shared_state_.runs_errors = &shared_state_errors.Add({{"op", "runs"}});
    shared_state_.sessions_errors = &shared_state_errors.Add({{"op", "sessions"}});
  });
  return shared_state_;
}

}  // namespace sluice
