#include "proxy/filter_chain.h"

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
    {"circuit_breaker",
     [](const RouteRuntime& r) -> StreamFilterPtr {
       return std::make_unique<CircuitBreakerFilter>(*r.upstream->breaker);
     }},
    {"throttle",
     [](const RouteRuntime& r) -> StreamFilterPtr {
       if (!r.upstream->quota) return nullptr;
       return std::make_unique<ThrottleFilter>(*r.upstream->config->rate_limit, *r.upstream->quota,
                                               *r.upstream->breaker, *r.upstream->metrics,
                                               r.upstream->global_quota.get());
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
