#include "proxy/exchange/exchange_problem.h"

#include <string>

namespace sluice {

Problem problemForCancel(CancelReason reason, const CancelContext& context,
                         std::optional<std::chrono::milliseconds> retry_after) {
  const std::string upstream(context.upstream);
  switch (reason) {
    case CancelReason::BudgetExhausted: {
      std::string budget;
      if (context.budget) budget = " of " + std::to_string(context.budget->count()) + " ms";
      return makeProblem(problems::kBudgetExhausted,
                         "the request's time budget" + budget + " ran out after " +
                             std::to_string(context.attempts) + " attempt(s)",
                         reason);
    }
    case CancelReason::UpstreamTimeout:
      return makeProblem(
          problems::kUpstreamTimeout,
          "upstream " + upstream + " stopped sending (first_byte_timeout/idle_timeout)", reason);
    case CancelReason::CircuitOpen:
      return makeProblem(problems::kCircuitOpen,
                         "upstream " + upstream + " is failing; sluice is not calling it for now",
                         reason, retry_after);
    case CancelReason::RateLimited:
      return makeProblem(problems::kRateLimited,
                         "upstream " + upstream + " quota would be exceeded; wait for its reset",
                         reason, retry_after);
    case CancelReason::Overloaded:
      return makeProblem(problems::kOverloaded,
                         "too many requests in flight or waiting for upstream " + upstream, reason,
                         retry_after);
    case CancelReason::Draining:
      return makeProblem(problems::kDraining, "this sluice instance is draining; retry on another",
                         reason, retry_after);
    case CancelReason::ClientDisconnect:
    case CancelReason::ClientAbandoned:
      return makeProblem(problems::kClientDisconnect, "the client went away", reason);
    case CancelReason::ClientStalled:
      return makeProblem(problems::kClientStalled,
                         "the client accepted no byte for limits.send_timeout", reason);
    case CancelReason::UpstreamReset:
      return makeProblem(problems::kUpstreamReset,
                         "upstream " + upstream + " broke the response under way", reason);
    case CancelReason::RunCancelled:
      return makeProblem(problems::kRunCancelled,
                         "the request's run was cancelled; its tasks are stopped", reason);
    case CancelReason::RunDeadline:
      return makeProblem(problems::kRunDeadlineExceeded,
                         "the request's run reached its deadline (runs.budget)", reason);
    case CancelReason::RunSpendCap:
      return makeProblem(problems::kRunSpendExhausted,
                         "the request's run reached its spend cap (runs.max_usd)", reason);
  }
  return makeProblem(problems::kClientDisconnect, "the client went away", reason);
}

}  // namespace sluice
