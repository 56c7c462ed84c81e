// Quota throttling end to end (DESIGN.md §3): sluice reads the provider's
// rate-limit headers and holds requests before the provider would answer
// 429. mock-llm enforces a real fixed-window quota; its ledger shows whether
// any request was refused.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

std::string config(const std::string& mock_url, bool throttle) {
  return substitute(
      R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
${RATE_LIMIT}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
    budget: {default: 15s}
    retry: {attempts: 1}
)",
      {{"MOCK_URL", mock_url},
       {"RATE_LIMIT", throttle ? "    rate_limit: {key: none, reserve: 0, max_queue: 100}" : ""}});
}

const char* kChat = R"({"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]})";

struct AgentsResult {
  int ok = 0;
  int rate_limited = 0;
  int other = 0;
  std::string refusals;  // status and body of every answer but a 200, for the failure message
};

/**
 * 12 concurrent agents, one request each, against a 3-requests-per-2-s quota.
 * The clients wait longer than the route's 15 s budget: sluice always answers.
 */
AgentsResult runAgents(uint16_t port, const std::string& quota_key) {
  std::atomic<int> ok{0}, limited{0}, other{0};
  std::mutex mu;
  std::string refusals;
  std::vector<std::thread> agents;
  for (int i = 0; i < 12; ++i) {
    agents.emplace_back([&, i] {
      auto r = httpRequest(port, "POST", "/v1/chat/completions",
                           {{"x-mock-quota", "3/2000"},
                            {"x-mock-quota-key", quota_key},
                            {"x-mock-quota-style", "openai"},
                            {"x-mock-request-id", quota_key + "-" + std::to_string(i)}},
                           kChat, std::chrono::seconds(30));
      if (r.status == 200) {
        ++ok;
        return;
      }
      ++(r.status == 429 ? limited : other);
      std::lock_guard<std::mutex> lock(mu);
      refusals += std::to_string(r.status) + " " + r.body + "\n";
    });
  }
  for (auto& t : agents) t.join();
  return {ok.load(), limited.load(), other.load(), refusals};
}

TEST(ThrottleTest, HoldsRequestsSoTheProviderNeverSays429) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), true));
  const auto result = runAgents(sluice.port(), "on");
  EXPECT_EQ(result.ok, 12) << "429s: " << result.rate_limited << " other: " << result.other << "\n"
                           << result.refusals;
  EXPECT_EQ(mock.answeredWith(429), 0) << mock.ledger().dump();
  EXPECT_EQ(mock.ledger().size(), 12u);
  // Some had to wait for a quota reset.
  EXPECT_GE(sluice.metric("sluice_throttle_wait_seconds_count", {{"upstream", "mock"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_throttle_queue_depth", {{"upstream", "mock"}}), 0);
}

TEST(ThrottleTest, WithoutThrottlingTheSameLoadHitsProvider429s) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), false));
  const auto result = runAgents(sluice.port(), "off");
  EXPECT_GT(mock.answeredWith(429), 0);
  EXPECT_GT(result.rate_limited, 0);
}

TEST(ThrottleTest, WaitBeyondTheBudgetIs429RateLimitedAtOnce) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), true));
  // Spend the quota (3 per 10 s), then ask with a budget shorter than the reset.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                          {{"x-mock-quota", "3/10000"}, {"x-mock-quota-key", "spent"}}, kChat)
                  .status,
              200);
  }
  const auto start = std::chrono::steady_clock::now();
  auto r = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-mock-quota", "3/10000"}, {"x-mock-quota-key", "spent"}, {"x-budget-ms", "1000"}}, kChat);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));
  EXPECT_EQ(r.status, 429);
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_EQ(j["cancel_reason"], "rate_limited");
  EXPECT_TRUE(r.headers.has("retry-after"));
  EXPECT_TRUE(r.headers.has("retry-after-ms"));
  EXPECT_EQ(mock.ledger().size(), 3u) << "the refused request must not reach the provider";
}

TEST(ThrottleTest, QueuedRequestWhoseClientLeavesIsNeverSent) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), true));
  for (int i = 0; i < 3; ++i) {
    httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                {{"x-mock-quota", "3/3000"}, {"x-mock-quota-key", "leave"}}, kChat);
  }
  {
    TestConnection conn(sluice.port());
    conn.sendRequest(
        "POST", "/v1/chat/completions",
        {{"x-mock-quota", "3/3000"}, {"x-mock-quota-key", "leave"}, {"x-mock-request-id", "left"}},
        kChat);
    ASSERT_TRUE(waitUntil([&] {
      return sluice.metric("sluice_throttle_queue_depth", {{"upstream", "mock"}}) >= 1;
    })) << "never queued";
  }  // the client leaves while queued
  EXPECT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_throttle_queue_depth", {{"upstream", "mock"}}) == 0;
  }));
  // Past the reset: a request on the same quota queues behind it and is
  // served once the quota refills, which is when an abandoned ticket would
  // have gone.
  auto after = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-mock-quota", "3/3000"}, {"x-mock-quota-key", "leave"}, {"x-mock-request-id", "after"}},
      kChat);
  EXPECT_EQ(after.status, 200);
  EXPECT_EQ(mock.ledger("after").size(), 1u);
  EXPECT_EQ(mock.ledger("left").size(), 0u);
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "client_disconnect"}}),
            1);
}

}  // namespace
}  // namespace sluice::test
