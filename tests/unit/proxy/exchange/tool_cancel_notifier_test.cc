// Tests for the sender of MCP notifications/cancelled
// (proxy/exchange/tool_cancel_notifier.h): what it sends, and its bounds —
// in time (connect_timeout + 2 s, on simulated time), in number (past the
// limit a notification is dropped, not queued) — and how each one counts.

#include "proxy/exchange/tool_cancel_notifier.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/loader.h"
#include "filters/tools/mcp_sessions.h"
#include "tests/support/simulated_time.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

/** One notification's stream: records the request; the test plays the server. */
class RecordingStream final : public UpstreamStream {
 public:
  void sendRequest(const RequestHead& head, RequestBody& body,
                   UpstreamCallbacks* callbacks) override {
    request = head;
    this->body = std::string(body.prefix());
    callbacks_ = callbacks;
  }
  void onRequestBodyData() override {}
  void pauseReading() override {}
  void resumeReading() override {}
  void detach() override { callbacks_ = nullptr; }
  void release() override { released = true; }
  void reset() override { was_reset = true; }

  void answer(int status) {
    ResponseHead h;
    h.status = status;
    callbacks_->onUpstreamHeaders(std::move(h), false);
    callbacks_->onUpstreamComplete();
  }
  void fail() { callbacks_->onUpstreamError(UpstreamError::Reset, "test"); }

  RequestHead request;
  std::string body;
  bool released = false;
  bool was_reset = false;

 private:
  UpstreamCallbacks* callbacks_ = nullptr;
};

class RecordingPool final : public UpstreamStreamSource {
 public:
  bool hasReadyStream() const override { return true; }
  UpstreamStream* acquire() override {
    streams.push_back(std::make_unique<RecordingStream>());
    return streams.back().get();
  }
  std::vector<std::unique_ptr<RecordingStream>> streams;
};

class ToolCancelNotifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::loadConfigString(R"(listen: 127.0.0.1:0
upstreams:
  - name: tool-server
    url: "http://127.0.0.1:9/base"
    connect_timeout: 1s
    headers: {authorization: "Bearer upstream-key"}
routes:
  - name: tools
    match: {path_prefix: /mcp}
    upstream: tool-server
    protocol: mcp
)",
                                      "tool_cancel_notifier_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
    route_ = runtime_->match("POST", "/mcp");
    ASSERT_NE(route_, nullptr);
  }

  ToolCancel cancel(std::string id = "7") const {
    ToolCancel c;
    c.runtime = runtime_;
    c.route = route_;
    c.upstream = route_->upstream;
    c.endpoint = &route_->upstream->endpoints[0];
    c.request.method = "POST";
    c.request.path = "/mcp";
    c.request.headers.add("host", "sluice");
    c.request.headers.add("content-length", "123");
    c.request.headers.add("mcp-session-id", "s-1");
    c.request.headers.add("mcp-protocol-version", "2025-06-18");
    c.request_id = std::move(id);
    c.reason = "budget_exhausted";
    return c;
  }

  double counted(const std::string& result) {
    return metrics_.tool_cancel_notifications.Add({{"route", "tools"}, {"result", result}}).Value();
  }

  ManualClock clock_;
  Metrics metrics_;
  test::SimulatedScheduler time_{clock_};
  // Deletes the notifications that ended (deferred) when it goes, before the runtime.
  Dispatcher dispatcher_{clock_, &time_};
  ConfigSnapshotPtr runtime_;
  const RouteRuntime* route_ = nullptr;
  RecordingPool pool_;
};

TEST(CancelledNotificationTest, EchoesTheIdAsItWasSent) {
  EXPECT_EQ(json::parse(cancelledNotification("7", "client_disconnect")),
            json::parse(R"({"jsonrpc":"2.0","method":"notifications/cancelled",)"
                        R"("params":{"requestId":7,"reason":"sluice client_disconnect"}})"));
  EXPECT_EQ(json::parse(cancelledNotification(R"("call-7")", "x"))["params"]["requestId"],
            "call-7");
}

TEST_F(ToolCancelNotifierTest, ASessionIsFoundWithTheEndpointThatIssuedIt) {
  RequestHead request = cancel().request;
  const EndpointRuntime& endpoint = route_->upstream->endpoints[0];
  EXPECT_EQ(McpSession::find(*route_, RequestHead{}, clock_.now()), nullptr);  // no session id
  std::unique_ptr<McpSession> unknown = McpSession::find(*route_, request, clock_.now());
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->endpoint, nullptr);  // not learned: placed as usual
  EXPECT_EQ(unknown->headers.get("mcp-session-id").value_or(""), "s-1");
  route_->upstream->mcp_sessions->learn(sessionKey("s-1"), endpoint.name(), clock_.now(),
                                        /*publish=*/false);
  std::unique_ptr<McpSession> known = McpSession::find(*route_, request, clock_.now());
  ASSERT_NE(known, nullptr);
  EXPECT_EQ(known->endpoint, &endpoint);
}

TEST_F(ToolCancelNotifierTest, PostsTheNotificationWithTheSessionToTheEndpoint) {
  ToolCancelNotifier notifier(
      dispatcher_, [&](const ConfigSnapshot&, size_t) -> UpstreamStreamSource& { return pool_; });
  notifier.send(cancel());
  ASSERT_EQ(pool_.streams.size(), 1u);
  RecordingStream& s = *pool_.streams[0];
  EXPECT_EQ(s.request.method, "POST");
  EXPECT_EQ(s.request.path, "/base/mcp");
  EXPECT_EQ(s.request.headers.get("mcp-session-id"), "s-1");
  EXPECT_EQ(s.request.headers.get("mcp-protocol-version"), "2025-06-18");
  EXPECT_EQ(s.request.headers.get("content-type"), "application/json");
  EXPECT_EQ(s.request.headers.get("authorization"), "Bearer upstream-key");
  EXPECT_EQ(s.request.headers.get("host"), "127.0.0.1:9");
  EXPECT_FALSE(s.request.headers.has("content-length"));  // the call's: framing is the codec's
  const json body = json::parse(s.body);
  EXPECT_EQ(body["method"], "notifications/cancelled");
  EXPECT_EQ(body["params"]["requestId"], 7);
  EXPECT_EQ(body["params"]["reason"], "sluice budget_exhausted");
  EXPECT_EQ(notifier.inFlight(), 1u);

  s.answer(202);
  EXPECT_TRUE(s.released);
  EXPECT_EQ(notifier.inFlight(), 0u);
  EXPECT_EQ(counted("sent"), 1);
}

TEST_F(ToolCancelNotifierTest, FailuresAndTimeoutsAreCountedNeverRetried) {
  ToolCancelNotifier notifier(
      dispatcher_, [&](const ConfigSnapshot&, size_t) -> UpstreamStreamSource& { return pool_; });
  notifier.send(cancel("1"));
  pool_.streams[0]->answer(404);
  notifier.send(cancel("2"));
  pool_.streams[1]->fail();
  EXPECT_EQ(counted("failed"), 2);

  notifier.send(cancel("3"));  // no answer
  time_.advance(2999ms);
  EXPECT_EQ(counted("timeout"), 0);
  time_.advance(1ms);  // connect_timeout 1s + 2s
  EXPECT_EQ(counted("timeout"), 1);
  EXPECT_TRUE(pool_.streams[2]->was_reset);
  EXPECT_EQ(pool_.streams.size(), 3u);  // never sent again
  EXPECT_EQ(notifier.inFlight(), 0u);
}

TEST_F(ToolCancelNotifierTest, PastTheBoundOneIsDroppedNotQueued) {
  ToolCancelNotifier notifier(
      dispatcher_, [&](const ConfigSnapshot&, size_t) -> UpstreamStreamSource& { return pool_; },
      /*max_in_flight=*/2);
  notifier.send(cancel("1"));
  notifier.send(cancel("2"));
  notifier.send(cancel("3"));
  EXPECT_EQ(pool_.streams.size(), 2u);
  EXPECT_EQ(counted("dropped"), 1);
  pool_.streams[0]->answer(200);
  notifier.send(cancel("4"));  // room again
  EXPECT_EQ(pool_.streams.size(), 3u);
  notifier.closeAll();  // the worker stops: what is under way is torn down
  EXPECT_TRUE(pool_.streams[1]->was_reset);
  EXPECT_TRUE(pool_.streams[2]->was_reset);
  EXPECT_EQ(notifier.inFlight(), 0u);
}

TEST_F(ToolCancelNotifierTest, ACancelledCallIsToldWithTheSessionsHeadersOnItsPath) {
  ToolCancelNotifier notifier(
      dispatcher_, [&](const ConfigSnapshot&, size_t) -> UpstreamStreamSource& { return pool_; });
  RequestHead request = cancel().request;
  request.path = "/mcp/v2";
  std::unique_ptr<McpSession> session = McpSession::find(*route_, request, clock_.now());
  ASSERT_NE(session, nullptr);
  const std::optional<std::string> id = R"("call-9")";
  notifier.cancelCall(*session, {request, id, CancelReason::ClientDisconnect, runtime_, route_,
                                 route_->upstream, &route_->upstream->endpoints[0]});
  ASSERT_EQ(pool_.streams.size(), 1u);
  RecordingStream& s = *pool_.streams[0];
  EXPECT_EQ(s.request.method, "POST");
  EXPECT_EQ(s.request.path, "/base/mcp/v2");
  EXPECT_EQ(s.request.headers.get("mcp-session-id"), "s-1");
  const json body = json::parse(s.body);
  EXPECT_EQ(body["params"]["requestId"], "call-9");
  EXPECT_EQ(body["params"]["reason"], "sluice client_disconnect");
}

TEST_F(ToolCancelNotifierTest, ANotificationOrANonPostCallHasNothingToCancel) {
  ToolCancelNotifier notifier(
      dispatcher_, [&](const ConfigSnapshot&, size_t) -> UpstreamStreamSource& { return pool_; });
  RequestHead request = cancel().request;
  std::unique_ptr<McpSession> session = McpSession::find(*route_, request, clock_.now());
  ASSERT_NE(session, nullptr);
  const std::optional<std::string> none;
  notifier.cancelCall(*session, {request, none, CancelReason::ClientDisconnect, runtime_, route_,
                                 route_->upstream, &route_->upstream->endpoints[0]});
  request.method = "GET";
  const std::optional<std::string> id = "1";
  notifier.cancelCall(*session, {request, id, CancelReason::ClientDisconnect, runtime_, route_,
                                 route_->upstream, &route_->upstream->endpoints[0]});
  EXPECT_TRUE(pool_.streams.empty());
  EXPECT_EQ(notifier.inFlight(), 0u);
}

}  // namespace
}  // namespace sluice
