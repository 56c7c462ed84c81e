// Tests for sluice's Prometheus metrics (common/metrics.h, docs/design.md §4):
// every family exists with exactly the documented name, type and label
// names; label values stay inside the documented closed sets; per-code and
// per-cause handles are cached; attempt results classify statuses.
//
// Assertions read the text exposition (Metrics::serialize) — what /metrics
// serves — rather than prometheus-cpp internals.

#include "common/metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice {
namespace {

// One sample line of the text exposition: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

// Parses `name{a="x",b="y"} value` (values in sluice's labels never contain
// quotes or commas, and the parser fails the test if one does).
std::vector<Sample> samplesOf(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (brace == std::string::npos || brace > space) {
      s.name = line.substr(0, space);
    } else {
      s.name = line.substr(0, brace);
      const size_t close = line.find('}', brace);
      std::string body = line.substr(brace + 1, close - brace - 1);
      while (!body.empty()) {
        const size_t eq = body.find('=');
        const size_t q2 = body.find('"', eq + 2);
        EXPECT_TRUE(eq != std::string::npos && q2 != std::string::npos) << line;
        if (eq == std::string::npos || q2 == std::string::npos) break;
        s.labels[body.substr(0, eq)] = body.substr(eq + 2, q2 - eq - 2);
        body = q2 + 1 < body.size() ? body.substr(q2 + 2) : "";  // skip `",`
      }
    }
    s.value = line.substr(space + 1);
    out.push_back(std::move(s));
  }
  return out;
}

// The family a sample belongs to (histogram series carry _bucket/_sum/_count).
std::string familyOf(const std::string& sample_name, const std::set<std::string>& histograms) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string sfx(suffix);
    if (sample_name.size() > sfx.size() &&
        sample_name.compare(sample_name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      const std::string base = sample_name.substr(0, sample_name.size() - sfx.size());
      if (histograms.count(base)) return base;
    }
  }
  return sample_name;
}

struct FamilySpec {
  std::string name;
  std::string type;
  std::set<std::string> labels;
};

// docs/design.md §4, verbatim.
const std::vector<FamilySpec>& designFamilies() {
  static const std::vector<FamilySpec> kFamilies = {
      {"sluice_requests_total", "counter", {"route", "upstream", "code"}},
      {"sluice_request_duration_seconds", "histogram", {"route", "upstream"}},
      // docs/design.md §4's labels plus `endpoint` (§5: attempts per endpoint; README
      // "Endpoints and fallback").
      {"sluice_upstream_attempts_total", "counter", {"upstream", "endpoint", "result"}},
      {"sluice_retries_total", "counter", {"route", "upstream", "cause"}},
      {"sluice_cancellations_total", "counter", {"route", "upstream", "cancel_reason"}},
      {"sluice_cancel_propagation_seconds", "histogram", {"upstream"}},
      {"sluice_circuit_state", "gauge", {"upstream"}},
      {"sluice_circuit_transitions_total", "counter", {"upstream", "to"}},
      // The quota is kept per endpoint (§5): its gauges carry the endpoint too.
      {"sluice_ratelimit_remaining", "gauge", {"upstream", "endpoint", "kind"}},
      {"sluice_throttle_queue_depth", "gauge", {"upstream", "endpoint"}},
      {"sluice_throttle_wait_seconds", "histogram", {"upstream"}},
      {"sluice_tokens_total", "counter", {"route", "upstream", "model", "kind", "disposition"}},
      {"sluice_spend_usd_total", "counter", {"route", "upstream", "model", "disposition"}},
      {"sluice_leaked_spend_usd_total", "counter", {"route", "upstream", "model", "cancel_reason"}},
      {"sluice_active_requests", "gauge", {"route"}},
      // Additions documented in README ("Admin port"), not in docs/design.md §4.
      {"sluice_config_reloads_total", "counter", {"result"}},
      {"sluice_config_last_reload_success_timestamp_seconds", "gauge", {}},
      // Not in docs/design.md §4: a documented addition (README "Limits").
      {"sluice_downstream_rejections_total", "counter", {"reason"}},
      // docs/design.md §4, added with §5–§8.
      {"sluice_time_to_first_byte_seconds", "histogram", {"route", "upstream"}},
      {"sluice_build_info", "gauge", {"version", "commit"}},
      {"sluice_fallbacks_total", "counter", {"route", "from", "to", "cause"}},
      {"sluice_endpoint_circuit_state", "gauge", {"upstream", "endpoint"}},
      // Not in docs/design.md §4: a documented addition (README "Access log").
      {"sluice_access_log_dropped_total", "counter", {}},
      // Not in docs/design.md §4: README "Logs never block".
      {"sluice_log_dropped_total", "counter", {"log"}},
      // The standard process metrics of every Prometheus client (README "Metrics").
      {"process_cpu_seconds_total", "counter", {}},
      {"process_resident_memory_bytes", "gauge", {}},
      {"process_virtual_memory_bytes", "gauge", {}},
      {"process_open_fds", "gauge", {}},
      {"process_max_fds", "gauge", {}},
      {"process_start_time_seconds", "gauge", {}},
      {"sluice_request_body_buffered_bytes", "gauge", {}},
      // docs/design.md §4, §6: only a config with shared_state has these series.
      {"sluice_shared_state_up", "gauge", {}},
      {"sluice_shared_state_errors_total", "counter", {"op"}},
      // docs/design.md §9: runs.
      {"sluice_runs_active", "gauge", {}},
      {"sluice_run_endings_total", "counter", {"reason"}},
  };
  return kFamilies;
}

// docs/design.md §4's set.
const std::set<std::string> kCancelReasons = {
    "client_disconnect", "client_stalled",   "budget_exhausted", "circuit_open",   "rate_limited",
    "overloaded",        "upstream_timeout", "draining",         "upstream_reset", "run_cancelled",
    "run_deadline",      "run_spend_cap",    "client_abandoned"};
const std::set<std::string> kResults = {
    "ok", "http_429", "http_5xx", "http_4xx", "connect_error", "reset", "timeout", "cancelled"};

// Touches every handle of one route and one upstream so every family has a series.
void exerciseEverything(RouteMetrics& route, UpstreamMetrics& upstream, EndpointMetrics& endpoint) {
  for (int code : {200, 400, 429, 499, 502, 503, 504}) route.requests(code).Increment();
  route.duration().Observe(0.25);
  route.timeToFirstByte().Observe(0.05);
  route.active().Increment();
  for (CancelReason r : kAllCancelReasons) route.cancellations(r).Increment();
  for (const char* cause : {"http_429", "http_5xx", "connect_error", "reset", "timeout"}) {
    route.retries(cause).Increment();
  }
  for (bool output : {false, true}) {
    for (Disposition d : {Disposition::Delivered, Disposition::Leaked}) {
      route.tokens("gpt-4o*", output, d).Increment(10);
      route.spend("gpt-4o*", d).Increment(0.01);
    }
  }
  for (CancelReason r : kAllCancelReasons) route.leakedSpend("other", toString(r)).Increment(0.5);

  for (size_t i = 0; i < kAttemptResultCount; ++i) {
    endpoint.attempts(static_cast<AttemptResult>(i)).Increment();
  }
  route.fallbacks("openai", "azure", "circuit_open").Increment();
  endpoint.circuitState().Set(1);
  upstream.cancelPropagation().Observe(0.0001);
  upstream.circuitState().Set(1);
  for (const char* to : {"closed", "open", "half_open"})
    upstream.circuitTransitions(to).Increment();
  endpoint.setRateLimitRemaining(false, 99);
  endpoint.setRateLimitRemaining(true, 12345);
  endpoint.throttleQueueDepth().Set(3);
  upstream.throttleWait().Observe(1.5);
}

// The shared-state series (created once a config has `shared_state`).
void exerciseSharedState(Metrics& metrics) {
  const auto& shared = metrics.sharedState();
  shared.up->Set(1);
  for (const char* op : {"quota", "circuit", "connect", "protocol"}) shared.errors(op).Increment();
}

class MetricsTest : public ::testing::Test {
 protected:
  Metrics metrics_;
  RouteMetrics route_{metrics_, "chat", "openai"};
  UpstreamMetrics upstream_{metrics_, "openai"};
  EndpointMetrics endpoint_{metrics_, "openai", "us"};
};

TEST_F(MetricsTest, EveryDesignFamilyHasItsNameAndType) {
  exerciseEverything(route_, upstream_, endpoint_);
  exerciseSharedState(metrics_);
  const std::string text = metrics_.serialize();
  for (const auto& f : designFamilies()) {
    EXPECT_NE(text.find("# TYPE " + f.name + " " + f.type + "\n"), std::string::npos)
        << f.name << " is not a " << f.type << "\n"
        << text;
  }
}

TEST_F(MetricsTest, NoUndocumentedFamilies) {
  exerciseEverything(route_, upstream_, endpoint_);
  exerciseSharedState(metrics_);
  std::set<std::string> documented;
  for (const auto& f : designFamilies()) documented.insert(f.name);
  std::istringstream in(metrics_.serialize());
  std::string line;
  int type_lines = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    ++type_lines;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    EXPECT_TRUE(documented.count(name)) << "undocumented family " << name;
  }
  EXPECT_EQ(type_lines, static_cast<int>(designFamilies().size()));
}

TEST_F(MetricsTest, EveryRejectionReasonHasASeriesFromTheStart) {
  // Built up front, so a dashboard sees zeros rather than missing series.
  const std::string text = metrics_.serialize();
  for (const char* reason : {"header_timeout", "body_timeout", "idle_timeout", "max_connections",
                             "header_too_large", "body_too_large", "send_timeout"}) {
    EXPECT_NE(
        text.find("sluice_downstream_rejections_total{reason=\"" + std::string(reason) + "\"} 0"),
        std::string::npos)
        << reason << "\n"
        << text;
  }
  metrics_.rejections(Rejection::BodyTimeout).Increment();
  EXPECT_NE(
      metrics_.serialize().find("sluice_downstream_rejections_total{reason=\"body_timeout\"} 1"),
      std::string::npos);
}

TEST_F(MetricsTest, FamilyReferencesCarryTheDesignNames) {
  // The public family members are wired to the right names (a swap would
  // send, e.g., spend into the tokens family).
  const std::pair<const void*, std::string> kMembers[] = {
      {&metrics_.requests_total, "sluice_requests_total"},
      {&metrics_.request_duration, "sluice_request_duration_seconds"},
      {&metrics_.upstream_attempts, "sluice_upstream_attempts_total"},
      {&metrics_.retries_total, "sluice_retries_total"},
      {&metrics_.cancellations_total, "sluice_cancellations_total"},
      {&metrics_.cancel_propagation, "sluice_cancel_propagation_seconds"},
      {&metrics_.circuit_state, "sluice_circuit_state"},
      {&metrics_.circuit_transitions, "sluice_circuit_transitions_total"},
      {&metrics_.ratelimit_remaining, "sluice_ratelimit_remaining"},
      {&metrics_.throttle_queue_depth, "sluice_throttle_queue_depth"},
      {&metrics_.throttle_wait, "sluice_throttle_wait_seconds"},
      {&metrics_.tokens_total, "sluice_tokens_total"},
      {&metrics_.spend_usd_total, "sluice_spend_usd_total"},
      {&metrics_.leaked_spend_usd_total, "sluice_leaked_spend_usd_total"},
      {&metrics_.active_requests, "sluice_active_requests"},
  };
  EXPECT_EQ(metrics_.requests_total.GetName(), "sluice_requests_total");
  EXPECT_EQ(metrics_.request_duration.GetName(), "sluice_request_duration_seconds");
  EXPECT_EQ(metrics_.upstream_attempts.GetName(), "sluice_upstream_attempts_total");
  EXPECT_EQ(metrics_.retries_total.GetName(), "sluice_retries_total");
  EXPECT_EQ(metrics_.cancellations_total.GetName(), "sluice_cancellations_total");
  EXPECT_EQ(metrics_.cancel_propagation.GetName(), "sluice_cancel_propagation_seconds");
  EXPECT_EQ(metrics_.circuit_state.GetName(), "sluice_circuit_state");
  EXPECT_EQ(metrics_.circuit_transitions.GetName(), "sluice_circuit_transitions_total");
  EXPECT_EQ(metrics_.ratelimit_remaining.GetName(), "sluice_ratelimit_remaining");
  EXPECT_EQ(metrics_.throttle_queue_depth.GetName(), "sluice_throttle_queue_depth");
  EXPECT_EQ(metrics_.throttle_wait.GetName(), "sluice_throttle_wait_seconds");
  EXPECT_EQ(metrics_.tokens_total.GetName(), "sluice_tokens_total");
  EXPECT_EQ(metrics_.spend_usd_total.GetName(), "sluice_spend_usd_total");
  EXPECT_EQ(metrics_.leaked_spend_usd_total.GetName(), "sluice_leaked_spend_usd_total");
  EXPECT_EQ(metrics_.active_requests.GetName(), "sluice_active_requests");
  std::set<const void*> distinct;
  for (const auto& [ptr, name] : kMembers) distinct.insert(ptr);
  EXPECT_EQ(distinct.size(), std::size(kMembers));
}

TEST_F(MetricsTest, EverySeriesHasExactlyTheDocumentedLabelNames) {
  exerciseEverything(route_, upstream_, endpoint_);
  exerciseSharedState(metrics_);
  std::map<std::string, std::set<std::string>> expected;
  std::set<std::string> histograms;
  for (const auto& f : designFamilies()) {
    expected[f.name] = f.labels;
    if (f.type == "histogram") histograms.insert(f.name);
  }
  const auto samples = samplesOf(metrics_.serialize());
  ASSERT_FALSE(samples.empty());
  std::set<std::string> seen;
  for (const auto& s : samples) {
    const std::string family = familyOf(s.name, histograms);
    seen.insert(family);
    ASSERT_TRUE(expected.count(family)) << s.name;
    std::set<std::string> names;
    for (const auto& [k, v] : s.labels) {
      if (k == "le" && s.name == family + "_bucket") continue;  // histogram bucket bound
      names.insert(k);
    }
    EXPECT_EQ(names, expected[family]) << s.name;
  }
  EXPECT_EQ(seen.size(), designFamilies().size());
}

TEST_F(MetricsTest, LabelValuesStayInTheDocumentedSets) {
  exerciseEverything(route_, upstream_, endpoint_);
  exerciseSharedState(metrics_);
  // Unknown inputs are folded into the documented set rather than minted as new values.
  upstream_.circuitTransitions("bogus").Increment();
  upstream_.circuitTransitions("").Increment();
  upstream_.circuitTransitions("HALF_OPEN").Increment();

  const std::map<std::string, std::map<std::string, std::set<std::string>>> kClosed = {
      {"sluice_cancellations_total", {{"cancel_reason", kCancelReasons}}},
      {"sluice_leaked_spend_usd_total", {{"cancel_reason", kCancelReasons}}},
      {"sluice_upstream_attempts_total", {{"result", kResults}}},
      {"sluice_circuit_transitions_total", {{"to", {"closed", "open", "half_open"}}}},
      {"sluice_ratelimit_remaining", {{"kind", {"requests", "tokens"}}}},
      {"sluice_tokens_total",
       {{"kind", {"input", "output"}}, {"disposition", {"delivered", "leaked"}}}},
      {"sluice_spend_usd_total", {{"disposition", {"delivered", "leaked"}}}},
  };
  std::map<std::string, std::map<std::string, std::set<std::string>>> seen;
  for (const auto& s : samplesOf(metrics_.serialize())) {
    const auto fam = kClosed.find(s.name);
    if (fam == kClosed.end()) continue;
    for (const auto& [label, allowed] : fam->second) {
      ASSERT_TRUE(s.labels.count(label)) << s.name << " lacks " << label;
      EXPECT_TRUE(allowed.count(s.labels.at(label)))
          << s.name << "{" << label << "=\"" << s.labels.at(label) << "\"} is not documented";
      seen[s.name][label].insert(s.labels.at(label));
    }
  }
  // Having touched every handle, every documented value is present.
  for (const auto& [family, labels] : kClosed) {
    for (const auto& [label, allowed] : labels) {
      EXPECT_EQ(seen[family][label], allowed) << family << " " << label;
    }
  }
}

TEST_F(MetricsTest, ClosedSetsArePreRegisteredPerRouteAndUpstream) {
  // Without touching anything, the attempt results, cancel reasons and circuit
  // targets exist at 0, so dashboards see them from the start. Quota
  // remaining does not: 0 would read as "exhausted" for an upstream that never
  // sent quota headers.
  const auto samples = samplesOf(metrics_.serialize());
  std::set<std::string> results, reasons, targets, kinds;
  for (const auto& s : samples) {
    if (s.name == "sluice_upstream_attempts_total") results.insert(s.labels.at("result"));
    if (s.name == "sluice_cancellations_total") reasons.insert(s.labels.at("cancel_reason"));
    if (s.name == "sluice_circuit_transitions_total") targets.insert(s.labels.at("to"));
    if (s.name == "sluice_ratelimit_remaining") kinds.insert(s.labels.at("kind"));
    if (s.name.rfind("sluice_", 0) == 0 && s.name.find("_total") != std::string::npos) {
      EXPECT_EQ(s.value, "0") << s.name;
    }
  }
  EXPECT_EQ(results, kResults);
  EXPECT_EQ(reasons, kCancelReasons);
  EXPECT_EQ(targets, (std::set<std::string>{"closed", "open", "half_open"}));
  EXPECT_TRUE(kinds.empty());
}

TEST_F(MetricsTest, RateLimitRemainingAppearsWithTheFirstValueSeen) {
  EXPECT_EQ(metrics_.serialize().find("sluice_ratelimit_remaining{"), std::string::npos);
  endpoint_.setRateLimitRemaining(true, 0);  // a real 0: exhausted
  std::string text = metrics_.serialize();
  EXPECT_NE(
      text.find(
          "sluice_ratelimit_remaining{endpoint=\"us\",kind=\"tokens\",upstream=\"openai\"} 0"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("sluice_ratelimit_remaining{kind=\"requests\""), std::string::npos) << text;
  endpoint_.setRateLimitRemaining(false, 42);
  endpoint_.setRateLimitRemaining(false, 41);
  // A second EndpointMetrics for the same endpoint (a reload) updates the same series.
  EndpointMetrics reloaded(metrics_, "openai", "us");
  reloaded.setRateLimitRemaining(false, 40);
  text = metrics_.serialize();
  EXPECT_NE(
      text.find(
          "sluice_ratelimit_remaining{endpoint=\"us\",kind=\"requests\",upstream=\"openai\"} 40"),
      std::string::npos)
      << text;
}

TEST_F(MetricsTest, DurationBucketsReachTheLargestBudget) {
  // budget.max may be 600 s: a request that used all of it lands in a finite bucket.
  ASSERT_FALSE(Metrics::durationBuckets().empty());
  EXPECT_EQ(Metrics::durationBuckets().back(), 600);
  route_.duration().Observe(599);
  route_.timeToFirstByte().Observe(599);
  const std::string text = metrics_.serialize();
  EXPECT_NE(text.find("sluice_request_duration_seconds_bucket{route=\"chat\",upstream=\"openai\","
                      "le=\"600\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sluice_time_to_first_byte_seconds_bucket{route=\"chat\","
                      "upstream=\"openai\",le=\"600\"} 1"),
            std::string::npos)
      << text;
}

TEST_F(MetricsTest, BuildInfoIsOneWithVersionAndCommit) {
  const auto samples = samplesOf(metrics_.serialize());
  int found = 0;
  for (const auto& s : samples) {
    if (s.name != "sluice_build_info") continue;
    ++found;
    EXPECT_EQ(s.value, "1");
    EXPECT_FALSE(s.labels.at("version").empty());
    // A git commit (hex) when built from a checkout, else "unknown".
    const std::string commit = s.labels.at("commit");
    EXPECT_TRUE(
        commit == "unknown" ||
        (!commit.empty() && commit.find_first_not_of("0123456789abcdef") == std::string::npos))
        << commit;
  }
  EXPECT_EQ(found, 1);
}

TEST_F(MetricsTest, ProcessMetricsAreReadAtScrapeTime) {
  std::map<std::string, double> values;
  for (const auto& s : samplesOf(metrics_.serialize())) {
    if (s.name.rfind("process_", 0) == 0) values[s.name] = std::stod(s.value);
  }
  ASSERT_EQ(values.size(), 6u);
  EXPECT_GT(values["process_resident_memory_bytes"], 0);
  EXPECT_GE(values["process_virtual_memory_bytes"], values["process_resident_memory_bytes"]);
  EXPECT_GE(values["process_open_fds"], 3);  // stdin, stdout, stderr at least
  EXPECT_NE(values["process_max_fds"], 0);
  EXPECT_GE(values["process_cpu_seconds_total"], 0);
  // Started after 2020 and not in the future (wall clock, seconds).
  EXPECT_GT(values["process_start_time_seconds"], 1.5e9);
  EXPECT_LE(
      values["process_start_time_seconds"],
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
          1);
}

TEST_F(MetricsTest, HandlesAreDistinctPerLabelValue) {
  std::set<const prometheus::Counter*> attempts;
  for (size_t i = 0; i < kAttemptResultCount; ++i) {
    attempts.insert(&endpoint_.attempts(static_cast<AttemptResult>(i)));
  }
  EXPECT_EQ(attempts.size(), kAttemptResultCount);
  std::set<const prometheus::Counter*> cancels;
  for (CancelReason r : kAllCancelReasons) cancels.insert(&route_.cancellations(r));
  EXPECT_EQ(cancels.size(), std::size(kAllCancelReasons));
  std::set<const prometheus::Counter*> transitions{&upstream_.circuitTransitions("closed"),
                                                   &upstream_.circuitTransitions("open"),
                                                   &upstream_.circuitTransitions("half_open")};
  EXPECT_EQ(transitions.size(), 3u);
}

TEST_F(MetricsTest, IncrementsLandOnTheRightSeries) {
  endpoint_.attempts(AttemptResult::Http429).Increment();
  endpoint_.attempts(AttemptResult::Http429).Increment();
  route_.cancellations(CancelReason::BudgetExhausted).Increment();
  upstream_.circuitTransitions("half_open").Increment();
  const std::string text = metrics_.serialize();
  EXPECT_NE(text.find("sluice_upstream_attempts_total{endpoint=\"us\",result=\"http_429\","
                      "upstream=\"openai\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sluice_cancellations_total{cancel_reason=\"budget_exhausted\","
                      "route=\"chat\",upstream=\"openai\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sluice_circuit_transitions_total{to=\"half_open\",upstream=\"openai\"} 1"),
            std::string::npos)
      << text;
}

TEST_F(MetricsTest, RequestsByCodeIsCached) {
  for (int code : {100, 200, 404, 429, 499, 500, 503, 599}) {
    prometheus::Counter& a = route_.requests(code);
    prometheus::Counter& b = route_.requests(code);
    EXPECT_EQ(&a, &b) << code;
    // And it is the series for that code, through the family.
    EXPECT_EQ(&a, &metrics_.requests_total.Add(
                      {{"route", "chat"}, {"upstream", "openai"}, {"code", std::to_string(code)}}))
        << code;
  }
  EXPECT_NE(&route_.requests(200), &route_.requests(201));
}

TEST_F(MetricsTest, OutOfRangeCodesCountAs500) {
  prometheus::Counter& c500 = route_.requests(500);
  for (int code : {INT_MIN, -1, 0, 1, 99, 600, 999, 1000, INT_MAX}) {
    EXPECT_EQ(&route_.requests(code), &c500) << code;
  }
  route_.requests(0).Increment();
  route_.requests(600).Increment();
  EXPECT_DOUBLE_EQ(c500.Value(), 2.0);
  for (const auto& s : samplesOf(metrics_.serialize())) {
    if (s.name != "sluice_requests_total") continue;
    const int code = std::stoi(s.labels.at("code"));
    EXPECT_GE(code, 100);
    EXPECT_LE(code, 599);
  }
}

TEST_F(MetricsTest, RequestsByCodeIsThreadSafe) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this] {
      for (int code = 100; code <= 599; ++code) route_.requests(code).Increment();
    });
  }
  for (auto& th : threads) th.join();
  for (int code = 100; code <= 599; ++code) {
    ASSERT_DOUBLE_EQ(route_.requests(code).Value(), kThreads) << code;
  }
}

TEST_F(MetricsTest, LazyHandlesAreCachedPerLabelSet) {
  EXPECT_EQ(&route_.retries("http_429"), &route_.retries("http_429"));
  EXPECT_NE(&route_.retries("http_429"), &route_.retries("timeout"));
  EXPECT_EQ(&route_.tokens("gpt-4o*", true, Disposition::Leaked),
            &route_.tokens("gpt-4o*", true, Disposition::Leaked));
  std::set<const prometheus::Counter*> tokens;
  for (bool output : {false, true}) {
    for (Disposition d : {Disposition::Delivered, Disposition::Leaked}) {
      tokens.insert(&route_.tokens("m", output, d));
    }
  }
  EXPECT_EQ(tokens.size(), 4u);
  EXPECT_NE(&route_.spend("m", Disposition::Delivered), &route_.spend("m", Disposition::Leaked));
  EXPECT_EQ(&route_.leakedSpend("m", "draining"), &route_.leakedSpend("m", "draining"));
  EXPECT_NE(&route_.leakedSpend("m", "draining"), &route_.leakedSpend("other", "draining"));
  // Same extra labels on different families are different series.
  EXPECT_NE(&route_.spend("m", Disposition::Leaked), &route_.leakedSpend("m", "client_disconnect"));
}

TEST_F(MetricsTest, TwoRoutesOnOneRegistryKeepSeparateSeries) {
  RouteMetrics other(metrics_, "embeddings", "openai");
  EXPECT_NE(&route_.requests(200), &other.requests(200));
  EXPECT_NE(&route_.active(), &other.active());
  EXPECT_NE(&route_.retries("reset"), &other.retries("reset"));
  // The same route built twice (config reload) shares series.
  RouteMetrics again(metrics_, "chat", "openai");
  EXPECT_EQ(&route_.requests(200), &again.requests(200));
  EXPECT_EQ(&route_.active(), &again.active());
  EXPECT_EQ(&route_.retries("reset"), &again.retries("reset"));
}

TEST(AttemptResultTest, ToStringNames) {
  const std::pair<AttemptResult, const char*> kNames[] = {
      {AttemptResult::Ok, "ok"},
      {AttemptResult::Http429, "http_429"},
      {AttemptResult::Http5xx, "http_5xx"},
      {AttemptResult::Http4xx, "http_4xx"},
      {AttemptResult::ConnectError, "connect_error"},
      {AttemptResult::Reset, "reset"},
      {AttemptResult::Timeout, "timeout"},
      {AttemptResult::Cancelled, "cancelled"},
  };
  static_assert(std::size(kNames) == kAttemptResultCount);
  std::set<std::string> names;
  for (const auto& [r, name] : kNames) {
    EXPECT_EQ(toString(r), name);
    names.insert(std::string(toString(r)));
  }
  EXPECT_EQ(names, kResults);
}

TEST(AttemptResultTest, ForStatusTable) {
  const std::pair<int, AttemptResult> kRows[] = {
      {100, AttemptResult::Ok},      {200, AttemptResult::Ok},      {201, AttemptResult::Ok},
      {204, AttemptResult::Ok},      {301, AttemptResult::Ok},      {304, AttemptResult::Ok},
      {399, AttemptResult::Ok},      {400, AttemptResult::Http4xx}, {401, AttemptResult::Http4xx},
      {404, AttemptResult::Http4xx}, {408, AttemptResult::Http4xx}, {428, AttemptResult::Http4xx},
      {429, AttemptResult::Http429}, {430, AttemptResult::Http4xx}, {499, AttemptResult::Http4xx},
      {500, AttemptResult::Http5xx}, {502, AttemptResult::Http5xx}, {503, AttemptResult::Http5xx},
      {504, AttemptResult::Http5xx}, {529, AttemptResult::Http5xx}, {599, AttemptResult::Http5xx},
  };
  for (const auto& [status, expected] : kRows) {
    EXPECT_EQ(attemptResultFor(AttemptOutcome::fromStatus(status)), expected)
        << status << " -> " << toString(attemptResultFor(AttemptOutcome::fromStatus(status)));
  }
}

TEST(AttemptResultTest, ForTransportOutcomes) {
  EXPECT_EQ(attemptResultFor(AttemptOutcome::connectError()), AttemptResult::ConnectError);
  EXPECT_EQ(attemptResultFor(AttemptOutcome::reset()), AttemptResult::Reset);
  EXPECT_EQ(attemptResultFor(AttemptOutcome::timeout()), AttemptResult::Timeout);
  EXPECT_EQ(attemptResultFor(AttemptOutcome::cancelled()), AttemptResult::Cancelled);
}

TEST(MetricsBucketsTest, BoundariesAreStrictlyIncreasing) {
  for (const auto* b : {&Metrics::durationBuckets(), &Metrics::propagationBuckets()}) {
    ASSERT_FALSE(b->empty());
    EXPECT_GT(b->front(), 0.0);
    for (size_t i = 1; i < b->size(); ++i) EXPECT_LT((*b)[i - 1], (*b)[i]);
  }
  // Durations reach the default budget max (600s) region; propagation resolves sub-millisecond.
  EXPECT_GE(Metrics::durationBuckets().back(), 120.0);
  EXPECT_LE(Metrics::propagationBuckets().front(), 0.0001);
}

}  // namespace
}  // namespace sluice
