#include "filters/runs/run_filter.h"

#include "filters/budget/budget_filter.h"

namespace sluice {

bool validRunId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (const char c : id) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

FilterStatus RunFilter::decodeHeaders(RequestHead& request) {
  const auto id = request.headers.get(config_.header);
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
  if (const auto p = request.headers.get(config_.parent_header)) {
    parent = std::string(trimOws(*p));
    if (!validRunId(parent)) {
      return refuse(config_.parent_header + " must be 1 to 128 visible ASCII characters");
    }
  }
  std::optional<std::chrono::milliseconds> budget;
  if (const auto raw = request.headers.get(config_.budget_header)) {
    budget = parseBudgetMs(*raw);
    if (!budget) {
      callbacks_->sendLocalReply(makeProblem(
          problems::kInvalidRunBudget, config_.budget_header +
                                           " must be a positive integer of milliseconds, got \"" +
                                           std::string(raw->substr(0, 64)) + "\""));
      return FilterStatus::StopIteration;
    }
  }
  run_id_ = std::string(run);
  callbacks_->recordRun(run_id_, parent);
  FilterCallbacks* callbacks = callbacks_;
  const RunTable::Join join = table_.join(
      run_id_, parent, budget,
      callbacks_->crossThreadWaker([callbacks] { callbacks->cancel(CancelReason::RunCancelled); }));
  switch (join.kind) {
    case RunTable::Join::Kind::Joined:
      task_ = join.task;
      callbacks_->lowerDeadline(join.deadline, CancelReason::RunDeadline);
      return FilterStatus::Continue;
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

FilterStatus RunFilter::beforeAttempt(RequestHead& upstream_request) {
  // The run's budget header is sluice's: it never goes upstream. The run id
  // does (a tool server, or another sluice behind this one, may use it).
  upstream_request.headers.remove(config_.budget_header);
  return FilterStatus::Continue;
}

void RunFilter::onDestroy() {
  if (task_ == 0) return;
  table_.leave(run_id_, task_);
  task_ = 0;
}

}  // namespace sluice
