#pragma once

// Waiting for a fact, never for a time: integration tests poll a predicate
// (a metric reached a value, a ledger entry finished, an exchange is gone)
// until it holds, with a generous timeout that only bounds a broken run.

#include <chrono>
#include <functional>
#include <thread>

namespace sluice::test {

/**
 * Calls `pred` every `poll` until it returns true (→ true) or `timeout`
 * passes (→ false, after one last try). The poll interval is not a
 * correctness threshold: a fast machine and a loaded one both end on the fact.
 */
inline bool waitUntil(const std::function<bool()>& pred,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10),
                      std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(poll);
  }
  return pred();
}

}  // namespace sluice::test
