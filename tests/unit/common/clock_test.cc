// RealClock and EventTimeScope: inside one event the clock is read once;
// outside any, every read is fresh; preciseNow() always reads.

#include "common/clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace sluice {
namespace {

// Waits (without sleeping) until the steady clock has moved past `t`.
void passTime(MonotonicTime t) {
  while (std::chrono::steady_clock::now() <= t) {
  }
}

TEST(ClockTest, OutsideAnEventEveryReadIsFresh) {
  const RealClock& clock = RealClock::instance();
  const MonotonicTime first = clock.now();
  passTime(first);
  EXPECT_GT(clock.now(), first);
}

TEST(ClockTest, InsideAnEventEveryReadGivesTheFirstReading) {
  const RealClock& clock = RealClock::instance();
  const EventTimeScope event;
  const MonotonicTime first = clock.now();
  passTime(first);
  EXPECT_EQ(clock.now(), first);
  EXPECT_EQ(clock.now(), first);
  EXPECT_GT(clock.preciseNow(), first);
}

TEST(ClockTest, TheEventsTimeIsTakenAtTheFirstReadNotWhenTheScopeOpens) {
  const RealClock& clock = RealClock::instance();
  const EventTimeScope event;
  const MonotonicTime opened = std::chrono::steady_clock::now();
  passTime(opened);
  EXPECT_GT(clock.now(), opened);
}

TEST(ClockTest, NestedScopesShareTheOutermostTimeAndTheNextEventReadsAgain) {
  const RealClock& clock = RealClock::instance();
  MonotonicTime first;
  {
    const EventTimeScope outer;
    first = clock.now();
    passTime(first);
    {
      const EventTimeScope inner;
      EXPECT_EQ(clock.now(), first);
    }
    passTime(first);
    EXPECT_EQ(clock.now(), first);  // the inner scope's end kept the outer's time
  }
  const EventTimeScope next;
  EXPECT_GT(clock.now(), first);
}

TEST(ClockTest, AnotherThreadsEventDoesNotFreezeThisThreadsClock) {
  const RealClock& clock = RealClock::instance();
  const EventTimeScope event;
  const MonotonicTime here = clock.now();
  MonotonicTime there_first;
  MonotonicTime there_second;
  std::thread other([&] {
    there_first = clock.now();  // no scope on this thread
    passTime(there_first);
    there_second = clock.now();
  });
  other.join();
  EXPECT_GT(there_first, here);
  EXPECT_GT(there_second, there_first);
  EXPECT_EQ(clock.now(), here);
}

TEST(ClockTest, AManualClockIsNotCachedByAnEvent) {
  ManualClock clock;
  const EventTimeScope event;
  const MonotonicTime first = clock.now();
  clock.advance(std::chrono::seconds(1));
  EXPECT_EQ(clock.now() - first, std::chrono::seconds(1));
  EXPECT_EQ(clock.preciseNow(), clock.now());
}

}  // namespace
}  // namespace sluice
