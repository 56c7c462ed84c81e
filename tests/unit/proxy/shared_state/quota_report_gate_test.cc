// QuotaReportGate (proxy/shared_state/quota_report_gate.h): which quota reports can change
// the fleet's count in Redis, so the rest are not sent.

#include "proxy/shared_state/quota_report_gate.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kRefresh{1000};

struct GateTest : ::testing::Test {
  ManualClock clock;
  QuotaReportGate gate{/*reserve=*/1, kRefresh};
  MonotonicTime at(milliseconds from_now) const { return clock.now() + from_now; }
};

TEST_F(GateTest, TheFirstReportOfAKeyGoes) {
  EXPECT_TRUE(gate.shouldReport("k", 100, 0, at(milliseconds(60000)), clock.now()));
  EXPECT_TRUE(gate.shouldReport("other", 100, 0, at(milliseconds(60000)), clock.now()));
}

TEST_F(GateTest, AReportThatSaysNoLessThanTheFleetKnowsIsNotSent) {
  const auto reset = at(milliseconds(60000));
  gate.learned("k", 90, reset, clock.now());
  clock.advance(milliseconds(10));
  EXPECT_FALSE(gate.shouldReport("k", 90, 0, reset, clock.now()));
  EXPECT_FALSE(gate.shouldReport("k", 95, 0, reset + milliseconds(50), clock.now()));
  // Lower than the fleet's count: the provider knows of requests the fleet does not.
  EXPECT_TRUE(gate.shouldReport("k", 80, 0, reset, clock.now()));
  // ... and that lower count is now what the gate compares with.
  EXPECT_FALSE(gate.shouldReport("k", 80, 0, reset, clock.now()));
  EXPECT_TRUE(gate.shouldReport("k", 79, 0, reset, clock.now()));
}

TEST_F(GateTest, RequestsInFlightAreSlackOnlyFarFromTheReserve) {
  const auto reset = at(milliseconds(60000));
  gate.learned("k", 50, reset, clock.now());
  // remaining 52, 4 unanswered: fresh 48, possibly counted twice: no news.
  EXPECT_FALSE(gate.shouldReport("k", 52, 4, reset, clock.now()));
  // Near the reserve every lower count goes.
  gate.learned("k", 6, reset, clock.now());
  EXPECT_TRUE(gate.shouldReport("k", 8, 4, reset, clock.now()));
}

TEST_F(GateTest, ALaterWindowOrAnUnknownOrPassedResetIsAlwaysReported) {
  const auto reset = at(milliseconds(2000));
  gate.learned("k", 1, reset, clock.now());
  EXPECT_TRUE(gate.shouldReport("k", 100, 0, reset + milliseconds(2000), clock.now()));
  EXPECT_FALSE(gate.shouldReport("k", 100, 0, reset + milliseconds(2000), clock.now()));

  gate.learned("j", 10, std::nullopt, clock.now());  // just refilled: the reset is unknown
  EXPECT_TRUE(gate.shouldReport("j", 10, 0, at(milliseconds(2000)), clock.now()));

  gate.learned("p", 10, at(milliseconds(100)), clock.now());
  clock.advance(milliseconds(100));  // the window passed
  EXPECT_TRUE(gate.shouldReport("p", 10, 0, std::nullopt, clock.now()));
}

TEST_F(GateTest, OneReportPerKeyAndRefreshGoesAnyway) {
  const auto reset = at(milliseconds(60000));
  gate.learned("k", 90, reset, clock.now());
  clock.advance(kRefresh - milliseconds(1));
  EXPECT_FALSE(gate.shouldReport("k", 90, 0, reset, clock.now()));
  clock.advance(milliseconds(1));
  EXPECT_TRUE(gate.shouldReport("k", 90, 0, reset, clock.now()));
  EXPECT_FALSE(gate.shouldReport("k", 90, 0, reset, clock.now()));
}

TEST_F(GateTest, ForgettingKeysPastTheBoundOnlyMeansMoreReports) {
  const auto reset = at(milliseconds(60000));
  gate.learned("k", 90, reset, clock.now());
  for (size_t i = 0; i < QuotaReportGate::kMaxKeys; ++i) {
    gate.shouldReport("key-" + std::to_string(i), 10, 0, reset, clock.now());
  }
  EXPECT_TRUE(gate.shouldReport("k", 90, 0, reset, clock.now()));
}

// --- the token counter -------------------------------------------------------------

constexpr auto kTokens = QuotaReportGate::Counter::kTokens;

TEST_F(GateTest, TheTokenCounterIsGatedOnItsOwn) {
  const auto reset = at(milliseconds(60000));
  // The first token report of a key goes even though its requests are known.
  gate.learned("k", 90, reset, clock.now());
  EXPECT_TRUE(gate.shouldReport("k", 5000, 0, reset, clock.now(), kTokens));
  EXPECT_FALSE(gate.shouldReport("k", 5000, 0, reset, clock.now(), kTokens));
  // A request report that changes nothing is still held back.
  EXPECT_FALSE(gate.shouldReport("k", 90, 0, reset, clock.now()));
  // A lower token count goes, and is what the gate compares with from now on.
  EXPECT_TRUE(gate.shouldReport("k", 4000, 0, reset, clock.now(), kTokens));
  EXPECT_FALSE(gate.shouldReport("k", 4500, 0, reset, clock.now(), kTokens));
  EXPECT_TRUE(gate.shouldReport("k", 3999, 0, reset, clock.now(), kTokens));
}

TEST_F(GateTest, WhatTheFleetHasLeftOfTokensIsLearnedFromAReserve) {
  const auto reset = at(milliseconds(60000));
  gate.learned("k", 3000, reset, clock.now(), kTokens);
  clock.advance(milliseconds(10));
  EXPECT_FALSE(gate.shouldReport("k", 3000, 0, reset, clock.now(), kTokens));
  EXPECT_TRUE(gate.shouldReport("k", 2999, 0, reset, clock.now(), kTokens));
  // Learning the token count says nothing of the request count: its first report goes.
  EXPECT_TRUE(gate.shouldReport("k", 90, 0, reset, clock.now()));
}

TEST_F(GateTest, TokensInFlightAreSlackOnlyFarFromEmpty) {
  const auto reset = at(milliseconds(60000));
  gate.learned("k", 5000, reset, clock.now(), kTokens);
  // 5200 remaining, 400 tokens unanswered: fresh 4800, possibly counted twice: no news.
  EXPECT_FALSE(gate.shouldReport("k", 5200, 400, reset, clock.now(), kTokens));
  // Near empty (tokens have no reserve) every lower count goes.
  gate.learned("k", 600, reset, clock.now(), kTokens);
  EXPECT_TRUE(gate.shouldReport("k", 900, 400, reset, clock.now(), kTokens));
}

TEST_F(GateTest, ALaterTokenWindowAndTheRefreshGoAnyway) {
  const auto reset = at(milliseconds(2000));
  gate.learned("k", 0, reset, clock.now(), kTokens);
  EXPECT_TRUE(gate.shouldReport("k", 6000, 0, reset + milliseconds(2000), clock.now(), kTokens));
  EXPECT_FALSE(gate.shouldReport("k", 6000, 0, reset + milliseconds(2000), clock.now(), kTokens));
  clock.advance(kRefresh);
  EXPECT_TRUE(gate.shouldReport("k", 6000, 0, reset + milliseconds(2000), clock.now(), kTokens));

  gate.learned("j", 10, std::nullopt, clock.now(), kTokens);  // just refilled
  EXPECT_TRUE(gate.shouldReport("j", 10, 0, at(milliseconds(2000)), clock.now(), kTokens));
}

}  // namespace
}  // namespace sluice
