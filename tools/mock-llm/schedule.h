#pragma once

// A time-based, server-side fault schedule (`mock-llm --schedule FILE`):
// outage windows, 429 bursts, slow periods. Unlike the x-mock-* request
// headers, a schedule fails a provider for every client at once, so a test or
// the demo can take one provider down while another serves, and a proxy in
// front cannot tell the outage was scripted.
//
// File format, one window per line (`#` starts a comment):
//
//   # from  to    fault
//   0s      2s    status 503                 # outage: every request answered 503
//   2s      4s    status 429 retry-after=1   # a 429 burst (Retry-After: 1)
//   4s      6s    slow 300ms                 # each answer waits 300 ms before its headers
//   6s      7s    reset                      # LLM answers are reset before any byte
//   7s      8s    hang                       # no answer at all (a stalled upstream)
//   repeat 8s                                # optional: the schedule loops with this period
//
// Times are durations (`ms`, `s`, `m`, `h`) since the schedule's epoch: the server's
// start, or the last `POST /_schedule`. Windows are [from, to); the first
// window that contains the moment applies. Control endpoints are never
// affected.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mockllm {

/** What a schedule window does to every request inside it. */
struct ScheduledFault {
  enum class Kind { kStatus, kSlow, kReset, kHang };
  Kind kind = Kind::kStatus;
  int status = 503;                      // kStatus
  std::optional<int64_t> retry_after_s;  // kStatus: `retry-after=S`
  std::chrono::milliseconds delay{0};    // kSlow: wait before the headers

  /** `status 503`, `slow 300ms`, ...: how /_schedule and the ledger name it. */
  std::string describe() const;
};

/** One line of the schedule: [from, to) → fault. */
struct ScheduleWindow {
  std::chrono::milliseconds from{0};
  std::chrono::milliseconds to{0};
  ScheduledFault fault;
};

/** A parsed schedule. Immutable once parsed; safe to read from any thread. */
class FaultSchedule {
 public:
  /**
   * Parses the file format above. On error returns nullopt and sets `error`
   * to "line N: what is wrong".
   */
  static std::optional<FaultSchedule> parse(std::string_view text, std::string* error);

  /** The fault in force `elapsed` after the epoch, or null when none is. */
  const ScheduledFault* activeAt(std::chrono::milliseconds elapsed) const;

  const std::vector<ScheduleWindow>& windows() const { return windows_; }
  /** The loop period; zero = the schedule runs once. */
  std::chrono::milliseconds period() const { return period_; }

 private:
  std::vector<ScheduleWindow> windows_;
  std::chrono::milliseconds period_{0};
};

/** Parses `250ms`, `2s`, `1.5s`, `3m`, `1h` (non-negative). */
std::optional<std::chrono::milliseconds> parseScheduleDuration(std::string_view text);

}  // namespace mockllm
