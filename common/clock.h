#pragma once

// Time sources. Everything time-dependent in sluice (budgets, backoff,
// cooldowns, quota resets) reads time through a Clock so unit tests can run
// on simulated time (ManualClock) and never sleep or flake.
//
// One read per event, not per question: the real clock answers every now()
// asked while one libevent callback runs with the time of that callback's
// first read (EventTimeScope, below). HAProxy does the same once per poll
// loop (`now_ms`); a request asked the clock ~25 times before, and the
// vDSO's clock_gettime was 2.1-2.5% of a worker's CPU (PROFILE.md, seventh
// round). What still needs the moment itself (how long a teardown took
// inside one callback) asks preciseNow().

#include <atomic>
#include <chrono>

namespace sluice {

using MonotonicTime = std::chrono::steady_clock::time_point;
using SystemTime = std::chrono::system_clock::time_point;

/** A source of monotonic time (for deadlines) and wall time (for HTTP-dates, epochs). */
class Clock {
 public:
  virtual ~Clock() = default;
  /** Now, or the time of the event being handled (see EventTimeScope). */
  virtual MonotonicTime now() const = 0;
  /** Now, always read: for durations inside one event. */
  virtual MonotonicTime preciseNow() const { return now(); }
  virtual SystemTime systemNow() const = 0;
};

namespace clock_detail {
/** One thread's event time: EventTimeScope's and RealClock's only. */
struct EventTimeState {
  int depth = 0;
  bool cached = false;
  MonotonicTime at{};
};
inline thread_local EventTimeState event_time{};
}  // namespace clock_detail

/**
 * Marks a thread as handling one event: from the first RealClock::now() on
 * this thread until the outermost scope ends, now() gives that first
 * reading. Every libevent callback sluice registers opens one (the socket,
 * timer, flusher, dispatcher and accept trampolines); code run outside any
 * (tests, admin, other threads) reads the clock each time, as before.
 * Nested scopes share the outermost one's time. Per thread, like errno:
 * workers never see each other's.
 */
class EventTimeScope {
 public:
  EventTimeScope() noexcept { ++clock_detail::event_time.depth; }
  ~EventTimeScope() {
    clock_detail::EventTimeState& s = clock_detail::event_time;
    if (--s.depth == 0) s.cached = false;
  }
  EventTimeScope(const EventTimeScope&) = delete;
  EventTimeScope& operator=(const EventTimeScope&) = delete;
};

/** The process's real clocks. One shared instance is fine (see instance()). */
class RealClock final : public Clock {
 public:
  MonotonicTime now() const override {
    clock_detail::EventTimeState& s = clock_detail::event_time;
    if (s.depth == 0) return std::chrono::steady_clock::now();
    if (!s.cached) {
      s.at = std::chrono::steady_clock::now();
      s.cached = true;
    }
    return s.at;
  }
  MonotonicTime preciseNow() const override { return std::chrono::steady_clock::now(); }
  SystemTime systemNow() const override { return std::chrono::system_clock::now(); }

  /**
   * A process-wide instance (stateless but for each thread's EventTimeScope,
   * so sharing it is not shared mutable state).
   */
  static const RealClock& instance() {
    static const RealClock clock;
    return clock;
  }
};

/** A clock tests move by hand. Thread-safe so multi-threaded tests can share it. */
class ManualClock final : public Clock {
 public:
  ManualClock()
      : mono_ns_(1'000'000'000'000LL),           // arbitrary non-zero origin
        sys_ns_(1'767'225'600'000'000'000LL) {}  // 2026-01-01T00:00:00Z

  MonotonicTime now() const override {
    return MonotonicTime(std::chrono::nanoseconds(mono_ns_.load()));
  }
  SystemTime systemNow() const override {
    return SystemTime(
        std::chrono::duration_cast<SystemTime::duration>(std::chrono::nanoseconds(sys_ns_.load())));
  }
  /** Moves both clocks forward by `d`. */
  template <class Rep, class Period>
  void advance(std::chrono::duration<Rep, Period> d) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    mono_ns_ += ns;
    sys_ns_ += ns;
  }
  /** Sets wall time (e.g. to match an HTTP-date in a test). */
  void setSystemTime(SystemTime t) {
    sys_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }

 private:
  std::atomic<long long> mono_ns_;
  std::atomic<long long> sys_ns_;
};

}  // namespace sluice
