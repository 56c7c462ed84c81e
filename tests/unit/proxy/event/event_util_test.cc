// Timer (proxy/event/event_util.h): armed() is kept beside the event instead of
// asked of libevent; it must agree with event_pending at every step.

#include "proxy/event/event_util.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using namespace std::chrono_literals;

class TimerTest : public ::testing::Test {
 protected:
  /** Runs the loop until nothing is active or pending soon (timers here are 0 ms). */
  void runOnce() { event_base_loop(base_.get(), EVLOOP_NONBLOCK); }

  EventBasePtr base_{event_base_new()};
};

TEST_F(TimerTest, ArmedFollowsArmFireAndDisarm) {
  int fired = 0;
  Timer timer(base_.get(), [&] { ++fired; });
  EXPECT_FALSE(timer.armed());
  timer.disarm();  // disarming an idle timer is harmless
  EXPECT_FALSE(timer.armed());

  timer.arm(1h);
  EXPECT_TRUE(timer.armed());
  timer.disarm();
  EXPECT_FALSE(timer.armed());
  runOnce();
  EXPECT_EQ(fired, 0);

  timer.arm(0ms);
  EXPECT_TRUE(timer.armed());
  runOnce();
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(timer.armed());  // a one-shot timer is no longer armed once it fired
  runOnce();
  EXPECT_EQ(fired, 1);
}

TEST_F(TimerTest, ReArmedFromItsOwnCallbackStaysArmed) {
  int fired = 0;
  Timer* self = nullptr;
  Timer timer(base_.get(), [&] {
    ++fired;
    EXPECT_FALSE(self->armed());
    if (fired == 1) self->arm(1h);
  });
  self = &timer;
  timer.arm(0ms);
  runOnce();
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(timer.armed());  // armed again by its callback
  timer.disarm();
  EXPECT_FALSE(timer.armed());
  runOnce();
  EXPECT_EQ(fired, 1);
}

TEST_F(TimerTest, DisarmedBetweenExpiryAndCallbackDoesNotFire) {
  // Two timers due in one loop turn, both already in libevent's active
  // queue: whichever runs first disarms the other, which must not run.
  int fired = 0;
  Timer* a_ptr = nullptr;
  Timer* b_ptr = nullptr;
  Timer a(base_.get(), [&] {
    ++fired;
    EXPECT_TRUE(b_ptr->armed());
    b_ptr->disarm();
    EXPECT_FALSE(b_ptr->armed());
  });
  Timer b(base_.get(), [&] {
    ++fired;
    EXPECT_TRUE(a_ptr->armed());
    a_ptr->disarm();
    EXPECT_FALSE(a_ptr->armed());
  });
  a_ptr = &a;
  b_ptr = &b;
  a.arm(0ms);
  b.arm(0ms);
  runOnce();
  runOnce();
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(a.armed());
  EXPECT_FALSE(b.armed());
}

}  // namespace
}  // namespace sluice
