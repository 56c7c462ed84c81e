// Retry-After parsing and the retry decision that uses it: the input is a
// header block (`name: value` lines, retry-after-ms, x-ms-retry-after-ms,
// Retry-After in seconds / HTTP-date, x-should-retry, content-type), an empty
// line, then a response body (an RFC 9457 problem+json with is_retriable).
// Every value also goes through each single-form parser on its own.
// Seeds: fuzz/corpus/retry_after/.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "common/retry_after.h"
#include "config/config.h"
#include "filters/retry/retry_decision.h"
#include "fuzz/support/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sluice::HeaderMap headers;
  const std::string_view body = sluice::fuzz::parseHeaderBlock(text, headers);

  static const sluice::ManualClock clock;  // 2026-01-01T00:00:00Z, never moves
  const sluice::SystemTime now = clock.systemNow();
  (void)sluice::parseRetryAfter(headers, now);
  for (const auto& [name, value] : headers) {
    (void)sluice::parseRetryAfterMsValue(value);
    (void)sluice::parseRetryAfterValue(value, now);
    (void)sluice::parseDelaySeconds(value);
    (void)sluice::parseHttpDate(value, now);
    (void)sluice::parseImfFixdate(value);
    (void)sluice::parseRfc850Date(value, now);
    (void)sluice::parseAsctimeDate(value);
  }

  // The decision for a 429 / 503 answer carrying these headers and body.
  static const sluice::config::RetryConfig config{};
  sluice::RetryBudget budget(20);
  budget.onRequestStart();
  for (int status : {429, 503}) {
    sluice::RetryInput input;
    input.config = &config;
    input.attempt = 1;
    input.outcome = sluice::AttemptOutcome::fromStatus(status);
    input.response_headers = &headers;
    input.response_body = body;
    input.method = "POST";
    input.remaining_budget = std::chrono::seconds(30);
    input.retry_budget = &budget;
    input.clock = &clock;
    input.random = [] { return 0.5; };  // deterministic jitter
    const sluice::RetryDecision decision = sluice::decideRetry(input);
    if (decision.budget_acquired) budget.releaseRetry();
  }
  budget.onRequestEnd();
  return 0;
}
