#pragma once

// Simulated time for unit tests (Envoy's SimulatedTimeSystem): a Scheduler
// (proxy/event/scheduler.h) whose timers fire only when the test advances its
// ManualClock through it. Give it to a Dispatcher and everything that arms
// timers through that Dispatcher — an Exchange's backoff, deadline, connect,
// first-byte and idle timers, the filters' timers — runs on simulated time:
// no sleeps, no wall-clock thresholds, the same order on any machine.
//
// Header-only so unit tests can use it without linking tests/support.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "proxy/event/scheduler.h"

namespace sluice::test {

class SimulatedScheduler final : public Scheduler {
 public:
  explicit SimulatedScheduler(ManualClock& clock) : clock_(clock) {}
  SimulatedScheduler(const SimulatedScheduler&) = delete;
  SimulatedScheduler& operator=(const SimulatedScheduler&) = delete;

  ScheduledTimerPtr createTimer(std::function<void()> cb) override {
    return std::make_unique<SimTimer>(*this, std::move(cb));
  }

  /**
   * Moves time forward by `d`, firing every timer that comes due on the way
   * in due-time order (ties in arming order), with the clock standing at
   * each timer's due time while it runs. A callback may arm timers; those
   * due within the window fire too.
   */
  void advance(std::chrono::nanoseconds d) {
    const MonotonicTime target = clock_.now() + d;
    while (SimTimer* next = earliestDue(target)) {
      if (*next->due_ > clock_.now()) clock_.advance(*next->due_ - clock_.now());
      next->due_.reset();
      const std::function<void()> cb = next->cb_;  // the callback may destroy its timer
      cb();
    }
    if (target > clock_.now()) clock_.advance(target - clock_.now());
  }
  template <class Rep, class Period>
  void advance(std::chrono::duration<Rep, Period> d) {
    advance(std::chrono::duration_cast<std::chrono::nanoseconds>(d));
  }
  /** Fires the timers due now (armed with a zero or negative delay), without moving time. */
  void runDue() { advance(std::chrono::nanoseconds(0)); }

  /** When the earliest armed timer is due; nullopt when none is armed. */
  std::optional<MonotonicTime> nextDue() const {
    std::optional<MonotonicTime> at;
    for (const SimTimer* t : timers_) {
      if (t->due_ && (!at || *t->due_ < *at)) at = t->due_;
    }
    return at;
  }
  /** Advances exactly to the earliest armed timer and fires it (and any due with it). */
  bool advanceToNext() {
    const auto at = nextDue();
    if (!at) return false;
    advance(*at > clock_.now() ? *at - clock_.now() : std::chrono::nanoseconds(0));
    return true;
  }

  const Clock& clock() const { return clock_; }
  /** How many times any timer was (re)armed so far. */
  uint64_t arms() const { return next_seq_; }

 private:
  class SimTimer final : public ScheduledTimer {
   public:
    SimTimer(SimulatedScheduler& owner, std::function<void()> cb)
        : owner_(owner), cb_(std::move(cb)) {
      owner_.timers_.push_back(this);
    }
    ~SimTimer() override {
      auto& v = owner_.timers_;
      v.erase(std::remove(v.begin(), v.end(), this), v.end());
    }
    void arm(std::chrono::nanoseconds d) override {
      due_ = owner_.clock_.now() + std::max(d, std::chrono::nanoseconds(0));
      seq_ = owner_.next_seq_++;
    }
    void disarm() override { due_.reset(); }
    bool armed() const override { return due_.has_value(); }

   private:
    friend class SimulatedScheduler;
    SimulatedScheduler& owner_;
    std::function<void()> cb_;
    std::optional<MonotonicTime> due_;
    uint64_t seq_ = 0;
  };

  SimTimer* earliestDue(MonotonicTime limit) const {
    SimTimer* best = nullptr;
    for (SimTimer* t : timers_) {
      if (!t->due_ || *t->due_ > limit) continue;
      if (best == nullptr || *t->due_ < *best->due_ ||
          (*t->due_ == *best->due_ && t->seq_ < best->seq_)) {
        best = t;
      }
    }
    return best;
  }

  ManualClock& clock_;
  std::vector<SimTimer*> timers_;
  uint64_t next_seq_ = 0;
};

}  // namespace sluice::test
