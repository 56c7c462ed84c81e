// End-to-end behaviour of the core proxy: real sluice_core (in-process, port
// 0), real mock-llm (child process, port 0), real sockets. Facts about the
// upstream side are asserted through mock-llm's ledger, never through
// sluice's own word.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

int64_t nowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string baseConfig(const std::string& mock_url, const std::string& route_extra = "") {
  return substitute(R"(
version: 1
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
    headers: {x-upstream-key: "s3cret-key"}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [POST]}
    upstream: mock
${ROUTE_EXTRA}
  - name: models
    match: {path_prefix: /v1/models, methods: [GET]}
    upstream: mock
  - name: echo
    match: {path_prefix: /echo}
    upstream: mock
)",
                    {{"MOCK_URL", mock_url}, {"ROUTE_EXTRA", route_extra}});
}

std::string chatBody(bool stream, bool include_usage = true) {
  nlohmann::json j{{"model", "gpt-4o-mini"},
                   {"messages", {{{"role", "user"}, {"content", "hello"}}}}};
  if (stream) {
    j["stream"] = true;
    if (include_usage) j["stream_options"] = {{"include_usage", true}};
  }
  return j.dump();
}

/** The content deltas of an OpenAI chat SSE body, in order. */
std::vector<std::string> sseContents(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      out.push_back("[DONE]");
      continue;
    }
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("choices") && !j["choices"].empty() && j["choices"][0].contains("delta") &&
        j["choices"][0]["delta"].contains("content")) {
      out.push_back(j["choices"][0]["delta"]["content"].get<std::string>());
    }
    if (j.contains("usage") && !j["usage"].is_null()) out.push_back("usage");
  }
  return out;
}

size_t countTokens(const std::string& body) {
  size_t n = 0;
  for (size_t pos = 0; (pos = body.find("\"content\":\"tok", pos)) != std::string::npos; ++pos) ++n;
  return n;
}

class ProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock_ = std::make_unique<MockLlm>();
    ASSERT_NE(mock_->port(), 0);
    sluice_ = std::make_unique<SluiceUnderTest>(baseConfig(mock_->url()));
  }
  std::unique_ptr<MockLlm> mock_;
  std::unique_ptr<SluiceUnderTest> sluice_;
};

TEST_F(ProxyTest, GetRoundTrip) {
  auto r = httpRequest(sluice_->port(), "GET", "/v1/models");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "1");
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_TRUE(j.contains("data"));
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "models"}, {"code", "200"}}), 1);
}

TEST_F(ProxyTest, PostChatJsonCarriesUsage) {
  auto r =
      httpRequest(sluice_->port(), "POST", "/v1/chat/completions",
                  {{"content-type", "application/json"}, {"x-mock-tokens", "7"}}, chatBody(false));
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 7);
  EXPECT_EQ(j["object"], "chat.completion");
}

TEST_F(ProxyTest, RewritesHeadersForTheUpstream) {
  auto r = httpRequest(sluice_->port(), "POST", "/echo/headers?q=1",
                       {{"connection", "keep-alive, x-drop-me"},
                        {"x-drop-me", "1"},
                        {"keep-alive", "timeout=5"},
                        {"te", "trailers"},
                        {"x-forwarded-for", "203.0.113.9"},
                        {"x-sluice-attempts", "99"},
                        {"x_sluice_route", "forged"},
                        {"x-custom", "kept"}},
                       "payload");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  const auto& h = j["headers"];
  EXPECT_EQ(j["path"], "/echo/headers?q=1");
  EXPECT_EQ(j["body"], "payload");
  EXPECT_EQ(h["host"], "127.0.0.1:" + std::to_string(mock_->port()));
  EXPECT_EQ(h["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
  EXPECT_EQ(h["x-forwarded-proto"], "http");
  EXPECT_EQ(h["x-upstream-key"], "s3cret-key");
  EXPECT_EQ(h["x-custom"], "kept");
  EXPECT_FALSE(h.contains("x-drop-me"));
  EXPECT_FALSE(h.contains("keep-alive"));
  EXPECT_FALSE(h.contains("te"));
  EXPECT_FALSE(h.contains("x-sluice-attempts"));
  EXPECT_FALSE(h.contains("x_sluice_route")) << "the underscore spelling is sluice's too";
  EXPECT_EQ(h["content-length"], "7");
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "1");
}

TEST_F(ProxyTest, NoRouteIsProblemJson404) {
  auto r = httpRequest(sluice_->port(), "GET", "/nowhere");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["type"], "urn:sluice:problem:no-route");
  EXPECT_EQ(j["status"], 404);
  // Method mismatch is no match either (chat is POST only).
  EXPECT_EQ(httpRequest(sluice_->port(), "GET", "/v1/chat/completions").status, 404);
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "none"}, {"code", "404"}}), 2);
}

TEST_F(ProxyTest, MalformedRequestIs400AndCloses) {
  TestConnection conn(sluice_->port());
  conn.send("THIS IS NOT HTTP\r\n\r\n");
  auto r = conn.readResponse();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
  EXPECT_TRUE(conn.waitForClose(milliseconds(2000)));
  // The proxy is fine afterwards.
  EXPECT_EQ(httpRequest(sluice_->port(), "GET", "/v1/models").status, 200);
}

TEST_F(ProxyTest, OversizedHeadersAre431) {
  TestConnection conn(sluice_->port());
  conn.sendRequest("GET", "/v1/models", {{"x-big", std::string(70 * 1024, 'a')}});
  auto r = conn.readResponse();
  EXPECT_EQ(r.status, 431);
  EXPECT_TRUE(conn.waitForClose(milliseconds(2000)));
}

TEST_F(ProxyTest, BothContentLengthAndChunkedIs400) {
  TestConnection conn(sluice_->port());
  conn.send(
      "POST /echo/x HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n");
  auto r = conn.readResponse();
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(conn.waitForClose(milliseconds(2000)));
  EXPECT_EQ(mock_->ledger().size(), 0u);
}

TEST_F(ProxyTest, BadBudgetHeaderIs400) {
  for (const char* bad : {"abc", "-5", "0", "1.5", ""}) {
    auto r = httpRequest(sluice_->port(), "GET", "/v1/models", {{"x-budget-ms", bad}});
    EXPECT_EQ(r.status, 400) << "budget '" << bad << "'";
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["type"], "urn:sluice:problem:invalid-budget");
  }
  EXPECT_EQ(mock_->ledger().size(), 0u);
}

TEST_F(ProxyTest, ChunkedRequestBodyIsForwarded) {
  TestConnection conn(sluice_->port());
  conn.send(
      "POST /echo/chunked HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  auto r = conn.readResponse();
  ASSERT_EQ(r.status, 200);
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["body"], "hello world");
  EXPECT_EQ(j["headers"]["content-length"], "11");
  EXPECT_FALSE(j["headers"].contains("transfer-encoding"));
}

TEST_F(ProxyTest, SseStreamsTokenForToken) {
  const std::vector<std::pair<std::string, std::string>> headers{
      {"content-type", "application/json"}, {"x-mock-tokens", "25"}};
  auto via = httpRequest(sluice_->port(), "POST", "/v1/chat/completions", headers, chatBody(true));
  auto direct = httpRequest(mock_->port(), "POST", "/v1/chat/completions", headers, chatBody(true));
  ASSERT_EQ(via.status, 200);
  EXPECT_EQ(via.headers.get("content-type").value_or(""),
            direct.headers.get("content-type").value_or("?"));
  EXPECT_EQ(via.headers.get("transfer-encoding").value_or(""), "chunked");
  const auto a = sseContents(via.body);
  const auto b = sseContents(direct.body);
  EXPECT_EQ(a, b);
  ASSERT_GE(a.size(), 27u);  // 25 tokens, usage, [DONE]
  EXPECT_EQ(a.front(), "tok0 ");
  EXPECT_EQ(a.back(), "[DONE]");
  EXPECT_EQ(via.body.size(), direct.body.size());
}

TEST_F(ProxyTest, StreamsArriveIncrementally) {
  // With 40 ms between tokens, the first token must reach the client long
  // before the stream ends: sluice must not buffer the response.
  TestConnection conn(sluice_->port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-mock-tokens", "20"},
                    {"x-mock-token-interval-ms", "40"},
                    {"x-mock-request-id", "incremental"}},
                   chatBody(true));
  conn.readUntil([](const TestResponse& r) { return countTokens(r.body) >= 1; });
  auto e = mock_->entry("incremental");
  EXPECT_FALSE(e["completed"].get<bool>()) << "the first token arrived only after the stream ended";
  auto r = conn.readResponse();
  EXPECT_EQ(countTokens(r.body), 20u);
}

TEST_F(ProxyTest, KeepAliveReusesOneUpstreamConnection) {
  TestConnection conn(sluice_->port());
  for (int i = 0; i < 5; ++i) {
    conn.sendRequest("GET", "/echo/ka", {{"x-mock-request-id", "ka-" + std::to_string(i)}});
    auto r = conn.readResponse();
    ASSERT_EQ(r.status, 200);
  }
  std::set<int64_t> upstream_connections;
  for (int i = 0; i < 5; ++i) {
    upstream_connections.insert(
        mock_->entry("ka-" + std::to_string(i))["connection_id"].get<int64_t>());
  }
  EXPECT_EQ(upstream_connections.size(), 1u);
}

TEST_F(ProxyTest, PipelinedRequestsAreAnsweredInOrder) {
  TestConnection conn(sluice_->port());
  std::string batch;
  for (int i = 0; i < 4; ++i) {
    batch += "GET /echo/p" + std::to_string(i) + " HTTP/1.1\r\nhost: t\r\n";
    // The first is slow: a reordering proxy would answer the others first.
    if (i == 0) batch += "x-mock-stall-before-headers-ms: 100\r\n";
    batch += "\r\n";
  }
  conn.send(batch);
  for (int i = 0; i < 4; ++i) {
    auto r = conn.readResponse();
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(nlohmann::json::parse(r.body)["path"], "/echo/p" + std::to_string(i));
  }
}

TEST_F(ProxyTest, ClientDisconnectMidStreamClosesUpstreamAtOnce) {
  TestConnection conn(sluice_->port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-mock-tokens", "2000"},
                    {"x-mock-token-interval-ms", "5"},
                    {"x-mock-request-id", "abort-mid"}},
                   chatBody(true));
  const auto& partial =
      conn.readUntil([](const TestResponse& r) { return countTokens(r.body) >= 5; });
  const size_t seen = countTokens(partial.body);
  ASSERT_GE(seen, 5u);
  const int64_t closed_at = nowMicros();
  conn.close();

  auto e = mock_->waitForEntry(
      "abort-mid", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  ASSERT_TRUE(e["peer_closed"].get<bool>());
  const int64_t propagation_us = e["peer_closed_us"].get<int64_t>() - closed_at;
  EXPECT_LT(propagation_us, 50'000) << "upstream saw the close " << propagation_us << " us later";
  EXPECT_FALSE(e["completed"].get<bool>());
  // Tokens emitted after the client's last read: what was in flight, no more.
  EXPECT_LE(e["tokens_emitted"].get<int64_t>() - static_cast<int64_t>(seen), 5);
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total",
                            {{"route", "chat"}, {"cancel_reason", "client_disconnect"}}),
            1);
  EXPECT_GE(sluice_->metric("sluice_cancel_propagation_seconds_count", {{"upstream", "mock"}}), 1);
  // The teardown happens inside one callback, where now() is the event's
  // time: the histogram must read the clock itself (Clock::preciseNow).
  EXPECT_GT(sluice_->metric("sluice_cancel_propagation_seconds_sum", {{"upstream", "mock"}}), 0);
  EXPECT_EQ(sluice_->metric("sluice_active_requests", {{"route", "chat"}}), 0);
}

TEST_F(ProxyTest, ClientResetWhileWaitingForFirstByteClosesUpstream) {
  TestConnection conn(sluice_->port());
  conn.sendRequest(
      "POST", "/v1/chat/completions",
      {{"x-mock-stall-before-headers-ms", "10000"}, {"x-mock-request-id", "abort-ttft"}},
      chatBody(true));
  mock_->waitForEntry("abort-ttft", [](const nlohmann::json&) { return true; });
  const int64_t closed_at = nowMicros();
  conn.reset();
  auto e = mock_->waitForEntry(
      "abort-ttft", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_LT(e["peer_closed_us"].get<int64_t>() - closed_at, 50'000);
  EXPECT_EQ(e["tokens_emitted"], 0);
}

TEST_F(ProxyTest, ClientGoneWhileSendingBodyNeverReachesUpstream) {
  {
    TestConnection conn(sluice_->port());
    conn.send(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n{\"model\":");
    // Wait until sluice has the exchange (it is queued, reading the body).
    waitUntil([&] { return !sluice_->server().exchanges().empty(); });
    ASSERT_EQ(sluice_->server().exchanges().size(), 1u);
    EXPECT_EQ(sluice_->server().exchanges()[0].state, "queued");
  }
  waitUntil([&] {
    return sluice_->metric("sluice_cancellations_total",
                           {{"cancel_reason", "client_disconnect"}}) >= 1;
  });
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total", {{"cancel_reason", "client_disconnect"}}),
            1);
  EXPECT_EQ(mock_->ledger().size(), 0u);
}

TEST_F(ProxyTest, SlowReaderPausesUpstreamWithBoundedBuffer) {
  TestConnection conn(sluice_->port(), /*receive_buffer=*/4096);
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-mock-tokens", "60000"}, {"x-mock-request-id", "slow"}}, chatBody(true));
  conn.readUntil([](const TestResponse& r) { return r.status != 0; });
  // The client now stops reading. sluice must stop reading the upstream.
  ExchangeSnapshot snap;
  ASSERT_TRUE(waitUntil([&] {
    auto all = sluice_->server().exchanges();
    if (all.size() != 1 || !all[0].upstream_paused) return false;
    snap = all[0];
    return true;
  })) << "upstream never paused";
  EXPECT_TRUE(snap.upstream_paused);
  // High watermark (64 KiB) plus at most one upstream read on top.
  EXPECT_LE(snap.downstream_buffered_bytes, 64u * 1024 + 64u * 1024);
  // Give the stream time; the buffer must stay bounded while the client sleeps.
  std::this_thread::sleep_for(milliseconds(200));
  auto again = sluice_->server().exchanges();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_LE(again[0].downstream_buffered_bytes, 64u * 1024 + 64u * 1024);
  // Then the client reads everything: the stream completes intact.
  auto r = conn.readResponse(std::chrono::seconds(60));
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(countTokens(r.body), 60000u);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
}

TEST_F(ProxyTest, BudgetExpiryWhileWaitingIs504AndClosesUpstream) {
  const auto start = std::chrono::steady_clock::now();
  auto r = httpRequest(sluice_->port(), "POST", "/v1/chat/completions",
                       {{"x-budget-ms", "300"},
                        {"x-mock-stall-before-headers-ms", "10000"},
                        {"x-mock-request-id", "budget"}},
                       chatBody(false));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 504);
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["cancel_reason"], "budget_exhausted");
  EXPECT_EQ(r.headers.get("x-should-retry").value_or(""), "false");
  EXPECT_GE(took, milliseconds(270));
  EXPECT_LE(took, milliseconds(330 + 200));
  auto e = mock_->waitForEntry(
      "budget", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_TRUE(e["peer_closed"].get<bool>());
  auto echoed = mock_->entry("budget")["request_headers"];
  // propagate: the upstream saw the remaining budget, not the client's value.
  ASSERT_TRUE(echoed.contains("x-budget-ms"));
  EXPECT_LE(std::stoi(echoed["x-budget-ms"].get<std::string>()), 300);
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total", {{"cancel_reason", "budget_exhausted"}}),
            1);
}

TEST_F(ProxyTest, UpstreamResetMidStreamAbortsTheClientResponse) {
  TestConnection conn(sluice_->port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-mock-tokens", "50"}, {"x-mock-reset-after-tokens", "3"}}, chatBody(true));
  auto r = conn.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete) << "a truncated stream must not look complete to the client";
  EXPECT_TRUE(conn.peerClosed());
  EXPECT_EQ(sluice_->metric("sluice_upstream_attempts_total",
                            {{"upstream", "mock"}, {"result", "reset"}}),
            1);
}

TEST_F(ProxyTest, GarbageFromUpstreamIs502) {
  auto r = httpRequest(sluice_->port(), "GET", "/echo/garbage", {{"x-mock-garbage", "1"}});
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "urn:sluice:problem:upstream-protocol-error");
  EXPECT_EQ(httpRequest(sluice_->port(), "GET", "/echo/fine").status, 200);
}

TEST_F(ProxyTest, UpstreamDownIs502ConnectError) {
  const uint16_t dead_port = mock_->port();
  mock_.reset();  // nothing listens there any more
  auto r = httpRequest(sluice_->port(), "GET", "/v1/models");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "urn:sluice:problem:upstream-connect-error");
  // connect_error is in the default retry `on` list: 3 attempts, all refused.
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "3");
  EXPECT_EQ(sluice_->metric("sluice_upstream_attempts_total",
                            {{"upstream", "mock"}, {"result", "connect_error"}}),
            3);
  (void)dead_port;
}

TEST_F(ProxyTest, AdminEndpoints) {
  const uint16_t admin = sluice_->adminPort();
  EXPECT_EQ(httpRequest(admin, "GET", "/healthz").status, 200);
  EXPECT_EQ(httpRequest(admin, "GET", "/ready").status, 200);
  auto cfg = httpRequest(admin, "GET", "/config");
  ASSERT_EQ(cfg.status, 200);
  EXPECT_EQ(cfg.body.find("s3cret-key"), std::string::npos) << "secret leaked in /config";
  EXPECT_NE(cfg.body.find("<redacted>"), std::string::npos);
  httpRequest(sluice_->port(), "GET", "/v1/models");
  auto metrics = httpRequest(admin, "GET", "/metrics").body;
  for (const char* family :
       {"sluice_requests_total", "sluice_request_duration_seconds", "sluice_active_requests",
        "sluice_cancellations_total", "sluice_cancel_propagation_seconds"}) {
    EXPECT_NE(metrics.find(std::string("# TYPE ") + family), std::string::npos) << family;
  }
  auto ex = httpRequest(admin, "GET", "/exchanges");
  EXPECT_EQ(ex.status, 200);
  EXPECT_TRUE(nlohmann::json::parse(ex.body)["exchanges"].is_array());
}

TEST_F(ProxyTest, ExchangesShowsInFlightState) {
  TestConnection conn(sluice_->port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-mock-stall-before-headers-ms", "5000"}, {"x-mock-request-id", "show"}},
                   chatBody(false));
  mock_->waitForEntry("show", [](const nlohmann::json&) { return true; });
  auto body = httpRequest(sluice_->adminPort(), "GET", "/exchanges").body;
  auto list = nlohmann::json::parse(body)["exchanges"];
  ASSERT_EQ(list.size(), 1u) << body;
  EXPECT_EQ(list[0]["state"], "running");
  EXPECT_EQ(list[0]["route"], "chat");
  EXPECT_EQ(list[0]["attempts"], 1);
}

TEST_F(ProxyTest, StopCancelsInFlightExchangesWithDraining) {
  TestConnection a(sluice_->port());
  TestConnection b(sluice_->port());
  for (auto* conn : {&a, &b}) {
    conn->sendRequest("POST", "/v1/chat/completions", {{"x-mock-stall-before-headers-ms", "10000"}},
                      chatBody(false));
  }
  waitUntil([&] { return mock_->ledger().size() >= 2; });
  sluice_->server().stop();
  // stop() is the hard stop: the 503 may or may not be flushed before the close.
  auto r = a.readResponse(milliseconds(2000));
  EXPECT_TRUE(r.status == 503 || a.peerClosed()) << r.status;
  const std::string text = sluice_->server().metrics().serialize();
  EXPECT_NE(text.find("sluice_cancellations_total{cancel_reason=\"draining\",route=\"chat\","
                      "upstream=\"mock\"} 2"),
            std::string::npos)
      << text;
}

// on_client_disconnect: finish — the attempt runs to completion, discarded.
TEST(ProxyFinishModeTest, FinishModeLetsTheAttemptComplete) {
  MockLlm mock;
  SluiceUnderTest sluice(
      baseConfig(mock.url(), "    on_client_disconnect: finish\n    finish_grace: 10s"));
  TestConnection conn(sluice.port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"x-mock-tokens", "30"},
                    {"x-mock-token-interval-ms", "10"},
                    {"x-mock-request-id", "finish"}},
                   chatBody(true));
  conn.readUntil([](const TestResponse& r) { return countTokens(r.body) >= 3; });
  conn.close();
  auto e = mock.waitForEntry("finish", [](const nlohmann::json& e) {
    return e["completed"].get<bool>() || e["peer_closed"].get<bool>();
  });
  EXPECT_TRUE(e["completed"].get<bool>());
  EXPECT_FALSE(e["peer_closed"].get<bool>());
  EXPECT_EQ(e["tokens_emitted"], 30);
  waitUntil([&] {
    return sluice.metric("sluice_requests_total", {{"route", "chat"}, {"code", "499"}}) >= 1;
  });
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "chat"}, {"code", "499"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "client_disconnect"}}),
            1);
}

}  // namespace
}  // namespace sluice::test
