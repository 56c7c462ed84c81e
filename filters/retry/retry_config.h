#pragma once

// `routes[].retry` (docs/design.md §2, §3 "Retries"): when and how often the retry
// filter tries again, and its YAML decoder. config/config.h composes it into
// RouteConfig.

#include <chrono>
#include <cstdint>

#include "common/yaml/field_reader.h"
#include "filters/outcome_set.h"

namespace sluice::config {

struct BackoffConfig {
  Duration base = std::chrono::milliseconds(250);
  Duration max = std::chrono::seconds(8);
};

enum class IdempotencyMode { Auto, Always, Never };

/** `routes[].retry`. */
struct RetryConfig {
  uint32_t attempts = 3;  // total, the first included; 1 = no retries
  // 529 is Anthropic's "overloaded" (a contract addition: docs/design.md §2's example omits it).
  OutcomeSet on{{429, 500, 502, 503, 504, 529}, false, false, true, true, true};
  BackoffConfig backoff;
  bool respect_retry_after = true;
  IdempotencyMode idempotent = IdempotencyMode::Always;
  uint32_t budget_percent = 20;
  uint64_t max_body = 8ull * 1024 * 1024;
};

/**
 * Decodes `retry: {attempts, on, backoff: {base, max}, respect_retry_after,
 * idempotent, budget_percent, max_body}`: attempts >= 1, budget_percent
 * 0..100, backoff.base <= backoff.max (both may be 0s).
 */
RetryConfig decodeRetry(detail::FieldReader& reader, const detail::Field& f);

}  // namespace sluice::config
