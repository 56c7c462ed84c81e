#pragma once

// Time sources. Everything time-dependent in sluice (budgets, backoff,
// cooldowns, quota resets) reads time through a Clock so unit tests can run
// on simulated time (ManualClock) and never sleep or flake.

#include <atomic>
#include <chrono>

namespace sluice {

using MonotonicTime = std::chrono::steady_clock::time_point;
using SystemTime = std::chrono::system_clock::time_point;

/** A source of monotonic time (for deadlines) and wall time (for HTTP-dates, epochs). */
class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonotonicTime now() const = 0;
  virtual SystemTime systemNow() const = 0;
};

/** The process's real clocks. Stateless; one shared instance is fine. */
class RealClock final : public Clock {
 public:
  MonotonicTime now() const override { return std::chrono::steady_clock::now(); }
  SystemTime systemNow() const override { return std::chrono::system_clock::now(); }

  /** A process-wide instance (stateless, so sharing it is not shared mutable state). */
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
