// Tests for the process_* metrics (common/process_metrics.h): /proc/self/stat
// parsing (a command name with spaces and parentheses, units), and a live
// reading of this test process.

#include "common/process_metrics.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

// proc(5) field numbers: 14 utime, 15 stime, 22 starttime, 23 vsize, 24 rss.
constexpr const char* kStat =
    "4242 (sluice (worker) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 "
    "250 150 0 0 20 0 5 0 12345 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 "
    "17 1 0 0 0 0 0\n";

TEST(ProcStatTest, ReadsCpuMemoryAndStartTime) {
  ProcessStats s;
  ASSERT_TRUE(parseProcStat(kStat, 100, 4096, 1'700'000'000, s));
  EXPECT_DOUBLE_EQ(s.cpu_seconds, 4.0);                      // (250 + 150) ticks / 100
  EXPECT_DOUBLE_EQ(s.start_time_seconds, 1'700'000'123.45);  // btime + 12345 / 100
  EXPECT_DOUBLE_EQ(s.virtual_memory_bytes, 104857600);
  EXPECT_DOUBLE_EQ(s.resident_memory_bytes, 2560.0 * 4096);
}

TEST(ProcStatTest, RejectsWhatIsNotAStatLine) {
  ProcessStats s;
  EXPECT_FALSE(parseProcStat("", 100, 4096, 0, s));
  EXPECT_FALSE(parseProcStat("4242 (x) S 1 2 3", 100, 4096, 0, s));  // too few fields
  EXPECT_FALSE(parseProcStat("no parenthesis at all", 100, 4096, 0, s));
  EXPECT_FALSE(parseProcStat(kStat, 0, 4096, 0, s));  // no tick rate
}

TEST(ProcessCollectorTest, ReadsThisProcess) {
  const auto stats = readProcessStats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_GT(stats->resident_memory_bytes, 0);
  EXPECT_GT(stats->open_fds, 0);
  const auto families = ProcessCollector().Collect();
  ASSERT_EQ(families.size(), 6u);
  EXPECT_EQ(families[0].name, "process_cpu_seconds_total");
  EXPECT_EQ(families[0].type, prometheus::MetricType::Counter);
  for (const auto& f : families) {
    EXPECT_EQ(f.name.rfind("process_", 0), 0u) << f.name;
    EXPECT_EQ(f.metric.size(), 1u) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
}

}  // namespace
}  // namespace sluice
