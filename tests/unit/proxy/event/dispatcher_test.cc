// Dispatcher: the inbox other threads post() to, and exit() from any thread.
// libevent runs without its own locks (no evthread_use_pthreads), so these
// are the only ways in from another thread; they must neither lose work nor
// run it anywhere but on the loop's thread.

#include "proxy/event/dispatcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace sluice {
namespace {

// Waits (without sleeping) until the steady clock has moved past `t`.
void passTime(MonotonicTime t) {
  while (std::chrono::steady_clock::now() <= t) {
  }
}

TEST(DispatcherTest, WorkPostedFromManyThreadsAllRunsOnTheLoopThread) {
  RealClock clock;
  Dispatcher dispatcher(clock);
  constexpr int kThreads = 4;
  constexpr int kPostsEach = 5000;
  std::atomic<std::thread::id> loop_thread{};
  int ran = 0;  // touched on the loop thread only
  int elsewhere = 0;

  std::thread loop([&] {
    loop_thread = std::this_thread::get_id();
    dispatcher.run();
  });
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&] {
      for (int i = 0; i < kPostsEach; ++i) {
        dispatcher.post([&] {
          if (std::this_thread::get_id() != loop_thread.load()) ++elsewhere;
          ++ran;
        });
      }
    });
  }
  for (auto& p : posters) p.join();
  // Posted after every other post: it runs after them, then the loop ends.
  dispatcher.exit();
  loop.join();
  EXPECT_EQ(ran, kThreads * kPostsEach);
  EXPECT_EQ(elsewhere, 0);
}

TEST(DispatcherTest, ExitFromTheLoopThreadRunsTheRestOfTheBatchThenStops) {
  RealClock clock;
  Dispatcher dispatcher(clock);
  std::vector<int> order;
  dispatcher.post([&] {
    order.push_back(1);
    dispatcher.exit();
  });
  dispatcher.post([&] { order.push_back(2); });
  dispatcher.run();  // returns: exit() came from inside the loop
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(DispatcherTest, RunNonBlockingTakesWhatWasPostedBeforeIt) {
  RealClock clock;
  Dispatcher dispatcher(clock);
  int ran = 0;
  std::thread poster([&] { dispatcher.post([&] { ++ran; }); });
  poster.join();
  dispatcher.runNonBlocking();
  EXPECT_EQ(ran, 1);
  dispatcher.runNonBlocking();  // nothing new: the wake was consumed
  EXPECT_EQ(ran, 1);
}

// Every callback is one event for the clock (common/clock.h): its reads give
// the first one's time; the next callback reads the clock again.
TEST(DispatcherTest, EachCallbackReadsTheRealClockOnce) {
  const RealClock& clock = RealClock::instance();
  Dispatcher dispatcher(clock);
  MonotonicTime posted_first;
  MonotonicTime posted_later;
  std::optional<MonotonicTime> timer_first;
  std::optional<MonotonicTime> timer_later;
  ScheduledTimerPtr timer = dispatcher.createTimer([&] {
    timer_first = clock.now();
    passTime(*timer_first);
    timer_later = clock.now();
  });
  dispatcher.post([&] {
    posted_first = clock.now();
    passTime(posted_first);
    posted_later = clock.now();
    timer->arm(std::chrono::nanoseconds(0));
  });
  dispatcher.runNonBlocking();
  while (!timer_first) dispatcher.runNonBlocking();
  EXPECT_EQ(posted_later, posted_first);
  EXPECT_EQ(*timer_later, *timer_first);
  EXPECT_GT(*timer_first, posted_first);
  EXPECT_GT(clock.now(), *timer_first);  // outside any callback: read each time
}

}  // namespace
}  // namespace sluice
