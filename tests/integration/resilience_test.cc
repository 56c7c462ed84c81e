// Retries and circuit breaking end to end (docs/design.md §3): real sluice_core,
// real mock-llm scripting the failures, real sockets. What the upstream saw
// (attempt count, timing, nothing sent while the circuit is open) comes from
// the mock's ledger.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

std::string config(const std::string& mock_url, const std::string& upstream_extra,
                   const std::string& route_extra) {
  return substitute(
      R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
${UPSTREAM_EXTRA}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
${ROUTE_EXTRA}
)",
      {{"MOCK_URL", mock_url}, {"UPSTREAM_EXTRA", upstream_extra}, {"ROUTE_EXTRA", route_extra}});
}

const char* kChat = R"({"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]})";

std::vector<nlohmann::json> attemptsFor(MockLlm& mock, const std::string& key) {
  std::vector<nlohmann::json> out;
  for (auto& e : mock.ledger()) {
    if (e["request_headers"].value("x-mock-fail-key", "") == key) out.push_back(e);
  }
  return out;
}

TEST(RetryTest, RetriesA429HonouringRetryAfterThenSucceeds) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "", "    retry: {attempts: 3, backoff: {base: 10ms, max: 50ms}}"));
  const auto start = std::chrono::steady_clock::now();
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-fail-times", "2"},
                        {"x-mock-fail-key", "ra"},
                        {"x-mock-status", "429"},
                        {"x-mock-retry-after", "1"}},
                       kChat);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "3");
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  auto attempts = attemptsFor(mock, "ra");
  ASSERT_EQ(attempts.size(), 3u);
  for (size_t i = 1; i < attempts.size(); ++i) {
    const int64_t gap =
        attempts[i]["received_us"].get<int64_t>() - attempts[i - 1]["received_us"].get<int64_t>();
    EXPECT_GE(gap, 1'000'000) << "attempt " << i << " came " << gap << " us after the previous";
  }
  EXPECT_GE(took, milliseconds(2000));
  EXPECT_EQ(sluice.metric("sluice_retries_total", {{"route", "chat"}, {"cause", "429"}}), 2);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "http_429"}}), 2);
}

TEST(RetryTest, RetryAfterBeyondTheBudgetAnswersAtOnce) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "", "    retry: {attempts: 3}"));
  const auto start = std::chrono::steady_clock::now();
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-budget-ms", "2000"},
                        {"x-mock-status", "429"},
                        {"x-mock-retry-after", "30"},
                        {"x-mock-request-id", "long-wait"}},
                       kChat);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 429);
  EXPECT_LT(took, milliseconds(500));
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  EXPECT_EQ(r.headers.get("retry-after").value_or(""), "30");  // the upstream's own answer
  EXPECT_EQ(mock.ledger("long-wait").size(), 1u);
}

TEST(RetryTest, RetriesConnectionResetAndServerErrors) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "", "    retry: {attempts: 3, backoff: {base: 5ms, max: 20ms}}"));
  auto r = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-mock-fail-times", "1"}, {"x-mock-fail-key", "e5"}, {"x-mock-status", "503"}}, kChat);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(attemptsFor(mock, "e5").size(), 2u);
  EXPECT_EQ(sluice.metric("sluice_retries_total", {{"cause", "503"}}), 1);
}

TEST(RetryTest, GivesUpAfterAttemptsAndForwardsTheLastAnswer) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "    circuit_breaker: {consecutive_failures: 100}",
                                "    retry: {attempts: 3, backoff: {base: 5ms, max: 20ms}}"));
  auto r = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-mock-status", "503"}, {"x-mock-fail-key", "always"}, {"x-mock-fail-times", "100"}},
      kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "3");
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  EXPECT_EQ(attemptsFor(mock, "always").size(), 3u);
}

TEST(RetryTest, ProblemJsonIsRetriableFalseIsNotRetried) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "", "    retry: {attempts: 3, backoff: {base: 5ms}}"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-status", "503"},
                        {"x-mock-problem", "1"},
                        {"x-mock-problem-retriable", "false"},
                        {"x-mock-fail-key", "pj"},
                        {"x-mock-fail-times", "5"}},
                       kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(attemptsFor(mock, "pj").size(), 1u);
  EXPECT_NE(r.body.find("is_retriable"), std::string::npos) << "the upstream's body is forwarded";
}

TEST(RetryTest, NonIdempotentPostIsRetriedOnlyWithIdempotencyKey) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "", "    retry: {attempts: 3, idempotent: auto, backoff: {base: 5ms}}"));
  auto without = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-mock-fail-times", "1"}, {"x-mock-fail-key", "nokey"}, {"x-mock-status", "503"}}, kChat);
  EXPECT_EQ(without.status, 503);
  EXPECT_EQ(attemptsFor(mock, "nokey").size(), 1u);
  auto with = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                          {{"x-mock-fail-times", "1"},
                           {"x-mock-fail-key", "withkey"},
                           {"x-mock-status", "503"},
                           {"idempotency-key", "abc-123"}},
                          kChat);
  EXPECT_EQ(with.status, 200);
  EXPECT_EQ(attemptsFor(mock, "withkey").size(), 2u);
}

TEST(RetryTest, BodyAboveMaxBodyIsProxiedOnceNotRetried) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "", "    retry: {attempts: 3, max_body: 16B, backoff: {base: 5ms}}"));
  auto big = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-mock-fail-times", "1"}, {"x-mock-fail-key", "big"}, {"x-mock-status", "503"}},
      kChat);  // ~70 bytes > 16 B
  EXPECT_EQ(big.status, 503);
  EXPECT_EQ(attemptsFor(mock, "big").size(), 1u);
  auto small = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-mock-fail-times", "1"}, {"x-mock-fail-key", "small"}, {"x-mock-status", "503"}}, "{}");
  EXPECT_EQ(small.status, 200);
  EXPECT_EQ(attemptsFor(mock, "small").size(), 2u);
}

TEST(RetryTest, ClientLeavingDuringBackoffStopsFurtherAttempts) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "", "    retry: {attempts: 3}"));
  {
    TestConnection conn(sluice.port());
    conn.sendRequest("POST", "/v1/chat/completions",
                     {{"x-mock-fail-times", "5"},
                      {"x-mock-fail-key", "bo"},
                      {"x-mock-status", "503"},
                      {"x-mock-retry-after", "2"}},
                     kChat);
    // Wait until sluice is sleeping before the second attempt.
    ASSERT_TRUE(waitUntil([&] {
      auto all = sluice.server().exchanges();
      return all.size() == 1 && all[0].state == "backing_off";
    })) << "never backed off";
  }  // the client closes here
  EXPECT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_cancellations_total", {{"cancel_reason", "client_disconnect"}}) >=
           1;
  }));
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "client_disconnect"}}),
            1);
  // The backoff sleep is a timer of the Exchange: once the Exchange is gone,
  // nothing can start the second attempt (waiting out the Retry-After adds
  // nothing; the unit test ExchangeTest.ClientLeavesWhileBackingOff runs the
  // clock past it on simulated time).
  EXPECT_TRUE(waitUntil([&] { return sluice.server().exchanges().empty(); }));
  EXPECT_EQ(attemptsFor(mock, "bo").size(), 1u) << "an attempt was made for a client that left";
}

TEST(RetryTest, StalledUpstreamHitsTheBudgetAnd504s) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "", "    retry: {attempts: 3}"));
  const auto start = std::chrono::steady_clock::now();
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-budget-ms", "1000"},
                        {"x-mock-stall-before-headers-ms", "-1"},
                        {"x-mock-request-id", "stall"}},
                       kChat);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(nlohmann::json::parse(r.body)["cancel_reason"], "budget_exhausted");
  EXPECT_GE(took, milliseconds(900));
  EXPECT_LE(took, milliseconds(1100 + 200));
  mock.waitForEntry("stall", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "budget_exhausted"}}),
            1);
}

TEST(RetryTest, FirstByteTimeoutIsRetriedAsTimeout) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "",
                                "    first_byte_timeout: 200ms\n"
                                "    retry: {attempts: 2, backoff: {base: 5ms}}"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-stall-before-headers-ms", "5000"}, {"x-mock-request-id", "fbt"}},
                       kChat);
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(nlohmann::json::parse(r.body)["cancel_reason"], "upstream_timeout");
  EXPECT_EQ(mock.ledger("fbt").size(), 2u);
  EXPECT_EQ(sluice.metric("sluice_retries_total", {{"cause", "timeout"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "timeout"}}), 2);
}

TEST(CircuitBreakerIntegrationTest, OpensAfterConsecutiveFailuresThenProbesOnce) {
  MockLlm mock;
  SluiceUnderTest sluice(config(
      mock.url(), "    circuit_breaker: {consecutive_failures: 3, cooldown: 1s, max_cooldown: 4s}",
      "    retry: {attempts: 1}"));
  const std::vector<std::pair<std::string, std::string>> failing{
      {"x-mock-status", "503"}, {"x-mock-fail-key", "cb"}, {"x-mock-fail-times", "3"}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", failing, kChat).status,
              503);
  }
  // Open: answered by sluice at once, nothing reaches the mock.
  for (int i = 0; i < 5; ++i) {
    auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", failing, kChat);
    EXPECT_EQ(r.status, 503);
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["cancel_reason"], "circuit_open");
    EXPECT_TRUE(r.headers.has("retry-after"));
  }
  EXPECT_EQ(attemptsFor(mock, "cb").size(), 3u);
  EXPECT_EQ(sluice.metric("sluice_circuit_state", {{"upstream", "mock"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "circuit_open"}}), 5);

  // After the cooldown exactly one probe goes through; it succeeds (the fail
  // key is exhausted) and closes the circuit. Until then sluice answers
  // circuit_open itself (nothing reaches the mock), so asking until the
  // probe is let through waits for the cooldown's end, not for a time.
  TestResponse probe;
  EXPECT_TRUE(waitUntil(
      [&] {
        probe = httpRequest(sluice.port(), "POST", "/v1/chat/completions", failing, kChat);
        return probe.status != 503;
      },
      std::chrono::seconds(10), milliseconds(20)));
  EXPECT_EQ(probe.status, 200);
  EXPECT_EQ(attemptsFor(mock, "cb").size(), 4u);
  EXPECT_EQ(sluice.metric("sluice_circuit_state", {{"upstream", "mock"}}), 0);
  EXPECT_EQ(sluice.metric("sluice_circuit_transitions_total", {{"to", "open"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_circuit_transitions_total", {{"to", "half_open"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_circuit_transitions_total", {{"to", "closed"}}), 1);
}

}  // namespace
}  // namespace sluice::test
