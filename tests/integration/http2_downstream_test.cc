// HTTP/2 on the client side of sluice: h2c with prior knowledge and HTTP/1.1
// on the same plain port, h2 and HTTP/1.1 over TLS by ALPN, one Exchange per
// stream, per-stream cancellation (RST_STREAM) and per-connection
// cancellation (GOAWAY, drop), flow control as backpressure, the protocol's
// own limits, drain, and certificate reload. Real clients (curl, nghttp,
// h2load, and tests/support/h2_client over nghttp2) against the real proxy
// and a real mock-llm; upstream facts come from the mock's ledger.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "config/loader.h"
#include "proxy/downstream/protocol_detector.h"
#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;
using Headers = std::vector<std::pair<std::string, std::string>>;

std::string config(const std::string& mock_url, const std::string& listen = "127.0.0.1:0") {
  return substitute(R"(
version: 1
listen: ${LISTEN}
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [POST]}
    upstream: mock
  - name: models
    match: {path_prefix: /v1/models, methods: [GET]}
    upstream: mock
  - name: echo
    match: {path_prefix: /echo}
    upstream: mock
)",
                    {{"MOCK_URL", mock_url}, {"LISTEN", listen}});
}

std::string tlsListen(const std::string& cert, const std::string& key) {
  return "[{address: 127.0.0.1:0, tls: {cert: " + cert + ", key: " + key + "}}]";
}

std::string chatBody() {
  return R"({"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},)"
         R"("messages":[{"role":"user","content":"hello"}]})";
}

size_t countTokens(const std::string& body) {
  size_t n = 0;
  for (size_t pos = 0; (pos = body.find("\"content\":\"tok", pos)) != std::string::npos; ++pos) ++n;
  return n;
}

/** Self-signed certificates for 127.0.0.1 made with the openssl CLI, removed afterwards. */
class TestCerts {
 public:
  TestCerts() {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-h2-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
  }
  ~TestCerts() { std::filesystem::remove_all(dir_); }
  /** Makes NAME.pem / NAME.key with subject CN=`cn`. */
  void make(const std::string& name, const std::string& cn) {
    auto [code, out] = runCommand(
        "cd " + dir_.string() +
        " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " +
        name + ".key -out " + name + ".pem -days 2 -subj /CN=" + cn +
        " -addext subjectAltName=DNS:localhost,IP:127.0.0.1");
    ASSERT_EQ(code, 0) << out;
  }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
};

/** Polls `pred` until it holds or `timeout` passes (a fact, never a fixed sleep). */
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return waitUntil(pred, timeout);
}

/** Ledger entries by id. */
std::map<std::string, nlohmann::json> ledgerById(MockLlm& mock) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& e : mock.ledger()) out[e["id"].get<std::string>()] = e;
  return out;
}

class Http2DownstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock_ = std::make_unique<MockLlm>();
    ASSERT_NE(mock_->port(), 0);
    sluice_ = std::make_unique<SluiceUnderTest>(config(mock_->url()));
  }
  std::unique_ptr<MockLlm> mock_;
  std::unique_ptr<SluiceUnderTest> sluice_;
};

// --- real clients -----------------------------------------------------------------------

TEST_F(Http2DownstreamTest, CurlPriorKnowledgeAndHttp11ShareThePlainPort) {
  const std::string url = "http://127.0.0.1:" + std::to_string(sluice_->port());
  auto [code, out] = runCommand(
      "curl -sS --http2-prior-knowledge -w '\\n%{http_version} %{response_code}' "
      "-H 'content-type: application/json' -H 'x-mock-tokens: 5' -d '" +
      chatBody() + "' " + url + "/v1/chat/completions");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\n2 200"), std::string::npos) << out;
  EXPECT_EQ(countTokens(out), 5u) << out;
  EXPECT_NE(out.find("data: [DONE]"), std::string::npos) << out;

  auto [code11, out11] = runCommand("curl -sS --http1.1 -w '\\n%{http_version} %{response_code}' " +
                                    url + "/v1/models");
  ASSERT_EQ(code11, 0) << out11;
  EXPECT_NE(out11.find("\n1.1 200"), std::string::npos) << out11;
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "chat"}, {"code", "200"}}), 1);
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "models"}, {"code", "200"}}), 1);
}

TEST_F(Http2DownstreamTest, NghttpThroughSluice) {
  const std::string body_file = std::filesystem::temp_directory_path() /
                                ("sluice-h2-body-" + std::to_string(::getpid()) + ".json");
  std::ofstream(body_file) << chatBody();
  auto [code, out] = runCommand(
      "nghttp -v -H 'x-mock-tokens: 3' -H 'content-type: application/json' "
      "-d " +
      body_file + " http://127.0.0.1:" + std::to_string(sluice_->port()) + "/v1/chat/completions");
  std::filesystem::remove(body_file);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find(":status: 200"), std::string::npos) << out;
  EXPECT_NE(out.find("x-sluice-attempts: 1"), std::string::npos) << out;
  EXPECT_EQ(countTokens(out), 3u) << out;
  EXPECT_EQ(out.find("transfer-encoding"), std::string::npos) << "connection-specific field sent";
}

TEST_F(Http2DownstreamTest, H2loadThroughSluice) {
  auto [code, out] =
      runCommand("h2load -n 200 -c 2 -m 10 http://127.0.0.1:" + std::to_string(sluice_->port()) +
                 "/v1/models");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(
      out.find("requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed, 0 errored"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("status codes: 200 2xx"), std::string::npos) << out;
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "models"}, {"code", "200"}}), 200);
}

// --- one Exchange per stream ------------------------------------------------------------

TEST_F(Http2DownstreamTest, RequestHeadAndBodyReachTheUpstream) {
  H2Connection conn(sluice_->port());
  const int32_t id =
      conn.submit("POST", "/echo/h2?q=1",
                  {{"cookie", "a=1"}, {"cookie", "b=2"}, {"x-custom", "kept"}}, "hello h2");
  ASSERT_TRUE(conn.waitForStream(id));
  const H2Response& r = conn.response(id);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "1");
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/echo/h2?q=1");
  EXPECT_EQ(j["body"], "hello h2");
  EXPECT_EQ(j["headers"]["content-length"], "8");
  EXPECT_EQ(j["headers"]["cookie"], "a=1; b=2");  // crumbs joined for HTTP/1.1 (RFC 9113 §8.2.3)
  EXPECT_EQ(j["headers"]["x-custom"], "kept");
  EXPECT_EQ(j["headers"]["x-forwarded-proto"], "http");
  EXPECT_EQ(j["headers"]["host"], "127.0.0.1:" + std::to_string(mock_->port()));

  const int32_t missing = conn.submit("GET", "/nowhere");
  ASSERT_TRUE(conn.waitForStream(missing));
  EXPECT_EQ(conn.response(missing).status, 404);
  EXPECT_EQ(conn.response(missing).headers.get("content-type").value_or(""),
            "application/problem+json");
}

TEST_F(Http2DownstreamTest, HundredStreamsFiftyResetMidStreamOnOneConnection) {
  constexpr int kStreams = 100;
  constexpr int kTokens = 40;  // the kept streams: 400 ms each
  // The reset streams would run for 20 s: they are certainly still streaming
  // when the client resets them a few tokens in, however slow this host is.
  constexpr int kResetTokens = 2000;
  auto id = [](int i) { return "h2-" + std::to_string(i); };
  auto isReset = [](int i) { return i % 2 == 0; };
  // The bytes each kept stream must deliver: the mock's own answer to the
  // same request, fetched directly (timestamps aside).
  std::map<int, std::string> expected;
  for (int i = 0; i < kStreams; ++i) {
    if (isReset(i)) continue;
    auto direct = httpRequest(
        mock_->port(), "POST", "/v1/chat/completions",
        {{"x-mock-tokens", std::to_string(kTokens)}, {"x-mock-request-id", id(i)}}, chatBody());
    ASSERT_EQ(direct.status, 200);
    expected[i] = withoutVolatileFields(direct.body);
  }
  mock_->clearLedger();

  H2Connection conn(sluice_->port());
  std::map<int, int32_t> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams[i] =
        conn.submit("POST", "/v1/chat/completions",
                    {{"x-mock-tokens", std::to_string(isReset(i) ? kResetTokens : kTokens)},
                     {"x-mock-token-interval-ms", "10"},
                     {"x-mock-request-id", id(i)}},
                    chatBody());
    ASSERT_GT(streams[i], 0);
    if (isReset(i)) conn.resetAfter(streams[i], 600);  // a few tokens in
  }
  ASSERT_TRUE(conn.runUntil(
      [&] {
        for (auto& [i, s] : streams) {
          if (!conn.response(s).closed) return false;
        }
        return true;
      },
      std::chrono::seconds(30)));

  for (int i = 0; i < kStreams; ++i) {
    const H2Response& r = conn.response(streams[i]);
    EXPECT_EQ(r.status, 200) << id(i);
    if (isReset(i)) {
      EXPECT_TRUE(r.reset_by_us) << id(i);
      EXPECT_FALSE(r.complete) << id(i);
    } else {
      EXPECT_TRUE(r.complete) << id(i);
      EXPECT_FALSE(r.reset_by_peer) << id(i);
      EXPECT_EQ(withoutVolatileFields(r.body), expected[i]) << id(i) << " not byte-exact";
    }
  }

  // The upstream saw exactly the 50 reset streams go away early; the other 50 ran to the end.
  std::map<std::string, nlohmann::json> ledger;
  ASSERT_TRUE(eventually([&] {
    ledger = ledgerById(*mock_);
    if (ledger.size() != static_cast<size_t>(kStreams)) return false;
    for (int i = 0; i < kStreams; ++i) {
      const auto& e = ledger[id(i)];
      if (!e["completed"].get<bool>() && !e["peer_closed"].get<bool>()) return false;
    }
    return true;
  })) << mock_->ledger().dump();
  for (int i = 0; i < kStreams; ++i) {
    const auto& e = ledger[id(i)];
    if (isReset(i)) {
      EXPECT_TRUE(e["peer_closed"].get<bool>()) << e.dump();
      EXPECT_FALSE(e["completed"].get<bool>()) << e.dump();
      EXPECT_LT(e["tokens_emitted"].get<int>(), kResetTokens) << e.dump();
    } else {
      EXPECT_TRUE(e["completed"].get<bool>()) << e.dump();
      EXPECT_FALSE(e["peer_closed"].get<bool>()) << e.dump();
      EXPECT_EQ(e["tokens_emitted"].get<int>(), kTokens) << e.dump();
    }
  }
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total",
                            {{"route", "chat"}, {"cancel_reason", "client_disconnect"}}),
            kStreams / 2);

  // The connection survived: a 101st request on it still works.
  const int32_t more = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(more));
  EXPECT_EQ(conn.response(more).status, 200);
  EXPECT_TRUE(conn.response(more).complete);
  EXPECT_FALSE(conn.peerClosed());
}

TEST_F(Http2DownstreamTest, ResetWhileWaitingForFirstByteCancelsOnlyThatStream) {
  H2Connection conn(sluice_->port());
  const int32_t stalled = conn.submit(
      "POST", "/v1/chat/completions",
      {{"x-mock-stall-before-headers-ms", "10000"}, {"x-mock-request-id", "stalled"}}, chatBody());
  mock_->waitForEntry("stalled", [](const nlohmann::json&) { return true; });
  conn.reset(stalled);
  const int32_t other =
      conn.submit("POST", "/v1/chat/completions",
                  {{"x-mock-tokens", "4"}, {"x-mock-request-id", "other"}}, chatBody());
  ASSERT_TRUE(conn.waitForStream(other));
  EXPECT_TRUE(conn.response(other).complete);
  EXPECT_EQ(countTokens(conn.response(other).body), 4u);
  auto e = mock_->waitForEntry(
      "stalled", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_TRUE(e["peer_closed"].get<bool>());
  EXPECT_EQ(e["tokens_emitted"], 0);
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total", {{"cancel_reason", "client_disconnect"}}),
            1);
}

TEST_F(Http2DownstreamTest, UpstreamResetMidStreamIsRstStreamInternalError) {
  H2Connection conn(sluice_->port());
  const int32_t broken =
      conn.submit("POST", "/v1/chat/completions",
                  {{"x-mock-tokens", "50"}, {"x-mock-reset-after-tokens", "3"}}, chatBody());
  ASSERT_TRUE(conn.waitForStream(broken));
  const H2Response& r = conn.response(broken);
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete) << "a truncated stream must not look complete";
  EXPECT_TRUE(r.reset_by_peer);
  EXPECT_EQ(r.error_code, static_cast<uint32_t>(NGHTTP2_INTERNAL_ERROR));
  // Only that stream: the connection carries on.
  const int32_t next = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(next));
  EXPECT_EQ(conn.response(next).status, 200);
}

TEST_F(Http2DownstreamTest, BudgetRunningOutMidStreamIsRstStreamCancel) {
  H2Connection conn(sluice_->port());
  const int32_t id = conn.submit("POST", "/v1/chat/completions",
                                 {{"x-budget-ms", "300"},
                                  {"x-mock-tokens", "100"},
                                  {"x-mock-token-interval-ms", "50"},
                                  {"x-mock-request-id", "budget"}},
                                 chatBody());
  ASSERT_TRUE(conn.waitForStream(id));
  const H2Response& r = conn.response(id);
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete);
  EXPECT_TRUE(r.reset_by_peer);
  EXPECT_EQ(r.error_code, static_cast<uint32_t>(NGHTTP2_CANCEL));
  auto e = mock_->waitForEntry(
      "budget", [](const nlohmann::json& e) { return e["peer_closed"].get<bool>(); });
  EXPECT_TRUE(e["peer_closed"].get<bool>());
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total", {{"cancel_reason", "budget_exhausted"}}),
            1);
}

// --- whole-connection cancellation --------------------------------------------------------

void openStalledStreams(H2Connection& conn, MockLlm& mock, int n, const std::string& prefix) {
  for (int i = 0; i < n; ++i) {
    conn.submit("POST", "/v1/chat/completions",
                {{"x-mock-stall-before-headers-ms", "10000"},
                 {"x-mock-request-id", prefix + std::to_string(i)}},
                chatBody());
  }
  for (int i = 0; i < n; ++i) {
    mock.waitForEntry(prefix + std::to_string(i), [](const nlohmann::json&) { return true; });
  }
}

TEST_F(Http2DownstreamTest, ClientGoawayCancelsAllItsExchanges) {
  H2Connection bystander(sluice_->port());
  const int32_t kept = bystander.submit("POST", "/v1/chat/completions",
                                        {{"x-mock-tokens", "5"},
                                         {"x-mock-token-interval-ms", "100"},
                                         {"x-mock-request-id", "bystander"}},
                                        chatBody());
  H2Connection conn(sluice_->port());
  openStalledStreams(conn, *mock_, 3, "goaway-");
  conn.goaway();
  for (int i = 0; i < 3; ++i) {
    auto e = mock_->waitForEntry("goaway-" + std::to_string(i), [](const nlohmann::json& e) {
      return e["peer_closed"].get<bool>();
    });
    EXPECT_TRUE(e["peer_closed"].get<bool>());
  }
  EXPECT_TRUE(conn.waitForClose());
  EXPECT_EQ(sluice_->metric("sluice_cancellations_total",
                            {{"route", "chat"}, {"cancel_reason", "client_disconnect"}}),
            3);
  // Another client's connection is untouched.
  ASSERT_TRUE(bystander.waitForStream(kept));
  EXPECT_TRUE(bystander.response(kept).complete);
}

TEST_F(Http2DownstreamTest, ConnectionDropCancelsAllItsExchanges) {
  H2Connection conn(sluice_->port());
  openStalledStreams(conn, *mock_, 3, "drop-");
  conn.drop();
  for (int i = 0; i < 3; ++i) {
    auto e = mock_->waitForEntry("drop-" + std::to_string(i), [](const nlohmann::json& e) {
      return e["peer_closed"].get<bool>();
    });
    EXPECT_TRUE(e["peer_closed"].get<bool>());
  }
  EXPECT_TRUE(eventually([&] {
    return sluice_->metric("sluice_cancellations_total",
                           {{"cancel_reason", "client_disconnect"}}) == 3;
  }));
  EXPECT_TRUE(eventually([&] { return sluice_->server().activeExchanges() == 0; }));
}

// --- backpressure ---------------------------------------------------------------------------

TEST_F(Http2DownstreamTest, SlowStreamPausesItsUpstreamWhileOthersFlow) {
  H2ClientOptions options;
  options.manual_window = true;
  options.initial_window = 16 * 1024;
  H2Connection conn(sluice_->port(), options);
  constexpr int kTokens = 20000;
  const int32_t slow = conn.submit(
      "POST", "/v1/chat/completions",
      {{"x-mock-tokens", std::to_string(kTokens)}, {"x-mock-request-id", "slow"}}, chatBody());
  conn.hold(slow);  // its window stays shut; the socket keeps being read
  ASSERT_TRUE(conn.runUntil([&] { return conn.response(slow).headers_received; }));

  ExchangeSnapshot snap;
  ASSERT_TRUE(conn.runUntil([&] {
    for (const auto& s : sluice_->server().exchanges()) {
      if (s.upstream_paused) {
        snap = s;
        return true;
      }
    }
    return false;
  })) << "the upstream was never paused";
  // High watermark plus at most one upstream read on top.
  EXPECT_LE(snap.downstream_buffered_bytes, 64u * 1024 + 64u * 1024);
  EXPECT_FALSE(mock_->entry("slow")["completed"].get<bool>());

  // Flow control is per stream: another stream on the same connection completes meanwhile.
  const int32_t quick =
      conn.submit("POST", "/v1/chat/completions", {{"x-mock-tokens", "5"}}, chatBody());
  ASSERT_TRUE(conn.waitForStream(quick));
  EXPECT_TRUE(conn.response(quick).complete);
  EXPECT_EQ(countTokens(conn.response(quick).body), 5u);
  for (const auto& s : sluice_->server().exchanges()) {
    EXPECT_TRUE(s.upstream_paused) << "the slow stream resumed while its window was shut";
    EXPECT_LE(s.downstream_buffered_bytes, 64u * 1024 + 64u * 1024);
  }

  // The client reads again: the stream completes intact.
  conn.release(slow);
  ASSERT_TRUE(conn.waitForStream(slow, std::chrono::seconds(60)));
  EXPECT_TRUE(conn.response(slow).complete);
  EXPECT_EQ(countTokens(conn.response(slow).body), static_cast<size_t>(kTokens));
  EXPECT_NE(conn.response(slow).body.find("data: [DONE]"), std::string::npos);
}

// --- limits -----------------------------------------------------------------------------------

TEST_F(Http2DownstreamTest, StreamsAboveTheConcurrencyLimitAreRefused) {
  H2Connection conn(sluice_->port());
  // Sent before the client has seen sluice's SETTINGS: all 130 go out.
  std::vector<int32_t> ids;
  for (int i = 0; i < 130; ++i) {
    ids.push_back(conn.submit(
        "POST", "/v1/chat/completions",
        {{"x-mock-stall-before-headers-ms", "-1"}, {"x-mock-request-id", "c-" + std::to_string(i)}},
        chatBody()));
  }
  ASSERT_TRUE(conn.runUntil(
      [&] { return conn.response(ids[128]).closed && conn.response(ids[129]).closed; }));
  for (int i = 128; i < 130; ++i) {
    EXPECT_TRUE(conn.response(ids[i]).reset_by_peer);
    EXPECT_EQ(conn.response(ids[i]).error_code, static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
  }
  for (int i = 0; i < 128; ++i) EXPECT_FALSE(conn.response(ids[i]).closed) << i;
  EXPECT_TRUE(eventually([&] { return mock_->ledger().size() == 128u; }));
  conn.drop();
  EXPECT_TRUE(eventually([&] {
    return sluice_->metric("sluice_cancellations_total",
                           {{"cancel_reason", "client_disconnect"}}) == 128;
  }));
}

TEST_F(Http2DownstreamTest, OversizedHeaderListIs431OnThatStreamOnly) {
  H2Connection conn(sluice_->port());
  Headers big;
  for (int i = 0; i < 10; ++i)
    big.emplace_back("x-big-" + std::to_string(i), std::string(8000, 'a'));
  const int32_t id = conn.submit("GET", "/v1/models", big);
  Headers many;
  for (int i = 0; i < 101; ++i) many.emplace_back("x-n-" + std::to_string(i), "1");
  const int32_t counted = conn.submit("GET", "/v1/models", many);
  ASSERT_TRUE(conn.waitForStream(id));
  ASSERT_TRUE(conn.waitForStream(counted));
  for (int32_t s : {id, counted}) {
    const H2Response& r = conn.response(s);
    EXPECT_EQ(r.status, 431);
    EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
    EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "urn:sluice:problem:header-too-large");
  }
  const int32_t fine = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(fine));
  EXPECT_EQ(conn.response(fine).status, 200);
  EXPECT_EQ(mock_->ledger().size(), 1u);
  EXPECT_EQ(sluice_->metric("sluice_requests_total", {{"route", "none"}, {"code", "431"}}), 2);
}

TEST_F(Http2DownstreamTest, OversizedBodyIs413AndTheStreamIsStopped) {
  H2Connection conn(sluice_->port());
  const std::string body(64u * 1024 * 1024 + 1, 'x');
  const int32_t id = conn.submit("POST", "/echo/big", {}, body);
  ASSERT_TRUE(conn.waitForStream(id, std::chrono::seconds(60)));
  EXPECT_EQ(conn.response(id).status, 413);
  EXPECT_EQ(mock_->ledger().size(), 0u);
  const int32_t next = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(next));
  EXPECT_EQ(conn.response(next).status, 200);
}

// --- drain --------------------------------------------------------------------------------------

TEST_F(Http2DownstreamTest, DrainSendsGoawayAndLetsTheStreamFinish) {
  H2Connection conn(sluice_->port());
  const int32_t id =
      conn.submit("POST", "/v1/chat/completions",
                  {{"x-mock-tokens", "10"}, {"x-mock-token-interval-ms", "30"}}, chatBody());
  ASSERT_TRUE(conn.runUntil([&] { return countTokens(conn.response(id).body) >= 1; }));
  std::thread drainer([&] { sluice_->server().drain(); });
  ASSERT_TRUE(conn.waitForStream(id));
  EXPECT_TRUE(conn.response(id).complete);
  EXPECT_EQ(countTokens(conn.response(id).body), 10u);
  EXPECT_TRUE(conn.waitForClose());
  drainer.join();
  EXPECT_TRUE(conn.goawayReceived());
  EXPECT_EQ(conn.goawayErrorCode(), static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  EXPECT_EQ(conn.goawayLastStreamId(), id);
}

TEST_F(Http2DownstreamTest, MethodsRefusedOverHttp11AreRefusedTheSameWay) {
  // One rule for both protocols: http-parser's methods, CONNECT excepted.
  H2Connection conn(sluice_->port());
  const int32_t unknown = conn.submit("FROB", "/echo/x");
  const int32_t lower = conn.submit("get", "/echo/x");
  const int32_t known = conn.submit("PROPFIND", "/echo/x");
  for (int32_t id : {unknown, lower, known}) ASSERT_TRUE(conn.waitForStream(id));
  for (int32_t id : {unknown, lower}) {
    const H2Response& r = conn.response(id);
    EXPECT_EQ(r.status, 400) << id;
    EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "urn:sluice:problem:bad-request");
  }
  EXPECT_EQ(conn.response(known).status, 200);
  EXPECT_EQ(mock_->ledger().size(), 1u);  // only PROPFIND went upstream
}

// --- raw frames: what no well-behaved client library sends ---------------------------------

/** One HTTP/2 frame (RFC 9113 §4.1) as bytes. */
std::string rawFrame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  const size_t len = payload.size();
  f += static_cast<char>((len >> 16) & 0xff);
  f += static_cast<char>((len >> 8) & 0xff);
  f += static_cast<char>(len & 0xff);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  f += static_cast<char>((stream >> 24) & 0x7f);
  f += static_cast<char>((stream >> 16) & 0xff);
  f += static_cast<char>((stream >> 8) & 0xff);
  f += static_cast<char>(stream & 0xff);
  return f + payload;
}

struct RawFrame {
  uint8_t type;
  uint8_t flags;
  uint32_t stream;
  std::string payload;
};

/** The whole frames in `bytes` (a server's output after our preface). */
std::vector<RawFrame> parseFrames(const std::string& bytes) {
  std::vector<RawFrame> out;
  size_t at = 0;
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])); };
  while (at + 9 <= bytes.size()) {
    const size_t len = (byte(at) << 16) | (byte(at + 1) << 8) | byte(at + 2);
    if (at + 9 + len > bytes.size()) break;
    const uint32_t stream =
        ((byte(at + 5) & 0x7f) << 24) | (byte(at + 6) << 16) | (byte(at + 7) << 8) | byte(at + 8);
    out.push_back({static_cast<uint8_t>(byte(at + 3)), static_cast<uint8_t>(byte(at + 4)), stream,
                   bytes.substr(at + 9, len)});
    at += 9 + len;
  }
  return out;
}

uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

const RawFrame* findFrame(const std::vector<RawFrame>& frames, uint8_t type, uint32_t stream) {
  for (const RawFrame& f : frames) {
    if (f.type == type && f.stream == stream) return &f;
  }
  return nullptr;
}

constexpr uint8_t kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4, kGoaway = 0x7;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4;
const std::string kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
// HPACK, static table only (RFC 7541 Appendix A): :method GET, :scheme http,
// :path /, :authority t (a literal without indexing, name index 1).
const std::string kAuthority = "\x01\x01t";
const std::string kGetRoot = "\x82\x86\x84" + kAuthority;
// :method POST, :scheme http, :path /nowhere (literal without indexing, name index 4).
const std::string kPostNowhere = std::string("\x83\x86\x04\x08") + "/nowhere" + kAuthority;
// A trailer field x-t: 1 (literal without indexing, new name).
const std::string kTrailer = std::string(
    "\x00\x03x-t\x01"
    "1",
    7);

TEST_F(Http2DownstreamTest, HeadersOnALowerNewStreamIdIsGoawayProtocolError) {
  // h2spec http2/5.1.1/2: stream 5, then a new stream 3.
  TestConnection conn(sluice_->port());
  conn.send(kPreface + rawFrame(kSettings, 0, 0, "") +
            rawFrame(kHeaders, kEndStream | kEndHeaders, 5, kGetRoot) +
            rawFrame(kHeaders, kEndStream | kEndHeaders, 3, kGetRoot));
  EXPECT_TRUE(conn.waitForClose(milliseconds(10000)));
  const auto frames = parseFrames(conn.raw());
  const RawFrame* goaway = findFrame(frames, kGoaway, 0);
  ASSERT_NE(goaway, nullptr) << "no GOAWAY in " << frames.size() << " frames";
  ASSERT_GE(goaway->payload.size(), 8u);
  EXPECT_EQ(be32(goaway->payload, 0), 5u);  // the last stream sluice processed
  EXPECT_EQ(be32(goaway->payload, 4), static_cast<uint32_t>(NGHTTP2_PROTOCOL_ERROR));
}

TEST_F(Http2DownstreamTest, TrailersOnAStreamSluiceAlreadyAnsweredAreNoConnectionError) {
  TestConnection conn(sluice_->port());
  // POST /nowhere without END_STREAM: answered 404 at once, then RST_STREAM(NO_ERROR).
  conn.send(kPreface + rawFrame(kSettings, 0, 0, "") +
            rawFrame(kHeaders, kEndHeaders, 1, kPostNowhere));
  conn.readUntil([&](const TestResponse&) {
    return findFrame(parseFrames(conn.raw()), kRstStream, 1) != nullptr;
  });
  ASSERT_NE(findFrame(parseFrames(conn.raw()), kRstStream, 1), nullptr);
  // The client had not seen that yet: its trailers (a lower id than stream 3
  // next) are no protocol error, and stream 3 is served.
  conn.send(rawFrame(kHeaders, kEndStream | kEndHeaders, 1, kTrailer) +
            rawFrame(kHeaders, kEndStream | kEndHeaders, 3, kGetRoot) +
            rawFrame(kHeaders, kEndStream | kEndHeaders, 1, kTrailer));
  conn.readUntil([&](const TestResponse&) {
    return findFrame(parseFrames(conn.raw()), kHeaders, 3) != nullptr;
  });
  const auto frames = parseFrames(conn.raw());
  std::string seen;
  for (const RawFrame& f : frames) {
    seen += std::to_string(f.type) + "@" + std::to_string(f.stream) + " ";
  }
  EXPECT_NE(findFrame(frames, kHeaders, 3), nullptr) << seen;
  EXPECT_EQ(findFrame(frames, kGoaway, 0), nullptr);
  EXPECT_FALSE(conn.peerClosed());
}

TEST_F(Http2DownstreamTest, UpperCaseFieldNamesAreRefusedBeforeTheyReachTheProxy) {
  // sluice stores the names nghttp2 hands over as they are
  // (Http2RequestHeadBuilder::addValidated): that rests on nghttp2's HTTP
  // messaging checks refusing any name with an upper-case letter
  // (RFC 9113 §8.2.1: a malformed request, RST_STREAM(PROTOCOL_ERROR)).
  // :method GET, :scheme http, :path /echo/u (literal, name index 4), :authority t.
  const std::string get_echo = std::string("\x82\x86\x04\x07") + "/echo/u" + kAuthority;
  const std::string upper = std::string("\x00\x03X-u\x01", 6) + "1";  // literal, new name
  const std::string lower = std::string("\x00\x03x-u\x01", 6) + "1";
  TestConnection conn(sluice_->port());
  conn.send(kPreface + rawFrame(kSettings, 0, 0, "") +
            rawFrame(kHeaders, kEndStream | kEndHeaders, 1, get_echo + upper) +
            rawFrame(kHeaders, kEndStream | kEndHeaders, 3, get_echo + lower));
  conn.readUntil([&](const TestResponse&) {
    const auto frames = parseFrames(conn.raw());
    return findFrame(frames, kRstStream, 1) != nullptr && findFrame(frames, kHeaders, 3) != nullptr;
  });
  const auto frames = parseFrames(conn.raw());
  const RawFrame* rst = findFrame(frames, kRstStream, 1);
  ASSERT_NE(rst, nullptr);
  ASSERT_GE(rst->payload.size(), 4u);
  EXPECT_EQ(be32(rst->payload, 0), static_cast<uint32_t>(NGHTTP2_PROTOCOL_ERROR));
  EXPECT_EQ(findFrame(frames, kHeaders, 1), nullptr);  // never answered: never proxied
  ASSERT_NE(findFrame(frames, kHeaders, 3), nullptr);
  EXPECT_TRUE(eventually([&] { return mock_->ledger().size() == 1u; }));
  const nlohmann::json entry = mock_->ledger()[0];
  EXPECT_EQ(entry["path"], "/echo/u") << entry.dump();
}

// --- protocol detection
// ---------------------------------------------------------------------------

TEST(ProtocolDetectorTest, ClassifiesTheFirstBytes) {
  using V = ProtocolDetector::Verdict;
  EXPECT_EQ(ProtocolDetector::classify(""), V::NeedMore);
  EXPECT_EQ(ProtocolDetector::classify("PRI * HTTP/2"), V::NeedMore);
  EXPECT_EQ(ProtocolDetector::classify("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), V::Http2);
  EXPECT_EQ(ProtocolDetector::classify("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00"), V::Http2);
  EXPECT_EQ(ProtocolDetector::classify("G"), V::Http1);
  EXPECT_EQ(ProtocolDetector::classify("PRI / HTTP/1.1\r\n"), V::Http1);
  EXPECT_EQ(ProtocolDetector::classify("POST /v1 HTTP/1.1\r\n"), V::Http1);
}

TEST_F(Http2DownstreamTest, DribbledPrefaceAndHttp11ConnectionsInterleave) {
  TestConnection h1(sluice_->port());
  h1.sendRequest("GET", "/v1/models");
  H2ClientOptions dribble;
  dribble.first_write_chunk = 3;  // the preface arrives in pieces
  H2Connection h2(sluice_->port(), dribble);
  const int32_t id = h2.submit("GET", "/v1/models");
  EXPECT_EQ(h1.readResponse().status, 200);
  ASSERT_TRUE(h2.waitForStream(id));
  EXPECT_EQ(h2.response(id).status, 200);
  h1.sendRequest("GET", "/echo/again");  // keep-alive on the HTTP/1.1 side still works
  EXPECT_EQ(h1.readResponse().status, 200);
}

// --- TLS ----------------------------------------------------------------------------------------

TEST(Http2TlsTest, AlpnPicksH2OrHttp11) {
  TestCerts certs;
  certs.make("server", "sluice-test");
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), tlsListen(certs.path("server.pem"), certs.path("server.key"))));
  H2ClientOptions tls;
  tls.tls = true;
  tls.alpn = {"h2", "http/1.1"};
  H2Connection conn(sluice.port(), tls);
  ASSERT_TRUE(conn.connected());
  EXPECT_EQ(conn.alpn(), "h2");
  EXPECT_EQ(conn.peerCommonName(), "sluice-test");
  const int32_t id = conn.submit("POST", "/echo/tls", {}, "over tls");
  ASSERT_TRUE(conn.waitForStream(id));
  ASSERT_EQ(conn.response(id).status, 200);
  auto j = nlohmann::json::parse(conn.response(id).body);
  EXPECT_EQ(j["headers"]["x-forwarded-proto"], "https");
  EXPECT_EQ(j["body"], "over tls");

  const std::string url = "https://127.0.0.1:" + std::to_string(sluice.port());
  auto [c2, o2] = runCommand(
      "curl -sSk --http2 -w '\\n%{http_version} %{response_code}' "
      "-H 'x-mock-tokens: 4' -d '" +
      chatBody() + "' " + url + "/v1/chat/completions");
  ASSERT_EQ(c2, 0) << o2;
  EXPECT_NE(o2.find("\n2 200"), std::string::npos) << o2;
  EXPECT_EQ(countTokens(o2), 4u) << o2;
  auto [c11, o11] = runCommand("curl -sSk --http1.1 -w '\\n%{http_version} %{response_code}' " +
                               url + "/echo/h1");
  ASSERT_EQ(c11, 0) << o11;
  EXPECT_NE(o11.find("\n1.1 200"), std::string::npos) << o11;
  EXPECT_NE(o11.find("\"x-forwarded-proto\":\"https\""), std::string::npos) << o11;
  // No ALPN at all: HTTP/1.1.
  auto [cn, on] = runCommand("curl -sSk --no-alpn -w '\\n%{http_version} %{response_code}' " + url +
                             "/v1/models");
  ASSERT_EQ(cn, 0) << on;
  EXPECT_NE(on.find("\n1.1 200"), std::string::npos) << on;
}

TEST(Http2TlsTest, MissingCertificateFailsAtStartNamingTheFile) {
  MockLlm mock;
  const std::string missing = "/nonexistent/sluice-test-cert.pem";
  auto loaded = config::loadConfigString(
      config(mock.url(), tlsListen(missing, "/nonexistent/k.pem")), "test.yaml");
  ASSERT_TRUE(loaded.ok());
  Server server(loaded.config);
  std::string error;
  EXPECT_FALSE(server.start(&error));
  EXPECT_NE(error.find(missing), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;

  // The binary reports it the same way and exits 1 (start failure, main.cc's convention).
  const std::string path = std::filesystem::temp_directory_path() /
                           ("sluice-h2-missing-cert-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << config(mock.url(), tlsListen(missing, "/nonexistent/k.pem"));
  auto [code, out] = runCommand(sluicePath() + " --config " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("tls.cert " + missing), std::string::npos) << out;
}

TEST(Http2TlsTest, ReloadsThatCannotApplyAreRejectedAndTheRunningCertificateStays) {
  TestCerts certs;
  certs.make("server", "sluice-test");
  MockLlm mock;
  const std::string key = certs.path("server.key");
  SluiceUnderTest sluice(config(mock.url(), tlsListen(certs.path("server.pem"), key)));
  std::string error;
  auto missing = config::loadConfigString(
      config(mock.url(), tlsListen("/nonexistent/sluice-reload.pem", key)), "reload.yaml");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(sluice.server().reload(missing.config, &error));
  EXPECT_NE(error.find("tls.cert /nonexistent/sluice-reload.pem"), std::string::npos) << error;
  // Sockets are bound once: turning TLS off is for a restart, not a reload.
  auto plain = config::loadConfigString(config(mock.url()), "reload.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(sluice.server().reload(plain.config, &error));
  EXPECT_NE(error.find("needs a restart"), std::string::npos) << error;

  H2ClientOptions tls;
  tls.tls = true;
  H2Connection conn(sluice.port(), tls);
  EXPECT_EQ(conn.peerCommonName(), "sluice-test");
  const int32_t id = conn.submit("GET", "/v1/models");
  ASSERT_TRUE(conn.waitForStream(id));
  EXPECT_EQ(conn.response(id).status, 200);
}

TEST(Http2TlsTest, SighupServesTheNewCertificateWithoutDroppingLiveStreams) {
  TestCerts certs;
  certs.make("a", "sluice-a");
  certs.make("b", "sluice-b");
  const std::string cert = certs.path("live.pem");
  const std::string key = certs.path("live.key");
  std::filesystem::copy_file(certs.path("a.pem"), cert);
  std::filesystem::copy_file(certs.path("a.key"), key);
  MockLlm mock;
  const std::string path = certs.path("sluice.yaml");
  std::ofstream(path) << config(mock.url(), tlsListen(cert, key));
  ChildProcess sluice({sluicePath(), "--config", path}, "sluice listening on");
  ASSERT_TRUE(sluice.running());
  const auto& line = sluice.readyLine();
  const uint16_t port = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));

  H2ClientOptions tls;
  tls.tls = true;
  H2ClientOptions held = tls;
  held.manual_window = true;
  held.initial_window = 16 * 1024;
  H2Connection live(port, held);
  ASSERT_EQ(live.peerCommonName(), "sluice-a");
  // A stream the client holds open across the reload: its window stays shut
  // until release(), so it cannot finish before the new certificate is in.
  constexpr int kTokens = 20000;
  const int32_t stream = live.submit(
      "POST", "/v1/chat/completions",
      {{"x-mock-tokens", std::to_string(kTokens)}, {"x-mock-request-id", "live"}}, chatBody());
  live.hold(stream);
  ASSERT_TRUE(live.runUntil([&] { return countTokens(live.response(stream).body) >= 1; }));

  // New files in place (rename: never a half-written certificate), then SIGHUP.
  std::filesystem::copy_file(certs.path("b.pem"), cert + ".new");
  std::filesystem::copy_file(certs.path("b.key"), key + ".new");
  std::filesystem::rename(cert + ".new", cert);
  std::filesystem::rename(key + ".new", key);
  ASSERT_EQ(::kill(sluice.pid(), SIGHUP), 0);
  EXPECT_TRUE(eventually([&] {
    H2Connection fresh(port, tls);
    return fresh.peerCommonName() == "sluice-b";
  })) << "new connections never got the new certificate";

  // The connection made before the reload lives on with its certificate and stream.
  EXPECT_FALSE(live.response(stream).closed);
  live.release(stream);
  ASSERT_TRUE(live.waitForStream(stream, std::chrono::seconds(60)));
  EXPECT_TRUE(live.response(stream).complete);
  EXPECT_EQ(countTokens(live.response(stream).body), static_cast<size_t>(kTokens));
  const int32_t after = live.submit("GET", "/v1/models");
  ASSERT_TRUE(live.waitForStream(after));
  EXPECT_EQ(live.response(after).status, 200);
  EXPECT_EQ(live.peerCommonName(), "sluice-a");
  EXPECT_EQ(sluice.stop(), 0);
}

}  // namespace
}  // namespace sluice::test
