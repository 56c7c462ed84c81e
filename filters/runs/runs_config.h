#pragma once

// `runs` (docs/design.md §9): which header makes a request a task of a run,
// the run's wall-clock budget, and how long the table remembers runs. Its
// YAML decoder; config/config.h composes it into Config (absent = no runs).

#include <chrono>
#include <cstdint>
#include <string>

#include "common/yaml/field_reader.h"

namespace sluice::config {

struct RunsConfig {
  std::string header = "x-run-id";                // lower-case
  std::string parent_header = "x-parent-run-id";  // lower-case
  std::string budget_header = "x-run-budget-ms";  // lower-case; lowers `budget` on the first task
  std::string max_usd_header = "x-run-max-usd";   // lower-case; lowers `max_usd` on the first task
  Duration budget = std::chrono::minutes(30);
  Duration idle_expiry = std::chrono::minutes(10);
  Duration tombstone = std::chrono::minutes(15);
  uint32_t max_runs = 100'000;
  double max_usd = 0;        // the run's spend cap; 0 = none
  std::string cancel_token;  // "" = no DELETE /sluice/runs/{id} on the listeners

  bool operator==(const RunsConfig&) const = default;
};

/**
 * Decodes `runs: {header, parent_header, budget, idle_expiry, tombstone,
 * max_runs, max_usd, cancel_token}`.
 */
RunsConfig decodeRuns(detail::FieldReader& reader, const detail::Field& f);

}  // namespace sluice::config
