// Errors as the SDKs read them (DESIGN.md §3 "No retry storms", §8), end to
// end on the real proxy against mock-llm:
//   - every problem sluice makes carries the SDK-shaped `error` member;
//   - `x-should-retry: false` (and is_retriable false) once sluice made more
//     than one attempt — connect errors included — and when the wait of a
//     circuit_open / rate_limited does not fit the remaining budget;
//   - a started SSE response that sluice cuts (budget, idle timeout, upstream
//     failure) first gets one final error event in the route's dialect, then
//     still ends truncated (HTTP/1.1: no terminating chunk; HTTP/2: RST_STREAM);
//   - the quota key is read after the upstream's `headers:` replaced the
//     client's dummy key.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"

namespace sluice::test {
namespace {

using nlohmann::json;

const char* kChat = R"({"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]})";
const char* kChatStream =
    R"({"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]})";
const char* kResponsesStream = R"({"model":"gpt-4o-mini","stream":true,"input":"hi"})";
const char* kMessagesStream = R"({"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,)"
                              R"("messages":[{"role":"user","content":"hi"}]})";

std::string config(const std::string& upstream_url, const std::string& upstream_extra = "",
                   const std::string& route_extra = "") {
  return substitute(
      R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${URL}
${UPSTREAM_EXTRA}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: mock
${ROUTE_EXTRA}
)",
      {{"URL", upstream_url}, {"UPSTREAM_EXTRA", upstream_extra}, {"ROUTE_EXTRA", route_extra}});
}

/** The URL of a port nothing listens on (a mock-llm that was started and stopped). */
std::string deadUpstreamUrl() {
  MockLlm gone;
  return gone.url();
}

json problemOf(const TestResponse& r) {
  EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
  // The Anthropic SDKs' err.requestID reads `request-id`: it is the access log's id.
  EXPECT_TRUE(r.headers.get("request-id").has_value()) << "sluice's own answer lacks request-id";
  EXPECT_EQ(r.headers.get("request-id"), r.headers.get("x-request-id"));
  json j = json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.body;
  return j;
}

/** The body's `error` member is what the openai SDK shows: it must name the slug and reason. */
void expectErrorMember(const json& problem, const std::string& slug,
                       const std::optional<std::string>& cancel_reason) {
  ASSERT_TRUE(problem.contains("error")) << problem.dump();
  const json& e = problem["error"];
  EXPECT_EQ(e["type"], slug) << problem.dump();
  EXPECT_EQ(e["message"].get<std::string>().rfind("sluice " + slug + ": ", 0), 0u)
      << problem.dump();
  if (cancel_reason) {
    EXPECT_EQ(e["code"], *cancel_reason) << problem.dump();
  } else {
    EXPECT_TRUE(e["code"].is_null()) << problem.dump();
  }
  // The RFC 9457 members stay.
  EXPECT_EQ(problem["type"], "urn:sluice:problem:" + slug);
}

// --- the `error` member and x-should-retry ------------------------------------------------

TEST(SdkErrorsTest, InvalidBudgetNamesItselfInTheErrorMember) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  auto r =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-budget-ms", "soon"}}, kChat);
  EXPECT_EQ(r.status, 400);
  const json j = problemOf(r);
  expectErrorMember(j, "invalid-budget", std::nullopt);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("x-budget-ms"), std::string::npos);
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
}

TEST(SdkErrorsTest, BudgetExhaustedCarriesItsCancelReasonAsTheErrorCode) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  auto r =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                  {{"x-budget-ms", "200"}, {"x-mock-stall-before-headers-ms", "10000"}}, kChat);
  EXPECT_EQ(r.status, 504);
  const json j = problemOf(r);
  expectErrorMember(j, "budget-exhausted", "budget_exhausted");
  EXPECT_NE(j["detail"].get<std::string>().find("200 ms"), std::string::npos) << j.dump();
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
}

// The retry storm of issue 14: three connect attempts answered 502 with
// is_retriable true, and an SDK retrying twice made nine.
TEST(SdkErrorsTest, ConnectErrorAfterRetriesTellsTheClientNotToRetry) {
  SluiceUnderTest sluice(config(deadUpstreamUrl(),
                                "    circuit_breaker: {consecutive_failures: 100}",
                                "    retry: {attempts: 3, backoff: {base: 1ms, max: 5ms}}"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "3");
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  const json j = problemOf(r);
  EXPECT_EQ(j["is_retriable"], false) << "is_retriable agrees with x-should-retry";
  expectErrorMember(j, "upstream-connect-error", std::nullopt);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "connect_error"}}), 3);
}

TEST(SdkErrorsTest, ConnectErrorOfASingleAttemptStaysRetriable) {
  SluiceUnderTest sluice(config(deadUpstreamUrl(), "", "    retry: {attempts: 1}"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "1");
  EXPECT_FALSE(r.headers.has("x-should-retry")) << "one attempt: a client retry may help";
  EXPECT_EQ(problemOf(r)["is_retriable"], true);
}

/** Trips the circuit with one 503 (consecutive_failures: 1, no retries). */
void tripCircuit(SluiceUnderTest& sluice) {
  auto r =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-mock-status", "503"}}, kChat);
  ASSERT_EQ(r.status, 503);
  ASSERT_EQ(sluice.metric("sluice_circuit_state", {{"upstream", "mock"}}), 1);
}

// A 120 s cooldown made the Anthropic SDK sleep 2 x 120 s in front of a
// circuit that sluice would not have let it through anyway within its budget.
TEST(SdkErrorsTest, CircuitOpenLongerThanTheBudgetSaysDoNotRetry) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(),
             "    circuit_breaker: {consecutive_failures: 1, cooldown: 120s, max_cooldown: 120s}",
             "    retry: {attempts: 1}\n    budget: {default: 30s}"));
  tripCircuit(sluice);
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  EXPECT_EQ(r.headers.get("retry-after").value_or(""), "120");
  const json j = problemOf(r);
  EXPECT_EQ(j["is_retriable"], false);
  expectErrorMember(j, "circuit-open", "circuit_open");
}

// A wait of 60 s or more is never handed to an SDK as retriable, even when it
// fits the budget: Retry-After 119 with a 120 s budget made one SDK call take
// 239.5 s (each SDK retry starts a new budget).
TEST(SdkErrorsTest, CircuitOpenWithinTheBudgetButBeyondTheSdkCapSaysDoNotRetry) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(),
             "    circuit_breaker: {consecutive_failures: 1, cooldown: 120s, max_cooldown: 120s}",
             "    retry: {attempts: 1}\n    budget: {default: 180s, max: 300s}"));
  tripCircuit(sluice);
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  EXPECT_EQ(r.headers.get("retry-after").value_or(""), "120") << "the wait is still said";
  const json j = problemOf(r);
  EXPECT_EQ(j["is_retriable"], false);
  expectErrorMember(j, "circuit-open", "circuit_open");
}

TEST(SdkErrorsTest, CircuitOpenShorterThanTheBudgetStaysRetriable) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(),
                                "    circuit_breaker: {consecutive_failures: 1, cooldown: 2s}",
                                "    retry: {attempts: 1}\n    budget: {default: 30s}"));
  tripCircuit(sluice);
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat);
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(r.headers.has("x-should-retry"));
  EXPECT_EQ(problemOf(r)["is_retriable"], true);
  EXPECT_EQ(r.headers.get("retry-after").value_or(""), "2");
}

TEST(SdkErrorsTest, RateLimitedBeyondTheBudgetSaysDoNotRetry) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "    rate_limit: {key: none, reserve: 0}", "    retry: {attempts: 1}"));
  const std::vector<std::pair<std::string, std::string>> quota = {
      {"x-mock-quota", "1/20000"}, {"x-mock-quota-key", "rl"}, {"x-mock-quota-style", "openai"}};
  ASSERT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat).status, 200);
  auto headers = quota;
  headers.emplace_back("x-budget-ms", "1000");
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", headers, kChat);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  const json j = problemOf(r);
  EXPECT_EQ(j["is_retriable"], false);
  expectErrorMember(j, "rate-limited", "rate_limited");
}

// --- the final SSE error event before a cut -----------------------------------------------

/** The SSE error event at the end of `body` (its last event), parsed; null if there is none. */
json lastDataOf(const std::string& body) {
  const auto end = body.rfind("\n\n");
  if (end == std::string::npos || end + 2 != body.size()) return nullptr;
  const auto start = body.rfind("\n\n", end - 1);
  const std::string event = body.substr(start == std::string::npos ? 0 : start + 2,
                                        end - (start == std::string::npos ? 0 : start + 2));
  const auto data = event.find("data: ");
  if (data == std::string::npos) return nullptr;
  return json::parse(event.substr(data + 6), nullptr, false);
}

TEST(SdkErrorsTest, BudgetCutOfAChatStreamEndsWithAnOpenAiErrorEvent) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  TestConnection conn(sluice.port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-budget-ms", "300"},
                    {"x-mock-tokens", "10"},
                    {"x-mock-stall-after-tokens", "3"},
                    {"x-mock-stall-ms", "-1"}},
                   kChatStream);
  auto r = conn.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete) << "the stream still ends truncated";
  EXPECT_TRUE(conn.peerClosed());
  EXPECT_NE(r.body.find("tok2 "), std::string::npos) << r.body;
  const json event = lastDataOf(r.body);
  ASSERT_TRUE(event.is_object()) << r.body;
  expectErrorMember({{"error", event["error"]}, {"type", "urn:sluice:problem:budget-exhausted"}},
                    "budget-exhausted", "budget_exhausted");
  EXPECT_EQ(r.body.find("event: error"), std::string::npos) << "OpenAI streams have no event names";
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "budget_exhausted"}}),
            1);
}

TEST(SdkErrorsTest, IdleTimeoutOfAMessagesStreamEndsWithAnAnthropicErrorEvent) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "", "    idle_timeout: 200ms"));
  TestConnection conn(sluice.port());
  conn.sendRequest(
      "POST", "/v1/messages",
      {{"x-mock-tokens", "10"}, {"x-mock-stall-after-tokens", "2"}, {"x-mock-stall-ms", "-1"}},
      kMessagesStream);
  auto r = conn.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete);
  const auto at = r.body.rfind("event: error\ndata: ");
  ASSERT_NE(at, std::string::npos) << r.body;
  const json event = lastDataOf(r.body);
  ASSERT_TRUE(event.is_object()) << r.body;
  EXPECT_EQ(event["type"], "error");
  EXPECT_EQ(event["error"]["type"], "upstream-timeout");
  EXPECT_EQ(event["error"]["message"].get<std::string>().rfind("sluice upstream-timeout: ", 0), 0u);
}

TEST(SdkErrorsTest, UpstreamResetOfAResponsesStreamEndsWithAnOpenAiErrorEvent) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  TestConnection conn(sluice.port());
  conn.sendRequest("POST", "/v1/responses",
                   {{"x-mock-tokens", "50"}, {"x-mock-reset-after-tokens", "3"}}, kResponsesStream);
  auto r = conn.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.body.find("response.output_text.delta"), std::string::npos) << r.body;
  const json event = lastDataOf(r.body);
  ASSERT_TRUE(event.is_object()) << r.body;
  EXPECT_EQ(event["error"]["type"], "upstream-reset");
  EXPECT_TRUE(event["error"]["code"].is_null());
}

// The event must not wait on a client that is not reading: with the stream's
// flow-control window shut (bytes already waiting for it), the cut is the
// plain RST_STREAM at once — not an event queued behind the window.
TEST(SdkErrorsTest, StreamWhoseWindowIsShutGetsNoEventAndAnImmediateReset) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  H2ClientOptions options;
  options.manual_window = true;
  options.initial_window = 16 * 1024;
  H2Connection conn(sluice.port(), options);
  // Paced tokens: each SSE event arrives whole, so only the window can stop the event.
  const int32_t id = conn.submit(
      "POST", "/v1/chat/completions",
      {{"x-budget-ms", "1500"}, {"x-mock-tokens", "100000"}, {"x-mock-token-interval-ms", "1"}},
      kChatStream);
  conn.hold(id);  // the window stays shut once used; the socket keeps being read
  const auto budgetCuts = [&] {
    return sluice.metric("sluice_cancellations_total", {{"cancel_reason", "budget_exhausted"}});
  };
  ASSERT_TRUE(conn.runUntil([&] {
    const auto all = sluice.server().exchanges();
    return all.size() == 1 && all[0].downstream_buffered_bytes > 0;
  })) << "no byte ever waited for the window";
  ASSERT_EQ(budgetCuts(), 0)
      << "the budget ran out before the window shut: the test proves nothing";
  ASSERT_TRUE(conn.waitForStream(id, std::chrono::seconds(10)))
      << "the cut waited for a window the client keeps shut";
  const H2Response& r = conn.response(id);
  EXPECT_TRUE(r.reset_by_peer);
  EXPECT_EQ(r.error_code, static_cast<uint32_t>(NGHTTP2_CANCEL));
  EXPECT_EQ(r.body.find("sluice budget-exhausted"), std::string::npos);
  EXPECT_EQ(budgetCuts(), 1);
}

TEST(SdkErrorsTest, Http2BudgetCutSendsTheEventThenRstStreamCancel) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  H2Connection conn(sluice.port());
  const int32_t id = conn.submit("POST", "/v1/chat/completions",
                                 {{"x-budget-ms", "300"},
                                  {"x-mock-tokens", "10"},
                                  {"x-mock-stall-after-tokens", "3"},
                                  {"x-mock-stall-ms", "-1"}},
                                 kChatStream);
  ASSERT_TRUE(conn.waitForStream(id));
  const H2Response& r = conn.response(id);
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete);
  EXPECT_TRUE(r.reset_by_peer);
  EXPECT_EQ(r.error_code, static_cast<uint32_t>(NGHTTP2_CANCEL));
  const json event = lastDataOf(r.body);
  ASSERT_TRUE(event.is_object()) << r.body;
  EXPECT_EQ(event["error"]["type"], "budget-exhausted");
  EXPECT_EQ(event["error"]["code"], "budget_exhausted");
}

// --- the quota key after key injection ----------------------------------------------------

// Agents send dummy keys; sluice puts the real one in. One real key is one
// provider quota: keying on the client's header split it per dummy key, and
// each new dummy key's first request went through to a provider 429.
TEST(SdkErrorsTest, QuotaKeyIsTheHeaderAsSentUpstream) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(),
                                "    headers: {authorization: \"Bearer sk-real\"}\n"
                                "    rate_limit: {key: \"header:authorization\", reserve: 0}",
                                "    retry: {attempts: 1}"));
  const auto ask = [&](const std::string& dummy_key, const std::string& id) {
    return httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                       {{"authorization", "Bearer " + dummy_key},
                        {"x-mock-quota", "1/20000"},
                        {"x-mock-quota-key", "real"},
                        {"x-mock-quota-style", "openai"},
                        {"x-budget-ms", "1000"},
                        {"x-mock-request-id", id}},
                       kChat);
  };
  ASSERT_EQ(ask("dummy-a", "a").status, 200);
  EXPECT_EQ(mock.entry("a")["request_headers"]["authorization"], "Bearer sk-real");
  // Another agent, another dummy key, the same real quota: held by sluice.
  auto r = ask("dummy-b", "b");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(problemOf(r)["cancel_reason"], "rate_limited");
  EXPECT_EQ(mock.ledger("b").size(), 0u)
      << "the provider must not see it: " << mock.ledger().dump();
}

}  // namespace
}  // namespace sluice::test
