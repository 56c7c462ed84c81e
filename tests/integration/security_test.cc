// Security defaults (issue 7 part 7), on the real binary so stderr is
// checked too: API keys — the client's Authorization and the configured
// upstream headers — never appear in logs, metric labels, /exchanges or
// /config; turning upstream TLS verification off is logged at start and on
// every reload. (Admin on 127.0.0.1 by default: config/loader_test; client
// x-sluice-* stripped: proxy_test and header_rewrite_test.)

#include <gtest/gtest.h>
#include <signal.h>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

constexpr char kClientKey[] = "sk-secret-123";
constexpr char kConfigKey[] = "sk-config-secret-456";

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

TEST(SecurityTest, ApiKeysNeverReachLogsLabelsExchangesOrConfig) {
  MockLlm mock;
  SluiceProcess sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
    headers: {x-api-key: "${KEY}"}
    rate_limit: {key: header:authorization}
routes:
  - name: chat
    match: {path_prefix: /}
    upstream: mock
)",
                                  {{"MOCK_URL", mock.url()}, {"KEY", kConfigKey}}));
  ASSERT_TRUE(sluice.running());
  const std::vector<std::pair<std::string, std::string>> auth = {
      {"authorization", std::string("Bearer ") + kClientKey},
      {"content-type", "application/json"},
      {"x-mock-quota", "100/60000"},
      {"x-mock-quota-key", kClientKey}};

  // A stream held in flight (stalled after one token) while the admin port is read.
  TestConnection stream(sluice.port());
  auto headers = auth;
  headers.insert(headers.end(), {{"x-mock-tokens", "5"},
                                 {"x-mock-stall-after-tokens", "1"},
                                 {"x-mock-stall-ms", "-1"}});
  stream.sendRequest("POST", "/v1/chat/completions?key=" + std::string(kClientKey), headers,
                     R"({"model":"gpt-4o-mini","stream":true,"messages":[]})");
  stream.readUntil([](const TestResponse& r) { return r.body.find("tok0") != std::string::npos; });
  ASSERT_NE(stream.current().body.find("tok0"), std::string::npos);

  const std::string exchanges = sluice.adminGet("/exchanges");
  ASSERT_NE(exchanges.find("\"state\""), std::string::npos) << exchanges;
  EXPECT_EQ(exchanges.find(kClientKey), std::string::npos) << exchanges;
  const std::string config = sluice.adminGet("/config");
  ASSERT_NE(config.find("x-api-key"), std::string::npos) << config;
  EXPECT_NE(config.find("<redacted>"), std::string::npos) << config;
  EXPECT_EQ(config.find(kConfigKey), std::string::npos) << config;

  // The upstream did get both keys (so the absence above means something).
  const auto entries = mock.ledger();
  ASSERT_FALSE(entries.empty());
  EXPECT_NE(entries.dump().find(kClientKey), std::string::npos);
  EXPECT_NE(entries.dump().find(kConfigKey), std::string::npos);

  // More traffic with the key: a completed request, a throttled-quota path,
  // a rejected budget, an unrouted method.
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", auth,
                        R"({"model":"gpt-4o-mini","messages":[]})")
                .status,
            200);
  auto bad_budget = auth;
  bad_budget.emplace_back("x-budget-ms", kClientKey);
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", bad_budget, "{}").status, 400);
  stream.reset();
  ASSERT_TRUE(waitUntil([&] { return sluice.metric("sluice_active_requests") == 0; }));

  const std::string metrics = sluice.adminGet("/metrics");
  ASSERT_NE(metrics.find("sluice_requests_total"), std::string::npos);
  EXPECT_EQ(metrics.find(kClientKey), std::string::npos);
  EXPECT_EQ(metrics.find("Bearer"), std::string::npos);
  EXPECT_EQ(metrics.find(kConfigKey), std::string::npos);

  sluice.signal(SIGHUP);  // a reload logs too
  ASSERT_TRUE(waitUntil([&] { return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1; }));
  EXPECT_EQ(sluice.stop(), 0);
  const std::string err = sluice.stderrText();
  EXPECT_NE(err.find("sluice: draining"), std::string::npos) << "stderr was captured: " << err;
  EXPECT_EQ(err.find(kClientKey), std::string::npos) << err;
  EXPECT_EQ(err.find(kConfigKey), std::string::npos) << err;
}

TEST(SecurityTest, TlsVerifyOffIsLoggedAtStartAndOnReload) {
  SluiceProcess sluice(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: insecure
    url: https://127.0.0.1:1
    tls: {verify: false}
  - name: checked
    url: https://127.0.0.1:2
routes:
  - name: all
    match: {path_prefix: /}
    upstream: insecure
)");
  ASSERT_TRUE(sluice.running());
  const std::string warning = "sluice: warning: upstream insecure: tls.verify is false";
  EXPECT_EQ(occurrences(sluice.stderrText(), warning), 1u) << sluice.stderrText();
  EXPECT_EQ(sluice.stderrText().find("upstream checked"), std::string::npos);

  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] { return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1; }));
  EXPECT_TRUE(waitUntil([&] { return occurrences(sluice.stderrText(), warning) == 2; }))
      << sluice.stderrText();
  EXPECT_EQ(sluice.stop(), 0);
}

}  // namespace
}  // namespace sluice::test
