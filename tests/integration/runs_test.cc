// Runs end to end (docs/design.md §9): a request carrying `x-run-id` is a
// task of that run; an admin cancel stops every task of the run and of its
// child runs on every worker, and refuses the run's later tasks; the run's
// deadline ends its tasks and refuses later ones; its spend cap cuts the
// task that crosses it and refuses later ones; with `cancel_token` a DELETE
// on the listeners cancels it; with `shared_state` a cancel on one replica
// reaches the others.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/redis_process.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

const char* kStream = R"({"model":"gpt-4o-mini","stream":true,"messages":[]})";
const char* kJson = R"({"model":"gpt-4o-mini","messages":[]})";

std::string config(const std::string& mock_url, bool runs = true,
                   const std::string& runs_yaml = "runs: {tombstone: 5m}",
                   const std::string& extra = "") {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
    budget: {default: 30s}
    retry: {attempts: 1}
${RUNS}
${EXTRA}
)",
                    {{"MOCK_URL", mock_url}, {"RUNS", runs ? runs_yaml : ""}, {"EXTRA", extra}});
}

/** Content deltas in an SSE body (the mock's tokens). */
int deltasIn(const std::string& body) {
  int n = 0;
  for (size_t at = body.find("\"content\""); at != std::string::npos;
       at = body.find("\"content\"", at + 1)) {
    ++n;
  }
  return n;
}

TestResponse adminPost(uint16_t admin_port, const std::string& path) {
  return httpRequest(admin_port, "POST", path, {{"x-sluice-admin", "1"}});
}

/** A streaming task of `run` that is under way (its first token reached the client). */
std::unique_ptr<TestConnection> startTask(
    uint16_t port, const std::string& run, const std::string& id,
    std::vector<std::pair<std::string, std::string>> extra = {}) {
  auto conn = std::make_unique<TestConnection>(port);
  std::vector<std::pair<std::string, std::string>> headers = {{"x-run-id", run},
                                                              {"x-mock-request-id", id},
                                                              {"x-mock-tokens", "1000"},
                                                              {"x-mock-token-interval-ms", "20"}};
  for (auto& h : extra) headers.push_back(std::move(h));
  conn->sendRequest("POST", "/v1/chat/completions", headers, kStream);
  conn->readUntil([](const TestResponse& r) { return r.body.find("data:") != std::string::npos; });
  return conn;
}

TEST(RunsTest, CancellingARunStopsEveryTaskOnEveryWorkerAndRefusesItsLaterTasks) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  std::vector<std::unique_ptr<TestConnection>> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back(startTask(sluice.port(), "run-a", "a" + std::to_string(i)));
    ASSERT_EQ(tasks.back()->current().status, 200);
  }
  // Another run's task is not touched.
  TestConnection other(sluice.port());
  other.sendRequest("POST", "/v1/chat/completions",
                    {{"x-run-id", "run-b"},
                     {"x-mock-tokens", "30"},
                     {"x-mock-token-interval-ms", "20"},
                     {"x-mock-request-id", "b0"}},
                    kStream);
  // (run-b's request may still be on its way: wait for it to join its run.)
  EXPECT_TRUE(waitUntil([&] { return sluice.metric("sluice_runs_active", {}) == 2; }));

  const TestResponse cancel = adminPost(sluice.adminPort(), "/runs/run-a/cancel");
  ASSERT_EQ(cancel.status, 202) << cancel.body;
  EXPECT_EQ(nlohmann::json::parse(cancel.body)["tasks_cancelled"], 4);

  for (int i = 0; i < 4; ++i) {
    const TestResponse r = tasks[i]->readResponse();
    // The stream under way ends with the final error event naming the cause.
    EXPECT_NE(r.body.find("run-cancelled"), std::string::npos) << r.body.substr(0, 300);
    const nlohmann::json e =
        mock.waitForEntry("a" + std::to_string(i),
                          [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
    EXPECT_TRUE(e["peer_closed"].get<bool>()) << "the upstream stream was closed";
    EXPECT_LT(e["tokens_emitted"].get<int>(), 1000);
  }
  const TestResponse b = other.readResponse();
  EXPECT_EQ(b.status, 200);
  EXPECT_TRUE(b.complete) << "another run's task runs to its end";

  EXPECT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_cancellations_total", {{"cancel_reason", "run_cancelled"}}) == 4;
  }));
  EXPECT_EQ(sluice.metric("sluice_run_endings_total", {{"reason", "cancelled"}}), 1);
  EXPECT_TRUE(waitUntil([&] { return sluice.metric("sluice_runs_active", {}) == 0; }));

  // A later task of the cancelled run is refused before any upstream call.
  const size_t calls = mock.ledger().size();
  const TestResponse late =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-run-id", "run-a"}}, kJson);
  EXPECT_EQ(late.status, 409);
  EXPECT_EQ(late.headers.get("x-should-retry"), "false");
  const auto problem = nlohmann::json::parse(late.body, nullptr, false);
  ASSERT_FALSE(problem.is_discarded()) << late.body;
  EXPECT_EQ(problem["type"], "urn:sluice:problem:run-cancelled");
  EXPECT_EQ(problem["cancel_reason"], "run_cancelled");
  EXPECT_EQ(mock.ledger().size(), calls);

  const auto run =
      nlohmann::json::parse(httpRequest(sluice.adminPort(), "GET", "/runs/run-a").body);
  EXPECT_EQ(run["state"], "cancelled");
  EXPECT_EQ(run["tasks_in_flight"], 0);
  EXPECT_EQ(run["tasks_total"], 4);
}

TEST(RunsTest, ACancelBeforeTheRunsFirstTaskRefusesIt) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  const TestResponse cancel = adminPost(sluice.adminPort(), "/runs/early%2Frun/cancel");
  ASSERT_EQ(cancel.status, 202) << cancel.body;
  EXPECT_EQ(nlohmann::json::parse(cancel.body)["tasks_cancelled"], 0);
  const TestResponse r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                     {{"x-run-id", "early/run"}}, kJson);
  EXPECT_EQ(r.status, 409);
  EXPECT_TRUE(mock.ledger().empty());
}

TEST(RunsTest, CancellingAParentRunStopsItsChildRuns) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  auto child = startTask(sluice.port(), "child", "c0", {{"x-parent-run-id", "parent"}});
  auto grandchild = startTask(sluice.port(), "grandchild", "g0", {{"x-parent-run-id", "child"}});
  ASSERT_EQ(adminPost(sluice.adminPort(), "/runs/parent/cancel").status, 202);
  EXPECT_NE(child->readResponse().body.find("run-cancelled"), std::string::npos);
  EXPECT_NE(grandchild->readResponse().body.find("run-cancelled"), std::string::npos);
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-run-id", "grandchild"}},
                        kJson)
                .status,
            409);
  const auto parent =
      nlohmann::json::parse(httpRequest(sluice.adminPort(), "GET", "/runs/parent").body);
  EXPECT_EQ(parent["children"], nlohmann::json::parse(R"(["child"])"));
}

TEST(RunsTest, TheRunsDeadlineEndsItsTasksAndRefusesLaterOnes) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  // The first task sets the run's budget (x-run-budget-ms); it stalls.
  const TestResponse r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                     {{"x-run-id", "short"},
                                      {"x-run-budget-ms", "300"},
                                      {"x-mock-tokens", "5"},
                                      {"x-mock-stall-after-tokens", "1"},
                                      {"x-mock-stall-ms", "-1"}},
                                     kStream);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("run-deadline-exceeded"), std::string::npos) << r.body;
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "run_deadline"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "budget_exhausted"}}),
            0);
  const TestResponse late =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-run-id", "short"}}, kJson);
  EXPECT_EQ(late.status, 504);
  EXPECT_NE(late.body.find("run-deadline-exceeded"), std::string::npos) << late.body;
  EXPECT_EQ(late.headers.get("x-should-retry"), "false");
  EXPECT_EQ(sluice.metric("sluice_run_endings_total", {{"reason", "deadline"}}), 1);
}

TEST(RunsTest, BadRunHeadersAreRefusedAndWithoutRunsTheHeaderIsOnlyForwarded) {
  MockLlm mock;
  {
    SluiceUnderTest sluice(config(mock.url()));
    EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                          {{"x-run-id", std::string(129, 'x')}}, kJson)
                  .status,
              400);
    const TestResponse budget =
        httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                    {{"x-run-id", "ok"}, {"x-run-budget-ms", "soon"}}, kJson);
    EXPECT_EQ(budget.status, 400);
    EXPECT_NE(budget.body.find("invalid-run-budget"), std::string::npos) << budget.body;
    EXPECT_EQ(httpRequest(sluice.adminPort(), "GET", "/runs/nope").status, 404);
    EXPECT_TRUE(mock.ledger().empty());
  }
  SluiceUnderTest sluice(config(mock.url(), false));
  EXPECT_EQ(
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-run-id", "r"}}, kJson).status,
      200);
  EXPECT_EQ(adminPost(sluice.adminPort(), "/runs/r/cancel").status, 404);
}

// Output at $1000 per million tokens: a token costs $0.001; input is free.
const char* kPricing = "pricing:\n  - {model: \"gpt-4o-mini\", input: 0, output: 1000}";

TEST(RunsTest, AStreamingTaskIsCutWhenItsRunReachesTheSpendCapAndLaterTasksGet402) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), true, "runs: {tombstone: 5m, max_usd: 10}", kPricing));
  // The task's header lowers the cap to $0.05: 50 tokens.
  TestConnection conn(sluice.port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-run-id", "capped"},
                    {"x-run-max-usd", "0.05"},
                    {"x-mock-request-id", "cap0"},
                    {"x-mock-tokens", "1000"},
                    {"x-mock-token-interval-ms", "2"}},
                   kStream);
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 200);
  // The stream ends with the final error event naming the cause.
  EXPECT_NE(r.body.find("run-spend-exhausted"), std::string::npos) << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("run_spend_cap"), std::string::npos);
  // Cut as soon as the metered spend crossed: the 50th token, and whatever
  // was already in the chunk that carried it — never the whole stream.
  EXPECT_GE(deltasIn(r.body), 50);
  const nlohmann::json e = mock.waitForEntry(
      "cap0", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_TRUE(e["peer_closed"].get<bool>()) << "the upstream stream was closed";
  EXPECT_LT(e["tokens_emitted"].get<int>(), 1000);

  EXPECT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_cancellations_total", {{"cancel_reason", "run_spend_cap"}}) == 1;
  }));
  EXPECT_EQ(sluice.metric("sluice_run_endings_total", {{"reason", "spend_cap"}}), 1);

  const size_t calls = mock.ledger().size();
  const TestResponse late =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-run-id", "capped"}}, kJson);
  EXPECT_EQ(late.status, 402);
  EXPECT_EQ(late.headers.get("x-should-retry"), "false");
  const auto problem = nlohmann::json::parse(late.body, nullptr, false);
  ASSERT_FALSE(problem.is_discarded()) << late.body;
  EXPECT_EQ(problem["type"], "urn:sluice:problem:run-spend-exhausted");
  EXPECT_EQ(mock.ledger().size(), calls) << "refused before any upstream call";

  EXPECT_TRUE(waitUntil([&] { return sluice.metric("sluice_runs_active", {}) == 0; }));
  const auto run =
      nlohmann::json::parse(httpRequest(sluice.adminPort(), "GET", "/runs/capped").body);
  EXPECT_EQ(run["state"], "spend_exhausted");
  EXPECT_DOUBLE_EQ(run["max_usd"].get<double>(), 0.05);
  EXPECT_GE(run["spend_usd"].get<double>(), 0.05);
  // What the run holds is what the spend metrics booked for its one task:
  // booked once the client's reading of the cut stream is known (it read it
  // all: a look at its socket, soon after the cut, finds nothing unread;
  // docs/reference/metrics.md, "Delivered means read").
  const double run_usd = run["spend_usd"].get<double>();
  EXPECT_TRUE(waitUntil([&] {
    return std::fabs(run_usd - sluice.metric("sluice_spend_usd_total", {{"route", "chat"}})) < 1e-9;
  })) << "the run holds "
      << run_usd << ", the metrics "
      << sluice.metric("sluice_spend_usd_total", {{"route", "chat"}});

  // Another run, under its cap, is untouched; a bad cap header is refused.
  const TestResponse other = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                         {{"x-run-id", "free"}, {"x-mock-tokens", "20"}}, kStream);
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(other.body.find("run-spend-exhausted"), std::string::npos);
  const TestResponse bad = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                       {{"x-run-id", "bad"}, {"x-run-max-usd", "-1"}}, kJson);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("invalid-run-max-usd"), std::string::npos) << bad.body;
}

const char* kToken = "0123456789abcdef-run-cancel";

TEST(RunsTest, DeleteOnTheListenersWithTheTokenCancelsTheRunOverHttp1AndHttp2) {
  MockLlm mock;
  SluiceUnderTest sluice(config(
      mock.url(), true, std::string("runs: {tombstone: 5m, cancel_token: \"") + kToken + "\"}"));
  auto task = startTask(sluice.port(), "stop-me", "d0");
  ASSERT_EQ(task->current().status, 200);

  // Without the token, or with a wrong one: 401, nothing cancelled, nothing routed.
  const TestResponse none = httpRequest(sluice.port(), "DELETE", "/sluice/runs/stop-me");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.headers.get("content-type"), "application/problem+json");
  EXPECT_TRUE(none.headers.get("www-authenticate").has_value());
  const TestResponse wrong = httpRequest(sluice.port(), "DELETE", "/sluice/runs/stop-me",
                                         {{"authorization", "Bearer 0123456789abcdef-run-cancex"}});
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/sluice/runs/stop-me",
                        {{"authorization", std::string("Bearer ") + kToken}})
                .status,
            405)
      << "the prefix is sluice's: never routed with the token";
  EXPECT_EQ(mock.ledger().size(), 1u);
  EXPECT_EQ(
      nlohmann::json::parse(httpRequest(sluice.adminPort(), "GET", "/runs/stop-me").body)["state"],
      "running");

  const TestResponse ok = httpRequest(sluice.port(), "DELETE", "/sluice/runs/stop-me",
                                      {{"authorization", std::string("Bearer ") + kToken}});
  ASSERT_EQ(ok.status, 202) << ok.body;
  EXPECT_EQ(nlohmann::json::parse(ok.body)["tasks_cancelled"], 1);
  const TestResponse cut = task->readResponse();
  EXPECT_NE(cut.body.find("run-cancelled"), std::string::npos) << cut.body.substr(0, 300);
  EXPECT_EQ(
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-run-id", "stop-me"}}, kJson)
          .status,
      409);

  // HTTP/2: the same, on a run not seen yet (it leaves a tombstone).
  H2Connection h2(sluice.port());
  ASSERT_TRUE(h2.connected());
  const int32_t denied = h2.submit("DELETE", "/sluice/runs/later", {});
  const int32_t stream = h2.submit("DELETE", "/sluice/runs/later",
                                   {{"authorization", std::string("bearer ") + kToken}});
  ASSERT_TRUE(h2.waitForStream(denied));
  ASSERT_TRUE(h2.waitForStream(stream));
  EXPECT_EQ(h2.response(denied).status, 401);
  EXPECT_EQ(h2.response(stream).status, 202) << h2.response(stream).body;
  EXPECT_EQ(
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-run-id", "later"}}, kJson)
          .status,
      409);
  EXPECT_EQ(mock.ledger().size(), 1u);
}

TEST(RunsTest, WithoutACancelTokenTheListenerPathIsRoutedAsUsual) {
  MockLlm mock;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: all
    match: {path_prefix: /}
    upstream: mock
runs: {}
)",
                                    {{"MOCK_URL", mock.url()}}));
  const TestResponse r = httpRequest(sluice.port(), "DELETE", "/sluice/runs/x",
                                     {{"authorization", std::string("Bearer ") + kToken}});
  EXPECT_NE(r.status, 401);
  EXPECT_NE(r.status, 202);
  EXPECT_EQ(mock.ledger().size(), 1u) << "it reached the upstream";
  EXPECT_EQ(httpRequest(sluice.adminPort(), "GET", "/runs/x").status, 404);
}

/** How many times Redis ran `command` (INFO commandstats; commands a script ran count too). */
int64_t redisCalls(const RedisProcess& redis, const std::string& command) {
  const std::string stats = redis.cli("INFO commandstats");
  const std::string tag = "cmdstat_" + command + ":calls=";
  const size_t at = stats.find(tag);
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + tag.size()));
}

TEST(RunsTest, AReplicaThatMissedTheCancelWhileItsSubscriptionWasDownCutsTheRunWhenItComesBack) {
  MockLlm mock;
  RedisProcess redis;
  // B connects as its own Redis user, so its subscription alone can be cut:
  // taking the channel from the user disconnects its subscriber, and its
  // SUBSCRIBE is refused until the channel is given back.
  ASSERT_EQ(redis.cli("ACL SETUSER bee on '>bee-password' '~*' '&*' '+@all'"), "OK");
  const std::string shared = "shared_state: {redis: \"%s\", prefix: \"missed:\", timeout: 500ms}";
  const auto yaml = [&](const std::string& url) {
    std::string extra = shared;
    extra.replace(extra.find("%s"), 2, url);
    return config(mock.url(), true, "runs: {tombstone: 5m}", extra);
  };
  SluiceProcess a(yaml(redis.url()));
  SluiceProcess b(
      yaml("redis://bee:bee-password@127.0.0.1:" + std::to_string(redis.port()) + "/0"));
  ASSERT_TRUE(waitUntil([&] {
    return a.metric("sluice_shared_state_up") == 1 && b.metric("sluice_shared_state_up") == 1;
  })) << a.stderrText()
      << b.stderrText();

  auto task = startTask(b.port(), "missed-run", "m0");
  ASSERT_EQ(task->current().status, 200);
  ASSERT_EQ(redis.cli("ACL SETUSER bee resetchannels"), "OK");  // B's subscriber is gone
  const TestResponse cancel = adminPost(a.adminPort(), "/runs/missed-run/cancel");
  ASSERT_EQ(cancel.status, 202) << cancel.body;
  ASSERT_TRUE(waitUntil([&] { return redis.cli("GET missed:r:missed-run:ended") == "cancelled"; }));
  ASSERT_TRUE(waitUntil([&] { return redisCalls(redis, "publish") >= 1; }));
  // Published to nobody on B's side: B's task streams on.
  EXPECT_EQ(b.metric("sluice_cancellations_total", {{"cancel_reason", "run_cancelled"}}), 0);

  ASSERT_EQ(redis.cli("ACL SETUSER bee allchannels"), "OK");  // B subscribes again
  const TestResponse cut = task->readResponse();
  EXPECT_NE(cut.body.find("run-cancelled"), std::string::npos) << cut.body.substr(0, 300);
  const nlohmann::json e =
      mock.waitForEntry("m0", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_LT(e["tokens_emitted"].get<int>(), 1000);
  EXPECT_TRUE(waitUntil([&] {
    return b.metric("sluice_cancellations_total", {{"cancel_reason", "run_cancelled"}}) == 1;
  })) << b.stderrText();
  // And its later tasks are refused (B holds the run, ended).
  const TestResponse late =
      httpRequest(b.port(), "POST", "/v1/chat/completions", {{"x-run-id", "missed-run"}}, kJson);
  EXPECT_EQ(late.status, 409) << late.body;
}

TEST(RunsTest, ACancelOnOneReplicaCutsTheRunsTaskOnAnotherAndItsTombstoneIsShared) {
  MockLlm mock;
  RedisProcess redis;
  const std::string yaml =
      config(mock.url(), true, "runs: {tombstone: 5m}",
             "shared_state: {redis: \"" + redis.url() + "\", prefix: \"runs:\", timeout: 500ms}");
  SluiceProcess a(yaml);
  SluiceProcess b(yaml);
  ASSERT_TRUE(waitUntil([&] {
    return a.metric("sluice_shared_state_up") == 1 && b.metric("sluice_shared_state_up") == 1;
  })) << a.stderrText()
      << b.stderrText();

  auto task = startTask(b.port(), "fleet-run", "f0");
  ASSERT_EQ(task->current().status, 200);
  const TestResponse cancel = adminPost(a.adminPort(), "/runs/fleet-run/cancel");
  ASSERT_EQ(cancel.status, 202) << cancel.body;
  EXPECT_EQ(nlohmann::json::parse(cancel.body)["tasks_cancelled"], 0) << "none on A";
  const TestResponse cut = task->readResponse();
  EXPECT_NE(cut.body.find("run-cancelled"), std::string::npos) << cut.body.substr(0, 300);
  const nlohmann::json e =
      mock.waitForEntry("f0", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_LT(e["tokens_emitted"].get<int>(), 1000);
  EXPECT_TRUE(waitUntil([&] {
    return b.metric("sluice_cancellations_total", {{"cancel_reason", "run_cancelled"}}) == 1;
  }));

  // A run B never saw: cancelled on A, refused on B.
  const size_t calls = mock.ledger().size();
  ASSERT_EQ(adminPost(a.adminPort(), "/runs/unseen/cancel").status, 202);
  ASSERT_TRUE(waitUntil([&] {
    const TestResponse r = httpRequest(b.adminPort(), "GET", "/runs/unseen");
    return r.status == 200 && r.body.find("\"cancelled\"") != std::string::npos;
  }));
  const TestResponse late =
      httpRequest(b.port(), "POST", "/v1/chat/completions", {{"x-run-id", "unseen"}}, kJson);
  EXPECT_EQ(late.status, 409);
  EXPECT_EQ(mock.ledger().size(), calls);
}

TEST(RunsTest, WithSharedStateTheSpendCapBoundsTheFleetsSumAndReachingItEndsTheRunEverywhere) {
  MockLlm mock;
  RedisProcess redis;
  // $0.001 an output token; the run's cap $0.5: 500 tokens. Each task
  // streams 400 (under the cap alone), the two together 800.
  const std::string yaml = config(mock.url(), true, "runs: {tombstone: 5m, max_usd: 0.5}",
                                  std::string(kPricing) + "\nshared_state: {redis: \"" +
                                      redis.url() + "\", prefix: \"spend:\", timeout: 500ms}");
  SluiceProcess a(yaml);
  SluiceProcess b(yaml);
  ASSERT_TRUE(waitUntil([&] {
    return a.metric("sluice_shared_state_up") == 1 && b.metric("sluice_shared_state_up") == 1;
  })) << a.stderrText()
      << b.stderrText();

  const auto start = [&](uint16_t port, const std::string& id) {
    auto conn = std::make_unique<TestConnection>(port);
    conn->sendRequest("POST", "/v1/chat/completions",
                      {{"x-run-id", "shared-cap"},
                       {"x-mock-request-id", id},
                       {"x-mock-tokens", "400"},
                       {"x-mock-token-interval-ms", "3"}},
                      kStream);
    return conn;
  };
  auto on_a = start(a.port(), "sa");
  auto on_b = start(b.port(), "sb");
  const TestResponse ra = on_a->readResponse();
  const TestResponse rb = on_b->readResponse();
  // Both cut: each replica's share alone stayed under the cap.
  EXPECT_NE(ra.body.find("run-spend-exhausted"), std::string::npos) << ra.body.substr(0, 300);
  EXPECT_NE(rb.body.find("run-spend-exhausted"), std::string::npos) << rb.body.substr(0, 300);
  const int delivered = deltasIn(ra.body) + deltasIn(rb.body);
  EXPECT_LT(delivered, 800);
  EXPECT_GE(delivered, 500) << "not cut before the fleet reached the cap";

  // Later tasks are refused on both, before any upstream call.
  const size_t calls = mock.ledger().size();
  for (SluiceProcess* p : {&a, &b}) {
    const TestResponse late =
        httpRequest(p->port(), "POST", "/v1/chat/completions", {{"x-run-id", "shared-cap"}}, kJson);
    EXPECT_EQ(late.status, 402) << late.body;
    EXPECT_EQ(late.headers.get("x-should-retry"), "false");
  }
  EXPECT_EQ(mock.ledger().size(), calls);

  // One counter for the fleet, added to in batches: far fewer additions
  // than the chunks the run's spend was fed from.
  EXPECT_TRUE(waitUntil([&] {
    const std::string total = redis.cli("GET spend:r:shared-cap:spend");
    return !total.empty() && std::stod(total) >= 0.5;
  })) << redis.cli("GET spend:r:shared-cap:spend");
  const int64_t additions = redisCalls(redis, "incrbyfloat");
  EXPECT_GT(additions, 0);
  EXPECT_LT(additions, delivered / 3) << "batched, never per chunk";
  EXPECT_EQ(redis.cli("GET spend:r:shared-cap:ended"), "spend_cap");
}

TEST(RunsTest, AReplicaThatStartsAfterACancelRefusesTheRunFromTheFleetsTombstone) {
  MockLlm mock;
  RedisProcess redis;
  const std::string yaml =
      config(mock.url(), true, "runs: {tombstone: 5m}",
             "shared_state: {redis: \"" + redis.url() + "\", prefix: \"tomb:\", timeout: 500ms}");
  SluiceProcess a(yaml);
  ASSERT_TRUE(waitUntil([&] { return a.metric("sluice_shared_state_up") == 1; })) << a.stderrText();
  // Cancelled on A before B existed: B never hears the published cancel.
  ASSERT_EQ(adminPost(a.adminPort(), "/runs/before-b/cancel").status, 202);
  EXPECT_TRUE(waitUntil([&] { return !redis.cli("GET tomb:r:before-b:ended").empty(); }));

  SluiceProcess b(yaml);
  ASSERT_TRUE(waitUntil([&] { return b.metric("sluice_shared_state_up") == 1; })) << b.stderrText();
  const size_t calls = mock.ledger().size();
  const TestResponse late =
      httpRequest(b.port(), "POST", "/v1/chat/completions", {{"x-run-id", "before-b"}}, kJson);
  EXPECT_EQ(late.status, 409) << late.body;
  EXPECT_NE(late.body.find("run-cancelled"), std::string::npos) << late.body;
  EXPECT_EQ(late.headers.get("x-should-retry"), "false");
  // A child run of it is refused too (its parent's tombstone).
  const TestResponse child =
      httpRequest(b.port(), "POST", "/v1/chat/completions",
                  {{"x-run-id", "child-of-before-b"}, {"x-parent-run-id", "before-b"}}, kJson);
  EXPECT_EQ(child.status, 409) << child.body;
  EXPECT_EQ(mock.ledger().size(), calls) << "refused before any upstream call";

  // A run the fleet knows nothing of goes through (looked up once).
  const int64_t lookups = redisCalls(redis, "mget");
  for (int i = 0; i < 3; ++i) {
    const TestResponse ok =
        httpRequest(b.port(), "POST", "/v1/chat/completions", {{"x-run-id", "fresh"}}, kJson);
    EXPECT_EQ(ok.status, 200) << ok.body;
  }
  EXPECT_EQ(redisCalls(redis, "mget"), lookups + 1) << "one lookup per run new here, not per task";
}

}  // namespace
}  // namespace sluice::test
