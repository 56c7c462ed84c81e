// Tests for ConfigSnapshot::build and ConfigSnapshot::match (proxy/exchange/config_snapshot.h):
// routes are tried in config order and the first whose path prefix and method match wins; an empty
// method list matches every method; no match is null. The config is inline YAML through the real
// loader.

#include "proxy/exchange/config_snapshot.h"

#include <gtest/gtest.h>

#include <string>

#include "common/clock.h"
#include "config/loader.h"

namespace sluice {
namespace {

config::ConfigPtr load(const std::string& yaml) {
  auto r = config::loadConfigString(yaml, "runtime_test.yaml");
  EXPECT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
  return r.config;
}

constexpr const char* kRoutes = R"(listen: 127.0.0.1:0
upstreams:
  - name: openai
    url: http://127.0.0.1:9001
  - name: anthropic
    url: https://api.anthropic.com
    tls: {verify: false}
routes:
  - name: chat-post
    match: {path_prefix: /v1/chat/completions, methods: [POST]}
    upstream: openai
  - name: chat-any
    match: {path_prefix: /v1/chat}
    upstream: openai
  - name: messages
    match: {path_prefix: /v1/messages, methods: [post, PUT]}
    upstream: anthropic
  - name: models
    match: {path_prefix: /v1/models, methods: [GET, HEAD]}
    upstream: openai
  - name: v1
    match: {path_prefix: /v1/}
    upstream: anthropic
)";

class ConfigSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = load(kRoutes);
    ASSERT_NE(config, nullptr);
    std::string error;
    runtime_ = ConfigSnapshot::build(config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
  }

  // The matched route's name, or "<none>".
  std::string matched(std::string_view method, std::string_view path) const {
    const RouteRuntime* r = runtime_->match(method, path);
    return r ? r->name() : "<none>";
  }

  ManualClock clock_;
  Metrics metrics_;
  ConfigSnapshotPtr runtime_;
};

TEST_F(ConfigSnapshotTest, MatchTable) {
  struct Row {
    const char* method;
    const char* path;
    const char* route;
  };
  const Row kRows[] = {
      // First match wins: chat-post precedes chat-any for POST.
      {"POST", "/v1/chat/completions", "chat-post"},
      {"GET", "/v1/chat/completions", "chat-any"},  // method filter skips chat-post
      {"DELETE", "/v1/chat/completions", "chat-any"},
      {"POST", "/v1/chat", "chat-any"},  // shorter than chat-post's prefix
      {"POST", "/v1/chat/completions/abc", "chat-post"},
      {"POST", "/v1/chatty", "chat-any"},    // prefix is a string prefix, as in Envoy
      {"POST", "/v1/messages", "messages"},  // methods were upper-cased at load
      {"PUT", "/v1/messages/count_tokens", "messages"},
      {"GET", "/v1/messages", "v1"},  // falls through to the catch-all
      {"GET", "/v1/models", "models"},
      {"HEAD", "/v1/models/gpt-4o", "models"},
      {"POST", "/v1/models", "v1"},
      {"OPTIONS", "/v1/embeddings", "v1"},
      {"GET", "/v1/", "v1"},
      // No match.
      {"GET", "/v1", "<none>"},  // "/v1/" is longer than the path
      {"GET", "/", "<none>"},
      {"GET", "", "<none>"},
      {"POST", "/v2/chat/completions", "<none>"},
      {"POST", "/V1/chat/completions", "<none>"},  // paths are case-sensitive
      {"POST", "/api/v1/chat/completions", "<none>"},
      // Methods are case-sensitive tokens (RFC 9110 §9.1): "post" is not POST,
      // so only routes without a method filter can take it.
      {"post", "/v1/chat/completions", "chat-any"},
      {"get", "/v1/models", "v1"},
  };
  for (const auto& row : kRows) {
    EXPECT_EQ(matched(row.method, row.path), row.route) << row.method << " " << row.path;
  }
}

TEST_F(ConfigSnapshotTest, MatchedRouteCarriesItsConfigAndUpstream) {
  const RouteRuntime* r = runtime_->match("POST", "/v1/messages");
  ASSERT_NE(r, nullptr);
  ASSERT_NE(r->config, nullptr);
  EXPECT_EQ(r->config->name, "messages");
  EXPECT_EQ(r->config->match.methods, (std::vector<std::string>{"POST", "PUT"}));
  ASSERT_NE(r->upstream, nullptr);
  ASSERT_NE(r->upstream->config, nullptr);
  EXPECT_EQ(r->upstream->config->name, "anthropic");
  ASSERT_EQ(r->chain.size(), 1u);
  EXPECT_EQ(r->chain[0], r->upstream);
  EXPECT_EQ(r->upstream, &runtime_->upstreams().at(1));
  ASSERT_NE(r->metrics, nullptr);
  // The pointer is into the runtime's own table, stable for its lifetime.
  EXPECT_EQ(r, &runtime_->routes().at(2));
}

TEST_F(ConfigSnapshotTest, BuildResolvesEveryUpstreamAndRoute) {
  ASSERT_EQ(runtime_->upstreams().size(), 2u);
  EXPECT_EQ(runtime_->upstreams()[0].config, &runtime_->config().upstreams[0]);
  EXPECT_EQ(runtime_->upstreams()[0].ssl_ctx, nullptr);  // http://
  EXPECT_NE(runtime_->upstreams()[1].ssl_ctx, nullptr);  // https://
  for (const auto& u : runtime_->upstreams()) {
    ASSERT_NE(u.metrics, nullptr);
    EXPECT_EQ(u.metrics->name(), u.config->name);
    ASSERT_NE(u.endpoints.at(0).breaker, nullptr) << u.config->name;
    EXPECT_EQ(u.endpoints.at(0).breaker->state(), CircuitState::Closed);
  }
  EXPECT_NE(runtime_->upstreams()[0].endpoints.at(0).breaker,
            runtime_->upstreams()[1].endpoints.at(0).breaker);
  ASSERT_EQ(runtime_->routes().size(), 5u);
  const char* kNames[] = {"chat-post", "chat-any", "messages", "models", "v1"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(runtime_->routes()[i].name(), kNames[i]);
    EXPECT_EQ(runtime_->routes()[i].config, &runtime_->config().routes[i]);
    EXPECT_NE(runtime_->routes()[i].retry_budget, nullptr) << kNames[i];
  }
  EXPECT_EQ(&runtime_->metrics(), &metrics_);
}

TEST_F(ConfigSnapshotTest, NoRouteExists) {
  const RouteRuntime& none = runtime_->noRoute();
  EXPECT_EQ(none.name(), "none");
  EXPECT_EQ(none.config, nullptr);
  EXPECT_EQ(none.upstream, nullptr);
  ASSERT_NE(none.metrics, nullptr);
  EXPECT_EQ(none.retry_budget, nullptr);
  // Not one of the matchable routes.
  for (const auto& r : runtime_->routes()) EXPECT_NE(&r, &none);
}

TEST_F(ConfigSnapshotTest, BuildRegistersPerRouteAndPerUpstreamSeries) {
  const RouteRuntime* chat = runtime_->match("POST", "/v1/chat/completions");
  ASSERT_NE(chat, nullptr);
  chat->metrics->requests(200).Increment();
  runtime_->noRoute().metrics->requests(404).Increment();
  const std::string text = metrics_.serialize();
  EXPECT_NE(text.find("sluice_active_requests{route=\"chat-post\"}"), std::string::npos);
  EXPECT_NE(text.find("sluice_active_requests{route=\"none\"}"), std::string::npos);
  EXPECT_NE(text.find("sluice_circuit_state{upstream=\"anthropic\"}"), std::string::npos);
  EXPECT_NE(
      text.find("sluice_requests_total{code=\"200\",route=\"chat-post\",upstream=\"openai\"} 1"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("sluice_requests_total{code=\"404\",route=\"none\",upstream=\"none\"} 1"),
            std::string::npos)
      << text;
}

TEST(RuntimeBuildTest, BreakerTransitionsReachTheUpstreamsMetrics) {
  auto config = load(R"(listen: 127.0.0.1:0
upstreams:
  - name: flaky
    url: http://127.0.0.1:9001
    circuit_breaker: {consecutive_failures: 2, cooldown: 5s}
  - name: steady
    url: http://127.0.0.1:9002
)");
  ASSERT_NE(config, nullptr);
  ManualClock clock;
  Metrics metrics;
  std::string error;
  auto rt = ConfigSnapshot::build(config, metrics, clock, &error);
  ASSERT_NE(rt, nullptr) << error;
  const UpstreamRuntime& flaky = rt->upstreams().at(0);
  const UpstreamRuntime& steady = rt->upstreams().at(1);
  EXPECT_DOUBLE_EQ(flaky.metrics->circuitState().Value(), 0);  // closed from the start

  for (int i = 0; i < 2; ++i) {
    const CircuitAdmission a = flaky.endpoints.at(0).breaker->admit();
    ASSERT_TRUE(a.admitted());
    flaky.endpoints.at(0).breaker->onResult(a, AttemptOutcome::fromStatus(503));
  }
  EXPECT_EQ(flaky.endpoints.at(0).breaker->state(), CircuitState::Open);
  EXPECT_DOUBLE_EQ(flaky.metrics->circuitState().Value(), 1);
  EXPECT_DOUBLE_EQ(flaky.metrics->circuitTransitions("open").Value(), 1);

  clock.advance(std::chrono::seconds(5));  // the cooldown runs on the injected clock
  EXPECT_EQ(flaky.endpoints.at(0).breaker->state(), CircuitState::HalfOpen);
  EXPECT_DOUBLE_EQ(flaky.metrics->circuitState().Value(), 2);
  EXPECT_DOUBLE_EQ(flaky.metrics->circuitTransitions("half_open").Value(), 1);

  // The other upstream's breaker and series are untouched.
  EXPECT_EQ(steady.endpoints.at(0).breaker->state(), CircuitState::Closed);
  EXPECT_DOUBLE_EQ(steady.metrics->circuitState().Value(), 0);
  EXPECT_DOUBLE_EQ(steady.metrics->circuitTransitions("open").Value(), 0);
}

TEST(RuntimeBuildTest, EachEndpointHasItsOwnCircuitAndTheUpstreamIsOpenOnlyWhenAllAre) {
  auto config = load(R"(listen: 127.0.0.1:0
upstreams:
  - name: openai
    endpoints:
      - {name: us, url: "http://127.0.0.1:9001", weight: 3}
      - {name: eu, url: "http://127.0.0.1:9002"}
    circuit_breaker: {consecutive_failures: 1, cooldown: 5s}
    rate_limit: {key: none}
routes:
  - {name: chat, match: {path_prefix: /}, upstream: openai}
)");
  ASSERT_NE(config, nullptr);
  ManualClock clock;
  Metrics metrics;
  std::string error;
  auto rt = ConfigSnapshot::build(config, metrics, clock, &error);
  ASSERT_NE(rt, nullptr) << error;
  const UpstreamRuntime& u = rt->upstreams().at(0);
  ASSERT_EQ(u.endpoints.size(), 2u);
  EXPECT_NE(u.endpoints[0].breaker, u.endpoints[1].breaker);
  EXPECT_NE(u.endpoints[0].quota, u.endpoints[1].quota);
  EXPECT_EQ(rt->poolCount(), 2u);
  EXPECT_EQ(rt->poolEndpoint(1).second, &u.endpoints[1]);
  EXPECT_EQ(u.endpoints[1].destination.endpoint, "eu");
  EXPECT_EQ(u.endpoints[1].destination.breaker, u.endpoints[1].breaker.get());

  const auto fail = [](CircuitBreaker& b) {
    const CircuitAdmission a = b.admit();
    ASSERT_TRUE(a.admitted());
    b.onResult(a, AttemptOutcome::fromStatus(503));
  };
  const auto endpointGauge = [&](const char* name) {
    return metrics.endpoint_circuit_state.Add({{"upstream", "openai"}, {"endpoint", name}}).Value();
  };
  fail(*u.endpoints[0].breaker);
  EXPECT_DOUBLE_EQ(endpointGauge("us"), 1);
  EXPECT_DOUBLE_EQ(endpointGauge("eu"), 0);
  EXPECT_DOUBLE_EQ(u.metrics->circuitState().Value(), 0) << "eu still serves";
  fail(*u.endpoints[1].breaker);
  EXPECT_DOUBLE_EQ(u.metrics->circuitState().Value(), 1) << "every endpoint is open";
  EXPECT_DOUBLE_EQ(u.metrics->circuitTransitions("open").Value(), 2);
  clock.advance(std::chrono::seconds(5));
  EXPECT_EQ(u.endpoints[0].breaker->state(), CircuitState::HalfOpen);
  EXPECT_DOUBLE_EQ(u.metrics->circuitState().Value(), 2);
}

TEST(RuntimeBuildTest, AReloadKeepsTheStateOfEndpointsThatKeepTheirNameAndUrl) {
  auto before_config = load(R"(listen: 127.0.0.1:0
upstreams:
  - name: openai
    endpoints:
      - {name: us, url: "http://127.0.0.1:9001"}
      - {name: eu, url: "http://127.0.0.1:9002"}
    circuit_breaker: {consecutive_failures: 1, cooldown: 60s}
)");
  auto after_config = load(R"(listen: 127.0.0.1:0
upstreams:
  - name: openai
    endpoints:
      - {name: us, url: "http://127.0.0.1:9001", weight: 5}
      - {name: eu, url: "http://127.0.0.1:9003"}
      - {name: ap, url: "http://127.0.0.1:9004"}
    circuit_breaker: {consecutive_failures: 1, cooldown: 60s}
)");
  ASSERT_NE(before_config, nullptr);
  ASSERT_NE(after_config, nullptr);
  ManualClock clock;
  Metrics metrics;
  std::string error;
  auto before = ConfigSnapshot::build(before_config, metrics, clock, &error);
  ASSERT_NE(before, nullptr) << error;
  const CircuitAdmission a = before->upstreams()[0].endpoints[0].breaker->admit();
  before->upstreams()[0].endpoints[0].breaker->onResult(a, AttemptOutcome::fromStatus(503));
  ASSERT_EQ(before->upstreams()[0].endpoints[0].breaker->state(), CircuitState::Open);

  auto after = ConfigSnapshot::build(after_config, metrics, clock, &error, before.get());
  ASSERT_NE(after, nullptr) << error;
  const auto& endpoints = after->upstreams()[0].endpoints;
  // `us` kept its name and url (a new weight is fine): the open circuit stays open.
  EXPECT_EQ(endpoints[0].breaker, before->upstreams()[0].endpoints[0].breaker);
  EXPECT_EQ(endpoints[0].breaker->state(), CircuitState::Open);
  // `eu` moved to another url, `ap` is new: fresh circuits.
  EXPECT_NE(endpoints[1].breaker, before->upstreams()[0].endpoints[1].breaker);
  EXPECT_EQ(endpoints[2].breaker->state(), CircuitState::Closed);
  EXPECT_EQ(after->poolCount(), 3u);
  EXPECT_DOUBLE_EQ(after->upstreams()[0].metrics->circuitState().Value(), 0);
}

TEST(RuntimeBuildTest, CatchAllRouteMatchesEverything) {
  auto config = load(R"(listen: 127.0.0.1:0
upstreams:
  - {name: up, url: "http://127.0.0.1:9001"}
routes:
  - {name: all, match: {path_prefix: /}, upstream: up}
)");
  ASSERT_NE(config, nullptr);
  ManualClock clock;
  Metrics metrics;
  std::string error;
  auto rt = ConfigSnapshot::build(config, metrics, clock, &error);
  ASSERT_NE(rt, nullptr) << error;
  for (const char* method : {"GET", "POST", "PATCH", "DELETE", "BREW"}) {
    for (const char* path : {"/", "/v1/chat/completions", "/health?x=1"}) {
      const RouteRuntime* r = rt->match(method, path);
      ASSERT_NE(r, nullptr) << method << " " << path;
      EXPECT_EQ(r->name(), "all");
    }
  }
  EXPECT_EQ(rt->match("GET", "relative"), nullptr);
}

TEST(RuntimeBuildTest, NoRoutesMatchesNothingButNoRouteExists) {
  auto config = load("listen: 127.0.0.1:0\n");
  ASSERT_NE(config, nullptr);
  ManualClock clock;
  Metrics metrics;
  std::string error;
  auto rt = ConfigSnapshot::build(config, metrics, clock, &error);
  ASSERT_NE(rt, nullptr) << error;
  EXPECT_TRUE(rt->routes().empty());
  EXPECT_EQ(rt->match("GET", "/"), nullptr);
  EXPECT_EQ(rt->noRoute().name(), "none");
  EXPECT_NE(rt->noRoute().metrics, nullptr);
}

TEST(RuntimeBuildTest, TwoRuntimesShareOneMetricsRegistry) {
  // A reload builds a second ConfigSnapshot against the same Metrics: same series, no duplicates.
  auto config = load(R"(listen: 127.0.0.1:0
upstreams:
  - {name: up, url: "http://127.0.0.1:9001"}
routes:
  - {name: r, match: {path_prefix: /}, upstream: up}
)");
  ASSERT_NE(config, nullptr);
  ManualClock clock;
  Metrics metrics;
  std::string error;
  auto first = ConfigSnapshot::build(config, metrics, clock, &error);
  auto second = ConfigSnapshot::build(config, metrics, clock, &error);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  first->routes()[0].metrics->requests(200).Increment();
  EXPECT_EQ(&first->routes()[0].metrics->requests(200),
            &second->routes()[0].metrics->requests(200));
  EXPECT_DOUBLE_EQ(second->routes()[0].metrics->requests(200).Value(), 1.0);
}

TEST(RuntimeBuildTest, UnreadableCaFileFailsWithTheUpstreamNamed) {
  auto config = load(R"(listen: 127.0.0.1:0
upstreams:
  - name: secure
    url: https://api.example.com
    tls: {ca_file: /nonexistent/sluice-test-ca.pem}
)");
  ASSERT_NE(config, nullptr);  // the loader does not open files; build() does
  ManualClock clock;
  Metrics metrics;
  std::string error;
  EXPECT_EQ(ConfigSnapshot::build(config, metrics, clock, &error), nullptr);
  EXPECT_NE(error.find("secure"), std::string::npos) << error;
  EXPECT_NE(error.find("/nonexistent/sluice-test-ca.pem"), std::string::npos) << error;
}

}  // namespace
}  // namespace sluice
