// Tests for MCP session affinity's table (filters/tools/mcp_sessions.h) and
// how the tools filter feeds it: learned from a response's Mcp-Session-Id,
// bounded (LRU), expiring (idle TTL), forgotten by a DELETE, published once.

#include "filters/tools/mcp_sessions.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "filters/tools/tools_filter.h"
#include "tests/unit/filters/fake_filter_callbacks.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(SessionKeyTest, IsAStableHashNotTheId) {
  const std::string key = sessionKey("0f8e3c1a-session");
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(key, sessionKey("0f8e3c1a-session"));
  EXPECT_NE(key, sessionKey("0f8e3c1a-session2"));
  EXPECT_EQ(key.find("session"), std::string::npos);
  // SHA-256("abc"), its first 16 bytes.
  EXPECT_EQ(sessionKey("abc"), "ba7816bf8f01cfea414140de5dae2223");
}

TEST(McpSessionTableTest, LearnsLooksUpAndForgets) {
  ManualClock clock;
  McpSessionTable table;
  EXPECT_EQ(table.lookup("k1", clock.now()), std::nullopt);
  table.learn("k1", "a", clock.now());
  table.learn("k2", "b", clock.now());
  EXPECT_EQ(table.lookup("k1", clock.now()), "a");
  EXPECT_EQ(table.lookup("k2", clock.now()), "b");
  table.learn("k1", "b", clock.now());  // the server on b answered for it: moved
  EXPECT_EQ(table.lookup("k1", clock.now()), "b");
  table.forget("k1");
  EXPECT_EQ(table.lookup("k1", clock.now()), std::nullopt);
  EXPECT_EQ(table.size(), 1u);
}

TEST(McpSessionTableTest, BoundedForgetsTheLeastRecentlyUsed) {
  ManualClock clock;
  McpSessionTable table(/*max_entries=*/3, 1h);
  table.learn("k1", "a", clock.now());
  table.learn("k2", "a", clock.now());
  table.learn("k3", "a", clock.now());
  EXPECT_EQ(table.lookup("k1", clock.now()), "a");  // k1 used: k2 is now the least recent
  table.learn("k4", "b", clock.now());
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.lookup("k2", clock.now()), std::nullopt);
  EXPECT_EQ(table.lookup("k1", clock.now()), "a");
  EXPECT_EQ(table.lookup("k3", clock.now()), "a");
  EXPECT_EQ(table.lookup("k4", clock.now()), "b");
}

TEST(McpSessionTableTest, ExpiresAfterTheIdleTtlAndUseKeepsItAlive) {
  ManualClock clock;
  McpSessionTable table(100, 10min);
  table.learn("busy", "a", clock.now());
  table.learn("idle", "a", clock.now());
  clock.advance(6min);
  EXPECT_EQ(table.lookup("busy", clock.now()), "a");
  clock.advance(6min);  // idle: 12 min unused; busy: 6 min
  EXPECT_EQ(table.lookup("idle", clock.now()), std::nullopt);
  EXPECT_EQ(table.lookup("busy", clock.now()), "a");
  EXPECT_EQ(table.size(), 1u);

  // New sessions push idle ones out of the tail without a lookup.
  clock.advance(11min);
  table.learn("new", "b", clock.now());
  EXPECT_EQ(table.size(), 1u);
}

TEST(McpSessionTableTest, PublishesNewAndMovedSessionsOnlyOnce) {
  ManualClock clock;
  McpSessionTable table;
  std::vector<std::pair<std::string, std::string>> published;
  table.setPublisher([&](const std::string& key, const std::string& endpoint) {
    published.emplace_back(key, endpoint);
  });
  table.learn("k1", "a", clock.now());
  table.learn("k1", "a", clock.now());                     // known: touched only
  table.learn("k1", "b", clock.now());                     // moved
  table.learn("k2", "a", clock.now(), /*publish=*/false);  // a peer's: not sent back
  ASSERT_EQ(published.size(), 2u);
  EXPECT_EQ(published[0], std::make_pair(std::string("k1"), std::string("a")));
  EXPECT_EQ(published[1], std::make_pair(std::string("k1"), std::string("b")));
}

TEST(McpSessionTableTest, WorkersLearnAndLookUpAtOnce) {
  ManualClock clock;
  McpSessionTable table(64, 1h);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string key = "k" + std::to_string((i * 7 + t) % 200);
        table.learn(key, t % 2 == 0 ? "a" : "b", clock.now());
        (void)table.lookup(key, clock.now());
        if (i % 13 == 0) table.forget(key);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(table.size(), 64u);
}

// --- the tools filter feeds the table -------------------------------------------

class ToolsFilterSessionTest : public ::testing::Test {
 protected:
  ToolsFilterSessionTest() : route_(config_, metrics_, "tools") {
    route_.addUpstream("tool-server", std::make_shared<ToolAnnotationTable>(), sessions_);
  }

  /** One request through a filter: its head, body (POST), its attempt, the response head. */
  void exchange(const std::string& method, const std::string& session, int status,
                const std::string& issued, const std::string& endpoint = "a") {
    test::FakeFilterCallbacks cb(clock_);
    cb.destination_value.upstream = "tool-server";
    cb.destination_value.endpoint = endpoint;
    ToolsFilter filter(route_);
    filter.setCallbacks(cb);
    RequestHead head;
    head.method = method;
    head.path = "/mcp";
    if (!session.empty()) head.headers.add("mcp-session-id", session);
    EXPECT_EQ(filter.decodeHeaders(head), FilterStatus::Continue);
    const std::string body =
        method == "POST" ? R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}})" : "";
    EXPECT_EQ(filter.decodeComplete(body), FilterStatus::Continue) << method;
    EXPECT_TRUE(cb.local_replies.empty()) << method;
    RequestHead upstream_request = head;
    EXPECT_TRUE(filter.beforeAttempt(upstream_request, cb.attemptContext()).proceeds());
    ResponseHead response;
    response.status = status;
    if (!issued.empty()) response.headers.add("mcp-session-id", issued);
    filter.encodeHeaders(response, true);
    filter.onDestroy();
  }

  config::ToolsConfig config_;
  Metrics metrics_;
  ManualClock clock_;
  std::shared_ptr<McpSessionTable> sessions_ = std::make_shared<McpSessionTable>();
  ToolRoute route_;
};

TEST_F(ToolsFilterSessionTest, LearnsTheEndpointThatIssuedASession) {
  exchange("POST", "", 200, "s-1", "b");
  EXPECT_EQ(sessions_->lookup(sessionKey("s-1"), clock_.now()), "b");
  // An error answer teaches nothing.
  exchange("POST", "", 500, "s-2", "a");
  EXPECT_EQ(sessions_->lookup(sessionKey("s-2"), clock_.now()), std::nullopt);
  // Not an upstream of the route: nothing.
  EXPECT_EQ(route_.sessions("elsewhere"), nullptr);
}

TEST_F(ToolsFilterSessionTest, ADeleteOfTheSessionForgetsItOnceAnswered) {
  exchange("POST", "", 200, "s-1", "b");
  exchange("DELETE", "s-1", 405, "");  // the server keeps it
  EXPECT_EQ(sessions_->lookup(sessionKey("s-1"), clock_.now()), "b");
  exchange("DELETE", "s-1", 200, "");
  EXPECT_EQ(sessions_->lookup(sessionKey("s-1"), clock_.now()), std::nullopt);
}

TEST_F(ToolsFilterSessionTest, GetAndDeleteCarryNoJsonRpcAndPassThrough) {
  exchange("GET", "s-1", 200, "");  // the server's event stream: no body, not answered 400
  exchange("DELETE", "s-1", 404, "");
}

}  // namespace
}  // namespace sluice
