// InFlightGauge: the count drain() waits on without polling.

#include "proxy/exchange/in_flight_gauge.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace sluice {
namespace {

TEST(InFlightGaugeTest, AWaiterWakesWhenTheLastExchangeIsRemoved) {
  InFlightGauge gauge;
  gauge.add();
  gauge.add();
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    gauge.waitForZero();
    woke = true;
  });
  gauge.remove();
  EXPECT_EQ(gauge.value(), 1u);
  gauge.remove();  // the waiter must wake now (a missed wake-up hangs: ctest's timeout fails it)
  waiter.join();
  EXPECT_TRUE(woke);
}

TEST(InFlightGaugeTest, AWaitWithADeadlineThatPassedAnswersAtOnce) {
  InFlightGauge gauge;
  gauge.add();
  EXPECT_FALSE(gauge.waitForZero(std::chrono::steady_clock::now()));
  gauge.remove();
  EXPECT_TRUE(gauge.waitForZero(std::chrono::steady_clock::now()));
}

TEST(InFlightGaugeTest, RemovingTheRestOfAStoppedWorkerNeverGoesBelowZero) {
  InFlightGauge gauge;
  gauge.add();
  gauge.remove(3);
  EXPECT_EQ(gauge.value(), 0u);
  gauge.add();
  EXPECT_EQ(gauge.value(), 1u);
}

}  // namespace
}  // namespace sluice
