// QuotaReportGate (proxy/quota_report_gate.h): which quota reports can change
// the fleet's count in Redis, so the rest are not sent.

#include "proxy/quota_report_gate.h"

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

}  // namespace
}  // namespace sluice
