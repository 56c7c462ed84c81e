// The `limits` section against real clients: each limit configured small,
// the protocol's own error comes back (431 / 413 / 408 problem+json, HTTP/2
// REFUSED_STREAM and GOAWAY), the connection is closed where HTTP/1.1 needs
// it, sluice_downstream_rejections_total counts it — and a fine request on
// another connection (or another stream) is never hurt. Timeouts are small
// in the config; tests wait for the fact (a close, a status), never for a
// time, and assert no wall-clock thresholds.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

/** One worker (so per-worker limits are exact), the mock upstream, and `limits`. */
std::string config(const std::string& mock_url, const std::string& limits) {
  return substitute(R"(
version: 1
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [POST]}
    upstream: mock
    retry: {attempts: 1}
  - name: models
    match: {path_prefix: /v1/models, methods: [GET]}
    upstream: mock
  - name: echo
    match: {path_prefix: /echo}
    upstream: mock
limits:
${LIMITS}
)",
                    {{"MOCK_URL", mock_url}, {"LIMITS", limits}});
}

std::string chatBody() {
  return R"({"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]})";
}

/** The problem+json slug of a response sluice made itself ("" if it is not one). */
std::string slugOf(const std::string& content_type, const std::string& body) {
  if (content_type != "application/problem+json") return "";
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) return "";
  const std::string type = j.value("type", "");
  const std::string prefix = "urn:sluice:problem:";
  return type.rfind(prefix, 0) == 0 ? type.substr(prefix.size()) : "";
}

std::string slugOf(const TestResponse& r) {
  return slugOf(std::string(r.headers.get("content-type").value_or("")), r.body);
}

class LimitsTest : public ::testing::Test {
 protected:
  void start(const std::string& limits) {
    mock_ = std::make_unique<MockLlm>();
    sluice_ = std::make_unique<SluiceUnderTest>(config(mock_->url(), limits));
  }
  double rejections(const std::string& reason) {
    return sluice_->metric("sluice_downstream_rejections_total", {{"reason", reason}});
  }
  /** A fine request on a fresh connection: the limits never hurt it. */
  void expectFineRequest() {
    const TestResponse r = httpRequest(sluice_->port(), "GET", "/v1/models");
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.complete);
  }

  std::unique_ptr<MockLlm> mock_;
  std::unique_ptr<SluiceUnderTest> sluice_;
};

// --- sizes ------------------------------------------------------------------------------

TEST_F(LimitsTest, HeaderBytesAboveTheLimitAre431AndTheConnectionCloses) {
  start("  max_header_bytes: 1KiB");
  TestConnection conn(sluice_->port());
  conn.sendRequest("GET", "/v1/models", {{"x-big", std::string(1500, 'a')}});
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(slugOf(r), "header-too-large");
  EXPECT_TRUE(conn.waitForClose(std::chrono::seconds(10)));
  EXPECT_EQ(rejections("header_too_large"), 1);
  // Just under the limit is fine.
  TestConnection ok(sluice_->port());
  ok.sendRequest("GET", "/v1/models", {{"x-big", std::string(800, 'a')}});
  EXPECT_EQ(ok.readResponse().status, 200);
  EXPECT_EQ(mock_->ledger().size(), 1u);
}

TEST_F(LimitsTest, HeaderCountAboveTheLimitIs431) {
  start("  max_headers: 5");
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 6; ++i) many.emplace_back("x-n-" + std::to_string(i), "1");
  TestConnection conn(sluice_->port());
  conn.sendRequest("GET", "/v1/models", many);  // + host and content-length: above 5
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(slugOf(r), "header-too-large");
  EXPECT_TRUE(conn.waitForClose(std::chrono::seconds(10)));
  EXPECT_EQ(rejections("header_too_large"), 1);
  EXPECT_EQ(mock_->ledger().size(), 0u);
}

TEST_F(LimitsTest, BodyAboveMaxBodyIs413AndNothingGoesUpstream) {
  start("  max_body: 1KiB");
  TestConnection conn(sluice_->port());
  conn.sendRequest("POST", "/echo/big", {{"content-type", "text/plain"}}, std::string(2000, 'x'));
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(slugOf(r), "body-too-large");
  EXPECT_TRUE(conn.waitForClose(std::chrono::seconds(10)));
  EXPECT_EQ(rejections("body_too_large"), 1);
  EXPECT_EQ(mock_->ledger().size(), 0u);
  // A body within the limit is proxied.
  const TestResponse fine =
      httpRequest(sluice_->port(), "POST", "/echo/small", {}, std::string(1000, 'x'));
  EXPECT_EQ(fine.status, 200);
}

// --- slow clients (HTTP/1.1) -------------------------------------------------------------

TEST_F(LimitsTest, SlowLorisGets408ByHeaderReadTimeoutThoughBytesKeepArriving) {
  start("  header_read_timeout: 300ms");
  TestConnection loris(sluice_->port());
  loris.send("GET /v1/models HTTP/1.1\r\nhost: sluice\r\nx-slow: ");
  // One header byte per 50 ms, forever: the head never completes. Reading is
  // how the client paces itself; it stops as soon as sluice answers.
  size_t sent = 0;
  while (sent < 400 && !loris.peerClosed() && loris.current().status == 0 &&
         loris.completed().empty()) {
    loris.send("a");
    ++sent;
    loris.readUntil([](const TestResponse& r) { return r.status != 0; }, milliseconds(50));
    if (sent == 2) expectFineRequest();  // meanwhile, another client is served
  }
  const TestResponse r = loris.readResponse();
  EXPECT_EQ(r.status, 408);
  EXPECT_EQ(slugOf(r), "request-timeout");
  EXPECT_EQ(nlohmann::json::parse(r.body)["cancel_reason"], "client_disconnect");
  EXPECT_GT(sent, 1u) << "bytes kept arriving: the limit is on the whole head, not per byte";
  EXPECT_TRUE(loris.waitForClose(std::chrono::seconds(10)));
  EXPECT_EQ(rejections("header_timeout"), 1);
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "none"}, {"code", "408"}}), 1);
  EXPECT_EQ(mock_->ledger().size(), 1u);  // only the fine request
}

TEST_F(LimitsTest, ASilentConnectionIsClosedWithoutAnAnswer) {
  start("  header_read_timeout: 200ms");
  TestConnection silent(sluice_->port());
  EXPECT_TRUE(silent.waitForClose(std::chrono::seconds(10)));
  EXPECT_TRUE(silent.raw().empty()) << silent.raw();
  EXPECT_EQ(rejections("header_timeout"), 1);
  expectFineRequest();
}

TEST_F(LimitsTest, AnUnfinishedH2cPrefaceIsClosedByHeaderReadTimeout) {
  start("  header_read_timeout: 200ms");
  TestConnection sniffed(sluice_->port());
  sniffed.send("PRI * HTTP/2.0\r\n");  // a prefix of the preface: still undecided
  EXPECT_TRUE(sniffed.waitForClose(std::chrono::seconds(10)));
  EXPECT_TRUE(sniffed.raw().empty()) << sniffed.raw();
  EXPECT_EQ(rejections("header_timeout"), 1);
}

TEST_F(LimitsTest, AStalledRequestBodyGets408AndNothingGoesUpstream) {
  start("  body_read_timeout: 300ms");
  TestConnection conn(sluice_->port());
  conn.send(
      "POST /v1/chat/completions HTTP/1.1\r\nhost: sluice\r\n"
      "content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\":");
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 408);
  EXPECT_EQ(slugOf(r), "request-timeout");
  EXPECT_EQ(nlohmann::json::parse(r.body)["cancel_reason"], "client_disconnect");
  EXPECT_EQ(r.headers.get("connection").value_or(""), "close");
  EXPECT_TRUE(conn.waitForClose(std::chrono::seconds(10)));
  EXPECT_EQ(rejections("body_timeout"), 1);
  // Counted on its route with the status the client saw.
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "chat"}, {"code", "408"}}), 1);
  EXPECT_TRUE(waitUntil([&] { return sluice_->server().exchanges().empty(); }));
  EXPECT_EQ(mock_->ledger().size(), 0u);
  expectFineRequest();
}

TEST_F(LimitsTest, AnIdleKeepAliveConnectionIsClosedQuietly) {
  start("  idle_timeout: 300ms");
  TestConnection conn(sluice_->port());
  conn.sendRequest("GET", "/v1/models");
  EXPECT_EQ(conn.readResponse().status, 200);
  EXPECT_TRUE(conn.waitForClose(std::chrono::seconds(10)));
  EXPECT_EQ(conn.completed().size(), 1u) << "no 408 or other answer on an idle close";
  EXPECT_EQ(rejections("idle_timeout"), 1);
  EXPECT_EQ(rejections("header_timeout"), 0);
}

TEST_F(LimitsTest, ALongResponseIsNotCutByTheReadTimeouts) {
  // Every read timeout far below the response's duration: none applies while
  // sluice is answering (the Exchange's budget owns that time).
  start("  header_read_timeout: 300ms\n  body_read_timeout: 100ms\n  idle_timeout: 100ms");
  TestConnection conn(sluice_->port());
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"content-type", "application/json"},
                    {"x-mock-tokens", "10"},
                    {"x-mock-token-interval-ms", "100"}},
                   chatBody());
  const TestResponse r = conn.readResponse(std::chrono::seconds(30));
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(rejections("header_timeout") + rejections("body_timeout"), 0);
}

// --- connections per worker --------------------------------------------------------------

TEST_F(LimitsTest, ConnectionsAboveThePerWorkerCapAreClosedAtOnce) {
  start("  max_connections_per_worker: 3");
  std::vector<std::unique_ptr<TestConnection>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<TestConnection>(sluice_->port()));
    held.back()->sendRequest("GET", "/v1/models");
    ASSERT_EQ(held.back()->readResponse().status, 200) << i;  // accepted and kept alive
  }
  TestConnection fourth(sluice_->port());
  EXPECT_TRUE(fourth.waitForClose(std::chrono::seconds(10)));
  EXPECT_TRUE(fourth.raw().empty());
  EXPECT_EQ(rejections("max_connections"), 1);
  // The connections inside the cap are untouched.
  held[1]->sendRequest("GET", "/v1/models");
  EXPECT_EQ(held[1]->readResponse().status, 200);

  // One leaves: a new client is served once sluice has seen it go.
  held[0]->close();
  EXPECT_TRUE(waitUntil([&] {
    TestConnection next(sluice_->port());
    next.sendRequest("GET", "/v1/models");
    return next.readResponse(std::chrono::seconds(5)).status == 200;
  }));
}

// --- HTTP/2 --------------------------------------------------------------------------------

TEST_F(LimitsTest, Http2HeaderListAboveTheLimitIs431OnThatStreamOnly) {
  start("  max_header_bytes: 1KiB");
  H2Connection conn(sluice_->port());
  const int32_t big = conn.submit("GET", "/v1/models", {{"x-big", std::string(1500, 'a')}});
  const int32_t fine = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(big));
  ASSERT_TRUE(conn.waitForStream(fine));
  const H2Response& r = conn.response(big);
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(slugOf(std::string(r.headers.get("content-type").value_or("")), r.body),
            "header-too-large");
  EXPECT_EQ(conn.response(fine).status, 200);
  EXPECT_FALSE(conn.peerClosed());
  EXPECT_EQ(rejections("header_too_large"), 1);
}

TEST_F(LimitsTest, Http2StreamsAboveTheConfiguredCapAreRefused) {
  start("  http2_max_concurrent_streams: 2");
  H2Connection conn(sluice_->port());
  // Sent before the client has seen sluice's SETTINGS: all three go out.
  std::vector<int32_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(conn.submit(
        "POST", "/v1/chat/completions",
        {{"x-mock-stall-before-headers-ms", "-1"}, {"x-mock-request-id", "s-" + std::to_string(i)}},
        chatBody()));
  }
  ASSERT_TRUE(conn.runUntil([&] { return conn.response(ids[2]).closed; }));
  EXPECT_TRUE(conn.response(ids[2]).reset_by_peer);
  EXPECT_EQ(conn.response(ids[2]).error_code, static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
  EXPECT_FALSE(conn.response(ids[0]).closed);
  EXPECT_FALSE(conn.response(ids[1]).closed);
  EXPECT_TRUE(waitUntil([&] { return mock_->ledger().size() == 2u; }));
  conn.drop();
}

TEST_F(LimitsTest, Http2BodyAboveMaxBodyIs413) {
  start("  max_body: 1KiB");
  H2Connection conn(sluice_->port());
  const int32_t id = conn.submit("POST", "/echo/big", {}, std::string(2000, 'x'));
  ASSERT_TRUE(conn.waitForStream(id));
  EXPECT_EQ(conn.response(id).status, 413);
  const int32_t next = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(next));
  EXPECT_EQ(conn.response(next).status, 200);
  EXPECT_EQ(rejections("body_too_large"), 1);
}

TEST_F(LimitsTest, Http2StalledBodyGets408OnThatStreamOnly) {
  start("  body_read_timeout: 300ms");
  H2Connection conn(sluice_->port());
  const int32_t stalled = conn.submitStalled("/v1/chat/completions", "{\"model\":", 100);
  ASSERT_TRUE(conn.waitForStream(stalled));
  const H2Response& r = conn.response(stalled);
  EXPECT_EQ(r.status, 408);
  EXPECT_EQ(slugOf(std::string(r.headers.get("content-type").value_or("")), r.body),
            "request-timeout");
  EXPECT_EQ(rejections("body_timeout"), 1);
  // The connection and its other streams go on.
  const int32_t fine = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(fine));
  EXPECT_EQ(conn.response(fine).status, 200);
  EXPECT_FALSE(conn.peerClosed());
  EXPECT_EQ(mock_->ledger().size(), 1u);
}

TEST_F(LimitsTest, Http2StalledBodiesEachGet408AtTheirOwnDeadline) {
  // One timer per connection watches every stream's body: the earlier
  // stream's deadline must not cut the later one, nor the later one delay it.
  start("  body_read_timeout: 600ms");
  H2Connection conn(sluice_->port());
  const auto opened = std::chrono::steady_clock::now();
  const int32_t first = conn.submitStalled("/v1/chat/completions", "{\"model\":", 100);
  conn.runUntil([] { return false; }, milliseconds(300));
  const int32_t second = conn.submitStalled("/v1/chat/completions", "{\"model\":", 100);
  ASSERT_TRUE(conn.waitForStream(first));
  EXPECT_EQ(conn.response(first).status, 408);
  EXPECT_GE(std::chrono::steady_clock::now() - opened, milliseconds(600));
  EXPECT_FALSE(conn.response(second).headers_received);  // its deadline is ~300 ms later
  ASSERT_TRUE(conn.waitForStream(second));
  EXPECT_EQ(conn.response(second).status, 408);
  EXPECT_GE(std::chrono::steady_clock::now() - opened, milliseconds(900));
  EXPECT_EQ(rejections("body_timeout"), 2);
  const int32_t fine = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(fine));
  EXPECT_EQ(conn.response(fine).status, 200);
  EXPECT_EQ(mock_->ledger().size(), 1u);
}

TEST_F(LimitsTest, AnIdleHttp2ConnectionGetsGoawayNoErrorAndCloses) {
  start("  idle_timeout: 300ms");
  H2Connection conn(sluice_->port());
  const int32_t id = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(id));
  EXPECT_EQ(conn.response(id).status, 200);
  EXPECT_TRUE(conn.waitForClose());
  EXPECT_TRUE(conn.goawayReceived());
  EXPECT_EQ(conn.goawayErrorCode(), static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  EXPECT_EQ(conn.goawayLastStreamId(), id);  // nothing was lost
  EXPECT_EQ(rejections("idle_timeout"), 1);
}

// --- clients that stop reading (send_timeout) ------------------------------------------------

/** A streaming answer far larger than any socket buffer: it only ends if the client reads. */
std::vector<std::pair<std::string, std::string>> endlessStream() {
  return {{"content-type", "application/json"}, {"x-mock-tokens", "10000000"}};
}

TEST_F(LimitsTest, AnHttp11ClientThatStopsReadingIsClosedBySendTimeout) {
  start("  send_timeout: 300ms");
  // A small receive buffer, and the test never reads: sluice's output backs up.
  TestConnection stalled(sluice_->port(), /*receive_buffer=*/4096);
  stalled.sendRequest("POST", "/v1/chat/completions", endlessStream(), chatBody());
  ASSERT_TRUE(waitUntil([&] { return rejections("send_timeout") == 1; }, std::chrono::seconds(30),
                        milliseconds(20)));
  // The exchange is cancelled as client_stalled and freed, its upstream released.
  EXPECT_TRUE(waitUntil([&] { return sluice_->server().exchanges().empty(); }));
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total",
                            {{"route", "chat"}, {"cancel_reason", "client_stalled"}}),
            1);
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total",
                            {{"route", "chat"}, {"cancel_reason", "client_disconnect"}}),
            0);
  // What reached the client's socket is all it gets: the response never completes.
  EXPECT_TRUE(stalled.waitForClose(std::chrono::seconds(30)));
  EXPECT_FALSE(stalled.current().complete);
  EXPECT_TRUE(stalled.completed().empty());
  expectFineRequest();
}

TEST_F(LimitsTest, AReadingClientIsNeverCutBySendTimeout) {
  // Every byte the client accepts restarts the wait: a long response to a
  // client that keeps reading (slowly: tokens every 100 ms) is never cut.
  start("  send_timeout: 100ms");
  TestConnection conn(sluice_->port(), /*receive_buffer=*/4096);
  conn.sendRequest("POST", "/v1/chat/completions",
                   {{"content-type", "application/json"},
                    {"x-mock-tokens", "5"},
                    {"x-mock-token-interval-ms", "150"}},
                   chatBody());
  const TestResponse r = conn.readResponse(std::chrono::seconds(30));
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(rejections("send_timeout"), 0);
}

TEST_F(LimitsTest, AnHttp2ClientThatStopsReadingIsClosedBySendTimeout) {
  start("  send_timeout: 300ms");
  H2ClientOptions options;
  options.receive_buffer = 4096;
  options.initial_window = 1 << 30;  // flow control never holds sluice back: the socket does
  options.connection_window = 1 << 30;
  H2Connection conn(sluice_->port(), options);
  const int32_t a = conn.submit("POST", "/v1/chat/completions", endlessStream(), chatBody());
  const int32_t b = conn.submit("POST", "/v1/chat/completions", endlessStream(), chatBody());
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  // Never read: both streams' frames back up behind the client's full socket.
  ASSERT_TRUE(waitUntil([&] { return rejections("send_timeout") == 1; }, std::chrono::seconds(30),
                        milliseconds(20)));
  // Every stream of the connection is cancelled as client_stalled and freed.
  EXPECT_TRUE(waitUntil([&] { return sluice_->server().exchanges().empty(); }));
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total",
                            {{"route", "chat"}, {"cancel_reason", "client_stalled"}}),
            2);
  EXPECT_TRUE(conn.waitForClose(std::chrono::seconds(30)));
  EXPECT_FALSE(conn.response(a).complete);
  EXPECT_FALSE(conn.response(b).complete);
  expectFineRequest();
}

// --- HPACK bombs ---------------------------------------------------------------------------

/**
 * A header block whose fields are all one large value: the client's HPACK
 * encoder puts it in the dynamic table once and then sends one-byte
 * references to it, so the decoded list is `copies` times the entry.
 */
std::vector<std::pair<std::string, std::string>> hpackBomb(size_t copies) {
  return std::vector<std::pair<std::string, std::string>>(copies,
                                                          {"x-bomb", std::string(2000, 'b')});
}

TEST_F(LimitsTest, Http2HpackBombIsCutEarlyAndARepeatOffenderGetsGoaway) {
  start("  max_header_bytes: 1KiB");
  H2Connection conn(sluice_->port());
  // Just above the limit: decoded to the end and answered 431.
  const int32_t above = conn.submit("GET", "/v1/models", {{"x-big", std::string(1500, 'a')}});
  ASSERT_TRUE(conn.waitForStream(above));
  EXPECT_EQ(conn.response(above).status, 431);
  // ~400 KB decoded from ~2 KB on the wire: no longer decoded once far above
  // the limit; the stream is reset with no answer, the connection goes on.
  const int32_t bomb = conn.submit("GET", "/v1/models", hpackBomb(200));
  ASSERT_GT(bomb, 0);
  ASSERT_TRUE(conn.waitForStream(bomb));
  EXPECT_EQ(conn.response(bomb).status, 0);
  EXPECT_TRUE(conn.response(bomb).reset_by_peer);
  EXPECT_FALSE(conn.peerClosed());
  const int32_t fine = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(fine));
  EXPECT_EQ(conn.response(fine).status, 200);
  EXPECT_EQ(rejections("header_too_large"), 2);
  // A connection that keeps doing it is ended.
  std::vector<int32_t> more;
  for (int i = 0; i < 4; ++i) more.push_back(conn.submit("GET", "/v1/models", hpackBomb(200)));
  EXPECT_TRUE(conn.waitForClose());
  EXPECT_TRUE(conn.goawayReceived());
  EXPECT_EQ(conn.goawayErrorCode(), static_cast<uint32_t>(NGHTTP2_ENHANCE_YOUR_CALM));
  EXPECT_LT(conn.goawayLastStreamId(), more.back());
  EXPECT_EQ(rejections("header_too_large"), 5);  // 431 + the bombs up to the GOAWAY
  EXPECT_EQ(mock_->ledger().size(), 1u);         // only the fine request
  expectFineRequest();
}

}  // namespace
}  // namespace sluice::test
