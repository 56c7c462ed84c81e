// Tests for the config loader (config/loader.h) and renderer (config/render.h):
// defaults, strict validation with exact file:line:column + key path messages,
// ${VAR} expansion, redaction, and the shipped examples.

#include "config/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/render.h"

namespace sluice::config {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A fake environment: only the variables given exist.
EnvLookup fakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const EnvLookup kEnv = fakeEnv({{"OPENAI_API_KEY", "sk-test-openai-123"},
                                {"ANTHROPIC_API_KEY", "sk-ant-test-456"},
                                {"WORKERS", "4"},
                                {"TIMEOUT", "750ms"},
                                {"EMPTY", ""}});

LoadResult load(const std::string& yaml) { return loadConfigString(yaml, "test.yaml", kEnv); }

// Loads YAML that must be valid; fails the test with the loader's message otherwise.
ConfigPtr loadOk(const std::string& yaml) {
  LoadResult r = load(yaml);
  EXPECT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
  EXPECT_FALSE(r.error.has_value());
  return r.config;
}

constexpr const char* kMinimal = R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
)";

// ---------------------------------------------------------------------------
// Defaults

TEST(ConfigLoaderTest, FillsEveryDefaultFromTheContract) {
  const ConfigPtr c = loadOk(kMinimal);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->version, 1);
  ASSERT_EQ(c->listeners.size(), 1u);
  EXPECT_EQ(c->listeners[0].address.host, "127.0.0.1");
  EXPECT_EQ(c->listeners[0].address.port, 8080);
  EXPECT_FALSE(c->listeners[0].tls.has_value());
  EXPECT_EQ(c->admin.toString(), "127.0.0.1:9901");
  EXPECT_EQ(c->workers, 0u);  // auto
  EXPECT_EQ(c->drain_timeout, seconds(30));
  EXPECT_EQ(c->source_path, "test.yaml");
  EXPECT_TRUE(c->pricing.empty());
  EXPECT_EQ(c->limits.max_header_bytes, 64u * 1024);
  EXPECT_EQ(c->limits.max_headers, 100u);
  EXPECT_EQ(c->limits.max_body, 64ull * 1024 * 1024);
  EXPECT_EQ(c->limits.max_buffered_body_bytes, 256ull * 1024 * 1024);
  EXPECT_EQ(c->limits.max_connections_per_worker, 10000u);
  EXPECT_EQ(c->limits.http2_max_concurrent_streams, 128u);
  EXPECT_EQ(c->limits.header_read_timeout, seconds(10));
  EXPECT_EQ(c->limits.body_read_timeout, seconds(30));
  EXPECT_EQ(c->limits.idle_timeout, seconds(60));
  EXPECT_EQ(c->limits.send_timeout, seconds(60));

  ASSERT_EQ(c->upstreams.size(), 1u);
  const UpstreamConfig& u = c->upstreams[0];
  EXPECT_EQ(u.name, "openai");
  EXPECT_EQ(u.endpoints[0].raw_url, "https://api.openai.com");
  EXPECT_TRUE(u.endpoints[0].url.isTls());
  EXPECT_EQ(u.endpoints[0].url.host, "api.openai.com");
  EXPECT_EQ(u.endpoints[0].url.port, 443);
  EXPECT_EQ(u.endpoints[0].url.path_prefix, "");
  EXPECT_EQ(u.connect_timeout, seconds(2));
  EXPECT_EQ(u.http2, Http2Mode::Auto);
  EXPECT_TRUE(u.tls.verify);
  EXPECT_EQ(u.tls.ca_file, "");
  EXPECT_EQ(u.tls.sni, "");
  EXPECT_TRUE(u.headers.empty());
  EXPECT_FALSE(u.rate_limit.has_value());  // throttling off unless configured

  const CircuitBreakerConfig& cb = u.circuit_breaker;
  EXPECT_EQ(cb.consecutive_failures, 5u);
  EXPECT_DOUBLE_EQ(cb.failure_rate.threshold, 0.5);
  EXPECT_EQ(cb.failure_rate.window, seconds(10));
  EXPECT_EQ(cb.failure_rate.min_requests, 20u);
  EXPECT_EQ(cb.cooldown, seconds(5));
  EXPECT_EQ(cb.max_cooldown, seconds(60));
  EXPECT_EQ(cb.half_open_probes, 1u);
  EXPECT_TRUE(cb.failure_on.any_5xx);
  EXPECT_FALSE(cb.failure_on.any_4xx);
  EXPECT_FALSE(cb.failure_on.matchesStatus(429));  // 429 is not a failure by default
  EXPECT_TRUE(cb.failure_on.connect_error && cb.failure_on.reset && cb.failure_on.timeout);
  EXPECT_EQ(cb.max_requests, 1000u);
  EXPECT_EQ(cb.max_pending, 1000u);

  ASSERT_EQ(c->routes.size(), 1u);
  const RouteConfig& r = c->routes[0];
  EXPECT_EQ(r.name, "chat");
  EXPECT_EQ(r.match.path_prefix, "/v1/chat");
  EXPECT_TRUE(r.match.methods.empty());
  EXPECT_EQ(r.upstream, "openai");
  EXPECT_EQ(r.upstream_index, 0u);
  EXPECT_EQ(r.budget.header, "x-budget-ms");
  EXPECT_EQ(r.budget.default_budget, seconds(120));
  EXPECT_EQ(r.budget.max, seconds(600));
  EXPECT_TRUE(r.budget.propagate);
  EXPECT_EQ(r.retry.attempts, 3u);
  EXPECT_EQ(r.retry.on.statuses, (std::vector<int>{429, 500, 502, 503, 504, 529}));
  EXPECT_TRUE(r.retry.on.connect_error && r.retry.on.reset && r.retry.on.timeout);
  EXPECT_EQ(r.retry.backoff.base, milliseconds(250));
  EXPECT_EQ(r.retry.backoff.max, seconds(8));
  EXPECT_TRUE(r.retry.respect_retry_after);
  EXPECT_EQ(r.retry.idempotent, IdempotencyMode::Always);
  EXPECT_EQ(r.retry.budget_percent, 20u);
  EXPECT_EQ(r.retry.max_body, 8u * 1024 * 1024);
  EXPECT_EQ(r.first_byte_timeout, Duration::zero());
  EXPECT_EQ(r.idle_timeout, seconds(30));
  EXPECT_EQ(r.on_client_disconnect, ClientDisconnectMode::Cancel);
  EXPECT_EQ(r.finish_grace, seconds(30));
}

TEST(ConfigLoaderTest, PartialBlocksOverrideOnlyTheKeysGiven) {
  const ConfigPtr c = loadOk(R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    rate_limit: {}
    circuit_breaker: {cooldown: 1s, failure_rate: {window: 30s}}
routes:
  - name: chat
    match: {path_prefix: /}
    upstream: openai
    budget: {default: 10s}
    retry: {attempts: 5, backoff: {max: 2s}}
)");
  ASSERT_NE(c, nullptr);
  const UpstreamConfig& u = c->upstreams[0];
  ASSERT_TRUE(u.rate_limit.has_value());  // present, even if empty: throttling on, defaults
  EXPECT_EQ(u.rate_limit->key.kind, RateLimitKey::Kind::Header);
  EXPECT_EQ(u.rate_limit->key.header, "authorization");
  EXPECT_EQ(u.rate_limit->reserve, 1);
  EXPECT_EQ(u.rate_limit->max_queue, 1000u);
  EXPECT_EQ(u.circuit_breaker.cooldown, seconds(1));
  EXPECT_EQ(u.circuit_breaker.max_cooldown, seconds(60));
  EXPECT_EQ(u.circuit_breaker.failure_rate.window, seconds(30));
  EXPECT_DOUBLE_EQ(u.circuit_breaker.failure_rate.threshold, 0.5);
  EXPECT_EQ(u.circuit_breaker.failure_rate.min_requests, 20u);
  EXPECT_EQ(u.circuit_breaker.consecutive_failures, 5u);

  const RouteConfig& r = c->routes[0];
  EXPECT_EQ(r.budget.default_budget, seconds(10));
  EXPECT_EQ(r.budget.max, seconds(600));
  EXPECT_EQ(r.budget.header, "x-budget-ms");
  EXPECT_EQ(r.retry.attempts, 5u);
  EXPECT_EQ(r.retry.backoff.base, milliseconds(250));
  EXPECT_EQ(r.retry.backoff.max, seconds(2));
  EXPECT_EQ(r.retry.on.statuses, (std::vector<int>{429, 500, 502, 503, 504, 529}));
}

// The full schema of docs/design.md §2, every key set to a non-default value.
constexpr const char* kFull = R"(version: 1
listen:
  - address: 0.0.0.0:8443
    tls: {cert: /etc/sluice/cert.pem, key: /etc/sluice/key.pem}
  - "[::1]:0"
admin: "[::1]:9902"
workers: 6
drain_timeout: 45s
upstreams:
  - name: local
    url: http://127.0.0.1:9000/base/
    http2: off
  - name: openai
    url: HTTPS://API.OpenAI.com:8443/v1
    connect_timeout: 1500ms
    http2: on
    tls: {verify: false, ca_file: /etc/ssl/ca.pem, sni: api.openai.com}
    headers:
      Authorization: "Bearer ${OPENAI_API_KEY}"
      OpenAI-Organization: org-123
    rate_limit:
      key: header:X-Api-Key
      reserve: 3
      max_queue: 50
    circuit_breaker:
      consecutive_failures: 7
      failure_rate: {threshold: 0.25, window: 1m, min_requests: 40}
      cooldown: 2s
      max_cooldown: 1h
      half_open_probes: 2
      failure_on: [4xx, 5xx, 429, reset]
      max_requests: 10
      max_pending: 0
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [post, Get]}
    upstream: openai
    budget: {header: X-Deadline-Ms, default: 1m30s, max: 10m, propagate: false}
    retry:
      attempts: 4
      on: [503, timeout]
      backoff: {base: 0s, max: 1.5s}
      respect_retry_after: false
      idempotent: auto
      budget_percent: 100
      max_body: 512KiB
    first_byte_timeout: 20s
    idle_timeout: 0s
    on_client_disconnect: finish
    finish_grace: 5s
  - name: rest
    match: {}
    upstream: local
    retry: {idempotent: never, max_body: 1000}
pricing:
  - {model: "gpt-4o*", input: 2.50, output: 10}
  - {model: "claude-*", input: 3, output: 1.5e1}
limits:
  max_header_bytes: 8KiB
  max_headers: 20
  max_body: 1MB
  max_buffered_body_bytes: 2GiB
  max_connections_per_worker: 3
  http2_max_concurrent_streams: 10
  header_read_timeout: 200ms
  body_read_timeout: 0s
  idle_timeout: 2m
  send_timeout: 15s
access_log: {path: /var/log/sluice/access.log, format: json}
)";

TEST(ConfigLoaderTest, DecodesEveryKeyOfTheSchema) {
  const ConfigPtr c = loadOk(kFull);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->listeners.size(), 2u);
  EXPECT_EQ(c->listeners[0].address.toString(), "0.0.0.0:8443");
  ASSERT_TRUE(c->listeners[0].tls.has_value());
  EXPECT_EQ(c->listeners[0].tls->cert_file, "/etc/sluice/cert.pem");
  EXPECT_EQ(c->listeners[0].tls->key_file, "/etc/sluice/key.pem");
  EXPECT_EQ(c->listeners[1].address.host, "::1");
  EXPECT_EQ(c->listeners[1].address.port, 0);
  EXPECT_EQ(c->listeners[1].address.toString(), "[::1]:0");
  EXPECT_FALSE(c->listeners[1].tls.has_value());
  EXPECT_EQ(c->admin.host, "::1");
  EXPECT_EQ(c->admin.port, 9902);
  EXPECT_EQ(c->workers, 6u);
  EXPECT_EQ(c->drain_timeout, seconds(45));
  EXPECT_EQ(c->limits.max_header_bytes, 8u * 1024);
  EXPECT_EQ(c->limits.max_headers, 20u);
  EXPECT_EQ(c->limits.max_body, 1'000'000u);
  EXPECT_EQ(c->limits.max_buffered_body_bytes, 2ull << 30);
  EXPECT_EQ(c->limits.max_connections_per_worker, 3u);
  EXPECT_EQ(c->limits.http2_max_concurrent_streams, 10u);
  EXPECT_EQ(c->limits.header_read_timeout, milliseconds(200));
  EXPECT_EQ(c->limits.body_read_timeout, milliseconds(0));  // 0 = off
  EXPECT_EQ(c->limits.idle_timeout, seconds(120));
  EXPECT_EQ(c->limits.send_timeout, seconds(15));
  EXPECT_EQ(c->access_log.target, AccessLogConfig::Target::File);
  EXPECT_EQ(c->access_log.path, "/var/log/sluice/access.log");

  ASSERT_EQ(c->upstreams.size(), 2u);
  const UpstreamConfig& local = c->upstreams[0];
  EXPECT_FALSE(local.endpoints[0].url.isTls());
  EXPECT_EQ(local.endpoints[0].url.port, 9000);
  EXPECT_EQ(local.endpoints[0].url.path_prefix, "/base");
  EXPECT_EQ(local.endpoints[0].url.authority(), "127.0.0.1:9000");
  EXPECT_EQ(local.http2, Http2Mode::Off);

  const UpstreamConfig& u = c->upstreams[1];
  EXPECT_TRUE(u.endpoints[0].url.isTls());
  EXPECT_EQ(u.endpoints[0].url.host, "api.openai.com");
  EXPECT_EQ(u.endpoints[0].url.port, 8443);
  EXPECT_EQ(u.endpoints[0].url.path_prefix, "/v1");
  EXPECT_EQ(u.endpoints[0].url.authority(), "api.openai.com:8443");
  EXPECT_EQ(u.connect_timeout, milliseconds(1500));
  EXPECT_EQ(u.http2, Http2Mode::On);
  EXPECT_FALSE(u.tls.verify);
  EXPECT_EQ(u.tls.ca_file, "/etc/ssl/ca.pem");
  EXPECT_EQ(u.tls.sni, "api.openai.com");
  using Header = std::pair<std::string, std::string>;
  EXPECT_EQ(u.headers, (std::vector<Header>{{"authorization", "Bearer sk-test-openai-123"},
                                            {"openai-organization", "org-123"}}));
  ASSERT_TRUE(u.rate_limit.has_value());
  EXPECT_EQ(u.rate_limit->key.kind, RateLimitKey::Kind::Header);
  EXPECT_EQ(u.rate_limit->key.header, "x-api-key");
  EXPECT_EQ(u.rate_limit->reserve, 3);
  EXPECT_EQ(u.rate_limit->max_queue, 50u);
  const CircuitBreakerConfig& cb = u.circuit_breaker;
  EXPECT_EQ(cb.consecutive_failures, 7u);
  EXPECT_DOUBLE_EQ(cb.failure_rate.threshold, 0.25);
  EXPECT_EQ(cb.failure_rate.window, seconds(60));
  EXPECT_EQ(cb.failure_rate.min_requests, 40u);
  EXPECT_EQ(cb.cooldown, seconds(2));
  EXPECT_EQ(cb.max_cooldown, seconds(3600));
  EXPECT_EQ(cb.half_open_probes, 2u);
  EXPECT_TRUE(cb.failure_on.any_4xx && cb.failure_on.any_5xx && cb.failure_on.reset);
  EXPECT_FALSE(cb.failure_on.connect_error || cb.failure_on.timeout);
  EXPECT_EQ(cb.failure_on.statuses, std::vector<int>{429});
  EXPECT_EQ(cb.max_requests, 10u);
  EXPECT_EQ(cb.max_pending, 0u);

  ASSERT_EQ(c->routes.size(), 2u);
  const RouteConfig& r = c->routes[0];
  EXPECT_EQ(r.match.methods, (std::vector<std::string>{"POST", "GET"}));
  EXPECT_EQ(r.upstream_index, 1u);
  EXPECT_EQ(r.budget.header, "x-deadline-ms");
  EXPECT_EQ(r.budget.default_budget, seconds(90));
  EXPECT_EQ(r.budget.max, seconds(600));
  EXPECT_FALSE(r.budget.propagate);
  EXPECT_EQ(r.retry.attempts, 4u);
  EXPECT_EQ(r.retry.on.statuses, std::vector<int>{503});
  EXPECT_TRUE(r.retry.on.timeout);
  EXPECT_FALSE(r.retry.on.connect_error || r.retry.on.reset || r.retry.on.any_5xx);
  EXPECT_EQ(r.retry.backoff.base, Duration::zero());
  EXPECT_EQ(r.retry.backoff.max, milliseconds(1500));
  EXPECT_FALSE(r.retry.respect_retry_after);
  EXPECT_EQ(r.retry.idempotent, IdempotencyMode::Auto);
  EXPECT_EQ(r.retry.budget_percent, 100u);
  EXPECT_EQ(r.retry.max_body, 512u * 1024);
  EXPECT_EQ(r.first_byte_timeout, seconds(20));
  EXPECT_EQ(r.idle_timeout, Duration::zero());
  EXPECT_EQ(r.on_client_disconnect, ClientDisconnectMode::Finish);
  EXPECT_EQ(r.finish_grace, seconds(5));

  const RouteConfig& rest = c->routes[1];
  EXPECT_EQ(rest.match.path_prefix, "/");  // `match: {}` matches everything
  EXPECT_EQ(rest.upstream_index, 0u);
  EXPECT_EQ(rest.retry.idempotent, IdempotencyMode::Never);
  EXPECT_EQ(rest.retry.max_body, 1000u);

  ASSERT_EQ(c->pricing.size(), 2u);
  EXPECT_EQ(c->pricing[0].model_glob, "gpt-4o*");
  EXPECT_DOUBLE_EQ(c->pricing[0].input_usd_per_mtok, 2.5);
  EXPECT_DOUBLE_EQ(c->pricing[0].output_usd_per_mtok, 10);
  EXPECT_DOUBLE_EQ(c->pricing[1].output_usd_per_mtok, 15);
}

TEST(ConfigLoaderTest, DecodesEndpointsAndTheFallbackChain) {
  const ConfigPtr c = loadOk(R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    endpoints:
      - {name: us, url: http://127.0.0.1:9000, weight: 3}
      - {url: "http://[::1]:9001/v1"}
      - {name: spare, url: https://backup.example, priority: 1}
  - {name: azure, url: http://127.0.0.1:9100}
  - {name: local, url: http://127.0.0.1:9200}
routes:
  - name: chat
    match: {path_prefix: /v1/chat, model: "gpt-4o*"}
    upstream: openai
    fallback:
      - {upstream: azure, model: gpt-4o-prod}
      - upstream: local
    fallback_on: [circuit_open, 429, 5xx, connect_error]
    fallback_wait: avoid
  - name: rest
    match: {path_prefix: /}
    upstream: openai
)");
  ASSERT_NE(c, nullptr);
  const UpstreamConfig& u = c->upstreams[0];
  ASSERT_EQ(u.endpoints.size(), 3u);
  EXPECT_EQ(u.endpoints[0].name, "us");
  EXPECT_EQ(u.endpoints[0].weight, 3u);
  EXPECT_EQ(u.endpoints[0].priority, 0u);
  EXPECT_EQ(u.endpoints[1].name, "[::1]:9001") << "the default name is host:port";
  EXPECT_EQ(u.endpoints[1].url.path_prefix, "/v1");
  EXPECT_EQ(u.endpoints[1].weight, 1u);
  EXPECT_EQ(u.endpoints[2].priority, 1u);
  EXPECT_TRUE(u.endpoints[2].url.isTls());
  ASSERT_EQ(c->upstreams[1].endpoints.size(), 1u);
  EXPECT_EQ(c->upstreams[1].endpoints[0].name, "127.0.0.1:9100");

  const RouteConfig& chat = c->routes[0];
  EXPECT_EQ(chat.match.model, "gpt-4o*");
  ASSERT_EQ(chat.fallback.size(), 2u);
  EXPECT_EQ(chat.fallback[0].upstream, "azure");
  EXPECT_EQ(chat.fallback[0].upstream_index, 1u);
  EXPECT_EQ(chat.fallback[0].model, "gpt-4o-prod");
  EXPECT_EQ(chat.fallback[1].upstream_index, 2u);
  EXPECT_EQ(chat.fallback[1].model, "");
  EXPECT_TRUE(chat.fallback_on.circuit_open);
  EXPECT_FALSE(chat.fallback_on.rate_limited);
  EXPECT_FALSE(chat.fallback_on.overloaded);
  EXPECT_TRUE(chat.fallback_on.outcomes.matchesStatus(429));
  EXPECT_TRUE(chat.fallback_on.outcomes.matchesStatus(502));
  EXPECT_FALSE(chat.fallback_on.outcomes.matchesStatus(404));
  EXPECT_TRUE(chat.fallback_on.outcomes.connect_error);
  EXPECT_FALSE(chat.fallback_on.outcomes.timeout);
  EXPECT_EQ(chat.fallback_wait, FallbackWait::Avoid);

  // Defaults: no fallback; every refusal, 429, 5xx and the transport failures.
  const RouteConfig& rest = c->routes[1];
  EXPECT_TRUE(rest.fallback.empty());
  EXPECT_EQ(rest.match.model, "");
  EXPECT_TRUE(rest.fallback_on.circuit_open && rest.fallback_on.rate_limited &&
              rest.fallback_on.overloaded);
  EXPECT_TRUE(rest.fallback_on.outcomes.matchesStatus(429));
  EXPECT_TRUE(rest.fallback_on.outcomes.matchesStatus(503));
  EXPECT_TRUE(rest.fallback_on.outcomes.reset && rest.fallback_on.outcomes.timeout);
  EXPECT_EQ(rest.fallback_wait, FallbackWait::Prefer);
}

TEST(ConfigLoaderTest, RateLimitKeyNoneAndListenAsList) {
  const ConfigPtr c = loadOk(R"(listen: [127.0.0.1:0, {address: "127.0.0.1:0"}]
admin: 127.0.0.1:0
upstreams:
  - {name: mock, url: "http://[::1]:9000", rate_limit: {key: none}}
)");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->listeners.size(), 2u);  // port 0 twice is fine: both ephemeral
  EXPECT_TRUE(c->routes.empty());
  ASSERT_TRUE(c->upstreams[0].rate_limit.has_value());
  EXPECT_EQ(c->upstreams[0].rate_limit->key.kind, RateLimitKey::Kind::None);
  EXPECT_EQ(c->upstreams[0].endpoints[0].url.host, "::1");
  EXPECT_EQ(c->upstreams[0].endpoints[0].url.authority(), "[::1]:9000");
}

// ---------------------------------------------------------------------------
// Validation errors: the exact message, position and key path.

struct ErrorCase {
  const char* name;
  const char* yaml;
  const char* expected;
};

const ErrorCase kErrorCases[] = {
    // --- structure, unknown keys, required keys
    {"UnknownTopLevelKey", "listen: 127.0.0.1:8080\nlistne: 1\n",
     R"(test.yaml:2:1: listne: unknown key (did you mean "listen"?))"},
    {"UnknownKeyFarFromAnyKnownKey", "listen: 127.0.0.1:8080\nfoo: 1\n",
     "test.yaml:2:1: foo: unknown key (expected one of: version, listen, admin, workers, "
     "drain_timeout, upstreams, routes, pricing, limits, access_log, shared_state, runs)"},
    {"MissingListen", "admin: 127.0.0.1:9901\n", "test.yaml:1:1: listen: required key is missing"},
    {"EmptyDocument", "",
     "test.yaml:1:1: expected a mapping at the top level, got an empty document"},
    {"TopLevelList", "- listen\n",
     "test.yaml:1:1: expected a mapping at the top level, got a list"},
    {"MultipleDocuments", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n",
     "test.yaml:3:1: expected one YAML document, found 2"},
    {"YamlSyntaxError", "listen: [127.0.0.1:8080\n",
     "test.yaml:2:1: invalid YAML: end of sequence flow not found"},
    {"DuplicateKey", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    upstream: openai
)",
     "test.yaml:9:5: routes[0].upstream: duplicate key"},
    {"NestedUnknownKey", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry: {attemps: 2}
)",
     R"(test.yaml:9:13: routes[0].retry.attemps: unknown key (did you mean "attempts"?))"},
    {"UrlAndEndpoints", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    endpoints: [{url: https://eu.api.openai.com}]
)",
     "test.yaml:5:16: upstreams[0].endpoints: give either `url` (one endpoint) or `endpoints`, not "
     "both"},
    {"DuplicateEndpointName", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    endpoints:
      - {url: http://127.0.0.1:9000}
      - {url: http://127.0.0.1:9000/v2}
)",
     "test.yaml:6:9: upstreams[0].endpoints[1]: duplicate endpoint name \"127.0.0.1:9000\" (first "
     "at line 5; two endpoints with one url need distinct names)"},
    {"EndpointWeightZero", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    endpoints: [{url: http://127.0.0.1:9000, weight: 0}]
)",
     "test.yaml:4:54: upstreams[0].endpoints[0].weight: must be at least 1"},
    {"FallbackUnknownUpstream", R"(listen: 127.0.0.1:8080
upstreams:
  - {name: openai, url: http://127.0.0.1:9000}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
    fallback: [{upstream: azure}]
)",
     "test.yaml:8:27: routes[0].fallback[0].upstream: unknown upstream \"azure\" (defined: "
     "openai)"},
    {"FallbackToItself", R"(listen: 127.0.0.1:8080
upstreams:
  - {name: openai, url: http://127.0.0.1:9000}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
    fallback: [{upstream: openai}]
)",
     "test.yaml:8:27: routes[0].fallback[0].upstream: upstream \"openai\" is already in this "
     "route's chain (the route's upstream or an earlier fallback)"},
    {"FallbackOnUnknownCause", R"(listen: 127.0.0.1:8080
upstreams:
  - {name: openai, url: http://127.0.0.1:9000}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
    fallback_on: [circuit_open, broken]
)",
     "test.yaml:8:33: routes[0].fallback_on[1]: unknown cause \"broken\" (expected circuit_open, "
     "rate_limited, overloaded, a status code 100..599, 4xx, 5xx, connect_error, reset or "
     "timeout)"},
    {"FallbackModelWithAQuote", R"(listen: 127.0.0.1:8080
upstreams:
  - {name: openai, url: http://127.0.0.1:9000}
  - {name: azure, url: http://127.0.0.1:9001}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
    fallback: [{upstream: azure, model: 'a"b'}]
)",
     "test.yaml:9:41: routes[0].fallback[0].model: a model name must not contain quotes, "
     "backslashes or control characters"},
    {"UpstreamMissingUrl", "listen: 127.0.0.1:8080\nupstreams:\n  - name: openai\n",
     "test.yaml:3:5: upstreams[0].url: required key is missing (or give `endpoints`)"},
    {"RouteMissingMatch", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    upstream: openai
)",
     "test.yaml:6:5: routes[0].match: required key is missing"},
    {"PricingMissingOutput",
     "listen: 127.0.0.1:8080\npricing:\n  - {model: \"gpt-4o*\", input: 2.5}\n",
     "test.yaml:3:5: pricing[0].output: required key is missing"},

    // --- wrong types
    {"ListenIsAMapping", "listen: {address: 127.0.0.1:8080}\n",
     "test.yaml:1:9: listen: expected an address (host:port) or a list of listeners, got a "
     "mapping"},
    {"AdminIsAList", "listen: 127.0.0.1:8080\nadmin: [127.0.0.1:9901]\n",
     "test.yaml:2:8: admin: expected an address (host:port), got a list"},
    {"AdminEmptyValuePointsAtTheKey", "listen: 127.0.0.1:8080\nadmin:\n",
     "test.yaml:2:1: admin: expected an address (host:port), got an empty value"},
    {"RetryIsAList", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry: [3]
)",
     "test.yaml:9:12: routes[0].retry: expected a mapping, got a list"},
    {"MaxQueueNotAnInteger", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    rate_limit: {max_queue: lots}
)",
     R"(test.yaml:5:29: upstreams[0].rate_limit.max_queue: expected an integer, got "lots")"},
    {"PropagateNotABool", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    budget: {propagate: yes}
)",
     R"(test.yaml:9:25: routes[0].budget.propagate: expected true or false, got "yes")"},
    {"HeaderValueIsAList", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    headers: {authorization: [a, b]}
)",
     "test.yaml:5:30: upstreams[0].headers.authorization: expected a header value, got a list"},

    // --- version, workers
    {"VersionNotOne", "version: 2\nlisten: 127.0.0.1:8080\n",
     "test.yaml:1:10: version: unsupported version (this sluice reads version 1)"},
    {"WorkersZero", "listen: 127.0.0.1:8080\nworkers: 0\n",
     R"(test.yaml:2:10: workers: must be "auto" or a positive integer (got "0"))"},

    // --- listeners and addresses
    {"ListenEmptyList", "listen: []\n", "test.yaml:1:9: listen: at least one listener is required"},
    {"AddressMissingPort", "listen: localhost\n",
     R"(test.yaml:1:9: listen: invalid address "localhost": missing port (expected host:port))"},
    {"AddressPortOutOfRange", "listen:\n  - address: 127.0.0.1:65536\n",
     R"(test.yaml:2:14: listen[0].address: invalid address "127.0.0.1:65536": port must be 0..65535)"},
    {"AddressUnbracketedIpv6", "listen: \"::1:8080\"\n",
     R"(test.yaml:1:9: listen: invalid address "::1:8080": IPv6 addresses must be in brackets, e.g. [::1]:8080)"},
    {"ListenerTlsMissingKey", R"(listen:
  - address: 0.0.0.0:8443
    tls: {cert: /etc/sluice/cert.pem}
)",
     "test.yaml:3:10: listen[0].tls.key: required key is missing"},
    {"ListenerTlsMinVersionTooOld", R"(listen:
  - address: 0.0.0.0:8443
    tls: {cert: c.pem, key: k.pem, min_version: "1.1"}
)",
     R"(test.yaml:3:49: listen[0].tls.min_version: must be "1.2" or "1.3" (got "1.1"))"},
    {"UpstreamTlsUnknownCipher", R"(listen: 127.0.0.1:8080
upstreams:
  - name: a
    url: https://api.example.com
    tls: {ciphers: "ECDHE-RSA-AES128-GCM-SHA256:AES128-GCM-SHA257"}
)",
     R"(test.yaml:5:20: upstreams[0].tls.ciphers: unknown cipher "AES128-GCM-SHA257" in the OpenSSL cipher list (e.g. ECDHE-RSA-AES128-GCM-SHA256))"},
    {"DuplicateListener", "listen: [127.0.0.1:8080, 127.0.0.1:8080]\n",
     "test.yaml:1:26: listen[1]: duplicate listener address 127.0.0.1:8080"},
    {"ListenerOnTheDefaultAdminAddress", "listen: 127.0.0.1:9901\n",
     "test.yaml:1:9: listen: conflicts with the default admin address 127.0.0.1:9901; set admin "
     "to another address"},

    // --- durations
    {"DurationBareNumber", "listen: 127.0.0.1:8080\ndrain_timeout: 30\n",
     R"(test.yaml:2:16: drain_timeout: invalid duration "30": missing unit; a bare number is ambiguous (use ms, s, m or h, e.g. "30s" or "250ms"))"},
    {"DurationNegative", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    connect_timeout: -1s
)",
     R"(test.yaml:5:22: upstreams[0].connect_timeout: invalid duration "-1s": must not be negative)"},
    {"DurationZeroWhereAPositiveOneIsNeeded", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    connect_timeout: 0s
)",
     "test.yaml:5:22: upstreams[0].connect_timeout: must be greater than 0s"},
    {"DurationUnknownUnit", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    circuit_breaker:
      cooldown: 5d
)",
     R"(test.yaml:6:17: upstreams[0].circuit_breaker.cooldown: invalid duration "5d": unknown unit (use ms, s, m or h, e.g. "30s" or "250ms"))"},
    {"DurationFinerThanAMillisecond", "listen: 127.0.0.1:8080\ndrain_timeout: 1.5ms\n",
     R"(test.yaml:2:16: drain_timeout: invalid duration "1.5ms": finer than a millisecond)"},

    // --- upstreams
    {"UrlBadScheme", R"(listen: 127.0.0.1:8080
upstreams:
  - name: files
    url: ftp://files.example.com
)",
     R"(test.yaml:4:10: upstreams[0].url: invalid URL "ftp://files.example.com": must start with http:// or https://)"},
    {"UrlWithQuery", R"(listen: 127.0.0.1:8080
upstreams:
  - name: api
    url: https://api.example.com/v1?key=1
)",
     R"(test.yaml:4:10: upstreams[0].url: invalid URL "https://api.example.com/v1?key=1": must not have a query or fragment)"},
    {"UrlWithoutHost", "listen: 127.0.0.1:8080\nupstreams:\n  - name: api\n    url: https://\n",
     R"(test.yaml:4:10: upstreams[0].url: invalid URL "https://": missing host)"},
    {"UrlPortZero", "listen: 127.0.0.1:8080\nupstreams:\n  - name: api\n    url: http://h:0\n",
     R"(test.yaml:4:10: upstreams[0].url: invalid URL "http://h:0": port must be 1..65535)"},
    {"Http2BadValue", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    http2: yes
)",
     R"(test.yaml:5:12: upstreams[0].http2: must be one of auto, on, off (got "yes"))"},
    {"HeaderNameInvalid", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    headers:
      "x api key": abc
)",
     R"(test.yaml:6:7: upstreams[0].headers.x api key: invalid header name "x api key")"},
    {"HeaderManagedBySluice", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    headers:
      Content-Length: "5"
)",
     R"(test.yaml:6:7: upstreams[0].headers.Content-Length: header "content-length" is managed by sluice and cannot be set)"},
    {"HeaderDuplicateIgnoringCase", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    headers:
      authorization: a
      Authorization: b
)",
     "test.yaml:7:7: upstreams[0].headers.Authorization: duplicate header (header names are "
     "case-insensitive)"},
    {"RateLimitBadKey", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    rate_limit:
      key: cookie:session
)",
     R"(test.yaml:6:12: upstreams[0].rate_limit.key: must be "none" or "header:<name>" (got "cookie:session"))"},
    {"RateLimitNegativeReserve", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    rate_limit: {reserve: -1}
)",
     "test.yaml:5:27: upstreams[0].rate_limit.reserve: must not be negative"},
    {"FailureOnUnknownOutcome", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    circuit_breaker: {failure_on: [5xx, 429x]}
)",
     R"(test.yaml:5:41: upstreams[0].circuit_breaker.failure_on[1]: unknown outcome "429x" (expected a status code 100..599, 4xx, 5xx, connect_error, reset or timeout))"},
    {"FailureRateThresholdAboveOne", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    circuit_breaker:
      failure_rate: {threshold: 1.5}
)",
     "test.yaml:6:33: upstreams[0].circuit_breaker.failure_rate.threshold: must be at most 1"},
    {"CooldownAboveMaxCooldown", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    circuit_breaker:
      cooldown: 90s
)",
     "test.yaml:6:17: upstreams[0].circuit_breaker.cooldown: must not exceed max_cooldown (60s)"},
    {"DuplicateUpstreamName", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
  - name: openai
    url: https://example.com
)",
     R"(test.yaml:5:11: upstreams[1].name: duplicate upstream name "openai" (first defined at line 3))"},
    {"UnsetEnvironmentVariable", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
    headers:
      authorization: "Bearer ${MISSING_KEY}"
)",
     "test.yaml:6:22: upstreams[0].headers.authorization: environment variable MISSING_KEY is not "
     "set"},

    // --- routes
    {"PathPrefixWithoutSlash", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: v1/chat}
    upstream: openai
)",
     R"(test.yaml:7:26: routes[0].match.path_prefix: must start with "/" (got "v1/chat"))"},
    {"InvalidMethod", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1, methods: [POST, "GE T"]}
    upstream: openai
)",
     R"(test.yaml:7:47: routes[0].match.methods[1]: invalid HTTP method "GE T")"},
    {"DanglingUpstream", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openia
)",
     R"(test.yaml:8:15: routes[0].upstream: unknown upstream "openia" (defined: openai))"},
    {"DuplicateRouteName", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
  - name: chat
    match: {path_prefix: /}
    upstream: openai
)",
     R"(test.yaml:9:11: routes[1].name: duplicate route name "chat" (first defined at line 6))"},
    {"RetryOnStatusOutOfRange", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry: {on: [429, 600]}
)",
     "test.yaml:9:23: routes[0].retry.on[1]: status code must be 100..599"},
    {"RetryAttemptsZero", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry: {attempts: 0}
)",
     "test.yaml:9:23: routes[0].retry.attempts: must be at least 1"},
    {"BackoffBaseAboveMax", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry:
      backoff: {base: 10s, max: 1s}
)",
     "test.yaml:10:23: routes[0].retry.backoff.base: must not exceed backoff.max (1s)"},
    {"BackoffMaxBelowTheDefaultBase", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry:
      backoff: {max: 100ms}
)",
     "test.yaml:10:22: routes[0].retry.backoff.max: must not be less than backoff.base (250ms)"},
    {"IdempotentBadValue", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry: {idempotent: sometimes}
)",
     R"(test.yaml:9:25: routes[0].retry.idempotent: must be one of auto, always, never (got "sometimes"))"},
    {"MaxBodyBadUnit", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry: {max_body: 8mb}
)",
     R"(test.yaml:9:23: routes[0].retry.max_body: invalid size "8mb": unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB))"},
    {"MaxBodyNegative", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    retry: {max_body: -1}
)",
     R"(test.yaml:9:23: routes[0].retry.max_body: invalid size "-1": must not be negative)"},
    {"BudgetMaxBelowTheDefaultDefault", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    budget: {max: 60s}
)",
     "test.yaml:9:19: routes[0].budget.max: must not be less than budget.default (120s)"},
    {"BudgetDefaultZero", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    budget: {default: 0s}
)",
     "test.yaml:9:23: routes[0].budget.default: must be greater than 0s"},
    {"OnClientDisconnectBadValue", R"(listen: 127.0.0.1:8080
upstreams:
  - name: openai
    url: https://api.openai.com
routes:
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: openai
    on_client_disconnect: abort
)",
     R"(test.yaml:9:27: routes[0].on_client_disconnect: must be one of cancel, finish (got "abort"))"},

    // --- pricing
    {"PricingNegativeInput",
     "listen: 127.0.0.1:8080\npricing:\n  - {model: \"gpt-4o*\", input: -2.5, output: 10}\n",
     "test.yaml:3:31: pricing[0].input: must not be negative"},
    {"PricingNotANumber",
     "listen: 127.0.0.1:8080\npricing:\n  - {model: \"gpt-4o*\", input: cheap, output: 10}\n",
     R"(test.yaml:3:31: pricing[0].input: expected a number, got "cheap")"},

    // --- access_log (docs/design.md §7)
    {"AccessLogNoPath", "listen: 127.0.0.1:8080\naccess_log: {format: json}\n",
     "test.yaml:2:13: access_log.path: required key is missing"},
    {"AccessLogEmptyPath", "listen: 127.0.0.1:8080\naccess_log: {path: \"\"}\n",
     "test.yaml:2:20: access_log.path: must not be empty"},
    {"AccessLogUnknownFormat", "listen: 127.0.0.1:8080\naccess_log: {path: stdout, format: text}\n",
     R"(test.yaml:2:36: access_log.format: must be one of json (got "text"))"},
    {"AccessLogUnknownKey", "listen: 127.0.0.1:8080\naccess_log: {path: off, fields: [ts]}\n",
     "test.yaml:2:25: access_log.fields: unknown key (expected one of: path, format)"},

    // --- shared_state (docs/design.md §6)
    {"SharedStateNoRedis", "listen: 127.0.0.1:8080\nshared_state: {prefix: \"x:\"}\n",
     "test.yaml:2:15: shared_state.redis: required key is missing"},
    {"SharedStateScheme", "listen: 127.0.0.1:8080\nshared_state: {redis: \"http://h:6380\"}\n",
     "test.yaml:2:23: shared_state.redis: invalid Redis URL: must start with redis:// or "
     "rediss://"},
    {"SharedStateTlsUnknownKey",
     "listen: 127.0.0.1:8080\nshared_state: {redis: \"rediss://h\", tls: {cafile: x}}\n",
     R"(test.yaml:2:43: shared_state.tls.cafile: unknown key (did you mean "ca_file"?))"},
    {"SharedStateBadDbHidesPassword",
     "listen: 127.0.0.1:8080\nshared_state: {redis: \"redis://:hunter2@h/99\"}\n",
     R"(test.yaml:2:23: shared_state.redis: invalid Redis URL: the database must be a number 0..15 (got "99"))"},
    {"SharedStateZeroTimeout",
     "listen: 127.0.0.1:8080\nshared_state: {redis: \"redis://h\", timeout: 0s}\n",
     "test.yaml:2:45: shared_state.timeout: must be greater than 0s"},
    {"SharedStateRequiredNotABool",
     "listen: 127.0.0.1:8080\nshared_state: {redis: \"redis://h\", required: yes}\n",
     R"(test.yaml:2:46: shared_state.required: expected true or false, got "yes")"},

    // --- limits (a contract addition)
    {"LimitsUnknownKey", "listen: 127.0.0.1:8080\nlimits:\n  max_header: 8KiB\n",
     R"(test.yaml:3:3: limits.max_header: unknown key (did you mean "max_headers"?))"},
    {"LimitsNotAMapping", "listen: 127.0.0.1:8080\nlimits: 5\n",
     R"(test.yaml:2:9: limits: expected a mapping, got "5")"},
    {"LimitsHeaderBytesWrongType", "listen: 127.0.0.1:8080\nlimits:\n  max_header_bytes: [1]\n",
     R"(test.yaml:3:21: limits.max_header_bytes: expected a size such as "8MiB", got a list)"},
    {"LimitsHeaderBytesTooSmall", "listen: 127.0.0.1:8080\nlimits:\n  max_header_bytes: 100\n",
     "test.yaml:3:21: limits.max_header_bytes: must be at least 1KiB"},
    {"LimitsMaxBodyZero", "listen: 127.0.0.1:8080\nlimits: {max_body: 0}\n",
     "test.yaml:2:20: limits.max_body: must be at least 1B"},
    {"LimitsBufferedBodyBytesTooSmall",
     "listen: 127.0.0.1:8080\nlimits: {max_buffered_body_bytes: 4KiB}\n",
     "test.yaml:2:35: limits.max_buffered_body_bytes: must be at least 64KiB"},
    {"LimitsMaxHeadersNotAnInteger", "listen: 127.0.0.1:8080\nlimits: {max_headers: many}\n",
     R"(test.yaml:2:23: limits.max_headers: expected an integer, got "many")"},
    {"LimitsConnectionsZero", "listen: 127.0.0.1:8080\nlimits: {max_connections_per_worker: 0}\n",
     "test.yaml:2:38: limits.max_connections_per_worker: must be at least 1"},
    {"LimitsStreamsTooMany",
     "listen: 127.0.0.1:8080\nlimits: {http2_max_concurrent_streams: 1000000}\n",
     "test.yaml:2:40: limits.http2_max_concurrent_streams: must be at most 100000"},
    {"LimitsTimeoutBareNumber", "listen: 127.0.0.1:8080\nlimits: {idle_timeout: 60}\n",
     R"(test.yaml:2:24: limits.idle_timeout: invalid duration "60": missing unit; a bare number is ambiguous (use ms, s, m or h, e.g. "30s" or "250ms"))"},
    // --- names become metric label values
    {"NulInUpstreamName",
     "listen: 127.0.0.1:8080\nupstreams:\n  - name: \"open\\0ai\"\n    url: http://x\n",
     "test.yaml:3:11: upstreams[0].name: must not contain control characters (NUL, tab, "
     "newline, ...)"},
    {"TabInRouteName", R"(listen: 127.0.0.1:8080
upstreams: [{name: a, url: "http://x"}]
routes: [{name: "r\t1", match: {path_prefix: /}, upstream: a}]
)",
     "test.yaml:3:17: routes[0].name: must not contain control characters (NUL, tab, newline, "
     "...)"},
    {"ReservedUpstreamName",
     "listen: 127.0.0.1:8080\nupstreams:\n  - name: none\n    url: http://x\n",
     R"(test.yaml:3:11: upstreams[0].name: "none" is reserved: sluice's metrics use it as a label value ("none": no route or upstream; "other": usage no pricing entry matches); choose another name)"},
    {"ReservedRouteName", R"(listen: 127.0.0.1:8080
upstreams: [{name: a, url: "http://x"}]
routes: [{name: other, match: {path_prefix: /}, upstream: a}]
)",
     R"(test.yaml:3:17: routes[0].name: "other" is reserved: sluice's metrics use it as a label value ("none": no route or upstream; "other": usage no pricing entry matches); choose another name)"},
    {"ReservedPricingModel",
     "listen: 127.0.0.1:8080\npricing: [{model: other, input: 1, output: 2}]\n",
     R"(test.yaml:2:19: pricing[0].model: "other" is reserved: sluice's metrics use it as a label value ("none": no route or upstream; "other": usage no pricing entry matches); choose another name)"},
    // --- admin as a mapping
    {"AdminMappingNeedsAddress", "listen: 127.0.0.1:8080\nadmin: {allowed_hosts: [sluice]}\n",
     "test.yaml:2:8: admin.address: required key is missing"},
    {"AdminAllowedHostWithPort",
     "listen: 127.0.0.1:8080\nadmin: {address: 0.0.0.0:9901, allowed_hosts: [sluice:9901]}\n",
     R"(test.yaml:2:48: admin.allowed_hosts[0]: expected a host name or IP address without a port (got "sluice:9901"))"},
    {"AdminAllowedHostDuplicate",
     "listen: 127.0.0.1:8080\nadmin: {address: 0.0.0.0:9901, allowed_hosts: [a, A]}\n",
     R"(test.yaml:2:51: admin.allowed_hosts[1]: duplicate host "a")"},
    {"AdminUnknownKey", "listen: 127.0.0.1:8080\nadmin: {address: 0.0.0.0:9901, hosts: [a]}\n",
     R"(test.yaml:2:32: admin.hosts: unknown key (expected one of: address, allowed_hosts))"},
};

class ConfigLoaderErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigLoaderErrorTest, NamesFileLineColumnAndKeyPath) {
  const ErrorCase& c = GetParam();
  LoadResult r;
  ASSERT_NO_THROW(r = load(c.yaml));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.config, nullptr);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->toString(), c.expected);
  EXPECT_EQ(r.error->file, "test.yaml");
  EXPECT_GE(r.error->line, 1);
  EXPECT_GE(r.error->column, 1);
}

INSTANTIATE_TEST_SUITE_P(Config, ConfigLoaderErrorTest, ::testing::ValuesIn(kErrorCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(ConfigLoaderTest, ErrorPartsAreSeparateFields) {
  const LoadResult r = load("listen: 127.0.0.1:8080\nworkers: many\n");
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->file, "test.yaml");
  EXPECT_EQ(r.error->line, 2);
  EXPECT_EQ(r.error->column, 10);
  EXPECT_EQ(r.error->key_path, "workers");
  EXPECT_EQ(r.error->message, R"(must be "auto" or a positive integer (got "many"))");
}

TEST(ConfigLoaderTest, ConfigErrorToStringLeavesOutUnknownParts) {
  EXPECT_EQ((ConfigError{"f.yaml", 3, 7, "a.b", "bad"}).toString(), "f.yaml:3:7: a.b: bad");
  EXPECT_EQ((ConfigError{"f.yaml", 3, 7, "", "bad"}).toString(), "f.yaml:3:7: bad");
  EXPECT_EQ((ConfigError{"f.yaml", 0, 0, "", "bad"}).toString(), "f.yaml: bad");
}

// Found by config_loader_fuzzer (fuzz/corpus/config_loader/repro-stray-comma-*):
// yaml-cpp 0.7's LoadAll() loops forever, allocating, on a top-level document
// that consumes no input, such as a tag followed by a stray ','. The loader
// must answer with an error at the offending position instead of eating all
// memory (this test would never finish without the fix).
TEST(ConfigLoaderTest, StrayCommaIsAnErrorNotAnEndlessLoop) {
  for (const char* name : {"repro-stray-comma-min", "repro-stray-comma-after-tag"}) {
    std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/fuzz/corpus/config_loader/" + name,
                     std::ios::binary);
    ASSERT_TRUE(in.good()) << name;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const LoadResult r = load(text);
    ASSERT_FALSE(r.ok()) << name;
    ASSERT_TRUE(r.error.has_value()) << name;
    EXPECT_EQ(r.error->line, 1) << name;
    EXPECT_NE(r.error->message.find("invalid YAML: unexpected character outside any value"),
              std::string::npos)
        << r.error->message;
  }
  // Valid multi-document text still gets its own answer.
  EXPECT_EQ(load("listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n").error->toString(),
            "test.yaml:3:1: expected one YAML document, found 2");
}

TEST(ConfigLoaderTest, NeverThrowsOnGarbage) {
  const char* inputs[] = {"{",
                          "]",
                          "listen: [",
                          "\t- x",
                          "listen: *alias",
                          "a: !!binary zz",
                          "? [a, b]\n: c",
                          "listen: &a [*a]",
                          "%YAML 9.9\n---\nx: 1",
                          "listen: 127.0.0.1:8080\nupstreams: {}\n",
                          "listen: 127.0.0.1:8080\nroutes: [[]]\n",
                          "listen: 127.0.0.1:8080\nupstreams: [~]\n"};
  for (const char* input : inputs) {
    LoadResult r;
    EXPECT_NO_THROW(r = load(input)) << input;
    EXPECT_FALSE(r.ok()) << input;
    ASSERT_TRUE(r.error.has_value()) << input;
    EXPECT_FALSE(r.error->message.empty()) << input;
  }
}

// ---------------------------------------------------------------------------
// ${VAR} expansion

TEST(ConfigLoaderTest, ExpandsVariablesInEveryScalarBeforeConversion) {
  const ConfigPtr c = loadOk(R"(listen: 127.0.0.1:8080
workers: ${WORKERS}
upstreams:
  - name: openai
    url: https://api.openai.com
    connect_timeout: ${TIMEOUT}
    headers:
      authorization: "Bearer ${OPENAI_API_KEY}"
      x-both: "${OPENAI_API_KEY}/${ANTHROPIC_API_KEY}"
      x-price: "$$5 and $5 and $"
      x-empty: "[${EMPTY}]"
)");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->workers, 4u);
  EXPECT_EQ(c->upstreams[0].connect_timeout, milliseconds(750));
  const auto& h = c->upstreams[0].headers;
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0].second, "Bearer sk-test-openai-123");
  EXPECT_EQ(h[1].second, "sk-test-openai-123/sk-ant-test-456");
  EXPECT_EQ(h[2].second, "$5 and $5 and $");  // $$ is a literal $; a lone $ stays
  EXPECT_EQ(h[3].second, "[]");               // set but empty is not an error
}

TEST(ConfigLoaderTest, UnsetVariableIsAnErrorAtTheScalarNamingTheVariable) {
  const LoadResult r = load("listen: 127.0.0.1:8080\ndrain_timeout: \"${DRAIN}\"\n");
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->toString(),
            "test.yaml:2:16: drain_timeout: environment variable DRAIN is not set");
}

TEST(ConfigLoaderTest, MalformedVariableReferencesAreErrors) {
  EXPECT_EQ(load("listen: \"${LISTEN\"\n").error->toString(),
            R"(test.yaml:1:9: listen: unterminated "${" (write "$$" for a literal "$"))");
  EXPECT_EQ(load("listen: \"${}\"\n").error->toString(),
            R"(test.yaml:1:9: listen: invalid environment variable name "")");
  EXPECT_EQ(load("listen: \"${A-B}\"\n").error->toString(),
            R"(test.yaml:1:9: listen: invalid environment variable name "A-B")");
}

TEST(ConfigLoaderTest, ProcessEnvironmentReadsGetenv) {
  ASSERT_EQ(setenv("SLUICE_LOADER_TEST_VAR", "127.0.0.1:18080", 1), 0);
  unsetenv("SLUICE_LOADER_TEST_UNSET");
  const EnvLookup env = processEnvironment();
  EXPECT_EQ(env("SLUICE_LOADER_TEST_VAR"), std::optional<std::string>("127.0.0.1:18080"));
  EXPECT_EQ(env("SLUICE_LOADER_TEST_UNSET"), std::nullopt);
  const LoadResult r = loadConfigString("listen: ${SLUICE_LOADER_TEST_VAR}\n", "env.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config->listeners[0].address.port, 18080);
}

// ---------------------------------------------------------------------------
// Value parsers

TEST(ConfigLoaderTest, ParsesDurations) {
  EXPECT_EQ(parseDuration("250ms"), milliseconds(250));
  EXPECT_EQ(parseDuration("30s"), seconds(30));
  EXPECT_EQ(parseDuration("5m"), seconds(300));
  EXPECT_EQ(parseDuration("1h"), seconds(3600));
  EXPECT_EQ(parseDuration("1.5s"), milliseconds(1500));
  EXPECT_EQ(parseDuration("0.25s"), milliseconds(250));
  EXPECT_EQ(parseDuration("0s"), Duration::zero());
  EXPECT_EQ(parseDuration("0ms"), Duration::zero());
  EXPECT_EQ(parseDuration("1m30s"), seconds(90));
  EXPECT_EQ(parseDuration("1h0m5s250ms"), milliseconds(3'605'250));
  for (const char* bad : {"", "30", "0", "-1s", "1.5", "5d", "1s1s", "30s1m", "s", ".5s", "5.s",
                          "1 s", " 1s", "1S", "1e3ms", "0.0001s", "999999999999h"}) {
    std::string why;
    EXPECT_EQ(parseDuration(bad, &why), std::nullopt) << bad;
    EXPECT_NE(why.find("invalid duration"), std::string::npos) << bad;
  }
}

TEST(ConfigLoaderTest, ParsesSizes) {
  EXPECT_EQ(parseSize("8MiB"), 8u << 20);
  EXPECT_EQ(parseSize("512KiB"), 512u << 10);
  EXPECT_EQ(parseSize("1GiB"), 1u << 30);
  EXPECT_EQ(parseSize("100B"), 100u);
  EXPECT_EQ(parseSize("10MB"), 10'000'000u);
  EXPECT_EQ(parseSize("1KB"), 1000u);
  EXPECT_EQ(parseSize("4096"), 4096u);
  EXPECT_EQ(parseSize("0"), 0u);
  EXPECT_EQ(parseSize("1.5KiB"), 1536u);
  for (const char* bad : {"", "-1", "8mb", "1.5", "0.1B", "8 MiB", "MiB", "99999999999TiB"}) {
    std::string why;
    EXPECT_EQ(parseSize(bad, &why), std::nullopt) << bad;
    EXPECT_NE(why.find("invalid size"), std::string::npos) << bad;
  }
}

TEST(ConfigLoaderTest, ParsesSocketAddresses) {
  const auto v4 = parseSocketAddress("0.0.0.0:8080");
  ASSERT_TRUE(v4.has_value());
  EXPECT_EQ(v4->host, "0.0.0.0");
  EXPECT_EQ(v4->port, 8080);
  const auto v6 = parseSocketAddress("[::1]:0");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_EQ(v6->toString(), "[::1]:0");
  EXPECT_EQ(parseSocketAddress("localhost:65535")->toString(), "localhost:65535");
  for (const char* bad : {"", ":8080", "host", "host:", "host:-1", "host:65536", "[::1]", "[::1",
                          "::1:80", "[zz]:80", "a b:80", "host:80x"}) {
    EXPECT_EQ(parseSocketAddress(bad), std::nullopt) << bad;
  }
}

TEST(ConfigLoaderTest, ParsesUpstreamUrls) {
  struct Case {
    const char* url;
    bool tls;
    const char* host;
    uint16_t port;
    const char* path;
    const char* authority;
  };
  const Case cases[] = {
      {"https://api.openai.com", true, "api.openai.com", 443, "", "api.openai.com"},
      {"https://api.openai.com/", true, "api.openai.com", 443, "", "api.openai.com"},
      {"http://127.0.0.1:9000", false, "127.0.0.1", 9000, "", "127.0.0.1:9000"},
      {"http://h:80/a/b//", false, "h", 80, "/a/b", "h"},
      {"https://h:443/v1", true, "h", 443, "/v1", "h"},
      {"http://h:443", false, "h", 443, "", "h:443"},
      {"http://[::1]:8080/x", false, "::1", 8080, "/x", "[::1]:8080"},
      {"https://[2001:db8::1]", true, "2001:db8::1", 443, "", "[2001:db8::1]"},
  };
  for (const Case& c : cases) {
    const std::optional<UpstreamUrl> url = parseUpstreamUrl(c.url);
    ASSERT_TRUE(url.has_value()) << c.url;
    EXPECT_EQ(url->isTls(), c.tls) << c.url;
    EXPECT_EQ(url->host, c.host) << c.url;
    EXPECT_EQ(url->port, c.port) << c.url;
    EXPECT_EQ(url->path_prefix, c.path) << c.url;
    EXPECT_EQ(url->authority(), c.authority) << c.url;
  }
  for (const char* bad : {"", "api.openai.com", "ftp://h", "http://", "http://:80",
                          "http://h:", "http://h:0", "http://h:99999", "http://u:p@h",
                          "http://h/?q", "http://h/#f", "http://h /x", "http://::1/"}) {
    EXPECT_EQ(parseUpstreamUrl(bad), std::nullopt) << bad;
  }
}

TEST(ConfigLoaderTest, OutcomeSetMatchesExactCodesAndClasses) {
  OutcomeSet set;
  set.statuses = {429};
  set.any_5xx = true;
  EXPECT_TRUE(set.matchesStatus(429));
  EXPECT_TRUE(set.matchesStatus(500));
  EXPECT_TRUE(set.matchesStatus(599));
  EXPECT_FALSE(set.matchesStatus(404));
  EXPECT_FALSE(set.matchesStatus(200));
  set.any_4xx = true;
  EXPECT_TRUE(set.matchesStatus(404));
  EXPECT_FALSE(set.matchesStatus(399));
  EXPECT_FALSE(OutcomeSet{}.matchesStatus(500));
}

// ---------------------------------------------------------------------------
// Rendering for /config

TEST(ConfigRenderTest, RedactsEveryUpstreamHeaderValue) {
  const ConfigPtr c = loadOk(kFull);
  ASSERT_NE(c, nullptr);
  const nlohmann::json j = toRedactedJson(*c);
  const nlohmann::json& headers = j["upstreams"][1]["headers"];
  ASSERT_EQ(headers.size(), 2u);
  EXPECT_EQ(headers["authorization"], "<redacted>");
  EXPECT_EQ(headers["openai-organization"], "<redacted>");
  const std::string dump = j.dump();
  EXPECT_EQ(dump.find("sk-test-openai-123"), std::string::npos);
  EXPECT_EQ(dump.find("org-123"), std::string::npos);
}

TEST(ConfigRenderTest, RendersEveryKeyWithDurationsAsStrings) {
  const ConfigPtr c = loadOk(kFull);
  ASSERT_NE(c, nullptr);
  const nlohmann::json j = toRedactedJson(*c);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["listen"][0]["address"], "0.0.0.0:8443");
  EXPECT_EQ(j["listen"][0]["tls"]["cert"], "/etc/sluice/cert.pem");
  // The effective TLS policy, defaults included.
  EXPECT_EQ(j["listen"][0]["tls"]["min_version"], "1.2");
  EXPECT_EQ(j["listen"][0]["tls"]["ciphers"], kDefaultTlsCiphers);
  EXPECT_TRUE(j["listen"][1]["tls"].is_null());
  EXPECT_EQ(j["admin"], (nlohmann::json{{"address", "[::1]:9902"},
                                        {"allowed_hosts", nlohmann::json::array()}}));
  EXPECT_EQ(j["workers"], 6);
  EXPECT_EQ(j["drain_timeout"], "45s");
  EXPECT_EQ(j["source_path"], "test.yaml");
  EXPECT_EQ(j["limits"], (nlohmann::json{{"max_header_bytes", "8KiB"},
                                         {"max_headers", 20},
                                         {"max_body", "1000000B"},
                                         {"max_buffered_body_bytes", "2GiB"},
                                         {"max_connections_per_worker", 3},
                                         {"http2_max_concurrent_streams", 10},
                                         {"header_read_timeout", "200ms"},
                                         {"body_read_timeout", "0s"},
                                         {"idle_timeout", "120s"},
                                         {"send_timeout", "15s"}}));

  const nlohmann::json& u = j["upstreams"][1];
  EXPECT_EQ(u["endpoints"], (nlohmann::json::array({{{"name", "api.openai.com:8443"},
                                                     {"url", "HTTPS://API.OpenAI.com:8443/v1"},
                                                     {"weight", 1},
                                                     {"priority", 0}}})));
  EXPECT_EQ(u["connect_timeout"], "1500ms");
  EXPECT_EQ(u["http2"], "on");
  EXPECT_EQ(u["tls"], (nlohmann::json{{"verify", false},
                                      {"ca_file", "/etc/ssl/ca.pem"},
                                      {"sni", "api.openai.com"},
                                      {"min_version", "1.2"},
                                      {"ciphers", kDefaultTlsCiphers}}));
  EXPECT_EQ(u["rate_limit"],
            (nlohmann::json{{"key", "header:x-api-key"}, {"reserve", 3}, {"max_queue", 50}}));
  const nlohmann::json& cb = u["circuit_breaker"];
  EXPECT_EQ(cb["failure_rate"]["window"], "60s");
  EXPECT_EQ(cb["max_cooldown"], "3600s");
  EXPECT_EQ(cb["failure_on"], nlohmann::json::parse(R"([429, "4xx", "5xx", "reset"])"));
  EXPECT_TRUE(j["upstreams"][0]["rate_limit"].is_null());

  const nlohmann::json& r = j["routes"][0];
  EXPECT_EQ(r["match"]["methods"], nlohmann::json::parse(R"(["POST", "GET"])"));
  EXPECT_EQ(r["budget"]["default"], "90s");
  EXPECT_EQ(r["budget"]["header"], "x-deadline-ms");
  EXPECT_EQ(r["retry"]["backoff"]["base"], "0s");
  EXPECT_EQ(r["retry"]["backoff"]["max"], "1500ms");
  EXPECT_EQ(r["retry"]["max_body"], "512KiB");
  EXPECT_EQ(r["retry"]["idempotent"], "auto");
  EXPECT_EQ(r["on_client_disconnect"], "finish");
  EXPECT_EQ(j["routes"][1]["retry"]["max_body"], "1000B");
  EXPECT_EQ(j["pricing"][1],
            (nlohmann::json{{"model", "claude-*"}, {"input", 3.0}, {"output", 15.0}}));

  EXPECT_EQ(j["access_log"],
            (nlohmann::json{{"path", "/var/log/sluice/access.log"}, {"format", "json"}}));

  const ConfigPtr minimal = loadOk(kMinimal);
  EXPECT_EQ(toRedactedJson(*minimal)["workers"], "auto");
  EXPECT_EQ(toRedactedJson(*minimal)["access_log"]["path"], "off");
}

// Strips what the YAML schema writes by omission (null) and the non-schema source_path.
nlohmann::json asYamlInput(nlohmann::json j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto& [key, value] : j.items()) {
      if (value.is_null() || key == "source_path") continue;
      out[key] = asYamlInput(value);
    }
    return out;
  }
  if (j.is_array()) {
    for (auto& item : j) item = asYamlInput(item);
  }
  return j;
}

TEST(ConfigRenderTest, RenderedConfigLoadsBackToTheSameConfig) {
  // JSON is YAML: what /config shows is itself a valid config file with every default spelled out.
  const ConfigPtr c = loadOk(kFull);
  ASSERT_NE(c, nullptr);
  const nlohmann::json rendered = toRedactedJson(*c);
  const ConfigPtr again = loadOk(asYamlInput(rendered).dump());
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(toRedactedJson(*again), rendered);
}

TEST(ConfigRenderTest, FormatsDurationsAndSizes) {
  EXPECT_EQ(formatDuration(Duration::zero()), "0s");
  EXPECT_EQ(formatDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(formatDuration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(formatDuration(seconds(2)), "2s");
  EXPECT_EQ(formatDuration(seconds(120)), "120s");
  EXPECT_EQ(formatSize(8u << 20), "8MiB");
  EXPECT_EQ(formatSize(1u << 30), "1GiB");
  EXPECT_EQ(formatSize(1536), "1536B");
  EXPECT_EQ(formatSize(0), "0B");
  for (uint64_t bytes : {0ull, 1ull, 1024ull, 1536ull, 8ull << 20, 3ull << 40}) {
    EXPECT_EQ(parseSize(formatSize(bytes)), bytes);
  }
  for (int64_t ms : {0, 1, 250, 1000, 1500, 60'000, 3'600'000}) {
    EXPECT_EQ(parseDuration(formatDuration(milliseconds(ms))), milliseconds(ms));
  }
}

// ---------------------------------------------------------------------------
// Files

TEST(ConfigLoaderTest, LoadConfigFileSetsSourcePathAndReportsUnreadableFiles) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "sluice_loader_test.yaml").string();
  {
    std::ofstream out(path);
    out << kMinimal << "workers: nope\n";
  }
  LoadResult bad = loadConfigFile(path, kEnv);
  ASSERT_TRUE(bad.error.has_value());
  EXPECT_EQ(bad.error->toString(),
            path + R"(:9:10: workers: must be "auto" or a positive integer (got "nope"))");
  {
    std::ofstream out(path);
    out << kMinimal;
  }
  LoadResult good = loadConfigFile(path, kEnv);
  ASSERT_TRUE(good.ok()) << good.error->toString();
  EXPECT_EQ(good.config->source_path, path);
  std::filesystem::remove(path);

  const LoadResult missing = loadConfigFile(path, kEnv);
  ASSERT_TRUE(missing.error.has_value());
  EXPECT_EQ(missing.error->toString(),
            path + ": cannot read config file: No such file or directory");
}

TEST(ConfigLoaderTest, EveryShippedExampleLoads) {
  const std::filesystem::path dir = std::filesystem::path(SLUICE_SOURCE_DIR) / "config/examples";
  // Any ${VAR} the examples use resolves to a fake value of the right shape.
  const EnvLookup env = [](const std::string& name) -> std::optional<std::string> {
    if (name.size() > 5 && name.substr(name.size() - 5) == "_PORT") return "0";
    if (name == "REDIS_URL") return "redis://127.0.0.1:9";
    if (name.size() > 4 && name.substr(name.size() - 4) == "_URL") return "http://127.0.0.1:9";
    return "fake-" + name;
  };
  std::set<std::string> loaded;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml" && entry.path().extension() != ".yml") continue;
    const LoadResult r = loadConfigFile(entry.path().string(), env);
    EXPECT_TRUE(r.ok()) << (r.error ? r.error->toString() : "");
    if (r.ok()) loaded.insert(entry.path().filename().string());
  }
  for (const char* name : {"minimal.yaml", "openai.yaml", "anthropic.yaml", "local-mock.yaml",
                           "demo.yaml", "replicas.yaml", "failover.yaml"}) {
    EXPECT_EQ(loaded.count(name), 1u) << name;
  }
}

TEST(ConfigLoaderTest, ExamplesUseTheirEnvironmentVariables) {
  const std::filesystem::path dir = std::filesystem::path(SLUICE_SOURCE_DIR) / "config/examples";
  // openai.yaml needs OPENAI_API_KEY: without it, loading fails and names it.
  const LoadResult unset = loadConfigFile((dir / "openai.yaml").string(), fakeEnv({}));
  ASSERT_TRUE(unset.error.has_value());
  EXPECT_NE(unset.error->message.find("OPENAI_API_KEY"), std::string::npos);

  const LoadResult anthropic = loadConfigFile((dir / "anthropic.yaml").string(), kEnv);
  ASSERT_TRUE(anthropic.ok()) << anthropic.error->toString();
  const auto& headers = anthropic.config->upstreams[0].headers;
  EXPECT_NE(std::find(headers.begin(), headers.end(),
                      std::pair<std::string, std::string>{"x-api-key", "sk-ant-test-456"}),
            headers.end());
  EXPECT_NE(std::find_if(headers.begin(), headers.end(),
                         [](const auto& h) { return h.first == "anthropic-version"; }),
            headers.end());
}

TEST(ConfigLoaderTest, LocalMockExampleFrontsTheMockOnTheDocumentedPorts) {
  const std::filesystem::path path =
      std::filesystem::path(SLUICE_SOURCE_DIR) / "config/examples/local-mock.yaml";
  const LoadResult r = loadConfigFile(path.string(), fakeEnv({}));  // needs no variables
  ASSERT_TRUE(r.ok()) << r.error->message;
  const Config& c = *r.config;
  ASSERT_EQ(c.listeners.size(), 1u);
  EXPECT_EQ(c.listeners[0].address.toString(), "127.0.0.1:8080");
  EXPECT_EQ(c.admin.toString(), "127.0.0.1:9901");
  ASSERT_EQ(c.upstreams.size(), 1u);
  EXPECT_EQ(c.upstreams[0].endpoints[0].url.authority(), "127.0.0.1:9000");
  EXPECT_FALSE(c.upstreams[0].endpoints[0].url.isTls());
  std::vector<std::string> prefixes;
  for (const RouteConfig& route : c.routes) prefixes.push_back(route.match.path_prefix);
  EXPECT_EQ(prefixes, (std::vector<std::string>{"/v1/chat/completions", "/v1/responses",
                                                "/v1/messages", "/"}));
}

// ---------------------------------------------------------------------------
// Secrets never reach an error message

TEST(ConfigLoaderTest, ErrorsShowValuesAsWrittenNeverExpanded) {
  const EnvLookup env = fakeEnv({{"UPSTREAM_URL", "http://user:sk-live-abcdef123456@api.example"},
                                 {"SECRET", "sk-live-abcdef123456"},
                                 {"TIMEOUT", "sk-live-abcdef123456"},
                                 {"HOST", "bad host sk-live-abcdef123456"}});
  struct Case {
    const char* yaml;
    const char* expected;
  };
  const Case cases[] = {
      // The whole value from a variable: quoted as written.
      {"listen: 127.0.0.1:1\nupstreams: [{name: a, url: \"${UPSTREAM_URL}\"}]\n",
       R"(test.yaml:2:28: upstreams[0].url: invalid URL "${UPSTREAM_URL}": must not contain credentials; set them in headers)"},
      // A variable inside the value: the value as written.
      {"listen: 127.0.0.1:1\nupstreams: [{name: a, url: \"http://user:${SECRET}@h\"}]\n",
       R"(test.yaml:2:28: upstreams[0].url: invalid URL "http://<redacted>@h": must not contain credentials; set them in headers)"},
      {"listen: 127.0.0.1:1\ndrain_timeout: ${TIMEOUT}\n",
       R"(test.yaml:2:16: drain_timeout: invalid duration "${TIMEOUT}": expected a number and a unit (use ms, s, m or h, e.g. "30s" or "250ms"))"},
      // A part of an expanded value quoted by the parser: redacted.
      {"listen: \"${HOST}:80\"\n",
       R"(test.yaml:1:9: listen: invalid address "${HOST}:80": invalid host "<redacted>")"},
  };
  for (const Case& c : cases) {
    const LoadResult r = loadConfigString(c.yaml, "test.yaml", env);
    ASSERT_TRUE(r.error.has_value()) << c.yaml;
    EXPECT_EQ(r.error->toString(), c.expected);
    EXPECT_EQ(r.error->toString().find("abcdef"), std::string::npos) << r.error->message;
  }
  // Credentials written literally are not echoed either.
  const LoadResult literal =
      load("listen: 127.0.0.1:1\nupstreams: [{name: a, url: \"https://bob:hunter2@h\"}]\n");
  ASSERT_TRUE(literal.error.has_value());
  EXPECT_EQ(
      literal.error->message,
      R"(invalid URL "https://<redacted>@h": must not contain credentials; set them in headers)");
}

TEST(ConfigLoaderTest, ErrorsAboutOtherFieldsDoNotEchoExpandedNames) {
  // A route naming an upstream through a variable: the unknown name is shown as written.
  const LoadResult r = loadConfigString(
      "listen: 127.0.0.1:1\nupstreams: [{name: a, url: \"http://x\"}]\n"
      "routes: [{name: r, match: {path_prefix: /}, upstream: \"${SECRET}\"}]\n",
      "test.yaml", fakeEnv({{"SECRET", "sk-live-abcdef123456"}}));
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->message, R"(unknown upstream "${SECRET}" (defined: a))");
}

// ---------------------------------------------------------------------------
// Warnings, and the defaults that came with them

TEST(ConfigLoaderTest, ParsesRedisUrls) {
  auto url = parseRedisUrl("redis://127.0.0.1");
  ASSERT_TRUE(url.has_value());
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 6379);
  EXPECT_EQ(url->db, 0);
  EXPECT_EQ(url->password, "");
  url = parseRedisUrl("redis://:s3cret@Redis.Local:6380/3");
  ASSERT_TRUE(url.has_value());
  EXPECT_EQ(url->host, "redis.local");
  EXPECT_EQ(url->port, 6380);
  EXPECT_EQ(url->db, 3);
  EXPECT_EQ(url->username, "");
  EXPECT_EQ(url->password, "s3cret");
  EXPECT_EQ(url->address(), "redis.local:6380");
  url = parseRedisUrl("redis://app:p@ss:w@[::1]/");
  ASSERT_TRUE(url.has_value());
  EXPECT_EQ(url->username, "app");
  EXPECT_EQ(url->password, "p@ss:w");
  EXPECT_EQ(url->host, "::1");
  EXPECT_FALSE(url->tls);
  url = parseRedisUrl("REDISS://:k@cache.example:6380/1");
  ASSERT_TRUE(url.has_value());
  EXPECT_TRUE(url->tls);
  EXPECT_EQ(url->host, "cache.example");
  EXPECT_EQ(url->port, 6380);
  EXPECT_EQ(url->db, 1);
  for (const char* bad : {"", "http://h", "redis://", "redis://h:0", "redis://h/16", "redis://h/x",
                          "redis://h?db=1", "rediss://", "redis://h /1", "redisss://h"}) {
    std::string why;
    EXPECT_EQ(parseRedisUrl(bad, &why), std::nullopt) << bad;
  }
  // A password never appears in an error.
  std::string why;
  EXPECT_EQ(parseRedisUrl("redis://:hunter2@h:99999", &why), std::nullopt);
  EXPECT_EQ(why.find("hunter2"), std::string::npos) << why;
}

TEST(ConfigLoaderTest, SharedStateDefaultsAndRendersWithoutThePassword) {
  auto r = loadConfigString(
      "listen: 127.0.0.1:8080\nshared_state: {redis: \"redis://:hunter2@10.0.0.5/2\"}\n",
      "test.yaml");
  ASSERT_TRUE(r.ok()) << r.error->message;
  ASSERT_TRUE(r.config->shared_state.has_value());
  EXPECT_EQ(r.config->shared_state->prefix, "sluice:");
  EXPECT_EQ(r.config->shared_state->timeout, std::chrono::milliseconds(50));
  EXPECT_EQ(r.config->shared_state->redis.db, 2);
  const std::string rendered = toRedactedJson(*r.config).dump();
  EXPECT_EQ(rendered.find("hunter2"), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("redis://<redacted>@10.0.0.5:6379/2"), std::string::npos) << rendered;
  EXPECT_TRUE(r.config->shared_state->tls.verify);
  auto tls = loadConfigString(
      "listen: 127.0.0.1:8080\nshared_state:\n  redis: rediss://r.internal:6380\n"
      "  tls: {ca_file: /etc/ca.pem, sni: redis.example}\n",
      "test.yaml");
  ASSERT_TRUE(tls.ok()) << tls.error->toString();
  EXPECT_TRUE(tls.config->shared_state->redis.tls);
  EXPECT_EQ(tls.config->shared_state->tls.ca_file, "/etc/ca.pem");
  EXPECT_EQ(tls.config->shared_state->tls.sni, "redis.example");
  EXPECT_NE(toRedactedJson(*tls.config).dump().find("rediss://r.internal:6380/0"),
            std::string::npos);
  auto none = loadConfigString("listen: 127.0.0.1:8080\n", "test.yaml");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.config->shared_state.has_value());
}

TEST(ConfigLoaderTest, WarnsWhenTheUrlPathAndTheRoutePrefixRepeatASegment) {
  const ConfigPtr c = loadOk(R"(listen: 127.0.0.1:8080
upstreams:
  - {name: openai, url: "https://api.openai.com/v1"}
  - {name: azure, url: "https://x.openai.azure.com/openai/v1/"}
routes:
  - {name: doubled, match: {path_prefix: /v1/chat/completions}, upstream: openai}
  - {name: fine, match: {path_prefix: /chat/completions}, upstream: openai}
  - {name: other-segment, match: {path_prefix: /v1/responses}, upstream: azure}
  - {name: everything, upstream: openai, match: {methods: [GET]}}
  - {name: exact, match: {path_prefix: /v1}, upstream: openai}
)");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->warnings.size(), 2u);
  EXPECT_EQ(
      c->warnings[0],
      R"(test.yaml:6:42: routes[0].match.path_prefix: upstream "openai"'s url path "/v1" is prepended to every request path, so a request for /v1/chat/completions goes upstream as /v1/v1/chat/completions (drop the path from the url, or leave it out of the route))");
  EXPECT_NE(c->warnings[1].find("test.yaml:10:40: routes[4].match.path_prefix:"), std::string::npos)
      << c->warnings[1];
  EXPECT_TRUE(loadOk(kMinimal)->warnings.empty());
}

TEST(ConfigLoaderTest, RetriesAnthropicsOverloaded529ByDefault) {
  const ConfigPtr c = loadOk(kMinimal);
  EXPECT_TRUE(c->routes[0].retry.on.matchesStatus(529));
  EXPECT_EQ(outcomeSetToJson(c->routes[0].retry.on),
            nlohmann::json::parse(
                R"([429, 500, 502, 503, 504, 529, "connect_error", "reset", "timeout"])"));
}

TEST(ConfigLoaderTest, AdminTakesAnAddressOrAMappingWithAllowedHosts) {
  const ConfigPtr plain = loadOk("listen: 127.0.0.1:8080\nadmin: 127.0.0.1:9902\n");
  EXPECT_EQ(plain->admin.toString(), "127.0.0.1:9902");
  EXPECT_TRUE(plain->admin_allowed_hosts.empty());
  const ConfigPtr mapped = loadOk(
      "listen: 127.0.0.1:8080\nadmin: {address: \"0.0.0.0:9901\", allowed_hosts: [Sluice, "
      "sluice.monitoring.svc, \"[fd00::1]\", 10.0.0.1]}\n");
  EXPECT_EQ(mapped->admin.toString(), "0.0.0.0:9901");
  EXPECT_EQ(mapped->admin_allowed_hosts,
            (std::vector<std::string>{"sluice", "sluice.monitoring.svc", "fd00::1", "10.0.0.1"}));
  EXPECT_EQ(toRedactedJson(*mapped)["admin"]["allowed_hosts"][0], "sluice");
  // The admin address still may not be a listener's.
  EXPECT_EQ(load("listen: 127.0.0.1:8080\nadmin: {address: 127.0.0.1:8080}\n").error->toString(),
            "test.yaml:2:18: admin.address: same address as listen[0]");
}

// ---------------------------------------------------------------------------
// Files that are not config files

TEST(ConfigLoaderTest, RejectsADirectoryAndAFileAboveTheSizeCap) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const LoadResult directory = loadConfigFile(dir.string(), kEnv);
  ASSERT_TRUE(directory.error.has_value());
  EXPECT_EQ(directory.error->toString(), dir.string() + ": is a directory, not a config file");

  // Just over the cap: a valid prefix followed by a long comment. Rejected
  // before parsing (this would parse fine, and slowly, without the cap).
  const std::string path = (dir / "sluice_loader_test_huge.yaml").string();
  std::string text = std::string(kMinimal) + "#";
  text.resize(kMaxConfigBytes + 1, 'x');
  std::ofstream(path, std::ios::binary) << text;
  const LoadResult huge = loadConfigFile(path, kEnv);
  ASSERT_TRUE(huge.error.has_value());
  EXPECT_EQ(huge.error->toString(),
            path + ": config file is larger than 4MiB (the limit; is this the right file?)");
  EXPECT_FALSE(loadConfigString(text, "big.yaml", kEnv).ok());
  // At the cap exactly, it loads.
  text.resize(kMaxConfigBytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  EXPECT_TRUE(loadConfigFile(path, kEnv).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sluice::config

namespace sluice::config {
namespace {

constexpr const char* kMcpBase = R"(listen: 127.0.0.1:0
upstreams:
  - {name: tool-server, url: "http://127.0.0.1:9000"}
routes:
  - name: tools
    match: {path_prefix: /mcp}
    upstream: tool-server
)";

TEST(ConfigLoaderMcpTest, ProtocolToolsAndToolRetry) {
  const LoadResult r = load(std::string(kMcpBase) + R"(    protocol: mcp
    tools:
      - {name: execute_sql, budget: 30s, retry: never}
      - {name: "search_*", budget: 10s, retry: safe}
      - {name: "lookup"}
    tool_retry: never
)");
  ASSERT_TRUE(r.ok()) << r.error->message;
  const RouteConfig& route = r.config->routes.at(0);
  EXPECT_EQ(route.protocol, RouteProtocol::Mcp);
  ASSERT_EQ(route.tools.tools.size(), 3u);
  EXPECT_EQ(route.tools.tools[0].name, "execute_sql");
  EXPECT_EQ(route.tools.tools[0].budget, seconds(30));
  EXPECT_EQ(route.tools.tools[0].retry, ToolRetry::Never);
  EXPECT_EQ(route.tools.tools[1].retry, ToolRetry::Safe);
  EXPECT_EQ(route.tools.tools[2].budget, std::nullopt);
  EXPECT_EQ(route.tools.tools[2].retry, std::nullopt);
  EXPECT_EQ(route.tools.tool_retry, ToolRetry::Never);
}

TEST(ConfigLoaderMcpTest, DefaultsAreHttpAndAnnotations) {
  const LoadResult r = load(kMcpBase);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config->routes.at(0).protocol, RouteProtocol::Http);
  EXPECT_EQ(r.config->routes.at(0).tools.tool_retry, ToolRetry::Annotations);
}

TEST(ConfigLoaderMcpTest, AllowedHosts) {
  const LoadResult r = load(std::string(kMcpBase) +
                            "    protocol: mcp\n    allowed_hosts: [Sluice, tools.internal]\n");
  ASSERT_TRUE(r.ok()) << r.error->message;
  EXPECT_EQ(r.config->routes.at(0).tools.allowed_hosts,
            (std::vector<std::string>{"sluice", "tools.internal"}));
  const LoadResult http = load(std::string(kMcpBase) + "    allowed_hosts: [sluice]\n");
  ASSERT_FALSE(http.ok());
  EXPECT_EQ(http.error->message, "only a route with protocol: mcp has allowed_hosts");
  const LoadResult port =
      load(std::string(kMcpBase) + "    protocol: mcp\n    allowed_hosts: [sluice:8080]\n");
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.error->key_path, "routes[0].allowed_hosts[0]");
}

TEST(ConfigLoaderMcpTest, Errors) {
  const LoadResult no_mcp = load(std::string(kMcpBase) + "    tools: [{name: x}]\n");
  ASSERT_FALSE(no_mcp.ok());
  EXPECT_EQ(no_mcp.error->message, "only a route with protocol: mcp has tools");
  const LoadResult bad_retry =
      load(std::string(kMcpBase) + "    protocol: mcp\n    tools: [{name: x, retry: maybe}]\n");
  ASSERT_FALSE(bad_retry.ok());
  EXPECT_EQ(bad_retry.error->key_path, "routes[0].tools[0].retry");
  const LoadResult dup =
      load(std::string(kMcpBase) + "    protocol: mcp\n    tools: [{name: x}, {name: x}]\n");
  ASSERT_FALSE(dup.ok());
  const LoadResult protocol = load(std::string(kMcpBase) + "    protocol: grpc\n");
  ASSERT_FALSE(protocol.ok());
  EXPECT_EQ(protocol.error->key_path, "routes[0].protocol");
}

}  // namespace
}  // namespace sluice::config
