// Reload (SIGHUP): a valid new config applies to new requests while a stream
// started before it finishes on the old one; an invalid file is rejected with
// its FILE:LINE:COL error on stderr and the running config stays in force;
// both are counted in sluice_config_reloads_total{result}. Circuit breakers
// and quotas of unchanged upstreams survive a reload.

#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

constexpr char kChat[] = R"({"model":"gpt-4o-mini","stream":true,"messages":[]})";

// Before: one route `chat` for everything.
constexpr char kBefore[] = R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: chat
    match: {path_prefix: /}
    upstream: mock
)";

// After: only GET /v1/models is routed; chat completions have no route.
constexpr char kAfter[] = R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: models
    match: {path_prefix: /v1/models, methods: [GET]}
    upstream: mock
)";

// Invalid: an unknown key on line 8, column 5 (the first line is empty).
constexpr char kInvalid[] = R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
    colour: red
routes:
  - name: chat
    match: {path_prefix: /}
    upstream: mock
)";

std::vector<std::string> routeNames(const std::string& config_json) {
  std::vector<std::string> names;
  auto j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_discarded()) return names;
  for (const auto& r : j["routes"]) names.push_back(r["name"].get<std::string>());
  return names;
}

class ReloadTest : public ::testing::Test {
 protected:
  std::string yaml(const char* text) const { return substitute(text, {{"MOCK_URL", mock_.url()}}); }
  MockLlm mock_;
};

TEST_F(ReloadTest, ValidConfigAppliesToNewRequestsWhileInFlightStreamFinishesOnTheOld) {
  SluiceProcess sluice(yaml(kBefore));
  ASSERT_TRUE(sluice.running());
  EXPECT_EQ(sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}), 0);

  // 20 tokens 50 ms apart: about a second of streaming across the reload.
  TestConnection stream(sluice.port());
  stream.sendRequest("POST", "/v1/chat/completions",
                     {{"x-mock-tokens", "20"}, {"x-mock-token-interval-ms", "50"},
                      {"content-type", "application/json"}},
                     kChat);
  stream.readUntil([](const TestResponse& r) { return r.body.find("tok0") != std::string::npos; });
  ASSERT_NE(stream.current().body.find("tok0"), std::string::npos);

  sluice.writeConfig(yaml(kAfter));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil(
      [&] { return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1; }));

  // New requests see the new routes.
  EXPECT_EQ(routeNames(sluice.adminGet("/config")), std::vector<std::string>{"models"});
  const TestResponse no_route = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                            {{"content-type", "application/json"}}, kChat);
  EXPECT_EQ(no_route.status, 404);
  EXPECT_NE(no_route.body.find("urn:sluice:problem:no-route"), std::string::npos) << no_route.body;
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/v1/models").status, 200);

  // The stream that started on the old route finishes on it.
  const TestResponse finished = stream.readResponse();
  EXPECT_EQ(finished.status, 200);
  EXPECT_TRUE(finished.complete);
  EXPECT_NE(finished.body.find("tok19"), std::string::npos);
  EXPECT_NE(finished.body.find("[DONE]"), std::string::npos);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "chat"}, {"code", "200"}}), 1);
  EXPECT_NE(sluice.stderrText().find("config reloaded from " + sluice.configPath()),
            std::string::npos);
  EXPECT_EQ(sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}), 0);
  EXPECT_GT(sluice.metric("sluice_config_last_reload_success_timestamp_seconds"), 0);
}

TEST_F(ReloadTest, InvalidConfigIsRejectedWithFileLineColumnAndTheOldOneStays) {
  SluiceProcess sluice(yaml(kBefore));
  ASSERT_TRUE(sluice.running());

  sluice.writeConfig(yaml(kInvalid));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil(
      [&] { return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 1; }));
  EXPECT_EQ(sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}), 0);
  const std::string err = sluice.stderrText();
  EXPECT_NE(err.find("reload rejected, keeping the running config: " + sluice.configPath() +
                     ":8:5: upstreams[0].colour: unknown key"),
            std::string::npos)
      << err;

  // The old config is still in force.
  EXPECT_EQ(routeNames(sluice.adminGet("/config")), std::vector<std::string>{"chat"});
  const TestResponse chat = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                        {{"content-type", "application/json"}}, kChat);
  EXPECT_EQ(chat.status, 200);
  EXPECT_NE(chat.body.find("[DONE]"), std::string::npos);

  // A file that parses but cannot be applied (another listener) is rejected too.
  {
    std::string two_listeners = yaml(kBefore);
    two_listeners.replace(two_listeners.find("listen: 127.0.0.1:0"), 19,
                          "listen: [127.0.0.1:0, 127.0.0.1:0]");
    sluice.writeConfig(two_listeners);
  }
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil(
      [&] { return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 2; }));
  EXPECT_NE(sluice.stderrText().find("needs a restart"), std::string::npos);
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/v1/models").status, 200);

  // And a good file afterwards is accepted.
  sluice.writeConfig(yaml(kAfter));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil(
      [&] { return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1; }));
  EXPECT_EQ(routeNames(sluice.adminGet("/config")), std::vector<std::string>{"models"});
  EXPECT_EQ(sluice.stop(), 0);
}

// --- state carried across a reload ------------------------------------------------------

constexpr char kBreaker[] = R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: ${UPSTREAM}
    url: http://127.0.0.1:${MOCK_PORT}
    circuit_breaker: {consecutive_failures: 2, cooldown: 60s, max_cooldown: 60s}
routes:
  - name: ${ROUTE}
    match: {path_prefix: /}
    upstream: ${UPSTREAM}
    retry: {attempts: 1}
)";

TEST_F(ReloadTest, OpenCircuitSurvivesAReloadOfAnUnchangedUpstream) {
  auto config = [&](const std::string& upstream, const std::string& route) {
    auto loaded = config::loadConfigString(
        substitute(kBreaker,
                   {{"UPSTREAM", upstream}, {"MOCK_PORT", std::to_string(mock_.port())}, {"ROUTE", route}}),
        "breaker.yaml");
    EXPECT_TRUE(loaded.ok()) << (loaded.ok() ? "" : loaded.error->toString());
    return loaded.config;
  };
  SluiceUnderTest sluice(
      substitute(kBreaker, {{"UPSTREAM", "mock"},
                            {"MOCK_PORT", std::to_string(mock_.port())},
                            {"ROUTE", "before"}}));
  auto failing = [&] {
    return httpRequest(sluice.port(), "GET", "/v1/models", {{"x-mock-status", "500"}}).status;
  };
  EXPECT_EQ(failing(), 500);
  EXPECT_EQ(failing(), 500);
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/v1/models").status, 503) << "the circuit is open";

  // Same upstream (name and URL), a changed route and thresholds: the circuit stays open.
  std::string error;
  ASSERT_TRUE(sluice.server().reload(config("mock", "after"), &error)) << error;
  mock_.clearLedger();
  const TestResponse after = httpRequest(sluice.port(), "GET", "/v1/models");
  EXPECT_EQ(after.status, 503);
  EXPECT_NE(after.body.find("circuit_open"), std::string::npos) << after.body;
  EXPECT_EQ(mock_.ledger().size(), 0u) << "an open circuit sends nothing upstream";
  EXPECT_EQ(sluice.metric("sluice_circuit_state", {{"upstream", "mock"}}), 1);

  // Another name is another upstream: its breaker starts closed.
  ASSERT_TRUE(sluice.server().reload(config("renamed", "after"), &error)) << error;
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/v1/models").status, 200);
  EXPECT_EQ(sluice.metric("sluice_circuit_state", {{"upstream", "renamed"}}), 0);
  EXPECT_EQ(sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}), 2);
}

}  // namespace
}  // namespace sluice::test
