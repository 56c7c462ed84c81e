#include "filters/retry/backoff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace sluice {
namespace {

using std::chrono::milliseconds;

config::BackoffConfig backoff(int64_t base_ms, int64_t max_ms) {
  return config::BackoffConfig{milliseconds(base_ms), milliseconds(max_ms)};
}

UniformRandom constant(double r) {
  return [r] { return r; };
}

TEST(BackoffTest, CeilingDoublesUpToMax) {
  struct Case {
    int64_t base_ms, max_ms;
    uint32_t n;
    int64_t expected_ms;
  };
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  const Case cases[] = {
      {250, 8000, 0, 250},
      {250, 8000, 1, 500},
      {250, 8000, 2, 1000},
      {250, 8000, 3, 2000},
      {250, 8000, 4, 4000},
      {250, 8000, 5, 8000},
      {250, 8000, 6, 8000},
      {250, 8000, 63, 8000},
      {250, 8000, 64, 8000},
      {250, 8000, 1000, 8000},
      {250, 8000, std::numeric_limits<uint32_t>::max(), 8000},
      {300, 1000, 2, 1000},   // 1200 capped
      {5000, 1000, 0, 1000},  // base above max: max
      {0, 8000, 3, 0},
      {250, 0, 3, 0},
      {-5, 8000, 3, 0},
      {kHuge / 2 + 1, kHuge, 1, kHuge},  // would overflow int64 if doubled naively
      {1, kHuge, 62, int64_t{1} << 62},
      {1, kHuge, 63, kHuge},
      {1, kHuge, 200, kHuge},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(backoffCeiling(backoff(c.base_ms, c.max_ms), c.n).count(), c.expected_ms)
        << "base=" << c.base_ms << " max=" << c.max_ms << " n=" << c.n;
  }
}

TEST(BackoffTest, FullJitterMapsRandomOntoZeroToCeiling) {
  struct Case {
    double r;
    int64_t expected_ms;  // ceiling is 250 (n = 0)
  };
  const Case cases[] = {
      {0.0, 0},
      {0.5, 125},         // floor(0.5 * 251)
      {0.999999, 250},    // the ceiling itself is reachable
      {1.0, 250},         // out of contract: clamped
      {7.0, 250},         // out of contract: clamped
      {-0.5, 0},          // out of contract: clamped
      {std::nan(""), 0},  // out of contract: treated as 0
      {std::numeric_limits<double>::infinity(), 250},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(fullJitterDelay(backoff(250, 8000), 0, constant(c.r)).count(), c.expected_ms)
        << "r=" << c.r;
  }
  EXPECT_EQ(fullJitterDelay(backoff(250, 8000), 0, UniformRandom{}).count(), 0);
  EXPECT_EQ(fullJitterDelay(backoff(250, 8000), 3, constant(0.5)).count(), 1000);  // of 2000
}

TEST(BackoffTest, SeededJitterStaysInRangeAndIsSpread) {
  std::mt19937_64 engine(42);
  const UniformRandom random = uniformFrom(engine);
  const auto cfg = backoff(250, 8000);
  for (uint32_t n = 0; n < 8; ++n) {
    const int64_t ceiling = backoffCeiling(cfg, n).count();
    double sum = 0;
    int64_t lo = ceiling, hi = 0;
    constexpr int kSamples = 20000;
    for (int i = 0; i < kSamples; ++i) {
      const int64_t d = fullJitterDelay(cfg, n, random).count();
      ASSERT_GE(d, 0);
      ASSERT_LE(d, ceiling);
      sum += static_cast<double>(d);
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    // Uniform on [0, ceiling]: mean ceiling/2, and both ends nearly reached.
    EXPECT_NEAR(sum / kSamples, ceiling / 2.0, ceiling * 0.03) << "n=" << n;
    EXPECT_LT(lo, ceiling / 50 + 1);
    EXPECT_GT(hi, ceiling - ceiling / 50 - 1);
  }
}

TEST(BackoffTest, RetryDelayIsAtLeastTheHint) {
  struct Case {
    std::optional<int64_t> hint_ms;
    bool respect;
    int64_t expected_ms;  // jitter is 125 (r = 0.5, n = 0)
  };
  const Case cases[] = {
      {std::nullopt, true, 125},
      {100, true, 125},      // jitter already longer
      {2000, true, 2000},    // the upstream asked for more
      {60000, true, 60000},  // not capped by backoff.max: the budget check decides
      {2000, false, 125},    // ignored when respect_retry_after is off
      {0, true, 125},
  };
  for (const auto& c : cases) {
    std::optional<milliseconds> hint;
    if (c.hint_ms) hint = milliseconds(*c.hint_ms);
    EXPECT_EQ(retryDelay(backoff(250, 8000), 0, hint, c.respect, constant(0.5)).count(),
              c.expected_ms);
  }
}

TEST(BackoffTest, ThreadLocalUniformIsInRange) {
  const UniformRandom random = threadLocalUniform();
  for (int i = 0; i < 1000; ++i) {
    const double r = random();
    ASSERT_GE(r, 0.0);
    ASSERT_LT(r, 1.0);
  }
}

}  // namespace
}  // namespace sluice
