#pragma once

// Retry backoff: "full jitter" (AWS Architecture Blog, "Exponential Backoff
// and Jitter"): the delay before retry n (0-based) is uniform in
// [0, min(max, base * 2^n)]. Full jitter spreads a thundering herd of agents
// that all failed at the same instant, which plain exponential backoff does
// not. Pure arithmetic; the randomness is injected so tests are exact.

#include <chrono>
#include <cstdint>
#include <optional>

#include "common/random.h"
#include "filters/retry/retry_config.h"

namespace sluice {

/**
 * The jitter ceiling for retry `retry_index` (0 = the first retry):
 * min(max, base * 2^retry_index). Saturates instead of overflowing for any
 * index; a zero or negative base gives 0.
 */
std::chrono::milliseconds backoffCeiling(const config::BackoffConfig& backoff,
                                         uint32_t retry_index);

/**
 * A full-jitter delay for retry `retry_index`: uniform in
 * [0, backoffCeiling(...)], whole milliseconds, both ends reachable.
 */
std::chrono::milliseconds fullJitterDelay(const config::BackoffConfig& backoff,
                                          uint32_t retry_index, const UniformRandom& random);

/**
 * The wait before retry `retry_index`: the full-jitter delay, raised to the
 * upstream's `retry_after_hint` when `respect_retry_after` (the upstream asked
 * for at least that long; `max` does not cap it — the caller checks whether
 * it fits the budget).
 */
std::chrono::milliseconds retryDelay(const config::BackoffConfig& backoff, uint32_t retry_index,
                                     std::optional<std::chrono::milliseconds> retry_after_hint,
                                     bool respect_retry_after, const UniformRandom& random);

}  // namespace sluice
