// Spend metering end to end (DESIGN.md §4): tokens and USD split into
// delivered and leaked, checked against what mock-llm says it generated.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

std::string config(const std::string& mock_url, const std::string& route_extra = "") {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
${ROUTE_EXTRA}
pricing:
  - {model: "gpt-4o-mini*", input: 0.15, output: 0.60}
)",
                    {{"MOCK_URL", mock_url}, {"ROUTE_EXTRA", route_extra}});
}

const std::string kStream =
    R"({"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]})";

double tokens(SluiceUnderTest& s, const char* kind, const char* disposition) {
  return s.metric(
      "sluice_tokens_total",
      {{"route", "chat"}, {"model", "gpt-4o-mini*"}, {"kind", kind}, {"disposition", disposition}});
}

void waitForMetric(const std::function<bool()>& pred) { waitUntil(pred, std::chrono::seconds(5)); }

TEST(SpendTest, CompletedStreamIsAllDeliveredAtTheProvidersCount) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-tokens", "20"}, {"x-mock-request-id", "full"}}, kStream);
  ASSERT_EQ(r.status, 200);
  auto e = mock.entry("full");
  EXPECT_EQ(tokens(sluice, "output", "delivered"), 20);
  EXPECT_EQ(tokens(sluice, "input", "delivered"), e["input_tokens"].get<double>());
  EXPECT_EQ(tokens(sluice, "output", "leaked"), 0);
  const double usd = sluice.metric("sluice_spend_usd_total", {{"disposition", "delivered"}});
  const double expected = (e["input_tokens"].get<double>() * 0.15 + 20 * 0.60) / 1e6;
  EXPECT_NEAR(usd, expected, 1e-12);
}

TEST(SpendTest, ARetriedErrorAnswerIsNotBilled) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "    retry: {attempts: 2, backoff: {base: 5ms}}"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-tokens", "4"},
                        {"x-mock-fail-times", "1"},
                        {"x-mock-fail-key", "billing"},
                        {"x-mock-status", "503"}},
                       kStream);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(tokens(sluice, "output", "delivered"), 4);
  EXPECT_EQ(tokens(sluice, "input", "leaked"), 0) << "a 503 is not billed by providers";
}

TEST(SpendTest, AbortBeforeTheFirstTokenLeaksTheInput) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  {
    TestConnection conn(sluice.port());
    conn.sendRequest("POST", "/v1/chat/completions",
                     {{"x-mock-stall-before-headers-ms", "5000"}, {"x-mock-request-id", "ttft"}},
                     kStream);
    mock.waitForEntry("ttft", [](const nlohmann::json&) { return true; });
  }
  waitForMetric([&] { return tokens(sluice, "input", "leaked") > 0; });
  EXPECT_EQ(tokens(sluice, "input", "leaked"), std::ceil(kStream.size() / 4.0));
  EXPECT_GT(
      sluice.metric("sluice_leaked_spend_usd_total", {{"cancel_reason", "client_disconnect"}}), 0);
}

TEST(SpendTest, FinishModeOutputIsLeaked) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "    on_client_disconnect: finish"));
  {
    TestConnection conn(sluice.port());
    conn.sendRequest(
        "POST", "/v1/chat/completions",
        {{"x-mock-tokens", "30"}, {"x-mock-token-interval-ms", "5"}, {"x-mock-request-id", "fin"}},
        kStream);
    conn.readUntil([](const TestResponse& r) { return r.body.find("tok2 ") != std::string::npos; });
  }
  waitForMetric([&] { return tokens(sluice, "output", "leaked") > 0; });
  EXPECT_EQ(tokens(sluice, "output", "leaked"), 30);  // the provider's own count, all of it
  EXPECT_EQ(tokens(sluice, "output", "delivered"), 0);
  EXPECT_GT(
      sluice.metric("sluice_leaked_spend_usd_total", {{"cancel_reason", "client_disconnect"}}), 0);
}

}  // namespace
}  // namespace sluice::test
