#include "filters/budget/budget_filter.h"

#include <algorithm>

namespace sluice {

std::optional<std::chrono::milliseconds> parseBudgetMs(std::string_view value) {
  value = trimOws(value);
  // 15 digits is ~31,000 years: anything longer is garbage, not a budget.
  if (value.empty() || value.size() > 15) return std::nullopt;
  long long ms = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    ms = ms * 10 + (c - '0');
  }
  if (ms <= 0) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

FilterStatus BudgetFilter::decodeHeaders(RequestHead& request) {
  std::chrono::milliseconds budget = config_.default_budget;
  if (auto raw = request.headers.get(config_.header)) {
    auto parsed = parseBudgetMs(*raw);
    if (!parsed) {
      std::string shown(raw->substr(0, 64));
      callbacks_->sendLocalReply(makeProblem(
          problems::kInvalidBudget,
          config_.header + " must be a positive integer of milliseconds, got \"" + shown + "\""));
      return FilterStatus::StopIteration;
    }
    budget = std::min(*parsed, config_.max);
  }
  callbacks_->setDeadline(callbacks_->startTime() + budget);
  return FilterStatus::Continue;
}

Admission BudgetFilter::beforeAttempt(RequestHead& upstream_request, const AttemptContext&) {
  if (!config_.propagate) {
    upstream_request.headers.remove(config_.header);
    return Admission::proceed();
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      callbacks_->deadline() - callbacks_->clock().now());
  upstream_request.headers.set(config_.header,
                               std::to_string(std::max<long long>(1, left.count())));
  return Admission::proceed();
}

}  // namespace sluice
