#include "proxy/filter_chain.h"

#include <iterator>

#include "filters/budget/budget_filter.h"
#include "filters/circuit_breaker/circuit_breaker_filter.h"
#include "filters/retry/retry_filter.h"
#include "filters/spend/spend_filter.h"
#include "filters/throttle/throttle_filter.h"

namespace sluice {

namespace {

using Factory = StreamFilterPtr (*)(const RouteRuntime&);

struct FilterEntry {
  std::string_view name;
  Factory make;  // returns null when the route does not use the filter
};

// The chain, in order. Request path: top to bottom; each attempt's response:
// top to bottom as well (observers first, the retry decision last).
constexpr FilterEntry kFilterTable[] = {
    {"budget",
     [](const RouteRuntime& r) -> StreamFilterPtr {
       return std::make_unique<BudgetFilter>(r.config->budget);
     }},
    // Circuit and quota are per endpoint: each attempt's come from its
    // destination (FilterCallbacks::destination()).
    {"circuit_breaker",
     [](const RouteRuntime&) -> StreamFilterPtr {
       return std::make_unique<CircuitBreakerFilter>();
     }},
    {"throttle",
     [](const RouteRuntime& r) -> StreamFilterPtr {
       // Only where some upstream of the route's chain has a `rate_limit`.
       for (const UpstreamRuntime* up : r.chain) {
         if (up->config->rate_limit) return std::make_unique<ThrottleFilter>();
       }
       return nullptr;
     }},
    {"retry",
     [](const RouteRuntime& r) -> StreamFilterPtr {
       return std::make_unique<RetryFilter>(r.config->retry, *r.retry_budget);
     }},
    // Last, so that when an attempt ends it sees the retry decision already made.
    {"spend",
     [](const RouteRuntime& r) -> StreamFilterPtr {
       return std::make_unique<SpendFilter>(r.runtime->prices(), *r.metrics);
     }},
};

}  // namespace

std::vector<StreamFilterPtr> buildFilterChain(const RouteRuntime& route) {
  std::vector<StreamFilterPtr> chain;
  if (route.config == nullptr) return chain;
  chain.reserve(std::size(kFilterTable));  // one allocation, not one per doubling
  for (const auto& entry : kFilterTable) {
    if (auto filter = entry.make(route)) chain.push_back(std::move(filter));
  }
  return chain;
}

std::vector<std::string_view> filterChainNames() {
  std::vector<std::string_view> names;
  for (const auto& entry : kFilterTable) names.push_back(entry.name);
  return names;
}

}  // namespace sluice
