// Endpoints and fallback end to end (docs/design.md §5): real sluice, real mock-llm
// providers (one process per provider, each with its own ledger and
// server-side fault schedule), real sockets. What each provider saw comes
// from its ledger; what sluice decided from its metrics and headers.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

const char* kChat = R"({"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]})";
const char* kStream =
    R"({"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},)"
    R"("messages":[{"role":"user","content":"hi"}]})";

/** A schedule file for mock-llm's --schedule, removed with the object. */
class ScheduleFile {
 public:
  explicit ScheduleFile(const std::string& text) {
    char name[] = "/tmp/sluice-failover-schedule-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    if (fd >= 0) close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~ScheduleFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/** A provider that answers every request with 503 for an hour: a provider outage. */
std::vector<std::string> outage(const ScheduleFile& file) { return {"--schedule", file.path()}; }

TEST(EndpointTest, ADeadEndpointIsSkippedOnceItsCircuitOpensAndTheOtherServes) {
  MockLlm live;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: openai
    endpoints:
      - {name: dead, url: "http://127.0.0.1:1"}
      - {name: live, url: "${LIVE}"}
    circuit_breaker: {consecutive_failures: 2, cooldown: 60s}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
    retry: {attempts: 3, backoff: {base: 1ms, max: 2ms}}
)",
                                    {{"LIVE", live.url()}}));
  for (int i = 0; i < 20; ++i) {
    auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.get("x-sluice-upstream").value_or(""), "openai");
  }
  EXPECT_EQ(live.ledger().size(), 20u);
  // Each refused connect was retried on the other endpoint; after two the
  // circuit of `dead` is open and nothing tries it again (no connect wait).
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "connect_error"}}), 2);
  EXPECT_EQ(sluice.metric("sluice_endpoint_circuit_state", {{"endpoint", "dead"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_endpoint_circuit_state", {{"endpoint", "live"}}), 0);
  // The upstream as a whole still serves: its circuit reads closed.
  EXPECT_EQ(sluice.metric("sluice_circuit_state", {{"upstream", "openai"}}), 0);
}

TEST(EndpointTest, WeightsSplitTheRequests) {
  MockLlm heavy;
  MockLlm light;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: openai
    endpoints:
      - {name: heavy, url: "${HEAVY}", weight: 3}
      - {name: light, url: "${LIGHT}", weight: 1}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
)",
                                    {{"HEAVY", heavy.url()}, {"LIGHT", light.url()}}));
  constexpr int kRequests = 2000;
  TestConnection conn(sluice.port());
  for (int i = 0; i < kRequests; ++i) {
    conn.sendRequest("POST", "/v1/chat/completions", {}, kChat);
    const TestResponse r = conn.readResponse();
    ASSERT_EQ(r.status, 200) << r.body;
  }
  const double share = static_cast<double>(heavy.ledger().size()) / kRequests;
  EXPECT_EQ(heavy.ledger().size() + light.ledger().size(), static_cast<size_t>(kRequests));
  EXPECT_NEAR(share, 0.75, 0.05) << "3:1 weights";
}

TEST(EndpointTest, APriorityOneEndpointServesOnlyWhileNoPriorityZeroIsAvailable) {
  MockLlm spare;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: openai
    endpoints:
      - {name: main, url: "http://127.0.0.1:1"}
      - {name: spare, url: "${SPARE}", priority: 1}
    circuit_breaker: {consecutive_failures: 1, cooldown: 60s}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
    retry: {attempts: 2, backoff: {base: 1ms, max: 1ms}}
)",
                                    {{"SPARE", spare.url()}}));
  // The first request tries `main` (refused), its retry goes to the spare;
  // then main's circuit is open and every request goes to the spare at once.
  for (int i = 0; i < 5; ++i) {
    auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(spare.ledger().size(), 5u);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "connect_error"}}), 1);
}

TEST(EndpointTest, ASlowEndpointGetsFewerRequestsThanAFastOne) {
  ScheduleFile slow_schedule("0s 1h slow 150ms\n");
  MockLlm slow("", "", {"--schedule", slow_schedule.path()});
  MockLlm fast;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: openai
    endpoints:
      - {name: slow, url: "${SLOW}"}
      - {name: fast, url: "${FAST}"}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: openai
)",
                                    {{"SLOW", slow.url()}, {"FAST", fast.url()}}));
  // Eight agents at once: the slow endpoint's requests stay outstanding, so
  // the power of two choices sends most of the work to the fast one.
  constexpr int kAgents = 8;
  constexpr int kEach = 10;
  std::vector<std::thread> agents;
  std::atomic<int> ok{0};
  for (int a = 0; a < kAgents; ++a) {
    agents.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        ok += httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat).status == 200;
      }
    });
  }
  for (auto& t : agents) t.join();
  EXPECT_EQ(ok.load(), kAgents * kEach);
  const size_t to_slow = slow.ledger().size();
  const size_t to_fast = fast.ledger().size();
  EXPECT_EQ(to_slow + to_fast, static_cast<size_t>(kAgents * kEach));
  EXPECT_LT(to_slow * 3, to_fast) << "slow " << to_slow << ", fast " << to_fast;
}

std::string fallbackConfig(const std::string& primary, const std::string& backup,
                           const std::string& route_extra, const std::string& primary_extra = "") {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: primary
    url: "${PRIMARY}"
${PRIMARY_EXTRA}
  - name: backup
    url: "${BACKUP}"
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: primary
    fallback: [{upstream: backup, model: gpt-4o-fallback}]
    retry: {attempts: 3, backoff: {base: 1ms, max: 2ms}}
${ROUTE_EXTRA}
pricing:
  - {model: "gpt-4o-fallback", input: 1.00, output: 100.00}
  - {model: "gpt-4o-mini", input: 0.15, output: 0.60}
)",
                    {{"PRIMARY", primary},
                     {"BACKUP", backup},
                     {"ROUTE_EXTRA", route_extra},
                     {"PRIMARY_EXTRA", primary_extra}});
}

TEST(FallbackTest, APrimaryOutageIsAnsweredByTheFallbackWithTheRewrittenModel) {
  ScheduleFile schedule("0s 1h status 503\n");
  MockLlm primary("", "", outage(schedule));
  MockLlm backup;
  SluiceUnderTest sluice(fallbackConfig(primary.url(), backup.url(), ""));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-request-id", "outage-1"}}, kChat);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.get("x-sluice-upstream").value_or(""), "backup");
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "2");
  // One endpoint on the primary: retrying it cannot help, the fallback goes at once.
  EXPECT_EQ(primary.ledger("outage-1").size(), 1u);
  const nlohmann::json served = backup.entry("outage-1");
  EXPECT_EQ(served.value("model", ""), "gpt-4o-fallback");
  EXPECT_EQ(nlohmann::json::parse(r.body).value("model", ""), "gpt-4o-fallback");
  EXPECT_EQ(sluice.metric(
                "sluice_fallbacks_total",
                {{"route", "chat"}, {"from", "primary"}, {"to", "backup"}, {"cause", "http_5xx"}}),
            1);
  // Priced as the model actually used (booked once the client's reading of
  // the answer is known: docs/reference/metrics.md, "Delivered means read").
  EXPECT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_spend_usd_total", {{"model", "gpt-4o-fallback"}}) > 0;
  }));
  EXPECT_EQ(sluice.metric("sluice_spend_usd_total", {{"model", "gpt-4o-mini"}}), 0);
}

TEST(FallbackTest, AStreamingRequestStaysStreamingOnTheFallback) {
  ScheduleFile schedule("0s 1h status 503\n");
  MockLlm primary("", "", outage(schedule));
  MockLlm backup;
  SluiceUnderTest sluice(fallbackConfig(primary.url(), backup.url(), ""));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-request-id", "stream-1"}}, kStream);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.get("content-type").value_or("").find("text/event-stream"),
            std::string::npos);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(r.body.find("\"gpt-4o-fallback\""), std::string::npos);
  const nlohmann::json served = backup.entry("stream-1");
  EXPECT_EQ(served.value("model", ""), "gpt-4o-fallback");
  EXPECT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_tokens_total", {{"model", "gpt-4o-fallback"}}) > 0;
  }));
}

// Two dead endpoints whose circuits are still closed and `attempts: 3`
// (config/examples/failover.yaml's shape): once both failed for this request,
// the third attempt goes to the fallback, not back to the first dead one.
TEST(FallbackTest, RetriesReachTheFallbackOnceEveryEndpointFailedForTheRequest) {
  MockLlm backup;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: primary
    endpoints:
      - {name: dead-a, url: "http://127.0.0.1:1"}
      - {name: dead-b, url: "http://127.0.0.1:1"}
    circuit_breaker: {consecutive_failures: 100}
  - name: backup
    url: "${BACKUP}"
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: primary
    fallback: [{upstream: backup, model: gpt-4o-fallback}]
    retry: {attempts: 3, backoff: {base: 1ms, max: 2ms}}
)",
                                    {{"BACKUP", backup.url()}}));
  for (int i = 0; i < 3; ++i) {
    auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.get("x-sluice-upstream").value_or(""), "backup");
    EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "3");
  }
  EXPECT_EQ(backup.ledger().size(), 3u);
  // Each dead endpoint was tried once per request, never twice.
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total",
                          {{"endpoint", "dead-a"}, {"result", "connect_error"}}),
            3);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total",
                          {{"endpoint", "dead-b"}, {"result", "connect_error"}}),
            3);
}

TEST(FallbackTest, AnOpenCircuitSpillsOverWithoutTouchingThePrimary) {
  ScheduleFile schedule("0s 1h status 503\n");
  MockLlm primary("", "", outage(schedule));
  MockLlm backup;
  SluiceUnderTest sluice(fallbackConfig(primary.url(), backup.url(), "",
                                        "    circuit_breaker: {consecutive_failures: 1, "
                                        "cooldown: 60s}"));
  auto first = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(primary.ledger().size(), 1u);
  ASSERT_EQ(sluice.metric("sluice_endpoint_circuit_state", {{"upstream", "primary"}}), 1);
  for (int i = 0; i < 3; ++i) {
    auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.get("x-sluice-upstream").value_or(""), "backup");
    EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "1") << "a spill-over is no attempt";
  }
  EXPECT_EQ(primary.ledger().size(), 1u) << "nothing sent while the circuit is open";
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {{"cause", "circuit_open"}}), 3);
}

TEST(FallbackTest, WithoutAFallbackOnCauseTheAnswerIsTheUpstreams) {
  ScheduleFile schedule("0s 1h status 503\n");
  MockLlm primary("", "", outage(schedule));
  MockLlm backup;
  SluiceUnderTest sluice(
      fallbackConfig(primary.url(), backup.url(), "    fallback_on: [429, connect_error]"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers.get("x-sluice-upstream").value_or(""), "primary");
  EXPECT_TRUE(backup.ledger().empty());
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {}), 0);
}

TEST(FallbackTest, ARequestThatIsNotSafeToRepeatNeverFallsBack) {
  ScheduleFile schedule("0s 1h status 503\n");
  MockLlm primary("", "", outage(schedule));
  MockLlm backup;
  // A route whose requests are never safe to repeat (retry.idempotent: never).
  SluiceUnderTest strict(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - {name: primary, url: "${PRIMARY}"}
  - {name: backup, url: "${BACKUP}"}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: primary
    fallback: [{upstream: backup}]
    retry: {attempts: 3, idempotent: never}
)",
                                    {{"PRIMARY", primary.url()}, {"BACKUP", backup.url()}}));
  auto r = httpRequest(strict.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(backup.ledger().empty());
}

TEST(FallbackTest, AQuotaSpentBeyondTheBudgetSpillsOver) {
  MockLlm primary;
  MockLlm backup;
  SluiceUnderTest sluice(
      fallbackConfig(primary.url(), backup.url(), "", "    rate_limit: {key: none, reserve: 0}"));
  // One request per minute: the first spends it, the second would wait ~60 s.
  const std::vector<std::pair<std::string, std::string>> quota = {
      {"x-mock-quota", "1/60000"}, {"x-mock-quota-key", "spill"}, {"x-budget-ms", "5000"}};
  auto first = httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.headers.get("x-sluice-upstream").value_or(""), "primary");
  auto second = httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.headers.get("x-sluice-upstream").value_or(""), "backup");
  EXPECT_EQ(primary.ledger().size(), 1u) << "the provider never saw a request it would refuse";
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {{"cause", "rate_limited"}}), 1);
}

TEST(FallbackTest, AvoidingTheWaitSpillsOverEvenWhenTheQuotaFreesWithinTheBudget) {
  MockLlm primary;
  MockLlm backup;
  SluiceUnderTest sluice(fallbackConfig(primary.url(), backup.url(), "    fallback_wait: avoid",
                                        "    rate_limit: {key: none, reserve: 0}"));
  const std::vector<std::pair<std::string, std::string>> quota = {
      {"x-mock-quota", "1/3000"}, {"x-mock-quota-key", "avoid"}, {"x-budget-ms", "60000"}};
  auto first = httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat);
  ASSERT_EQ(first.status, 200) << first.body;
  auto second = httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.headers.get("x-sluice-upstream").value_or(""), "backup")
      << "with fallback_wait: prefer it would wait ~3 s for the primary";
  EXPECT_EQ(primary.ledger().size(), 1u);
  EXPECT_EQ(sluice.metric("sluice_throttle_wait_seconds_count", {}), 0) << "nothing waited";
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {{"cause", "rate_limited"}}), 1);
}

TEST(FallbackTest, PreferringToWaitWaitsForAQuotaThatFreesWithinTheBudget) {
  MockLlm primary;
  MockLlm backup;
  SluiceUnderTest sluice(
      fallbackConfig(primary.url(), backup.url(), "", "    rate_limit: {key: none, reserve: 0}"));
  const std::vector<std::pair<std::string, std::string>> quota = {
      {"x-mock-quota", "1/1500"}, {"x-mock-quota-key", "prefer"}, {"x-budget-ms", "20000"}};
  ASSERT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat).status, 200);
  auto second = httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.headers.get("x-sluice-upstream").value_or(""), "primary");
  EXPECT_TRUE(backup.ledger().empty());
  EXPECT_EQ(sluice.metric("sluice_throttle_wait_seconds_count", {}), 1);
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {}), 0);
}

TEST(FallbackTest, AStreamThatSentBytesIsNeverMoved) {
  MockLlm primary;
  MockLlm backup;
  SluiceUnderTest sluice(fallbackConfig(primary.url(), backup.url(), ""));
  // The primary streams three tokens, then its connection resets.
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-tokens", "20"},
                        {"x-mock-token-interval-ms", "5"},
                        {"x-mock-reset-after-tokens", "3"},
                        {"x-mock-request-id", "cut"}},
                       kStream);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.get("x-sluice-upstream").value_or(""), "primary");
  EXPECT_EQ(r.body.find("data: [DONE]"), std::string::npos) << "cut, not completed";
  EXPECT_TRUE(backup.ledger().empty()) << "the client already had bytes: never moved";
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {}), 0);
}

TEST(FallbackTest, OneBudgetCoversTheWholeChain) {
  ScheduleFile hang("0s 1h hang\n");
  MockLlm a("", "", {"--schedule", hang.path()});
  MockLlm b("", "", {"--schedule", hang.path()});
  MockLlm c("", "", {"--schedule", hang.path()});
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - {name: a, url: "${A}"}
  - {name: b, url: "${B}"}
  - {name: c, url: "${C}"}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: a
    fallback: [{upstream: b}, {upstream: c}]
    first_byte_timeout: 400ms
    retry: {attempts: 3}
)",
                                    {{"A", a.url()}, {"B", b.url()}, {"C", c.url()}}));
  // a and b stall past first_byte_timeout and the request moves on; c stalls
  // until the budget ends it (1 s in all, not three timeouts more).
  const auto start = std::chrono::steady_clock::now();
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-budget-ms", "1000"}, {"x-mock-request-id", "chain"}}, kChat);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_NE(r.body.find("budget_exhausted"), std::string::npos) << r.body;
  EXPECT_GE(took, std::chrono::milliseconds(1000));
  for (MockLlm* mock : {&a, &b, &c}) {
    // Each was asked once and torn down (nothing keeps generating).
    mock->waitForEntry("chain",
                       [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  }
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {{"cause", "timeout"}}), 2);
}

TEST(FallbackTest, AClientThatLeavesTearsDownTheFallbackAttempt) {
  ScheduleFile schedule("0s 1h status 503\n");
  MockLlm primary("", "", outage(schedule));
  MockLlm backup;
  SluiceUnderTest sluice(fallbackConfig(primary.url(), backup.url(), ""));
  TestConnection conn(sluice.port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-mock-tokens", "500"},
                    {"x-mock-token-interval-ms", "10"},
                    {"x-mock-request-id", "leave"}},
                   kStream);
  conn.readUntil([](const TestResponse& r) { return r.body.find("data:") != std::string::npos; });
  conn.close();
  const nlohmann::json e = backup.waitForEntry(
      "leave", [](const nlohmann::json& x) { return x["peer_closed"].get<bool>(); });
  EXPECT_FALSE(e["completed"].get<bool>());
  EXPECT_LT(e["tokens_emitted"].get<int>(), 500);
  EXPECT_EQ(primary.ledger("leave").size(), 1u);
}

TEST(FallbackTest, AttemptsAreCappedAcrossTheChain) {
  ScheduleFile schedule("0s 1h status 503\n");
  MockLlm primary("", "", outage(schedule));
  MockLlm backup("", "", outage(schedule));
  SluiceUnderTest sluice(fallbackConfig(primary.url(), backup.url(), "",
                                        "    circuit_breaker: {consecutive_failures: 100}"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "3");
  EXPECT_EQ(r.headers.get("x-sluice-upstream").value_or(""), "backup");
  EXPECT_EQ(primary.ledger().size() + backup.ledger().size(), 3u);
  EXPECT_EQ(primary.ledger().size(), 1u);
}

}  // namespace
}  // namespace sluice::test

namespace sluice::test {
namespace {

TEST(RouteOnModelTest, TheBodysModelPicksTheRoute) {
  MockLlm gpt;
  MockLlm llama;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - {name: openai, url: "${GPT}"}
  - {name: vllm, url: "${LLAMA}"}
routes:
  - name: gpt
    match: {path_prefix: /v1/chat/completions, model: "gpt-4o*"}
    upstream: openai
  - name: llama
    match: {path_prefix: /v1/chat/completions, model: "llama-*"}
    upstream: vllm
)",
                                    {{"GPT", gpt.url()}, {"LLAMA", llama.url()}}));
  auto a = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {},
                       R"({"messages":[],"model":"llama-3.1-70b","stream":false})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.headers.get("x-sluice-upstream").value_or(""), "vllm");
  auto b = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.headers.get("x-sluice-upstream").value_or(""), "openai");
  // An escaped model name is decoded before it is matched.
  auto c = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {},
                       R"({"model":"gpt\u002d4o","messages":[]})");
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.headers.get("x-sluice-upstream").value_or(""), "openai");
  // No route for this model (nor for a body without one): 404 no_route.
  auto d = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {},
                       R"({"model":"mistral-large","messages":[]})");
  EXPECT_EQ(d.status, 404);
  EXPECT_NE(d.body.find("mistral-large"), std::string::npos) << d.body;
  auto e = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, "{}");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "llama"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "gpt"}}), 2);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "none"}}), 2);
  EXPECT_EQ(sluice.metric("sluice_active_requests", {{"route", "gpt"}}), 0);
  EXPECT_EQ(llama.ledger().size(), 1u);
  EXPECT_EQ(gpt.ledger().size(), 2u);
}

}  // namespace
}  // namespace sluice::test
