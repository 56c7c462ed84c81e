#include "proxy/exchange/exchange_problem.h"

#include <string>

#include "common/jsonrpc_error.h"

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

Problem noRouteProblem(const RequestHead& request, const std::string* model) {
  std::string detail = "no route matches " + request.method + " " + std::string(request.pathOnly());
  if (model != nullptr) detail += " for model \"" + *model + "\"";
  return makeProblem(problems::kNoRoute, detail);
}

Problem bodyTooLargeProblem(uint64_t max_body) {
  return makeProblem(problems::kBodyTooLarge, "the request body exceeds sluice's limit of " +
                                                  std::to_string(max_body) +
                                                  " bytes (limits.max_body)");
}

Problem bodyOverloadedProblem(uint64_t cap) {
  return makeProblem(problems::kOverloaded,
                     "request bodies held by sluice would exceed "
                     "limits.max_buffered_body_bytes (" +
                         std::to_string(cap) + " bytes)",
                     CancelReason::Overloaded);
}

Problem upstreamErrorProblem(UpstreamError error, const std::string& detail) {
  switch (error) {
    case UpstreamError::ConnectError:
      return makeProblem(problems::kUpstreamConnectError, detail);
    case UpstreamError::Protocol:
      return makeProblem(problems::kUpstreamProtocolError, detail);
    case UpstreamError::Refused:
      return makeProblem(problems::kUpstreamRefused, detail);
    case UpstreamError::Reset:
      break;
  }
  return makeProblem(problems::kUpstreamReset, detail);
}

Problem connectTimeoutProblem(std::string_view upstream, std::string_view endpoint) {
  return makeProblem(problems::kUpstreamConnectTimeout,
                     "no connection to upstream " + std::string(upstream) + " (" +
                         std::string(endpoint) + ") within connect_timeout");
}

LocalReply problemReply(const Problem& problem, bool mcp_route,
                        const std::optional<std::string>& jsonrpc_id, uint32_t attempts_sent) {
  LocalReply reply =
      mcp_route ? makeMcpReply(problem, jsonrpc_id ? std::optional<std::string_view>(*jsonrpc_id)
                                                   : std::nullopt)
                : makeProblemReply(problem);
  if (attempts_sent > 0) reply.head.headers.set("x-sluice-attempts", std::to_string(attempts_sent));
  return reply;
}

void stampRequestId(ResponseHead& head, const std::string& request_id, bool from_upstream) {
  if (from_upstream) {
    // Providers answer with their own x-request-id (what their support asks
    // for): the client gets sluice's id, and the provider's alongside.
    const auto theirs = head.headers.get("x-request-id");
    if (theirs && *theirs != request_id) {
      const std::string copy(*theirs);  // set() may move the header it points into
      head.headers.set("x-sluice-upstream-request-id", copy);
    }
  }
  head.headers.set("x-request-id", request_id);
  // The Anthropic SDKs read `request-id` (err.requestID): sluice's own
  // answers carry it too, so that id finds the access log line.
  if (!from_upstream) head.headers.set("request-id", request_id);
}

}  // namespace sluice
