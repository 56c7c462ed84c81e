// Tests for buildFilterChain (proxy/exchange/filter_chain.h): the table's filters in
// table order, the throttle only where the route's upstreams have a
// `rate_limit`, every filter in one block, and a chain that moves without
// moving its filters. The config is inline YAML through the real loader.

#include "proxy/exchange/filter_chain.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <typeinfo>
#include <vector>

#include "common/clock.h"
#include "config/loader.h"
#include "filters/budget/budget_filter.h"
#include "filters/circuit_breaker/circuit_breaker_filter.h"
#include "filters/retry/retry_filter.h"
#include "filters/spend/spend_filter.h"
#include "filters/throttle/throttle_filter.h"
#include "filters/tools/tools_filter.h"

namespace sluice {
namespace {

constexpr const char* kConfig = R"(listen: 127.0.0.1:0
upstreams:
  - name: limited
    url: http://127.0.0.1:9001
    rate_limit: {key: header:authorization}
  - name: plain
    url: http://127.0.0.1:9002
routes:
  - name: limited
    match: {path_prefix: /limited}
    upstream: limited
  - name: plain
    match: {path_prefix: /plain}
    upstream: plain
  - name: fallback
    match: {path_prefix: /fallback}
    upstream: plain
    fallback: [{upstream: limited}]
  - name: tools
    match: {path_prefix: /mcp}
    upstream: plain
    protocol: mcp
)";

class FilterChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::loadConfigString(kConfig, "filter_chain_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
  }

  const RouteRuntime& route(std::string_view path) const {
    const RouteRuntime* r = runtime_->match("POST", path);
    EXPECT_NE(r, nullptr) << path;
    return *r;
  }

  static std::vector<std::string> types(const FilterChain& chain) {
    std::vector<std::string> out;
    for (StreamFilter* f : chain) {
      if (dynamic_cast<BudgetFilter*>(f))
        out.push_back("budget");
      else if (dynamic_cast<CircuitBreakerFilter*>(f))
        out.push_back("circuit_breaker");
      else if (dynamic_cast<ThrottleFilter*>(f))
        out.push_back("throttle");
      else if (dynamic_cast<RetryFilter*>(f))
        out.push_back("retry");
      else if (dynamic_cast<SpendFilter*>(f))
        out.push_back("spend");
      else if (dynamic_cast<ToolsFilter*>(f))
        out.push_back("tools");
      else
        out.push_back(typeid(*f).name());
    }
    return out;
  }

  static size_t sizeOf(const StreamFilter& f) {
    if (typeid(f) == typeid(BudgetFilter)) return sizeof(BudgetFilter);
    if (typeid(f) == typeid(CircuitBreakerFilter)) return sizeof(CircuitBreakerFilter);
    if (typeid(f) == typeid(ThrottleFilter)) return sizeof(ThrottleFilter);
    if (typeid(f) == typeid(RetryFilter)) return sizeof(RetryFilter);
    if (typeid(f) == typeid(ToolsFilter)) return sizeof(ToolsFilter);
    return sizeof(SpendFilter);
  }

  ManualClock clock_;
  Metrics metrics_;
  ConfigSnapshotPtr runtime_;
};

TEST_F(FilterChainTest, TableOrderWithTheThrottleOnlyWhereARateLimitIs) {
  const std::vector<std::string> all = {"budget", "circuit_breaker", "throttle", "retry", "spend"};
  EXPECT_EQ(types(buildFilterChain(route("/limited"))), all);
  EXPECT_EQ(types(buildFilterChain(route("/plain"))),
            (std::vector<std::string>{"budget", "circuit_breaker", "retry", "spend"}));
  // A fallback upstream's rate_limit is enough: any attempt may go there.
  EXPECT_EQ(types(buildFilterChain(route("/fallback"))), all);
  // The names /config shows are the table's (`runs` only with a `runs` section).
  std::vector<std::string> names;
  for (auto n : filterChainNames()) names.emplace_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"budget", "runs", "tools", "circuit_breaker",
                                             "throttle", "retry", "spend"}));
}

TEST_F(FilterChainTest, McpRoutesReadTheCallAndMeterNoSpend) {
  EXPECT_EQ(types(buildFilterChain(route("/mcp"))),
            (std::vector<std::string>{"budget", "tools", "circuit_breaker", "retry"}));
}

TEST_F(FilterChainTest, NoRouteHasNoFilters) {
  const FilterChain chain = buildFilterChain(runtime_->noRoute());
  EXPECT_TRUE(chain.empty());
  EXPECT_EQ(chain.begin(), chain.end());
}

TEST_F(FilterChainTest, TheFiltersLieBackToBackInOneBlock) {
  for (const char* path : {"/limited", "/plain"}) {
    const FilterChain chain = buildFilterChain(route(path));
    ASSERT_GE(chain.size(), 2u);
    for (size_t i = 0; i < chain.size(); ++i) {
      const auto at = reinterpret_cast<uintptr_t>(chain[i]);
      EXPECT_EQ(at % __STDCPP_DEFAULT_NEW_ALIGNMENT__, 0u) << path << " filter " << i;
      if (i == 0) continue;
      const auto before = reinterpret_cast<uintptr_t>(chain[i - 1]);
      // The next filter starts right after the previous one, rounded up to
      // the block's alignment: one allocation, no gaps.
      const size_t size = sizeOf(*chain[i - 1]);
      const size_t align = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
      EXPECT_EQ(at - before, (size + align - 1) / align * align) << path << " filter " << i;
    }
  }
}

TEST_F(FilterChainTest, MovingAChainKeepsItsFiltersInPlace) {
  FilterChain a = buildFilterChain(route("/limited"));
  const std::vector<StreamFilter*> where(a.begin(), a.end());
  FilterChain b = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(std::vector<StreamFilter*>(b.begin(), b.end()), where);
  // Move-assigning over a chain destroys the old filters (ASan's leak check
  // sees a filter that is not) and takes the new ones.
  FilterChain c = buildFilterChain(route("/plain"));
  c = std::move(b);
  EXPECT_EQ(std::vector<StreamFilter*>(c.begin(), c.end()), where);
  c.clear();
  EXPECT_TRUE(c.empty());
}

}  // namespace
}  // namespace sluice
