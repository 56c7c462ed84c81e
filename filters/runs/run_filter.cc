#include "filters/runs/run_filter.h"

#include <cstdlib>
#include <cstring>
#include <functional>

#include "filters/budget/budget_filter.h"

namespace sluice {

namespace {

/** Whether any of the eight bytes of `w` is outside 0x21..0x7e (visible ASCII). */
bool anyInvisible(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101;
  constexpr uint64_t kHigh = 0x8080808080808080;
  // Per byte, no carry between bytes: x is the byte's low 7 bits; x + 0x5f
  // stays below 0x80 only for x < 0x21, x + 1 reaches 0x80 only for 0x7f;
  // a byte of 0x80 or more has its top bit set in w.
  const uint64_t x = w & ~kHigh;
  return ((w | ~(x + 0x5f * kOnes) | (x + kOnes)) & kHigh) != 0;
}

}  // namespace

bool validRunId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  const char* p = id.data();
  const size_t n = id.size();
  if (n < 8) {
    for (size_t i = 0; i < n; ++i) {
      const auto c = static_cast<unsigned char>(p[i]);
      if (c < 0x21 || c > 0x7e) return false;
    }
    return true;
  }
  // Eight bytes at a time, the last eight overlapping the ones before.
  uint64_t w = 0;
  for (size_t i = 0; i + 8 < n; i += 8) {
    std::memcpy(&w, p + i, 8);
    if (anyInvisible(w)) return false;
  }
  std::memcpy(&w, p + n - 8, 8);
  return !anyInvisible(w);
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
    // (The last byte first: a field of the same length is mostly another name.)
    if (slot || f.name.size() != name.size() || name.empty() || f.name.back() != name.back() ||
        std::memcmp(f.name.data(), name.data(), name.size() - 1) != 0) {
      return false;
    }
    slot = f.value;
    return true;
  };
  // Most fields are skipped by their name's length alone (names are 1 to
  // 63 bytes here: a longer one always goes on to the compares).
  const auto bit = [](const std::string& name) {
    return name.size() < 64 ? uint64_t{1} << name.size() : 0;
  };
  const uint64_t lengths = bit(config_.header) | bit(config_.parent_header) |
                           bit(config_.budget_header) | bit(config_.max_usd_header);
  request.headers.forEachOfLengths(lengths, [&](const HeaderMap::Field& f) {
    take(id, f, config_.header) || take(parent_value, f, config_.parent_header) ||
        take(budget_value, f, config_.budget_header) ||
        take(max_usd_value, f, config_.max_usd_header);
  });
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
  run_id_.clear();
  run_id_.append(run.data(), run.size());
  if (!parent.empty()) parent_ = std::move(parent);
  budget_ = budget;
  max_usd_ = max_usd;
  callbacks_->record().setRun(run_id_, parent_);
  return admit();
}

FilterStatus RunFilter::admit() {
  FilterCallbacks* callbacks = callbacks_;
  RunTable::Join join;
  for (;;) {
    // A cancel reaches the task on its own worker (canceller()).
    join = table_.join(run_id_, parent_, budget_, *this, max_usd_);
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
      task_ = join;
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

std::function<void()> RunFilter::canceller() {
  // Called by the table, under its lock, on the cancelling thread, while
  // this task is in flight: the Exchange is alive (onDestroy leaves under
  // that lock), and a waker is made from any thread. The cause reaches the
  // task on its own worker: the run's state says which (the run is held
  // while this task is in flight).
  return callbacks_->crossThreadWaker([this] {
    callbacks_->cancel(table_.spendExhausted(run_id_) ? CancelReason::RunSpendCap
                                                      : CancelReason::RunCancelled);
  });
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
  // While the task is in flight its run is at hand (no lookup).
  if (task_.run != nullptr) {
    table_.addSpend(task_, usd);
  } else if (!run_id_.empty()) {
    table_.addSpend(run_id_, usd);
  }
}

void RunFilter::onDestroy() {
  if (task_.run == nullptr) return;
  table_.leave(task_);
  task_ = RunTable::Join{};
}

}  // namespace sluice
