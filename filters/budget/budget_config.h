#pragma once

// `routes[].budget` (docs/design.md §2, §3 "Budget"): the route's time budget, and
// its YAML decoder. config/config.h composes it into RouteConfig.

#include <chrono>
#include <string>

#include "common/yaml/field_reader.h"

namespace sluice::config {

/** `routes[].budget`. */
struct BudgetConfig {
  std::string header = "x-budget-ms";  // lower-case
  Duration default_budget = std::chrono::seconds(120);
  Duration max = std::chrono::seconds(600);
  bool propagate = true;
};

/**
 * Decodes `budget: {header, default, max, propagate}`: default and max are
 * greater than 0s and default <= max.
 */
BudgetConfig decodeBudget(detail::FieldReader& reader, const detail::Field& f);

}  // namespace sluice::config
