// Reload (SIGHUP): a valid new config applies to new requests while a stream
// started before it finishes on the old one; an invalid file is rejected with
// its FILE:LINE:COL error on stderr and the running config stays in force;
// both are counted in sluice_config_reloads_total{result}. Circuit breakers
// and quotas of unchanged upstreams survive a reload. A reload retires the
// replaced config's upstream pools: they close once idle, so repeated
// reloads under load leak no fd and no upstream connection. `listen`,
// `admin` and `workers` need a restart: a reload changing them is refused.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/loader.h"
#include "tests/support/http_client.h"
#include "tests/support/process_fds.h"
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
                     {{"x-mock-tokens", "20"},
                      {"x-mock-token-interval-ms", "50"},
                      {"content-type", "application/json"}},
                     kChat);
  stream.readUntil([](const TestResponse& r) { return r.body.find("tok0") != std::string::npos; });
  ASSERT_NE(stream.current().body.find("tok0"), std::string::npos);

  sluice.writeConfig(yaml(kAfter));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1;
  }));

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
  EXPECT_TRUE(waitUntil([&] {  // the log line is written by the log's own thread
    return sluice.stderrText().find("config reloaded from " + sluice.configPath()) !=
           std::string::npos;
  }));
  EXPECT_EQ(sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}), 0);
  EXPECT_GT(sluice.metric("sluice_config_last_reload_success_timestamp_seconds"), 0);
}

TEST_F(ReloadTest, InvalidConfigIsRejectedWithFileLineColumnAndTheOldOneStays) {
  SluiceProcess sluice(yaml(kBefore));
  ASSERT_TRUE(sluice.running());

  sluice.writeConfig(yaml(kInvalid));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 1;
  }));
  EXPECT_EQ(sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}), 0);
  // The log line is written by the log's own thread, after the count.
  EXPECT_TRUE(
      waitUntil([&] { return sluice.stderrText().find("reload rejected") != std::string::npos; }));
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
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 2;
  }));
  EXPECT_TRUE(
      waitUntil([&] { return sluice.stderrText().find("needs a restart") != std::string::npos; }));
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/v1/models").status, 200);

  // And a good file afterwards is accepted.
  sluice.writeConfig(yaml(kAfter));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1;
  }));
  EXPECT_EQ(routeNames(sluice.adminGet("/config")), std::vector<std::string>{"models"});
  EXPECT_EQ(sluice.stop(), 0);
}

// --- keys only a restart can apply ---------------------------------------------------------

nlohmann::json configJson(const SluiceProcess& sluice) {
  return nlohmann::json::parse(sluice.adminGet("/config"), nullptr, false);
}

TEST_F(ReloadTest, ChangingListenAdminOrWorkersIsRejectedNamingTheKeyAndConfigShowsWhatIsInForce) {
  SluiceProcess sluice(yaml(kBefore));
  ASSERT_TRUE(sluice.running());
  const nlohmann::json running = configJson(sluice);
  ASSERT_FALSE(running.is_discarded());
  const std::string listen_now = "listen: 127.0.0.1:" + std::to_string(sluice.port());
  struct Case {
    std::string from, to, message;
  };
  const Case cases[] = {
      {"workers: 2", "workers: 3", "workers: changing 2 to 3 needs a restart"},
      {"workers: 2", "workers: auto", "workers: changing 2 to auto needs a restart"},
      {"admin: 127.0.0.1:0", "admin: 127.0.0.1:" + std::to_string(sluice.adminPort() + 1),
       "admin: changing 127.0.0.1:0 to 127.0.0.1:" + std::to_string(sluice.adminPort() + 1) +
           " needs a restart"},
      {"listen: 127.0.0.1:0", listen_now,
       "listen: changing 127.0.0.1:0 to 127.0.0.1:" + std::to_string(sluice.port()) +
           " needs a restart"},
  };
  double rejected = 0;
  for (const Case& c : cases) {
    std::string changed = yaml(kAfter);  // new routes too: none of it may apply
    changed.replace(changed.find(c.from), c.from.size(), c.to);
    sluice.writeConfig(changed);
    sluice.signal(SIGHUP);
    ++rejected;
    ASSERT_TRUE(waitUntil([&] {
      return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == rejected;
    })) << c.to;
    EXPECT_TRUE(waitUntil([&] {
      return sluice.stderrText().find("reload rejected, keeping the running config: " +
                                      c.message) != std::string::npos;
    })) << c.to
        << "\n"
        << sluice.stderrText();
    // /config shows what is in force: the running file, not the refused one.
    EXPECT_EQ(configJson(sluice), running) << c.to;
    EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                          {{"content-type", "application/json"}}, kChat)
                  .status,
              200)
        << c.to;
  }
  EXPECT_EQ(sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}), 0);
  EXPECT_EQ(sluice.stderrText().find("config reloaded"), std::string::npos);

  // The same keys unchanged (the routes changed): applied.
  sluice.writeConfig(yaml(kAfter));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1;
  }));
  EXPECT_EQ(routeNames(sluice.adminGet("/config")), std::vector<std::string>{"models"});
  EXPECT_EQ(sluice.stop(), 0);
}

// --- upstream pools across reloads ----------------------------------------------------------

constexpr char kPools[] = R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
    http2: ${HTTP2}
routes:
  - name: chat
    match: {path_prefix: /}
    upstream: mock
)";

class ReloadPoolsTest : public ::testing::TestWithParam<const char*> {
 protected:
  MockLlm mock_;
};

// Every SIGHUP used to leak the replaced config's pools and
// their keep-alive connections (10 reloads under 6 clients: 23 → 55 fds).
TEST_P(ReloadPoolsTest, RepeatedReloadsUnderLoadLeaveNoFdAndNoUpstreamConnection) {
  constexpr int kClients = 6;
  constexpr int kReloads = 10;
  SluiceProcess sluice(substitute(kPools, {{"MOCK_URL", mock_.url()}, {"HTTP2", GetParam()}}));
  ASSERT_TRUE(sluice.running());
  const pid_t pid = sluice.pid();
  const FdCount before = countFds(pid, mock_.port());
  ASSERT_GT(before.total, 0u);
  ASSERT_EQ(before.upstream, 0u);

  // Streams of a few tokens, back to back on keep-alive connections; each
  // reload lands while some are in flight on the old config's pools.
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0}, failed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        const TestResponse r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                           {{"content-type", "application/json"},
                                            {"x-mock-tokens", "4"},
                                            {"x-mock-token-interval-ms", "5"}},
                                           kChat);
        if (r.status == 200 && r.complete && r.body.find("[DONE]") != std::string::npos) {
          ++completed;
        } else {
          ++failed;
        }
      }
    });
  }
  for (int i = 1; i <= kReloads; ++i) {
    const int progress = completed.load() + 2 * kClients;
    EXPECT_TRUE(waitUntil([&] { return completed.load() >= progress; })) << "load stalled";
    sluice.signal(SIGHUP);
    ASSERT_TRUE(waitUntil([&] {
      return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == i;
    }));
  }
  const int progress = completed.load() + 2 * kClients;
  EXPECT_TRUE(waitUntil([&] { return completed.load() >= progress; }));
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed.load(), 0) << "requests in flight across a reload must finish";

  // One more reload with no load: the last config's pools hold only idle
  // connections, which close at once; every earlier pool is gone already.
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == kReloads + 1;
  }));
  FdCount after;
  EXPECT_TRUE(waitUntil([&] {
    after = countFds(pid, mock_.port());
    return after.upstream == 0 && after.total == before.total;
  })) << "fds "
      << before.total << " before, " << after.total << " after (" << after.upstream
      << " to the upstream)";

  // And the process still serves, on fresh connections.
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                        {{"content-type", "application/json"}}, kChat)
                .status,
            200);
  EXPECT_EQ(sluice.stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Http1AndHttp2Upstreams, ReloadPoolsTest, ::testing::Values("off", "on"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param) == "on" ? "Http2" : "Http1";
                         });

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
    auto loaded =
        config::loadConfigString(substitute(kBreaker, {{"UPSTREAM", upstream},
                                                       {"MOCK_PORT", std::to_string(mock_.port())},
                                                       {"ROUTE", route}}),
                                 "breaker.yaml");
    EXPECT_TRUE(loaded.ok()) << (loaded.ok() ? "" : loaded.error->toString());
    return loaded.config;
  };
  SluiceUnderTest sluice(substitute(
      kBreaker,
      {{"UPSTREAM", "mock"}, {"MOCK_PORT", std::to_string(mock_.port())}, {"ROUTE", "before"}}));
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
