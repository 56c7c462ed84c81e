#pragma once

// sluice's Prometheus metrics (docs/design.md §4), built once.
//
// `Metrics` owns the registry and every family. Per-route and per-upstream
// handle sets (`RouteMetrics`, `UpstreamMetrics`) are resolved once when a
// config is applied, so the request path only touches atomics: no label
// lookups per request, none per byte. Label sets that vary per request
// (status code, retry cause, model) are cached on first use.

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/attempt.h"
#include "common/cancel_reason.h"
#include "common/process_metrics.h"

namespace sluice {

/**
 * `result` label of sluice_upstream_attempts_total: the label set only. How
 * an attempt ended is an AttemptOutcome (common/attempt.h); attemptResultFor()
 * is its one mapping to this label.
 */
enum class AttemptResult { Ok, Http429, Http5xx, Http4xx, ConnectError, Reset, Timeout, Cancelled };
inline constexpr size_t kAttemptResultCount = 8;
std::string_view toString(AttemptResult r);
/** The label of an attempt that ended with `outcome` (a status by its class). */
AttemptResult attemptResultFor(const AttemptOutcome& outcome);

/**
 * `reason` label of sluice_downstream_rejections_total (a contract addition,
 * README "Limits"): a downstream limit closed a connection or refused a request.
 */
enum class Rejection {
  HeaderTimeout,   // header_read_timeout: TLS handshake, h2c preface or request head too slow
  BodyTimeout,     // body_read_timeout: no request body byte for too long
  IdleTimeout,     // idle_timeout: a keep-alive connection with nothing in flight
  MaxConnections,  // max_connections_per_worker: accepted and closed at once
  HeaderTooLarge,  // max_header_bytes / max_headers: 431
  BodyTooLarge,    // max_body: 413
  SendTimeout,     // send_timeout: output pending and not a byte accepted for too long
};
inline constexpr size_t kRejectionCount = 7;
std::string_view toString(Rejection r);

/** `disposition` label: delivered to a listening client, or leaked. */
enum class Disposition { Delivered, Leaked };

class Metrics;

/** Handles for one upstream. Thread-safe; shared by all workers. */
/**
 * Handles for one endpoint of an upstream (docs/design.md §5): the series whose
 * state is kept per endpoint. Thread-safe; shared by all workers.
 */
class EndpointMetrics {
 public:
  EndpointMetrics(Metrics& m, const std::string& upstream, const std::string& endpoint);

  /** sluice_upstream_attempts_total{upstream,endpoint,result}. */
  prometheus::Counter& attempts(AttemptResult r) { return *attempts_[static_cast<size_t>(r)]; }
  /** sluice_endpoint_circuit_state{upstream,endpoint}: alive as long as Metrics. */
  prometheus::Gauge& circuitState() { return *circuit_state_; }
  /**
   * Sets sluice_ratelimit_remaining{upstream,endpoint,kind} (the quota is kept
   * per endpoint). The series is created by the first value: an endpoint
   * that never sent quota headers has none (a 0 would read as "exhausted").
   */
  void setRateLimitRemaining(bool tokens, double remaining);
  /** sluice_throttle_queue_depth{upstream,endpoint}. */
  prometheus::Gauge& throttleQueueDepth() { return *throttle_queue_depth_; }

 private:
  std::string upstream_;
  std::string endpoint_;
  std::array<prometheus::Counter*, kAttemptResultCount> attempts_{};
  prometheus::Gauge* circuit_state_;
  prometheus::Family<prometheus::Gauge>& rl_family_;
  std::array<std::atomic<prometheus::Gauge*>, 2> rl_remaining_{};  // [tokens]
  prometheus::Gauge* throttle_queue_depth_;
};

class UpstreamMetrics {
 public:
  UpstreamMetrics(Metrics& m, const std::string& upstream);

  prometheus::Histogram& cancelPropagation() { return *cancel_propagation_; }
  prometheus::Gauge& circuitState() { return *circuit_state_; }
  /** `to` ∈ closed, open, half_open. */
  prometheus::Counter& circuitTransitions(std::string_view to);
  prometheus::Histogram& throttleWait() { return *throttle_wait_; }

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  prometheus::Histogram* cancel_propagation_;
  prometheus::Gauge* circuit_state_;
  prometheus::Counter* to_closed_;
  prometheus::Counter* to_open_;
  prometheus::Counter* to_half_open_;
  prometheus::Histogram* throttle_wait_;
};

/** Handles for one route (and its upstream). Thread-safe; shared by all workers. */
class RouteMetrics {
 public:
  RouteMetrics(Metrics& m, const std::string& route, const std::string& upstream);

  /** sluice_requests_total{route,upstream,code}; cached per code after first use. */
  prometheus::Counter& requests(int code);
  prometheus::Histogram& duration() { return *duration_; }
  /** sluice_time_to_first_byte_seconds: request head in → first response byte out. */
  prometheus::Histogram& timeToFirstByte() { return *ttfb_; }
  prometheus::Gauge& active() { return *active_; }
  prometheus::Counter& cancellations(CancelReason r) {
    return *cancellations_[static_cast<size_t>(r)];
  }
  /** sluice_retries_total{route,upstream,cause}. */
  prometheus::Counter& retries(const std::string& cause);
  /**
   * sluice_fallbacks_total{route,from,to,cause} (docs/design.md §5): one spill-over
   * from upstream `from` to `to`. Bounded: upstream pairs of the route's
   * chain times a handful of causes.
   */
  prometheus::Counter& fallbacks(const std::string& from, const std::string& to,
                                 const std::string& cause);
  /** sluice_tokens_total{route,upstream,model,kind,disposition}; kind ∈ input, output. */
  prometheus::Counter& tokens(const std::string& model, bool output, Disposition d);
  /** sluice_spend_usd_total{route,upstream,model,disposition}. */
  prometheus::Counter& spend(const std::string& model, Disposition d);
  /** sluice_leaked_spend_usd_total{route,upstream,model,cancel_reason}. */
  prometheus::Counter& leakedSpend(const std::string& model, std::string_view cancel_reason);

 private:
  prometheus::Counter& lookup(prometheus::Family<prometheus::Counter>& family,
                              const prometheus::Labels& extra, bool with_upstream = true);

  /**
   * The spend/token series of one `model` label, resolved on first use and
   * then read without locks: the spend filter bumps three or four of them per
   * request, and building a prometheus::Labels map and a key string for each
   * was the largest metric cost per request (bench/results/PROFILE.md).
   */
  struct ModelSeries {
    std::string label;                                          // set before the slot is published
    std::array<std::atomic<prometheus::Counter*>, 4> tokens{};  // [output * 2 + leaked]
    std::array<std::atomic<prometheus::Counter*>, 2> spend{};   // [leaked]
    std::array<std::atomic<prometheus::Counter*>, std::size(kAllCancelReasons)>
        leaked_spend{};  // [CancelReason]
  };
  /** Labels are the config's pricing globs + "other": a handful per config. */
  static constexpr size_t kMaxCachedModels = 32;

  /** The slot for `model`, created on first use; null when the table is full. */
  ModelSeries* modelSeries(const std::string& model);
  /** slot's counter, created through `lookup` the first time. */
  prometheus::Counter& cached(std::atomic<prometheus::Counter*>& slot,
                              prometheus::Family<prometheus::Counter>& family,
                              const prometheus::Labels& extra);

  Metrics& metrics_;
  std::string route_;
  std::string upstream_;
  std::array<ModelSeries, kMaxCachedModels> models_;
  std::atomic<size_t> model_count_{0};
  std::array<std::atomic<prometheus::Counter*>, 600> by_code_{};
  std::array<prometheus::Counter*, std::size(kAllCancelReasons)> cancellations_{};
  prometheus::Histogram* duration_;
  prometheus::Histogram* ttfb_;
  prometheus::Gauge* active_;
  std::mutex mu_;  // guards the lazily filled caches below and by_code_ creation
  std::map<std::string, prometheus::Counter*> lazy_;
};

/**
 * Operational log lines dropped in this process (the operational log is
 * process-wide: proxy/observability/log.cc counts here). Shown as
 * sluice_log_dropped_total{log="operational"} by every Metrics.
 */
std::atomic<uint64_t>& operationalLogDropped();

/** The registry and every metric family of docs/design.md §4. */
class Metrics {
  // Declared first: the family references below are built from it.
  std::shared_ptr<prometheus::Registry> registry_;

 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /**
   * The Prometheus text exposition of everything registered, plus the
   * process_* families and sluice_log_dropped_total{log} (access: the
   * access log's drops, as sluice_access_log_dropped_total; operational:
   * operationalLogDropped()).
   */
  std::string serialize() const;
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  prometheus::Family<prometheus::Counter>& requests_total;
  prometheus::Family<prometheus::Histogram>& request_duration;
  prometheus::Family<prometheus::Counter>& upstream_attempts;
  prometheus::Family<prometheus::Counter>& retries_total;
  prometheus::Family<prometheus::Counter>& cancellations_total;
  prometheus::Family<prometheus::Histogram>& cancel_propagation;
  prometheus::Family<prometheus::Gauge>& circuit_state;
  prometheus::Family<prometheus::Counter>& circuit_transitions;
  prometheus::Family<prometheus::Gauge>& ratelimit_remaining;
  prometheus::Family<prometheus::Gauge>& throttle_queue_depth;
  prometheus::Family<prometheus::Histogram>& throttle_wait;
  prometheus::Family<prometheus::Counter>& tokens_total;
  prometheus::Family<prometheus::Counter>& spend_usd_total;
  prometheus::Family<prometheus::Counter>& leaked_spend_usd_total;
  prometheus::Family<prometheus::Gauge>& active_requests;
  prometheus::Family<prometheus::Counter>& fallbacks_total;
  prometheus::Family<prometheus::Gauge>& endpoint_circuit_state;
  prometheus::Family<prometheus::Histogram>& time_to_first_byte;
  prometheus::Family<prometheus::Gauge>& build_info;
  // Not in docs/design.md §4 (README "Operating sluice"): config reloads by result.
  prometheus::Family<prometheus::Counter>& config_reloads;
  prometheus::Family<prometheus::Gauge>& config_last_reload_success;

  /**
   * Counts one reload attempt: sluice_config_reloads_total{result="ok"|"rejected"};
   * an accepted one also sets sluice_config_last_reload_success_timestamp_seconds.
   */
  void countReload(bool accepted);

  prometheus::Family<prometheus::Counter>& downstream_rejections;
  // Not in docs/design.md §4 (README "Access log"): lines the access log could not write.
  prometheus::Family<prometheus::Counter>& access_log_dropped;
  prometheus::Counter& accessLogDropped() { return *access_log_dropped_; }

  /** sluice_downstream_rejections_total{reason}: every label built once, up front. */
  prometheus::Counter& rejections(Rejection r) { return *rejections_[static_cast<size_t>(r)]; }

  /**
   * sluice_request_body_buffered_bytes (a contract addition, README
   * "Limits"): request body bytes held now, against the process-wide cap.
   */
  prometheus::Family<prometheus::Gauge>& request_body_buffered;
  prometheus::Gauge& requestBodyBuffered() { return *request_body_buffered_bytes_; }

  /** sluice_shared_state_up and sluice_shared_state_errors_total{op} (docs/design.md §4, §6). */
  prometheus::Family<prometheus::Gauge>& shared_state_up;
  prometheus::Family<prometheus::Counter>& shared_state_errors;
  /** sluice_runs_active and sluice_run_endings_total{reason} (docs/design.md §9). */
  prometheus::Family<prometheus::Gauge>& runs_active;
  prometheus::Family<prometheus::Counter>& run_endings;
  prometheus::Gauge& runsActive() { return *runs_active_; }
  /**
   * sluice_tool_calls_total{route,tool,outcome} and
   * sluice_tool_call_duration_seconds{route,tool} (docs/design.md §10):
   * `tool` is the route's matching `tools[].name` pattern or "other".
   */
  prometheus::Family<prometheus::Counter>& tool_calls;
  prometheus::Family<prometheus::Histogram>& tool_call_duration;
  /**
   * sluice_tool_cancel_notifications_total{route,result}: the
   * `notifications/cancelled` sluice sent to session-ful MCP servers;
   * `result` sent | failed | timeout | dropped.
   */
  prometheus::Family<prometheus::Counter>& tool_cancel_notifications;
  /** `reason`: "cancelled" or "deadline". */
  prometheus::Counter& runEndings(std::string_view reason) {
    return *run_endings_[reason == "cancelled" ? 0 : reason == "deadline" ? 1 : 2];
  }
  /** The shared-state series, one per op (quota, circuit, connect). */
  struct SharedStateSeries {
    prometheus::Gauge* up = nullptr;
    prometheus::Counter* quota_errors = nullptr;
    prometheus::Counter* circuit_errors = nullptr;
    prometheus::Counter* connect_errors = nullptr;
    prometheus::Counter* protocol_errors = nullptr;  // a reply past the limits, or not RESP
    prometheus::Counter* runs_errors = nullptr;      // a run cancel not published
    prometheus::Counter* sessions_errors = nullptr;  // an MCP session not published
    /**
     * The counter of `op` ("quota", "circuit", "protocol", "runs", "sessions", anything
     * else counts as "connect").
     */
    prometheus::Counter& errors(std::string_view op) const;
  };
  /**
   * Creates the shared-state series (only a config with `shared_state` has
   * them: a process on local state by design shows no "down" gauge).
   * Idempotent; thread-safe.
   */
  const SharedStateSeries& sharedState();

  static const prometheus::Histogram::BucketBoundaries& durationBuckets();
  static const prometheus::Histogram::BucketBoundaries& propagationBuckets();

 private:
  std::array<prometheus::Counter*, kRejectionCount> rejections_{};
  prometheus::Counter* access_log_dropped_ = nullptr;
  prometheus::Gauge* runs_active_ = nullptr;
  std::array<prometheus::Counter*, 3> run_endings_{};
  ProcessCollector process_;
  prometheus::Gauge* request_body_buffered_bytes_ = nullptr;
  std::once_flag shared_state_once_;
  SharedStateSeries shared_state_;
};

}  // namespace sluice
