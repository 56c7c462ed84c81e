// Tests for sluice's answers in the MCP dialect (common/jsonrpc_error.h).

#include "common/jsonrpc_error.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice {
namespace {

using nlohmann::json;

TEST(JsonRpcErrorTest, CodesByKind) {
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kBudgetExhausted, "x")), -32001);
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kRunDeadlineExceeded, "x")), -32001);
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kUpstreamTimeout, "x")), -32001);
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kCircuitOpen, "x")), -32000);
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kRateLimited, "x")), -32000);
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kRunCancelled, "x")), -32000);
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kJsonRpcParseError, "x")), -32700);
  EXPECT_EQ(jsonRpcErrorCode(makeProblem(problems::kJsonRpcInvalidRequest, "x")), -32600);
}

TEST(JsonRpcErrorTest, ARequestGets200WithTheErrorForItsId) {
  const Problem p = makeProblem(problems::kBudgetExhausted, "the request's time budget ran out",
                                CancelReason::BudgetExhausted);
  const LocalReply reply = makeMcpReply(p, std::string_view(R"("req-7")"));
  EXPECT_EQ(reply.head.status, 200);
  EXPECT_EQ(reply.head.headers.get("content-type"), "application/json");
  const json body = json::parse(reply.body);
  EXPECT_EQ(body["jsonrpc"], "2.0");
  EXPECT_EQ(body["id"], "req-7");
  EXPECT_EQ(body["error"]["code"], -32001);
  EXPECT_EQ(body["error"]["message"], "sluice budget-exhausted: the request's time budget ran out");
  EXPECT_EQ(body["error"]["data"]["type"], "urn:sluice:problem:budget-exhausted");
  EXPECT_EQ(body["error"]["data"]["status"], 504);
  EXPECT_EQ(body["error"]["data"]["cancel_reason"], "budget_exhausted");
}

TEST(JsonRpcErrorTest, RetryAfterStaysOnTheAnswer) {
  const Problem p = makeProblem(problems::kCircuitOpen, "failing", CancelReason::CircuitOpen,
                                std::chrono::milliseconds(1500));
  const LocalReply reply = makeMcpReply(p, std::string_view("3"));
  EXPECT_EQ(json::parse(reply.body)["id"], 3);
  EXPECT_EQ(reply.head.headers.get("retry-after"), "2");
  EXPECT_EQ(reply.head.headers.get("retry-after-ms"), "1500");
}

TEST(JsonRpcErrorTest, ANotificationGetsTheProblem) {
  const Problem p = makeProblem(problems::kCircuitOpen, "failing", CancelReason::CircuitOpen);
  const LocalReply reply = makeMcpReply(p, std::nullopt);
  EXPECT_EQ(reply.head.status, 503);
  EXPECT_EQ(reply.head.headers.get("content-type"), "application/problem+json");
}

TEST(JsonRpcErrorTest, NotJsonRpcIs400WithANullId) {
  const LocalReply reply =
      makeMcpReply(makeProblem(problems::kJsonRpcParseError, "not JSON"), std::nullopt);
  EXPECT_EQ(reply.head.status, 400);
  EXPECT_EQ(reply.head.headers.get("content-type"), "application/json");
  const json body = json::parse(reply.body);
  EXPECT_TRUE(body["id"].is_null());
  EXPECT_EQ(body["error"]["code"], -32700);

  const LocalReply invalid =
      makeMcpReply(makeProblem(problems::kJsonRpcInvalidRequest, "no name"), std::string_view("9"));
  EXPECT_EQ(invalid.head.status, 400);
  EXPECT_EQ(json::parse(invalid.body)["id"], 9);
  EXPECT_EQ(json::parse(invalid.body)["error"]["code"], -32600);
}

TEST(JsonRpcErrorTest, FinalEventIsAMessageEvent) {
  const std::string event =
      mcpErrorEvent(makeProblem(problems::kUpstreamReset, "broke"), std::string_view("4"));
  ASSERT_EQ(event.rfind("event: message\ndata: ", 0), 0u);
  ASSERT_EQ(event.substr(event.size() - 2), "\n\n");
  const json body = json::parse(event.substr(21, event.size() - 23));
  EXPECT_EQ(body["id"], 4);
  EXPECT_EQ(body["error"]["code"], -32000);
  EXPECT_EQ(sseErrorEvent(SseDialect::Mcp, makeProblem(problems::kUpstreamReset, "x")), "");
}

}  // namespace
}  // namespace sluice
