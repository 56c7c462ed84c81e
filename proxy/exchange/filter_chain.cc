#include "proxy/exchange/filter_chain.h"

#include <iterator>
#include <new>

#include "filters/budget/budget_filter.h"
#include "filters/circuit_breaker/circuit_breaker_filter.h"
#include "filters/retry/retry_filter.h"
#include "filters/runs/run_filter.h"
#include "filters/spend/spend_filter.h"
#include "filters/throttle/throttle_filter.h"
#include "filters/tools/tools_filter.h"

namespace sluice {

namespace {

// Each filter's place in the chain's block: its size rounded up to the
// alignment operator new[] gives the block.
constexpr size_t kSlotAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
constexpr size_t slotSize(size_t size) { return (size + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

template <typename F>
constexpr size_t slotOf() {
  static_assert(alignof(F) <= kSlotAlign, "a filter's alignment must fit the chain's block");
  return slotSize(sizeof(F));
}

struct FilterEntry {
  std::string_view name;
  size_t slot;  // bytes the filter takes in the chain's block
  // Whether the route uses the filter.
  bool (*wanted)(const RouteRuntime&);
  // Constructs the filter at `at` (slot bytes, aligned).
  StreamFilter* (*construct)(void* at, const RouteRuntime&);
};

constexpr bool always(const RouteRuntime&) { return true; }

// The chain, in order. Request path: top to bottom; each attempt's response:
// top to bottom as well (observers first, the retry decision last).
constexpr FilterEntry kFilterTable[] = {
    {"budget", slotOf<BudgetFilter>(), always,
     [](void* at, const RouteRuntime& r) -> StreamFilter* {
       return new (at) BudgetFilter(r.config->budget);
     }},
    // After the budget: a run's deadline lowers the request's own.
    {"runs", slotOf<RunFilter>(),
     [](const RouteRuntime& r) { return r.runtime->runs() != nullptr; },
     [](void* at, const RouteRuntime& r) -> StreamFilter* {
       return new (at) RunFilter(*r.runtime->config().runs, *r.runtime->runs());
     }},
    // MCP routes: reads the JSON-RPC call; a tool's budget lowers the deadline further.
    {"tools", slotOf<ToolsFilter>(), [](const RouteRuntime& r) { return r.tools != nullptr; },
     [](void* at, const RouteRuntime& r) -> StreamFilter* {
       return new (at) ToolsFilter(*r.tools);
     }},
    // Circuit and quota are per endpoint: each attempt's come from its
    // destination (beforeAttempt's AttemptContext).
    {"circuit_breaker", slotOf<CircuitBreakerFilter>(), always,
     [](void* at, const RouteRuntime&) -> StreamFilter* {
       return new (at) CircuitBreakerFilter();
     }},
    {"throttle", slotOf<ThrottleFilter>(),
     [](const RouteRuntime& r) {
       // Only where some upstream of the route's chain has a `rate_limit`.
       for (const UpstreamRuntime* up : r.chain) {
         if (up->config->rate_limit) return true;
       }
       return false;
     },
     [](void* at, const RouteRuntime&) -> StreamFilter* { return new (at) ThrottleFilter(); }},
    {"retry", slotOf<RetryFilter>(), always,
     [](void* at, const RouteRuntime& r) -> StreamFilter* {
       return new (at) RetryFilter(r.config->retry, *r.retry_budget);
     }},
    // Last, so that when an attempt ends it sees the retry decision already made.
    // Not on MCP routes: tool calls are not billed by the token.
    {"spend", slotOf<SpendFilter>(),
     [](const RouteRuntime& r) { return r.config->protocol != config::RouteProtocol::Mcp; },
     [](void* at, const RouteRuntime& r) -> StreamFilter* {
       return new (at) SpendFilter(r.runtime->prices(), *r.metrics);
     }},
};
static_assert(std::size(kFilterTable) == FilterChain::kMaxFilters);

}  // namespace

void FilterChain::clear() {
  for (size_t i = 0; i < size_; ++i) std::destroy_at(filters_[i]);
  size_ = 0;
  block_.reset();
}

FilterChain buildFilterChain(const RouteRuntime& route) {
  FilterChain chain;
  if (route.config == nullptr) return chain;
  bool wanted[std::size(kFilterTable)];
  size_t bytes = 0;
  for (size_t i = 0; i < std::size(kFilterTable); ++i) {
    wanted[i] = kFilterTable[i].wanted(route);
    if (wanted[i]) bytes += kFilterTable[i].slot;
  }
  chain.block_.reset(new std::byte[bytes]);
  std::byte* at = chain.block_.get();
  for (size_t i = 0; i < std::size(kFilterTable); ++i) {
    if (!wanted[i]) continue;
    // size_ counts only constructed filters: if a constructor throws, the
    // chain's destructor destroys exactly those.
    chain.filters_[chain.size_] = kFilterTable[i].construct(at, route);
    ++chain.size_;
    at += kFilterTable[i].slot;
  }
  return chain;
}

std::vector<std::string_view> filterChainNames() {
  std::vector<std::string_view> names;
  for (const auto& entry : kFilterTable) names.push_back(entry.name);
  return names;
}

}  // namespace sluice
