#pragma once

// The budget filter (docs/design.md §3 "Budget"): one deadline per request, from
// the moment its headers arrived, covering queueing, every attempt, every
// backoff and the streaming of the response.
//
// The budget comes from a request header (default `x-budget-ms`): missing →
// the route's default; above `max` → clamped; anything but a positive integer
// of milliseconds → 400. With `propagate`, each attempt tells the upstream the
// milliseconds left in the same header. The Exchange enforces the deadline:
// it cancels with `budget_exhausted` when it passes.

#include <chrono>
#include <optional>
#include <string_view>

#include "filters/budget/budget_config.h"
#include "filters/filter.h"

namespace sluice {

/** Parses a budget header value: a positive decimal integer of milliseconds. */
std::optional<std::chrono::milliseconds> parseBudgetMs(std::string_view value);

class BudgetFilter final : public StreamFilter {
 public:
  explicit BudgetFilter(const config::BudgetConfig& config) : config_(config) {}

  std::string_view name() const override { return "budget"; }
  FilterStatus decodeHeaders(RequestHead& request) override;
  Admission beforeAttempt(RequestHead& upstream_request, const AttemptContext& attempt) override;

 private:
  const config::BudgetConfig& config_;
};

}  // namespace sluice
