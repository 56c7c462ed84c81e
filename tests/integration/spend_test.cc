// Spend metering end to end (docs/design.md §4): tokens and USD split into
// delivered and leaked, checked against what mock-llm says it generated.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
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

// An HTTP/1.1 answer is booked once its client's reading is known (its
// close, or a look at its socket soon after: docs/reference/metrics.md,
// "Delivered means read"), not when the response's last byte goes out.
void waitUntilBooked(SluiceUnderTest& s) {
  EXPECT_TRUE(waitUntil([&] {
    return tokens(s, "input", "delivered") + tokens(s, "input", "leaked") > 0;
  })) << "never booked";
}

TEST(SpendTest, CompletedStreamIsAllDeliveredAtTheProvidersCount) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"x-mock-tokens", "20"}, {"x-mock-request-id", "full"}}, kStream);
  ASSERT_EQ(r.status, 200);
  auto e = mock.entry("full");
  waitUntilBooked(sluice);
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
  waitUntilBooked(sluice);
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

// ---- every spend number of a request agrees -------------------------------------

/** A temporary directory for one test's access log. */
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sluice-spend-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/** The access log's single line, once it was written. */
nlohmann::json onlyLogLine(const std::string& path) {
  std::string text;
  const bool written = waitUntil([&] {
    std::ifstream in(path);
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
    return !text.empty() && text.back() == '\n';
  });
  EXPECT_TRUE(written) << "no access log line in " << path;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  return written ? nlohmann::json::parse(text.substr(0, text.find('\n'))) : nlohmann::json();
}

/**
 * One request went through `s`: its token and USD counters, by disposition,
 * the leaked USD by cancel_reason and its access log line all tell the same
 * story, priced at gpt-4o-mini's rates.
 */
void expectSpendAgrees(SluiceUnderTest& s, const nlohmann::json& line) {
  const auto tokens = [&](const char* kind, const char* disposition) {
    return s.metric("sluice_tokens_total", {{"kind", kind}, {"disposition", disposition}});
  };
  const double in_delivered = tokens("input", "delivered");
  const double in_leaked = tokens("input", "leaked");
  const double out_delivered = tokens("output", "delivered");
  const double out_leaked = tokens("output", "leaked");
  const double usd_delivered = s.metric("sluice_spend_usd_total", {{"disposition", "delivered"}});
  const double usd_leaked = s.metric("sluice_spend_usd_total", {{"disposition", "leaked"}});
  const double leaked_by_reason = s.metric("sluice_leaked_spend_usd_total", {});

  EXPECT_NEAR(usd_delivered, (in_delivered * 0.15 + out_delivered * 0.60) / 1e6, 1e-12);
  EXPECT_NEAR(usd_leaked, (in_leaked * 0.15 + out_leaked * 0.60) / 1e6, 1e-12);
  EXPECT_NEAR(leaked_by_reason, usd_leaked, 1e-12)
      << "sluice_leaked_spend_usd_total against sluice_spend_usd_total{disposition=leaked}";
  EXPECT_EQ(line["input_tokens"].get<double>(), in_delivered + in_leaked) << line.dump();
  EXPECT_EQ(line["output_tokens"].get<double>(), out_delivered + out_leaked) << line.dump();
  EXPECT_NEAR(line["spend_usd"].get<double>(), usd_delivered + usd_leaked, 1e-12) << line.dump();
  EXPECT_NEAR(line["leaked_usd"].get<double>(), usd_leaked, 1e-12) << line.dump();
}

// A connect-refused attempt never reached the upstream: it bills nothing.
// The fallback's answer is the whole bill, as the provider (the mock) counts it.
TEST(SpendTest, ConnectRefusedThenFallbackBillsOnlyTheFallbackAndEveryCountAgrees) {
  MockLlm mock;
  TempDir dir;
  const std::string log = dir.path() + "/access.log";
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
access_log: {path: ${LOG}, format: json}
upstreams:
  - name: dead
    url: http://127.0.0.1:1
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: dead
    fallback: [{upstream: mock}]
    retry: {attempts: 2, backoff: {base: 0s, max: 0s}}
pricing:
  - {model: "gpt-4o-mini*", input: 0.15, output: 0.60}
)",
                                    {{"MOCK_URL", mock.url()}, {"LOG", log}}));
  const TestResponse r =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                  {{"x-mock-tokens", "4"}, {"x-mock-request-id", "spilled"}}, kStream);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "connect_error"}}), 1);
  const nlohmann::json billed = mock.entry("spilled");
  const double input = billed["input_tokens"].get<double>();
  const nlohmann::json line = onlyLogLine(log);
  expectSpendAgrees(sluice, line);
  EXPECT_EQ(line["attempts"], 2);
  EXPECT_EQ(line["retry_causes"], nlohmann::json::parse(R"(["connect_error"])"));
  EXPECT_EQ(line["input_tokens"].get<double>(), input);
  EXPECT_EQ(line["output_tokens"], 4);
  EXPECT_NEAR(line["spend_usd"].get<double>(), (input * 0.15 + 4 * 0.60) / 1e6, 1e-12)
      << "the provider's bill, nothing for the refused connection";
  EXPECT_EQ(line["leaked_usd"], 0);
  EXPECT_EQ(tokens(sluice, "input", "leaked"), 0);
  EXPECT_EQ(sluice.metric("sluice_spend_usd_total", {{"disposition", "leaked"}}), 0);
}

// A leak by client disconnect: the input the upstream was working on, booked
// once, the same in every metric and the log.
TEST(SpendTest, ALeakByClientDisconnectAgreesEverywhere) {
  MockLlm mock;
  TempDir dir;
  const std::string log = dir.path() + "/access.log";
  SluiceUnderTest sluice(config(mock.url()) +
                         substitute("access_log: {path: ${LOG}, format: json}\n", {{"LOG", log}}));
  {
    TestConnection conn(sluice.port());
    conn.sendRequest("POST", "/v1/chat/completions",
                     {{"x-mock-stall-before-headers-ms", "5000"}, {"x-mock-request-id", "gone"}},
                     kStream);
    mock.waitForEntry("gone", [](const nlohmann::json&) { return true; });
  }
  const nlohmann::json line = onlyLogLine(log);
  EXPECT_EQ(line["cancel_reason"], "client_disconnect");
  expectSpendAgrees(sluice, line);
  const double input = std::ceil(kStream.size() / 4.0);
  EXPECT_EQ(line["input_tokens"].get<double>(), input);
  EXPECT_NEAR(line["leaked_usd"].get<double>(), input * 0.15 / 1e6, 1e-12);
  EXPECT_NEAR(
      sluice.metric("sluice_leaked_spend_usd_total", {{"cancel_reason", "client_disconnect"}}),
      input * 0.15 / 1e6, 1e-12);
}

}  // namespace
}  // namespace sluice::test
