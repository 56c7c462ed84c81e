#pragma once

// The outcome kinds a config can name: `retry.on`, `circuit_breaker.failure_on`
// and the outcome part of `routes[].fallback_on`. Shared by the retry and
// circuit breaker filters (filters/attempt_outcome.h tests an attempt against
// one) and by config/'s routes, so it sits in the filters root.

#include <string>
#include <vector>

#include "common/yaml/field_reader.h"

namespace sluice::config {

/** The outcome kinds a circuit breaker's `failure_on` and a retry's `on` can name. */
struct OutcomeSet {
  std::vector<int> statuses;  // exact status codes, e.g. 429, 503
  bool any_4xx = false;       // "4xx"
  bool any_5xx = false;       // "5xx"
  bool connect_error = false;
  bool reset = false;
  bool timeout = false;

  /** True when `status` is in the set (exact code or class). */
  bool matchesStatus(int status) const;
};

/**
 * An outcome list (`retry.on`, `circuit_breaker.failure_on`): status codes
 * 100..599, 4xx, 5xx, connect_error, reset, timeout. It replaces the default
 * list; duplicates and unknown names are errors.
 */
OutcomeSet decodeOutcomeSet(detail::FieldReader& reader, const detail::Field& f);

/**
 * Adds the outcome `name` (read from `item`) to `set`; false when `name` is
 * none (for lists that also take other names, as `fallback_on` does). A
 * status code outside 100..599 fails.
 */
bool addOutcome(detail::FieldReader& reader, const detail::Field& item, const std::string& name,
                OutcomeSet& set);

}  // namespace sluice::config
