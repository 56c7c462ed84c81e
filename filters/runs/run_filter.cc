#include "filters/runs/run_filter.h"

#include <cstdlib>
#include <cstring>
#include <functional>

#include "filters/budget/budget_filter.h"

namespace sluice {

bool validRunId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (const char c : id) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

std::optional<double> parseRunMaxUsd(std::string_view value) {
  value = trimOws(value);
  // Plain decimal only: digits with at most one '.', no sign, exponent, inf or nan.
  if (value.empty() || value.size() > 32) return std::nullopt;
  bool dot = false;
  bool digit = false;
  for (const char c : value) {
    if (c == '.') {
      if (dot) return std::nullopt;
      dot = true;
    } else if (c >= '0' && c <= '9') {
      digit = true;
    } else {
      return std::nullopt;
    }
  }
  if (!digit) return std::nullopt;
  const double usd = std::strtod(std::string(value).c_str(), nullptr);
  if (!(usd > 0) || usd > 1e9) return std::nullopt;
  return usd;
}

FilterStatus RunFilter::decodeHeaders(RequestHead& request) {
  // The four run headers in one pass over the request's (names are stored
  // lower case, the configured ones are lower case): the first of each.
  std::optional<std::string_view> id;
  std::optional<std::string_view> parent_value;
  std::optional<std::string_view> budget_value;
  std::optional<std::string_view> max_usd_value;
  const auto take = [](std::optional<std::string_view>& slot, const HeaderMap::Field& f,
                       const std::string& name) {
    if (slot || f.name.size() != name.size() ||
        std::memcmp(f.name.data(), name.data(), name.size()) != 0) {
      return false;
    }
    slot = f.value;
    return true;
  };
  // Most fields are skipped by their name's length alone.
  uint64_t lengths = 0;
  for (const std::string* name :
       {&config_.header, &config_.parent_header, &config_.budget_header, &config_.max_usd_header}) {
    if (name->size() < 64) lengths |= uint64_t{1} << name->size();
  }
  for (const HeaderMap::Field f : request.headers) {
    if (f.name.size() < 64 && (lengths >> f.name.size() & 1) == 0) continue;
    take(id, f, config_.header) || take(parent_value, f, config_.parent_header) ||
        take(budget_value, f, config_.budget_header) ||
        take(max_usd_value, f, config_.max_usd_header);
  }
  if (!id) return FilterStatus::Continue;
  const std::string_view run = trimOws(*id);
  const auto refuse = [&](const std::string& detail) {
    callbacks_->sendLocalReply(makeProblem(problems::kBadRequest, detail));
    return FilterStatus::StopIteration;
  };
  if (!validRunId(run)) {
    return refuse(config_.header + " must be 1 to 128 visible ASCII characters");
  }
  std::string parent;
  if (const auto& p = parent_value) {
    parent = std::string(trimOws(*p));
    if (!validRunId(parent)) {
      return refuse(config_.parent_header + " must be 1 to 128 visible ASCII characters");
    }
  }
  std::optional<std::chrono::milliseconds> budget;
  if (const auto& raw = budget_value) {
    budget = parseBudgetMs(*raw);
    if (!budget) {
      callbacks_->sendLocalReply(makeProblem(
          problems::kInvalidRunBudget, config_.budget_header +
                                           " must be a positive integer of milliseconds, got \"" +
                                           std::string(raw->substr(0, 64)) + "\""));
      return FilterStatus::StopIteration;
    }
  }
  std::optional<double> max_usd;
  if (const auto& raw = max_usd_value) {
    max_usd = parseRunMaxUsd(*raw);
    if (!max_usd) {
      callbacks_->sendLocalReply(makeProblem(
          problems::kInvalidRunMaxUsd, config_.max_usd_header +
                                           " must be a positive decimal number of USD, got \"" +
                                           std::string(raw->substr(0, 64)) + "\""));
      return FilterStatus::StopIteration;
    }
  }
  run_id_ = std::string(run);
  parent_ = std::move(parent);
  budget_ = budget;
  max_usd_ = max_usd;
  callbacks_->record().setRun(run_id_, parent_);
  return admit();
}

FilterStatus RunFilter::admit() {
  FilterCallbacks* callbacks = callbacks_;
  RunTable::Join join;
  for (;;) {
    // The cause reaches the task on its own worker: the run's state says
    // which (the run is held while this task is in flight). One waker per
    // task, whichever the cause.
    join = table_.join(
        run_id_, parent_, budget_, [wake = callbacks->crossThreadWaker([this] {
          callbacks_->cancel(table_.spendExhausted(run_id_) ? CancelReason::RunSpendCap
                                                            : CancelReason::RunCancelled);
        })](RunTable::Ending) { wake(); },
        max_usd_);
    if (join.kind != RunTable::Join::Kind::Pending) break;
    // The run is new here and the fleet is asked about it (shared_state):
    // held until it answered, then admitted or refused as it says.
    if (table_.awaitFleet(run_id_, callbacks->crossThreadWaker([this] {
          if (admit() == FilterStatus::Continue) callbacks_->continueDecoding();
        }))) {
      return FilterStatus::StopIteration;
    }
  }
  switch (join.kind) {
    case RunTable::Join::Kind::Pending:  // (not reached: the loop waits or joins again)
      return FilterStatus::StopIteration;
    case RunTable::Join::Kind::Joined:
      task_ = join.task;
      callbacks_->lowerDeadline(join.deadline, CancelReason::RunDeadline);
      callbacks_->setRunSpend(this);
      return FilterStatus::Continue;
    case RunTable::Join::Kind::SpendExhausted:
      callbacks_->sendLocalReply(makeProblem(problems::kRunSpendExhausted,
                                             "run " + run_id_ + " reached its spend cap",
                                             CancelReason::RunSpendCap));
      return FilterStatus::StopIteration;
    case RunTable::Join::Kind::Cancelled:
      callbacks_->sendLocalReply(makeProblem(
          problems::kRunCancelled, "run " + run_id_ + " was cancelled; it takes no more requests",
          CancelReason::RunCancelled));
      return FilterStatus::StopIteration;
    case RunTable::Join::Kind::DeadlineExceeded:
      callbacks_->sendLocalReply(makeProblem(problems::kRunDeadlineExceeded,
                                             "run " + run_id_ + " reached its deadline",
                                             CancelReason::RunDeadline));
      return FilterStatus::StopIteration;
  }
  return FilterStatus::Continue;
}

Admission RunFilter::beforeAttempt(RequestHead& upstream_request, const AttemptContext&) {
  // The run's budget header is sluice's: it never goes upstream. The run id
  // does (a tool server, or another sluice behind this one, may use it).
  // (A task's were read in decodeHeaders: absent there, absent here.)
  if (run_id_.empty() || budget_) upstream_request.headers.remove(config_.budget_header);
  if (run_id_.empty() || max_usd_) upstream_request.headers.remove(config_.max_usd_header);
  return Admission::proceed();
}

void RunFilter::addRunSpend(double usd) {
  // Spend booked after the task left (the spend filter's onDestroy) still
  // counts: the run outlives its tasks.
  if (!run_id_.empty()) table_.addSpend(run_id_, usd);
}

void RunFilter::onDestroy() {
  if (task_ == 0) return;
  table_.leave(run_id_, task_);
  task_ = 0;
}

}  // namespace sluice
