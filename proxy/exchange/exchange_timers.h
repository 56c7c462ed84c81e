#pragma once

// Every timer of one Exchange, served by one scheduler timer armed at the
// earliest of them (HAProxy's per-stream expiry): the Exchange's own named
// slots, which allocate nothing, and the timers filters arm through
// FilterCallbacks::armTimer, each with its callback. Due timers run in the
// order they were armed; each may arm, disarm or end the exchange.
//
// The wake timer is moved only earlier while armed: a disarmed or later
// timer leaves it, and firing early finds nothing due and sleeps again
// until the earliest pending timer (one arm per request in the common case).

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/cancel_reason.h"
#include "common/clock.h"
#include "filters/filter.h"
#include "proxy/event/dispatcher.h"

namespace sluice {

/** The Exchange's own timers. */
enum class ExchangeSlot : uint8_t {
  Deadline,     // the budget (setDeadline): budget_exhausted
  Connect,      // the attempt's connect_timeout
  FirstByte,    // the attempt's first_byte_timeout
  Idle,         // the attempt's idle_timeout (re-checked against the last upstream byte)
  RetryDelay,   // the backoff before the next attempt
  FinishGrace,  // finish mode: the client left, the upstream may complete until then
};

class ExchangeTimers {
 public:
  /** What runs a due slot, and whether the owner is still running timers at all. */
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void onSlot(ExchangeSlot slot) = 0;
    /** False once the exchange finished: no further timer runs. */
    virtual bool timersLive() const = 0;
  };

  ExchangeTimers(Dispatcher& dispatcher, Owner& owner);
  ExchangeTimers(const ExchangeTimers&) = delete;
  ExchangeTimers& operator=(const ExchangeTimers&) = delete;

  const Clock& clock() const { return clock_; }
  void arm(ExchangeSlot slot, MonotonicTime at);
  void disarm(ExchangeSlot slot) { slots_[index(slot)].id = 0; }
  bool armed(ExchangeSlot slot) const { return slots_[index(slot)].id != 0; }

  /** A filter's timer: `cb` runs once at `at` unless disarmed. Ids are never 0. */
  TimerId armCallback(MonotonicTime at, std::function<void()> cb);
  void disarmCallback(TimerId id);

  /**
   * The request's deadline: arms the Deadline slot at `at`, which means
   * the request's own budget (budget_exhausted).
   */
  void setDeadline(MonotonicTime at);
  /**
   * Lowers the deadline to `at` for `reason` (a run's deadline, a tool's
   * budget); a deadline no earlier than the current one changes nothing.
   */
  void lowerDeadline(MonotonicTime at, CancelReason reason);
  /** The deadline (max: unbounded); clear() keeps it, for what the cancel answers. */
  MonotonicTime deadline() const { return deadline_; }
  /** What reaching the deadline means: the request's own budget, or a lower one's reason. */
  CancelReason deadlineReason() const { return deadline_reason_; }

  /** Disarms everything (the exchange finished). */
  void clear();

  /** The earliest pending timer's time; max when none. */
  MonotonicTime earliest() const;

 private:
  static constexpr size_t kSlots = static_cast<size_t>(ExchangeSlot::FinishGrace) + 1;
  static constexpr size_t index(ExchangeSlot slot) { return static_cast<size_t>(slot); }
  struct SlotTimer {
    TimerId id = 0;  // 0: not armed
    MonotonicTime at{};
  };
  struct CallbackTimer {
    TimerId id;
    MonotonicTime at;
    std::function<void()> cb;
  };

  /** Lazy: arms the wake timer for `at` only when that is earlier than it is armed for. */
  void wakeBy(MonotonicTime at);
  void onWake();

  const Clock& clock_;
  Owner& owner_;
  std::array<SlotTimer, kSlots> slots_{};
  std::vector<CallbackTimer> callbacks_;
  TimerId next_id_ = 1;
  ScheduledTimerPtr wake_;  // from the Dispatcher's scheduler: simulated time in tests
  // When wake_ fires; max = not armed.
  MonotonicTime wake_at_ = MonotonicTime::max();
  MonotonicTime deadline_ = MonotonicTime::max();
  CancelReason deadline_reason_ = CancelReason::BudgetExhausted;
};

}  // namespace sluice
