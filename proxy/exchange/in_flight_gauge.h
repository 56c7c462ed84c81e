#pragma once

// The process's in-flight exchanges, shared by the workers, that drain can
// wait on: each worker adds an Exchange when it starts and removes it when it
// is retired; Server::drain() sleeps on a condition variable until the count
// reaches zero (or its deadline), instead of polling.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace sluice {

class InFlightGauge {
 public:
  void add() {
    std::lock_guard lock(mutex_);
    ++count_;
  }
  void remove(size_t n = 1) {
    std::lock_guard lock(mutex_);
    count_ = n >= count_ ? 0 : count_ - n;
    if (count_ == 0) zero_.notify_all();
  }
  size_t value() const {
    std::lock_guard lock(mutex_);
    return count_;
  }
  /** Blocks until the count is zero or `deadline` passed; true when it is zero. */
  bool waitForZero(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    return zero_.wait_until(lock, deadline, [this] { return count_ == 0; });
  }
  /** Blocks until the count is zero. */
  void waitForZero() {
    std::unique_lock lock(mutex_);
    zero_.wait(lock, [this] { return count_ == 0; });
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable zero_;
  size_t count_ = 0;
};

}  // namespace sluice
