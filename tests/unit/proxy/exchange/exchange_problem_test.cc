// problemForCancel: the answer to every cancel reason, as a table.

#include "proxy/exchange/exchange_problem.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

using std::chrono::milliseconds;

struct Row {
  CancelReason reason;
  int status;
  std::string slug;
  std::string detail_has;
  bool keeps_retry_after;
};

TEST(ExchangeProblemTest, EveryCancelReasonHasItsAnswer) {
  CancelContext context;
  context.upstream = "openai";
  context.budget = milliseconds(1500);
  context.attempts = 2;
  const Row rows[] = {
      {CancelReason::BudgetExhausted, 504, "budget-exhausted", "budget of 1500 ms ran out after 2",
       false},
      {CancelReason::UpstreamTimeout, 504, "upstream-timeout", "upstream openai stopped sending",
       false},
      {CancelReason::CircuitOpen, 503, "circuit-open", "upstream openai is failing", true},
      {CancelReason::RateLimited, 429, "rate-limited", "upstream openai quota", true},
      {CancelReason::Overloaded, 503, "overloaded", "waiting for upstream openai", true},
      {CancelReason::Draining, 503, "draining", "draining", true},
      {CancelReason::ClientDisconnect, 499, "client-disconnect", "went away", false},
      {CancelReason::ClientStalled, 499, "client-stalled", "limits.send_timeout", false},
      {CancelReason::UpstreamReset, 502, "upstream-reset", "upstream openai broke the response",
       false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(toString(row.reason)));
    const Problem p = problemForCancel(row.reason, context, milliseconds(700));
    EXPECT_EQ(p.slug, row.slug);
    EXPECT_NE(p.detail.find(row.detail_has), std::string::npos) << p.detail;
    EXPECT_EQ(p.cancel_reason, row.reason);
    EXPECT_EQ(p.retry_after.has_value(), row.keeps_retry_after);
    EXPECT_EQ(p.status, row.status);
  }
}

TEST(ExchangeProblemTest, EveryReasonIsCovered) {
  for (CancelReason reason : kAllCancelReasons) {
    const Problem p = problemForCancel(reason, CancelContext{}, std::nullopt);
    EXPECT_EQ(p.cancel_reason, reason) << toString(reason);
    EXPECT_FALSE(p.detail.empty());
  }
}

TEST(ExchangeProblemTest, AnUnboundedBudgetIsNotNamed) {
  const Problem p = problemForCancel(CancelReason::BudgetExhausted, CancelContext{}, std::nullopt);
  EXPECT_EQ(p.detail.find(" ms"), std::string::npos) << p.detail;
  EXPECT_NE(p.detail.find("after 0 attempt(s)"), std::string::npos) << p.detail;
}

TEST(ExchangeProblemTest, RefusedRequestsAndBrokenAttemptsHaveTheirAnswers) {
  RequestHead head;
  head.method = "POST";
  head.path = "/v2/x?y=1";
  EXPECT_EQ(noRouteProblem(head).status, 404);
  EXPECT_NE(noRouteProblem(head).detail.find("no route matches POST /v2/x"), std::string::npos);
  const std::string model = "gpt-9";
  EXPECT_NE(noRouteProblem(head, &model).detail.find(R"(for model "gpt-9")"), std::string::npos);
  EXPECT_EQ(bodyTooLargeProblem(16).status, 413);
  EXPECT_NE(bodyTooLargeProblem(16).detail.find("limit of 16 bytes"), std::string::npos);
  EXPECT_EQ(bodyOverloadedProblem(1024).status, 503);
  EXPECT_EQ(bodyOverloadedProblem(1024).cancel_reason, CancelReason::Overloaded);
  EXPECT_EQ(upstreamErrorProblem(UpstreamError::ConnectError, "d").status, 502);
  EXPECT_EQ(upstreamErrorProblem(UpstreamError::Reset, "d").detail, "d");
  EXPECT_NE(connectTimeoutProblem("up", "e1").detail.find("upstream up (e1)"), std::string::npos);
}

TEST(ExchangeProblemTest, AProblemReplyIsJsonRpcOnAnMcpRouteAndCountsTheAttempts) {
  const Problem p = upstreamErrorProblem(UpstreamError::Reset, "broke");
  const LocalReply plain = problemReply(p, /*mcp_route=*/false, std::nullopt, 0);
  EXPECT_EQ(plain.head.status, 502);
  EXPECT_FALSE(plain.head.headers.has("x-sluice-attempts"));
  EXPECT_EQ(plain.head.headers.get("content-type").value_or(""), "application/problem+json");
  const LocalReply mcp = problemReply(p, /*mcp_route=*/true, std::string("7"), 2);
  EXPECT_EQ(mcp.head.headers.get("x-sluice-attempts").value_or(""), "2");
  EXPECT_NE(mcp.body.find(R"("id":7)"), std::string::npos);
}

TEST(ExchangeProblemTest, TheClientGetsSluicesRequestIdAndTheProvidersAlongside) {
  ResponseHead upstream;
  upstream.headers.add("x-request-id", "theirs");
  stampRequestId(upstream, "ours", /*from_upstream=*/true);
  EXPECT_EQ(upstream.headers.get("x-request-id").value_or(""), "ours");
  EXPECT_EQ(upstream.headers.get("x-sluice-upstream-request-id").value_or(""), "theirs");
  EXPECT_FALSE(upstream.headers.has("request-id"));
  ResponseHead own;
  stampRequestId(own, "ours", /*from_upstream=*/false);
  EXPECT_EQ(own.headers.get("request-id").value_or(""), "ours");
}

}  // namespace
}  // namespace sluice
