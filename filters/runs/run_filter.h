#pragma once

// Makes a request a task of its run (docs/design.md §9): the request header
// `runs.header` names the run, `runs.parent_header` its parent run (on the
// run's first request), `x-run-budget-ms` lowers the run's budget on its
// first request. A task of a cancelled run is refused 409 run-cancelled, of
// a run past its deadline 504 run-deadline-exceeded (both
// `x-should-retry: false`); an admitted task's deadline is lowered to its
// run's, which then ends it as `run_deadline`, and a cancel of the run
// cancels it (`run_cancelled`) on its own worker. `x-run-max-usd` lowers the
// run's spend cap on its first request; the spend filter feeds the run's
// spend through this filter (RunSpend), and a run at its cap cancels its
// tasks (`run_spend_cap`) and refuses later ones 402 run-spend-exhausted.
// Without the header the request is no run's task and this filter does
// nothing.

#include <cstdint>
#include <optional>
#include <string>

#include "filters/filter.h"
#include "filters/runs/run_table.h"
#include "filters/runs/runs_config.h"

namespace sluice {

/** A run id or parent run id as a header carries it: 1–128 visible ASCII characters. */
bool validRunId(std::string_view id);

/** An `x-run-max-usd` value: a positive decimal number of USD (at most 1e9); nullopt if invalid. */
std::optional<double> parseRunMaxUsd(std::string_view value);

class RunFilter final : public StreamFilter, public RunSpend, public RunTable::TaskOwner {
 public:
  RunFilter(const config::RunsConfig& config, RunTable& table) : config_(config), table_(table) {}
  std::string_view name() const override { return "runs"; }
  FilterStatus decodeHeaders(RequestHead& request) override;
  Admission beforeAttempt(RequestHead& upstream_request, const AttemptContext& attempt) override;
  void onDestroy() override;
  void addRunSpend(double usd) override;
  std::function<void()> canceller() override;

 private:
  /** Joins the task to its run (again, once the fleet answered about a run new here). */
  FilterStatus admit();

  const config::RunsConfig& config_;
  RunTable& table_;
  std::string run_id_;
  std::string parent_;
  std::optional<std::chrono::milliseconds> budget_;
  std::optional<double> max_usd_;
  RunTable::Join task_;  // Joined while the request is a task in flight (run: null otherwise)
};

}  // namespace sluice
