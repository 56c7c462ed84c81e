// SendStallWatch waking through its owner's timer (an Alarm: the HTTP/1.1
// connection's read timer): it asks for one wake per wait, at the deadline
// the last progress sets, asks again for what is left when woken early, lets
// the wait lapse when the output drained, and reports a stall exactly once.
// The own-Timer mode (HTTP/2) and the connection's use of the alarm are
// covered end to end by LimitsTest.*SendTimeout*.

#include "proxy/downstream/send_stall_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "common/clock.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;

class RecordingAlarm : public SendStallWatch::Alarm {
 public:
  void wakeBy(MonotonicTime at) override { wakes.push_back(at); }
  void onSendStalled() override { ++stalls; }
  std::vector<MonotonicTime> wakes;
  int stalls = 0;
};

class SendStallWatchAlarmTest : public ::testing::Test {
 protected:
  SendStallWatchAlarmTest() : dispatcher_(clock_), output_(evbuffer_new()) {}

  void make(milliseconds timeout) {
    watch_ = std::make_unique<SendStallWatch>(dispatcher_, timeout, alarm_);
    watch_->watch(output_.get());
  }
  void add(size_t n) {
    const std::string bytes(n, 'x');
    evbuffer_add(output_.get(), bytes.data(), bytes.size());
  }
  void drain(size_t n) { evbuffer_drain(output_.get(), n); }
  MonotonicTime now() const { return clock_.now(); }

  ManualClock clock_;
  Dispatcher dispatcher_;
  EvBufferPtr output_;
  RecordingAlarm alarm_;
  std::unique_ptr<SendStallWatch> watch_;
};

TEST_F(SendStallWatchAlarmTest, PendingOutputAsksOneWakeAtTheTimeout) {
  make(milliseconds(300));
  EXPECT_TRUE(alarm_.wakes.empty());  // nothing pending yet
  const MonotonicTime t0 = now();
  add(10);
  ASSERT_EQ(alarm_.wakes.size(), 1u);
  EXPECT_EQ(alarm_.wakes[0], t0 + milliseconds(300));
  clock_.advance(milliseconds(50));
  add(10);  // more output while a wake is pending: no second request
  drain(5);
  EXPECT_EQ(alarm_.wakes.size(), 1u);
  EXPECT_EQ(alarm_.stalls, 0);
}

TEST_F(SendStallWatchAlarmTest, AnEarlyWakeAsksAgainForWhatIsLeft) {
  make(milliseconds(300));
  add(10);
  clock_.advance(milliseconds(100));
  drain(4);  // progress at +100: the deadline is +400
  clock_.advance(milliseconds(200));
  const MonotonicTime woke = now();
  EXPECT_FALSE(watch_->onAlarm());  // the shared timer fired for the watch's first deadline
  ASSERT_EQ(alarm_.wakes.size(), 2u);
  EXPECT_EQ(alarm_.wakes[1], woke + milliseconds(100));
  clock_.advance(milliseconds(10));
  EXPECT_FALSE(watch_->onAlarm());  // fired for another reason (a read deadline): asks again
  ASSERT_EQ(alarm_.wakes.size(), 3u);
  EXPECT_EQ(alarm_.wakes[2], woke + milliseconds(100));
  EXPECT_EQ(alarm_.stalls, 0);
}

TEST_F(SendStallWatchAlarmTest, ADrainedBufferLetsTheWaitLapse) {
  make(milliseconds(300));
  add(10);
  drain(10);
  clock_.advance(milliseconds(400));
  EXPECT_FALSE(watch_->onAlarm());
  EXPECT_EQ(alarm_.wakes.size(), 1u);  // nothing asked for: nothing pending
  EXPECT_EQ(alarm_.stalls, 0);
  const MonotonicTime t1 = now();
  add(3);  // pending again: a new wait
  ASSERT_EQ(alarm_.wakes.size(), 2u);
  EXPECT_EQ(alarm_.wakes[1], t1 + milliseconds(300));
}

TEST_F(SendStallWatchAlarmTest, NoByteAcceptedForTheTimeoutIsOneStall) {
  make(milliseconds(300));
  add(10);
  clock_.advance(milliseconds(299));
  EXPECT_FALSE(watch_->onAlarm());
  EXPECT_EQ(alarm_.stalls, 0);
  clock_.advance(milliseconds(1));
  EXPECT_TRUE(watch_->onAlarm());
  EXPECT_EQ(alarm_.stalls, 1);
  // Stopped by the stall: later firings and output do nothing.
  const size_t asked = alarm_.wakes.size();
  clock_.advance(milliseconds(1000));
  EXPECT_FALSE(watch_->onAlarm());
  drain(10);
  add(10);
  EXPECT_EQ(alarm_.wakes.size(), asked);
  EXPECT_EQ(alarm_.stalls, 1);
}

TEST_F(SendStallWatchAlarmTest, StopAndZeroTimeoutWatchNothing) {
  make(milliseconds(300));
  add(10);
  watch_->stop();
  clock_.advance(milliseconds(1000));
  EXPECT_FALSE(watch_->onAlarm());
  add(10);
  EXPECT_EQ(alarm_.wakes.size(), 1u);
  EXPECT_EQ(alarm_.stalls, 0);

  watch_.reset();
  make(milliseconds(0));  // send_timeout off
  add(10);
  clock_.advance(milliseconds(1000));
  EXPECT_FALSE(watch_->onAlarm());
  EXPECT_EQ(alarm_.wakes.size(), 1u);
  EXPECT_EQ(alarm_.stalls, 0);
}

TEST_F(SendStallWatchAlarmTest, OutputAlreadyPendingAtWatchAsksAtOnce) {
  add(10);
  const MonotonicTime t0 = now();
  make(milliseconds(300));
  ASSERT_EQ(alarm_.wakes.size(), 1u);
  EXPECT_EQ(alarm_.wakes[0], t0 + milliseconds(300));
}

// The first constructor's own Timer (HTTP/2's), on real time: a stall is
// reported once the timeout passed without progress; output drained in time
// lets the wait lapse without one.
TEST(SendStallWatchOwnTimerTest, ReportsAStallAfterTheTimeoutAndNotBefore) {
  const RealClock& clock = RealClock::instance();
  Dispatcher dispatcher(clock);
  EvBufferPtr output(evbuffer_new());
  int stalls = 0;
  // A timeout far above a loaded machine's scheduling hiccups: the drain
  // below follows the add at once, so only a stall of the whole process for
  // this long could fire the watch early.
  constexpr milliseconds kTimeout(300);
  SendStallWatch watch(dispatcher, kTimeout, [&] { ++stalls; });
  watch.watch(output.get());
  const auto run_for = [&](milliseconds d) {
    const MonotonicTime until = clock.now() + d;
    while (clock.now() < until) event_base_loop(dispatcher.base(), EVLOOP_NONBLOCK);
  };
  evbuffer_add(output.get(), "abc", 3);
  event_base_loop(dispatcher.base(), EVLOOP_NONBLOCK);
  evbuffer_drain(output.get(), 3);  // drained in time: no stall
  run_for(kTimeout + milliseconds(50));
  EXPECT_EQ(stalls, 0);
  const MonotonicTime added = clock.now();
  evbuffer_add(output.get(), "abc", 3);
  while (stalls == 0 && clock.now() < added + std::chrono::seconds(10)) {
    event_base_loop(dispatcher.base(), EVLOOP_ONCE);
  }
  EXPECT_EQ(stalls, 1);
  EXPECT_GE(clock.now() - added, kTimeout);
  run_for(milliseconds(50));
  EXPECT_EQ(stalls, 1);  // stopped by the stall
}

}  // namespace
}  // namespace sluice
