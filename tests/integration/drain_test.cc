// Drain (docs/design.md §3): SIGTERM or POST /drain turns /ready 503 at once, stops
// accepting, closes idle keep-alive connections, marks responses under way
// `Connection: close` (HTTP/2: one GOAWAY), lets in-flight exchanges finish
// within drain_timeout, cancels the rest with `draining` and exits 0.
//
// The signal and exit-status tests run the real sluice binary. The metric of
// the cut exchange is checked on an in-process Server, whose admin port
// outlives drain() (the binary's admin port closes as the process exits).

#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

// drain_timeout is generous for the stream that must finish (a 300 ms stall,
// then 3 tokens) and is exactly when the stalled-forever one is cut.
constexpr char kConfig[] = R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
drain_timeout: 1500ms
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: all
    match: {path_prefix: /}
    upstream: mock
)";

constexpr char kChat[] = R"({"model":"gpt-4o-mini","stream":true,"messages":[]})";

/** Headers of a stream that answers after 300 ms and then finishes at once. */
std::vector<std::pair<std::string, std::string>> shortStream(const std::string& id) {
  return {{"x-mock-stall-before-headers-ms", "300"},
          {"x-mock-tokens", "3"},
          {"x-mock-request-id", id},
          {"content-type", "application/json"}};
}

/** Headers of a stream that sends 2 tokens and then stalls forever. */
std::vector<std::pair<std::string, std::string>> longStream(const std::string& id) {
  return {{"x-mock-tokens", "10"},
          {"x-mock-stall-after-tokens", "2"},
          {"x-mock-stall-ms", "-1"},
          {"x-mock-request-id", id},
          {"content-type", "application/json"}};
}

size_t exchangesIn(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  return j.is_discarded() ? 0 : j["exchanges"].size();
}

class DrainTest : public ::testing::Test {
 protected:
  MockLlm mock_;
  std::string config() const { return substitute(kConfig, {{"MOCK_URL", mock_.url()}}); }
};

// Drives one HTTP/1.1 drain; `trigger` starts it (SIGTERM or POST /drain).
void drainHttp1(SluiceProcess& sluice, const std::function<void()>& trigger) {
  ASSERT_TRUE(sluice.running());
  // An idle keep-alive connection, a stalled-forever stream, and a stream
  // whose response head arrives only after the drain began.
  TestConnection idle(sluice.port());
  idle.sendRequest("GET", "/v1/models");
  ASSERT_EQ(idle.readResponse().status, 200);

  TestConnection long_conn(sluice.port());
  long_conn.sendRequest("POST", "/v1/chat/completions", longStream("long"), kChat);
  long_conn.readUntil(
      [](const TestResponse& r) { return r.body.find("tok1") != std::string::npos; });
  ASSERT_NE(long_conn.current().body.find("tok1"), std::string::npos);

  TestConnection short_conn(sluice.port());
  short_conn.sendRequest("POST", "/v1/chat/completions", shortStream("short"), kChat);
  ASSERT_TRUE(waitUntil([&] { return exchangesIn(sluice.adminGet("/exchanges")) == 2; }));
  ASSERT_EQ(sluice.adminStatus("/ready"), 200);

  trigger();

  EXPECT_TRUE(waitUntil([&] { return sluice.adminStatus("/ready") == 503; }))
      << "/ready must turn 503 as soon as draining starts";
  EXPECT_TRUE(waitUntil([&] { return !canConnect(sluice.port()); }))
      << "new connections must be refused while draining";
  EXPECT_TRUE(idle.waitForClose(std::chrono::seconds(5)))
      << "an idle keep-alive connection is closed at drain";

  // The in-flight short stream completes normally, marked Connection: close.
  TestResponse short_response = short_conn.readResponse(std::chrono::seconds(10));
  EXPECT_EQ(short_response.status, 200);
  EXPECT_TRUE(short_response.complete);
  EXPECT_NE(short_response.body.find("[DONE]"), std::string::npos);
  EXPECT_EQ(short_response.headers.get("connection").value_or(""), "close");

  // The stalled one is cut at drain_timeout: a truncated response.
  long_conn.readUntil([](const TestResponse&) { return false; }, std::chrono::seconds(10));
  EXPECT_TRUE(long_conn.peerClosed());
  EXPECT_FALSE(long_conn.current().complete) << "a cut stream must not look complete";

  EXPECT_EQ(sluice.waitForExit(), 0);
  const std::string err = sluice.stderrText();
  EXPECT_NE(err.find("sluice: draining"), std::string::npos) << err;
  EXPECT_NE(err.find("drained; 1 exchange(s) still in flight at drain_timeout were cancelled"),
            std::string::npos)
      << err;
}

TEST_F(DrainTest, SigtermDrainsHttp1AndExitsZero) {
  SluiceProcess sluice(config());
  drainHttp1(sluice, [&] { sluice.signal(SIGTERM); });
}

TEST_F(DrainTest, PostDrainDrainsHttp1AndExitsZero) {
  SluiceProcess sluice(config());
  drainHttp1(sluice, [&] {
    EXPECT_EQ(httpRequest(sluice.adminPort(), "POST", "/drain", {{"x-sluice-admin", "1"}}).status,
              202);
  });
}

TEST_F(DrainTest, Http2GetsGoawayInFlightStreamFinishesStalledOneIsCancelled) {
  SluiceProcess sluice(config());
  ASSERT_TRUE(sluice.running());
  H2Connection conn(sluice.port());
  ASSERT_TRUE(conn.connected());
  const int32_t long_id = conn.submit("POST", "/v1/chat/completions", longStream("h2-long"), kChat);
  ASSERT_TRUE(
      conn.runUntil([&] { return conn.response(long_id).body.find("tok1") != std::string::npos; }));
  const int32_t short_id =
      conn.submit("POST", "/v1/chat/completions", shortStream("h2-short"), kChat);
  ASSERT_TRUE(waitUntil([&] { return exchangesIn(sluice.adminGet("/exchanges")) == 2; }));

  sluice.signal(SIGTERM);

  EXPECT_TRUE(conn.runUntil([&] { return conn.goawayReceived(); }, std::chrono::seconds(5)))
      << "draining sends GOAWAY";
  EXPECT_EQ(conn.goawayErrorCode(), static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  EXPECT_GE(conn.goawayLastStreamId(), short_id) << "streams already seen may finish";
  EXPECT_TRUE(conn.waitForStream(short_id));
  EXPECT_TRUE(conn.response(short_id).complete);
  EXPECT_EQ(conn.response(short_id).status, 200);
  EXPECT_NE(conn.response(short_id).body.find("[DONE]"), std::string::npos);

  EXPECT_TRUE(conn.waitForStream(long_id));
  EXPECT_TRUE(conn.response(long_id).reset_by_peer)
      << "the stalled stream is reset at drain_timeout";
  EXPECT_EQ(conn.response(long_id).error_code, static_cast<uint32_t>(NGHTTP2_CANCEL));
  EXPECT_FALSE(conn.response(long_id).complete);
  EXPECT_TRUE(conn.waitForClose()) << "the connection closes once its last stream ended";
  EXPECT_EQ(sluice.waitForExit(), 0);
}

// The metric of the cut, read while the admin port is still up: an
// in-process Server, drained from another thread as main() does.
TEST_F(DrainTest, CutExchangesAreCountedAsDraining) {
  SluiceUnderTest sluice(substitute(kConfig, {{"MOCK_URL", mock_.url()}}));
  TestConnection long_conn(sluice.port());
  long_conn.sendRequest("POST", "/v1/chat/completions", longStream("m-long"), kChat);
  long_conn.readUntil(
      [](const TestResponse& r) { return r.body.find("tok1") != std::string::npos; });
  TestConnection short_conn(sluice.port());
  short_conn.sendRequest("POST", "/v1/chat/completions", shortStream("m-short"), kChat);
  ASSERT_TRUE(waitUntil([&] { return sluice.server().activeExchanges() == 2; }));

  sluice.server().requestShutdown();
  EXPECT_FALSE(sluice.server().ready());
  auto drained = std::async(std::launch::async, [&] { return sluice.server().drain(); });
  EXPECT_EQ(short_conn.readResponse().status, 200);
  ASSERT_EQ(drained.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(drained.get(), 1u);

  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "draining"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {}), 1);
  // Both requests are counted once: the short one 200, the cut one with the
  // status it had already sent (its response was under way).
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "all"}, {"code", "200"}}), 2);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {}), 2);
  EXPECT_EQ(httpRequest(sluice.adminPort(), "GET", "/ready").status, 503);
}

}  // namespace
}  // namespace sluice::test
