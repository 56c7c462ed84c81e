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

}  // namespace
}  // namespace sluice
