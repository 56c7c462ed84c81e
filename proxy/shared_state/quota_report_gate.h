#pragma once

// Which of a replica's quota reports can change the fleet's state (docs/design.md §6;
// the per-request cost of shared state). Every admitted request already took
// its slot from the fleet's count (the reserve script), and the observe
// script keeps, within one window, the lowest count it was told. So a
// response that says no less than what the fleet had left when this replica
// last asked, in the same window, changes nothing in Redis: it is not sent.
//
// The count a response implies is `fresh` = remaining - this replica's
// unanswered requests. When the provider counts a request on arrival,
// `fresh` also subtracts requests it has already counted, so it runs up to
// `unanswered` below the fleet's count with nothing to tell. That slack is
// allowed only while the count is far from `reserve` (where a lower count
// could not change an admission anyway); near it every lower count goes.
//
// Always sent: the first report of a key, the first of a later window, any
// report when the window's reset is unknown or passed, and one per key per
// `refresh` (it refreshes the key's expiry and a reset that moved). The
// entries are bounded (kMaxKeys); past it they are forgotten, which only
// means more reports. Thread-safe: one gate serves every worker of a process.
//
// A key has two counters, requests and tokens, each gated on its own by the
// same rules (a token count's `reserve` is 0: the fleet admits while the
// need fits). A report goes when either counter could change; the caller
// sends only the counters that could.

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/clock.h"

namespace sluice {

class QuotaReportGate {
 public:
  static constexpr size_t kMaxKeys = 4096;
  /** Resets within this of each other belong to one window (clock and header jitter). */
  static constexpr std::chrono::milliseconds kSameWindow{100};

  /** Which count of a key. */
  enum class Counter { kRequests = 0, kTokens = 1 };

  QuotaReportGate(int64_t reserve, std::chrono::milliseconds refresh)
      : reserve_(reserve), refresh_(refresh) {}

  /**
   * A reserve admitted a request on `key`: the fleet has `avail` of
   * `counter` left, its window resets at `reset_at` (nullopt: unknown, e.g.
   * just refilled).
   */
  void learned(const std::string& key, int64_t avail, std::optional<MonotonicTime> reset_at,
               MonotonicTime now, Counter counter = Counter::kRequests);

  /**
   * Whether a report of `remaining` (the response's) with `unanswered`
   * requests (or, for tokens, their token needs) of this replica in flight,
   * for a window resetting at `reset_at`, can change the fleet's `counter`.
   * When it returns true the report is taken as sent.
   */
  bool shouldReport(const std::string& key, int64_t remaining, int64_t unanswered,
                    std::optional<MonotonicTime> reset_at, MonotonicTime now,
                    Counter counter = Counter::kRequests);

 private:
  struct Known {
    bool seen = false;                      // anything learned or reported yet
    int64_t avail = 0;                      // the lowest count the fleet is known to have
    std::optional<MonotonicTime> reset_at;  // its window's reset
    MonotonicTime reported_at;              // the last report sent (or first learned)
  };
  using Counters = std::array<Known, 2>;  // by Counter

  /** `key`'s counters, created (forgetting every key past kMaxKeys) when absent. */
  Counters& entryLocked(const std::string& key);

  const int64_t reserve_;
  const std::chrono::milliseconds refresh_;
  std::mutex mu_;
  std::unordered_map<std::string, Counters> known_;
};

}  // namespace sluice
