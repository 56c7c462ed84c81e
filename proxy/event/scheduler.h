#pragma once

// Timers behind the Dispatcher (Envoy's TimeSystem / Scheduler split). A
// worker's Dispatcher hands out ScheduledTimers: in production libevent
// timers on its event_base (LibeventScheduler); in tests a scheduler on
// simulated time (tests/support/simulated_time.h) whose ManualClock the test
// advances, so an Exchange's backoff, deadline and timeouts fire in order
// without sleeping. Time itself is always read through the Dispatcher's
// Clock; a scheduler only decides when callbacks run.

#include <event2/event.h>

#include <chrono>
#include <functional>
#include <memory>

namespace sluice {

/** A one-shot timer. Destroying it disarms it. */
class ScheduledTimer {
 public:
  virtual ~ScheduledTimer() = default;
  /** (Re)arms the timer to fire once after `d`; zero or less fires as soon as possible. */
  virtual void arm(std::chrono::nanoseconds d) = 0;
  virtual void disarm() = 0;
  virtual bool armed() const = 0;
};
using ScheduledTimerPtr = std::unique_ptr<ScheduledTimer>;

/** Makes timers whose callbacks run on one Dispatcher's thread. */
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual ScheduledTimerPtr createTimer(std::function<void()> cb) = 0;
};

/** Real time: libevent timers on one event_base. */
class LibeventScheduler final : public Scheduler {
 public:
  explicit LibeventScheduler(event_base* base) : base_(base) {}
  ScheduledTimerPtr createTimer(std::function<void()> cb) override;

 private:
  event_base* base_;
};

}  // namespace sluice
