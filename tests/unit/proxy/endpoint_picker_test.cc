// The endpoint choice (DESIGN §5): priority levels, weights, the power of two
// choices on outstanding requests, and a retry avoiding the endpoint that failed.

#include "proxy/endpoint_picker.h"

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
