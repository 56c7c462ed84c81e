// Rate-limit header parsing, every dialect (x-ratelimit-*, OpenAI's
// -requests/-tokens with Go durations, Anthropic's RFC 3339 resets, the IETF
// RateLimit / RateLimit-Policy structured fields and the drafts' separate
// fields, a 429's Retry-After), then the QuotaTracker the throttle feeds it
// to. The input is a header block of `name: value` lines; every value also
// goes through each single-value parser. Seeds: fuzz/corpus/quota_headers/.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "config/config.h"
#include "filters/throttle/quota_headers.h"
#include "filters/throttle/quota_tracker.h"
#include "fuzz/support/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sluice::HeaderMap headers;
  sluice::fuzz::parseHeaderBlock(text, headers);

  static const sluice::ManualClock clock;  // never moves: resets are deterministic
  for (const auto& [name, value] : headers) {
    (void)sluice::parseGoDuration(value);
    (void)sluice::parseRfc3339(value);
    (void)sluice::parseResetValue(value, clock);
    (void)sluice::parseQuotaCount(value);
  }
  for (int status : {200, 429}) {
    const sluice::QuotaObservation seen = sluice::observeQuota(headers, status, clock);
    (void)sluice::exhaustedQuotaWait(seen, clock.now());
  }

  // What the throttle does with one response: admit, observe, admit again.
  static const sluice::config::RateLimitConfig config{};
  sluice::QuotaTracker tracker(config, clock);
  const auto first = tracker.admit("k", 100, sluice::MonotonicTime::max(), [] {});
  tracker.observe(first.ticket, sluice::observeQuota(headers, 429, clock));
  tracker.onAttemptDone(first.ticket, true);
  const auto second = tracker.admit("k", 100, clock.now() + std::chrono::seconds(30), [] {});
  if (second.kind == sluice::QuotaTracker::Admission::Kind::Admitted) {
    tracker.observe("k", sluice::observeQuota(headers, 200, clock));
    tracker.onAttemptDone(second.ticket, true);
  } else if (second.ticket != 0) {
    (void)tracker.poll(second.ticket);
    tracker.abandon(second.ticket);
  }
  return 0;
}
