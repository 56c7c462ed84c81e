// ExchangeTimers: an Exchange's named slots and its filters' timers served by
// one scheduler timer at the earliest, on simulated time.

#include "proxy/exchange/exchange_timers.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/simulated_time.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;

class RecordingOwner : public ExchangeTimers::Owner {
 public:
  void onSlot(ExchangeSlot slot) override {
    fired.push_back("slot" + std::to_string(static_cast<int>(slot)));
    if (on_slot) on_slot(slot);
  }
  bool timersLive() const override { return live; }

  std::vector<std::string> fired;
  std::function<void(ExchangeSlot)> on_slot;
  bool live = true;
};

class ExchangeTimersTest : public ::testing::Test {
 protected:
  ExchangeTimersTest() : time(clock), dispatcher(clock, &time), timers(dispatcher, owner) {}

  MonotonicTime at(int ms) const { return start + milliseconds(ms); }

  ManualClock clock;
  test::SimulatedScheduler time;
  Dispatcher dispatcher;
  RecordingOwner owner;
  ExchangeTimers timers;
  const MonotonicTime start = clock.now();
};

TEST_F(ExchangeTimersTest, NothingArmedMeansNoWake) {
  EXPECT_EQ(timers.earliest(), MonotonicTime::max());
  EXPECT_FALSE(time.nextDue().has_value());
}

TEST_F(ExchangeTimersTest, SlotsAndCallbacksFireAtTheirTimesInDueOrder) {
  timers.arm(ExchangeSlot::Deadline, at(300));
  timers.armCallback(at(100), [this] { owner.fired.push_back("filter"); });
  timers.arm(ExchangeSlot::Connect, at(200));
  EXPECT_EQ(timers.earliest(), at(100));
  ASSERT_TRUE(time.nextDue().has_value());
  EXPECT_EQ(*time.nextDue(), at(100));  // one wake, at the earliest

  time.advance(milliseconds(150));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"filter"}));
  time.advance(milliseconds(100));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"filter", "slot1"}));
  EXPECT_TRUE(timers.armed(ExchangeSlot::Deadline));
  EXPECT_FALSE(timers.armed(ExchangeSlot::Connect));
  time.advance(milliseconds(100));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"filter", "slot1", "slot0"}));
  EXPECT_FALSE(time.nextDue().has_value());
}

TEST_F(ExchangeTimersTest, TimersDueTogetherRunInTheOrderTheyWereArmed) {
  timers.arm(ExchangeSlot::Idle, at(50));
  timers.armCallback(at(50), [this] { owner.fired.push_back("filter"); });
  timers.arm(ExchangeSlot::Deadline, at(50));
  time.advance(milliseconds(60));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"slot3", "filter", "slot0"}));
}

TEST_F(ExchangeTimersTest, DisarmedTimersNeverFireAndAnEarlyWakeSleepsAgain) {
  timers.arm(ExchangeSlot::FirstByte, at(100));
  const TimerId id = timers.armCallback(at(50), [this] { owner.fired.push_back("filter"); });
  timers.arm(ExchangeSlot::Deadline, at(400));
  timers.disarmCallback(id);
  timers.disarm(ExchangeSlot::FirstByte);
  // The wake stays at 50 ms (moved only earlier); firing there finds nothing
  // due and sleeps until the deadline.
  time.advance(milliseconds(60));
  EXPECT_TRUE(owner.fired.empty());
  ASSERT_TRUE(time.nextDue().has_value());
  EXPECT_EQ(*time.nextDue(), at(400));
  time.advance(milliseconds(400));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"slot0"}));
}

TEST_F(ExchangeTimersTest, ReArmingASlotReplacesItsTime) {
  timers.arm(ExchangeSlot::Idle, at(100));
  timers.arm(ExchangeSlot::Idle, at(300));
  time.advance(milliseconds(200));
  EXPECT_TRUE(owner.fired.empty());
  time.advance(milliseconds(200));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"slot3"}));
}

TEST_F(ExchangeTimersTest, ACallbackMayArmAnotherTimerThatIsAlreadyDue) {
  timers.armCallback(at(10), [this] {
    owner.fired.push_back("first");
    timers.arm(ExchangeSlot::RetryDelay, clock.now());  // due at once
  });
  time.advance(milliseconds(10));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"first", "slot4"}));
}

TEST_F(ExchangeTimersTest, NothingRunsOnceTheOwnerFinished) {
  timers.arm(ExchangeSlot::Connect, at(10));
  timers.arm(ExchangeSlot::Deadline, at(10));
  owner.on_slot = [this](ExchangeSlot) { owner.live = false; };  // the first ends the exchange
  time.advance(milliseconds(20));
  EXPECT_EQ(owner.fired.size(), 1u);
}

TEST_F(ExchangeTimersTest, ClearDisarmsEverything) {
  timers.arm(ExchangeSlot::Deadline, at(10));
  timers.armCallback(at(5), [this] { owner.fired.push_back("filter"); });
  timers.clear();
  EXPECT_EQ(timers.earliest(), MonotonicTime::max());
  EXPECT_FALSE(time.nextDue().has_value());
  time.advance(milliseconds(50));
  EXPECT_TRUE(owner.fired.empty());
}

TEST_F(ExchangeTimersTest, ArmingManyTimersLaterThanTheWakeDoesNotReArmIt) {
  timers.arm(ExchangeSlot::Deadline, at(1000));
  const uint64_t arms = time.arms();
  for (int i = 0; i < 10; ++i) timers.armCallback(at(2000 + i), [] {});
  timers.arm(ExchangeSlot::Idle, at(1500));
  EXPECT_EQ(time.arms(), arms);  // one scheduler arm serves them all
}

TEST_F(ExchangeTimersTest, TheDeadlineArmsItsSlotAndOnlyALowerOneReplacesIt) {
  EXPECT_EQ(timers.deadline(), MonotonicTime::max());  // unbounded until set
  timers.setDeadline(at(1000));
  EXPECT_EQ(timers.deadline(), at(1000));
  EXPECT_EQ(timers.deadlineReason(), CancelReason::BudgetExhausted);
  EXPECT_TRUE(timers.armed(ExchangeSlot::Deadline));

  timers.lowerDeadline(at(2000), CancelReason::RunDeadline);  // later: ignored
  EXPECT_EQ(timers.deadline(), at(1000));
  EXPECT_EQ(timers.deadlineReason(), CancelReason::BudgetExhausted);

  timers.lowerDeadline(at(400), CancelReason::RunDeadline);
  EXPECT_EQ(timers.deadline(), at(400));
  EXPECT_EQ(timers.deadlineReason(), CancelReason::RunDeadline);
  time.advance(milliseconds(400));
  EXPECT_EQ(owner.fired, (std::vector<std::string>{"slot0"}));  // once, at the lower deadline
}

TEST_F(ExchangeTimersTest, SettingTheDeadlineAgainMeansTheBudgetAndClearKeepsIt) {
  timers.lowerDeadline(at(300), CancelReason::RunDeadline);
  timers.setDeadline(at(500));  // the budget's own, even later than a lowered one
  EXPECT_EQ(timers.deadline(), at(500));
  EXPECT_EQ(timers.deadlineReason(), CancelReason::BudgetExhausted);
  timers.clear();
  EXPECT_FALSE(timers.armed(ExchangeSlot::Deadline));
  EXPECT_EQ(timers.deadline(), at(500));  // what a cancel's answer names as the budget
}

}  // namespace
}  // namespace sluice
