// The endpoint choice (docs/design.md §5): priority levels, weights, the power of two
// choices on outstanding requests, and a retry avoiding the endpoint that failed.

#include "proxy/upstream/endpoint_picker.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace sluice {
namespace {

std::optional<size_t> pick(const std::vector<EndpointView>& endpoints,
                           std::optional<size_t> avoid = std::nullopt, double u = 0.0) {
  return pickEndpoint(endpoints, avoid, [u] { return u; });
}

TEST(EndpointPickerTest, NoneAvailableIsNone) {
  EXPECT_EQ(pick({}), std::nullopt);
  EXPECT_EQ(pick({{.available = false}, {.available = false}}), std::nullopt);
}

TEST(EndpointPickerTest, TheOnlyAvailableOneIsChosen) {
  EXPECT_EQ(pick({{.available = false}, {.available = true}}), 1u);
}

TEST(EndpointPickerTest, AHigherPriorityLevelIsUsedOnlyWhileNoLowerOneIsAvailable) {
  std::vector<EndpointView> endpoints = {{.priority = 1}, {.priority = 0}, {.priority = 1}};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(endpoints, std::nullopt, u), 1u);
  endpoints[1].available = false;
  const auto spare = pick(endpoints);
  ASSERT_TRUE(spare);
  EXPECT_NE(*spare, 1u);
}

TEST(EndpointPickerTest, ARetryAvoidsTheEndpointThatFailedWhileAnotherIsAvailable) {
  const std::vector<EndpointView> two = {{}, {}};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(two, 0u, u), 1u);
  // Even one of a higher priority level is preferred to the one that failed.
  const std::vector<EndpointView> spare = {{.priority = 0}, {.priority = 1}};
  EXPECT_EQ(pick(spare, 0u), 1u);
  // Alone, it is chosen again.
  const std::vector<EndpointView> alone = {{}, {.available = false}};
  EXPECT_EQ(pick(alone, 0u), 0u);
}

TEST(EndpointPickerTest, WithNothingOutstandingTheSplitFollowsTheWeights) {
  const std::vector<EndpointView> endpoints = {{.weight = 3}, {.weight = 1}};
  std::mt19937_64 engine(7);
  const UniformRandom random = uniformFrom(engine);
  int first = 0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) first += *pickEndpoint(endpoints, std::nullopt, random) == 0;
  EXPECT_NEAR(static_cast<double>(first) / kDraws, 0.75, 0.02);
}

TEST(EndpointPickerTest, FewerOutstandingPerWeightWinsOfTheTwoDrawn) {
  // Two candidates: both are always drawn; the busier one loses whatever the order.
  const std::vector<EndpointView> endpoints = {{.outstanding = 5}, {.outstanding = 1}};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(endpoints, std::nullopt, u), 1u);
  // Per unit of weight: 6 outstanding on weight 3 is less than 3 on weight 1.
  const std::vector<EndpointView> weighted = {{.weight = 3, .outstanding = 6},
                                              {.weight = 1, .outstanding = 3}};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(weighted, std::nullopt, u), 0u);
}

TEST(EndpointPickerTest, AMisbehavingRandomSourceIsClamped) {
  const std::vector<EndpointView> endpoints = {{}, {}, {}};
  for (double u : {-1.0, 1.0, 7.5, std::numeric_limits<double>::quiet_NaN()}) {
    const auto chosen = pick(endpoints, std::nullopt, u);
    ASSERT_TRUE(chosen);
    EXPECT_LT(*chosen, 3u);
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Three endpoints, the first two failed for this request: the third is next,
// not the first again (which only avoiding the last failure would allow).
TEST(EndpointPickerTest, ARetryPrefersAnEndpointThisRequestHasNotFailedOn) {
  const std::vector<EndpointView> three = {{.failed = true}, {.failed = true}, {}};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(three, 1u, u), 2u);
  // Every one failed: any but the last one to fail.
  const std::vector<EndpointView> all = {{.failed = true}, {.failed = true}};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(all, 1u, u), 0u);
}

// The attempt router after a failed attempt, as a table.
TEST(RouteAfterFailureTest, AfterAFailureTheNextAttemptGoesWhereItCanHelp) {
  using R = AttemptRoute;
  const EndpointView fresh{};
  const EndpointView failed{.failed = true};
  const EndpointView open{.available = false};
  const EndpointView open_failed{.available = false, .failed = true};
  struct Row {
    std::vector<EndpointView> endpoints;
    bool filters_retry;
    bool may_fall_back;
    AttemptRoute expect;
    const char* why;
  };
  const Row rows[] = {
      {{failed}, true, true, R::NextFallback, "one endpoint, failed: the fallback"},
      {{failed, fresh}, true, true, R::SameUpstream, "another endpoint not tried yet"},
      {{failed, failed}, true, true, R::NextFallback, "two dead endpoints: the fallback"},
      {{failed, failed, fresh}, true, true, R::SameUpstream, "a third not tried yet"},
      {{failed, open}, true, true, R::NextFallback, "the other's circuit is open"},
      {{open_failed, failed}, true, true, R::NextFallback, "all failed or open"},
      {{failed, fresh}, false, true, R::NextFallback, "the filters do not retry"},
      {{failed, failed}, true, false, R::SameUpstream, "no fallback allowed: retry as decided"},
      {{failed, failed}, false, false, R::Stop, "neither: the verdict stands"},
      {{failed, fresh}, false, false, R::Stop, "neither, with an endpoint left"},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(routeAfterFailure(row.endpoints, row.filters_retry, row.may_fall_back), row.expect)
        << row.why;
  }
}

}  // namespace
}  // namespace sluice
