// `workers: auto` honours the cgroup CPU limit (proxy/server/cpu_limit.h): the
// cpu.max / cfs quota parsers, and the whole lookup (/proc/self/cgroup →
// /proc/self/mountinfo → the cgroup's files) on fixture trees in
// tests/unit/proxy/server/cgroup_fixtures/ copied from real systems' layouts.

#include "proxy/server/cpu_limit.h"

#include <gtest/gtest.h>

#include <thread>

namespace sluice {
namespace {

std::string fixture(const std::string& name) {
  return std::string(SLUICE_SOURCE_DIR) + "/tests/unit/proxy/server/cgroup_fixtures/" + name;
}

TEST(CpuLimitTest, ParsesCgroupV2CpuMax) {
  EXPECT_EQ(parseCgroupV2CpuMax("200000 100000\n"), 2.0);
  EXPECT_EQ(parseCgroupV2CpuMax("150000 100000"), 1.5);
  EXPECT_EQ(parseCgroupV2CpuMax("50000 100000"), 0.5);
  EXPECT_EQ(parseCgroupV2CpuMax("max 100000\n"), std::nullopt);  // no limit
  for (const char* bad : {"", "\n", "100000", "x 100000", "100000 0", "-1 100000", "1 2 3"}) {
    EXPECT_EQ(parseCgroupV2CpuMax(bad), std::nullopt) << bad;
  }
}

TEST(CpuLimitTest, ParsesCgroupV1Quota) {
  EXPECT_EQ(parseCgroupV1Quota("250000\n", "100000\n"), 2.5);
  EXPECT_EQ(parseCgroupV1Quota("-1\n", "100000\n"), std::nullopt);  // no limit
  EXPECT_EQ(parseCgroupV1Quota("100000", "0"), std::nullopt);
  EXPECT_EQ(parseCgroupV1Quota("abc", "100000"), std::nullopt);
}

TEST(CpuLimitTest, ReadsTheLimitOfThisProcesssCgroup) {
  struct Case {
    const char* fixture;
    std::optional<double> limit;
  };
  const Case cases[] = {
      {"v2-container", 1.5},  // docker --cpus=1.5 with a cgroup namespace: cpu.max at the mount
      {"v2-systemd", 3.0},    // the unit has none, its slice 3 CPUs: an ancestor's limit applies
      {"v2-unlimited", std::nullopt},
      {"v2-fraction", 0.5},
      {"v1-docker", 2.5},  // v1: the mount's root is the container's own cgroup
      {"v1-unlimited", std::nullopt},
      {"does-not-exist", std::nullopt},  // no /proc or cgroup files at all
  };
  for (const Case& c : cases) {
    EXPECT_EQ(cgroupCpuLimit(fixture(c.fixture)), c.limit) << c.fixture;
  }
}

TEST(CpuLimitTest, AutoWorkersAreTheQuotaRoundedDownAtLeastOne) {
  const uint32_t cpus = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(autoWorkerCount(fixture("v2-container")), std::min(cpus, 1u));  // 1.5 → 1
  EXPECT_EQ(autoWorkerCount(fixture("v2-fraction")), 1u);                   // 0.5 → 1
  EXPECT_EQ(autoWorkerCount(fixture("v1-docker")), std::min(cpus, 2u));     // 2.5 → 2
  EXPECT_EQ(autoWorkerCount(fixture("v2-systemd")), std::min(cpus, 3u));
  EXPECT_EQ(autoWorkerCount(fixture("v2-unlimited")), cpus);
  EXPECT_EQ(resolveWorkerCount(7), 7u);  // an explicit count is kept
  EXPECT_GE(resolveWorkerCount(0), 1u);
}

}  // namespace
}  // namespace sluice
