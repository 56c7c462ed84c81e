#include "filters/runs/run_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "filters/runs/run_filter.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

class RunTableTest : public ::testing::Test {
 protected:
  RunTable::Limits limits() {
    RunTable::Limits l;
    l.budget = 60s;
    l.idle_expiry = 10s;
    l.tombstone = 30s;
    l.max_runs = 4;
    return l;
  }
  ManualClock clock_;
  RunTable table_{clock_, limits()};
  int cancelled_ = 0;
  RunTable::Canceller canceller() {
    return [this](RunTable::Ending) { ++cancelled_; };
  }
};

TEST_F(RunTableTest, TheFirstTaskFixesTheDeadlineAndLaterTasksShareIt) {
  const auto start = clock_.now();
  const auto first = table_.join("r1", "", 20s, canceller());
  ASSERT_EQ(first.kind, RunTable::Join::Kind::Joined);
  EXPECT_EQ(first.deadline, start + 20s) << "x-run-budget-ms lowers the run's budget";
  clock_.advance(5s);
  const auto second = table_.join("r1", "", 50s, canceller());
  EXPECT_EQ(second.deadline, start + 20s) << "only the first task sets it";
  EXPECT_NE(first.task, second.task);
  EXPECT_EQ(table_.active(), 1u);
  table_.leave("r1", first.task);
  table_.leave("r1", second.task);
  EXPECT_EQ(table_.active(), 0u);
  EXPECT_EQ(table_.join("r2", "", 90s, canceller()).deadline, clock_.now() + 60s)
      << "runs.budget is the ceiling";
}

TEST_F(RunTableTest, ACancelReachesEveryTaskInFlightAndRefusesLaterOnes) {
  std::vector<RunTable::Ending> endings;
  table_.setEndingListener([&](RunTable::Ending e) { endings.push_back(e); });
  const auto a = table_.join("run", "", std::nullopt, canceller());
  const auto b = table_.join("run", "", std::nullopt, canceller());
  table_.leave("run", a.task);  // done before the Stop: not cancelled
  EXPECT_EQ(table_.cancel("run"), 1u);
  EXPECT_EQ(cancelled_, 1);
  EXPECT_EQ(endings, std::vector<RunTable::Ending>{RunTable::Ending::Cancelled});
  EXPECT_EQ(table_.join("run", "", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::Cancelled);
  EXPECT_EQ(table_.cancel("run"), 1u) << "a second cancel finds the task still leaving";
  EXPECT_EQ(endings.size(), 1u) << "a run ends once";
  table_.leave("run", b.task);
  EXPECT_EQ(table_.cancel("run"), 0u);
  EXPECT_EQ(table_.snapshot("run")->state, "cancelled");
}

TEST_F(RunTableTest, ACancelBeforeTheFirstTaskIsATombstone) {
  EXPECT_EQ(table_.cancel("early"), 0u);
  EXPECT_EQ(table_.join("early", "", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::Cancelled);
  clock_.advance(31s);  // past `tombstone`
  EXPECT_EQ(table_.join("early", "", std::nullopt, canceller()).kind, RunTable::Join::Kind::Joined)
      << "the tombstone expired: the id is a new run";
}

TEST_F(RunTableTest, CancellingAParentCancelsItsDescendants) {
  table_.join("parent", "", std::nullopt, canceller());
  table_.join("child", "parent", std::nullopt, canceller());
  table_.join("grandchild", "child", std::nullopt, canceller());
  table_.join("other", "", std::nullopt, canceller());
  EXPECT_EQ(table_.cancel("parent"), 3u);
  EXPECT_EQ(cancelled_, 3);
  EXPECT_EQ(table_.join("grandchild", "", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::Cancelled);
  EXPECT_EQ(table_.join("other", "", std::nullopt, canceller()).kind, RunTable::Join::Kind::Joined);
  // A new child of a cancelled run is refused from its first task.
  EXPECT_EQ(table_.join("late-child", "parent", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::Cancelled);
}

TEST_F(RunTableTest, AChildNeverOutlivesItsParentsDeadline) {
  const auto start = clock_.now();
  table_.join("parent", "", 10s, canceller());
  EXPECT_EQ(table_.join("child", "parent", 30s, canceller()).deadline, start + 10s);
}

TEST_F(RunTableTest, PastItsDeadlineARunRefusesTasksAndEndsOnce) {
  std::vector<RunTable::Ending> endings;
  table_.setEndingListener([&](RunTable::Ending e) { endings.push_back(e); });
  const auto t = table_.join("slow", "", 5s, canceller());
  clock_.advance(5s);
  EXPECT_EQ(table_.join("slow", "", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::DeadlineExceeded);
  EXPECT_EQ(table_.join("slow", "", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::DeadlineExceeded);
  EXPECT_EQ(endings, std::vector<RunTable::Ending>{RunTable::Ending::Deadline});
  EXPECT_EQ(table_.snapshot("slow")->state, "deadline_exceeded");
  EXPECT_EQ(cancelled_, 0) << "its own tasks end at their clamped deadline, not by a cancel";
  table_.leave("slow", t.task);
}

TEST_F(RunTableTest, IdleRunsAreForgottenAndTheTableIsBounded) {
  for (const char* id : {"a", "b", "c", "d"}) {
    const auto t = table_.join(id, "", std::nullopt, canceller());
    table_.leave(id, t.task);
    clock_.advance(1s);
  }
  const auto busy = table_.join("a", "", std::nullopt, canceller());  // "a" in flight again
  EXPECT_EQ(table_.size(), 4u);
  table_.join("e", "", std::nullopt, canceller());  // full: the longest idle ("b") goes
  EXPECT_EQ(table_.size(), 4u);
  EXPECT_FALSE(table_.snapshot("b"));
  EXPECT_TRUE(table_.snapshot("a")) << "a run with a task in flight is never forgotten";
  clock_.advance(11s);  // past idle_expiry
  table_.snapshot();    // (a sweep)
  EXPECT_FALSE(table_.snapshot("c"));
  EXPECT_TRUE(table_.snapshot("a"));
  table_.leave("a", busy.task);
}

TEST_F(RunTableTest, SpendAddsUpAndReachingTheCapEndsTheRunOnce) {
  std::vector<RunTable::Ending> endings;
  table_.setEndingListener([&](RunTable::Ending e) { endings.push_back(e); });
  std::vector<RunTable::Ending> told;
  const auto tell = [&](RunTable::Ending e) { told.push_back(e); };
  const auto a = table_.join("run", "", std::nullopt, tell, 1.0);
  const auto b = table_.join("run", "", std::nullopt, tell, 0.25);  // not the first task: ignored
  table_.addSpend("run", 0.4);
  table_.addSpend("run", -0.1);  // a correction
  table_.addSpend("run", 0.6);
  EXPECT_TRUE(told.empty()) << "0.9 of 1.0: under the cap";
  EXPECT_DOUBLE_EQ(table_.snapshot("run")->spend_usd, 0.9);
  EXPECT_DOUBLE_EQ(table_.snapshot("run")->max_usd, 1.0);
  table_.addSpend("run", 0.1);  // reaches it exactly
  EXPECT_EQ(told, (std::vector<RunTable::Ending>{RunTable::Ending::SpendCap,
                                                 RunTable::Ending::SpendCap}));
  EXPECT_EQ(endings, std::vector<RunTable::Ending>{RunTable::Ending::SpendCap});
  EXPECT_EQ(table_.snapshot("run")->state, "spend_exhausted");
  table_.addSpend("run", 0.5);  // the tasks' last chunks: counted, nothing told twice
  EXPECT_EQ(told.size(), 2u);
  EXPECT_EQ(endings.size(), 1u);
  EXPECT_DOUBLE_EQ(table_.snapshot("run")->spend_usd, 1.5);
  EXPECT_EQ(table_.join("run", "", std::nullopt, tell).kind, RunTable::Join::Kind::SpendExhausted);
  table_.cancel("run");  // already ended: first cause wins
  EXPECT_EQ(endings.size(), 1u);
  EXPECT_EQ(table_.snapshot("run")->state, "spend_exhausted");
  table_.leave("run", a.task);
  table_.leave("run", b.task);
}

TEST_F(RunTableTest, TheConfiguredCapAppliesAndTheHeaderOnlyLowersIt) {
  RunTable::Limits l = limits();
  l.max_usd = 2.0;
  table_.setLimits(l);
  table_.join("lowered", "", std::nullopt, canceller(), 0.5);
  table_.join("raised", "", std::nullopt, canceller(), 5.0);
  table_.join("default", "", std::nullopt, canceller());
  EXPECT_DOUBLE_EQ(table_.snapshot("lowered")->max_usd, 0.5);
  EXPECT_DOUBLE_EQ(table_.snapshot("raised")->max_usd, 2.0) << "a header never raises the cap";
  EXPECT_DOUBLE_EQ(table_.snapshot("default")->max_usd, 2.0);
  table_.addSpend("default", 100.0);
  EXPECT_EQ(cancelled_, 1);
}

TEST_F(RunTableTest, WithoutACapSpendIsOnlyCounted) {
  const auto t = table_.join("free", "", std::nullopt, canceller());
  table_.addSpend("free", 1e6);
  table_.addSpend("free", -2e6);  // never below zero
  EXPECT_EQ(cancelled_, 0);
  EXPECT_DOUBLE_EQ(table_.snapshot("free")->spend_usd, 0.0);
  EXPECT_EQ(table_.snapshot("free")->state, "running");
  table_.addSpend("unknown", 1.0);  // ignored
  EXPECT_FALSE(table_.snapshot("unknown"));
  table_.leave("free", t.task);
}

TEST_F(RunTableTest, AChildsSpendCountsInItsParentsAndTheParentsCapEndsTheTree) {
  std::vector<RunTable::Ending> endings;
  table_.setEndingListener([&](RunTable::Ending e) { endings.push_back(e); });
  const auto p = table_.join("parent", "", std::nullopt, canceller(), 1.0);
  const auto c = table_.join("child", "parent", std::nullopt, canceller());
  table_.addSpend("child", 0.7);
  EXPECT_DOUBLE_EQ(table_.snapshot("parent")->spend_usd, 0.7);
  EXPECT_DOUBLE_EQ(table_.snapshot("child")->spend_usd, 0.7);
  EXPECT_EQ(cancelled_, 0);
  table_.addSpend("parent", 0.3);
  EXPECT_EQ(cancelled_, 2) << "the parent's task and the child's";
  EXPECT_EQ(endings, (std::vector<RunTable::Ending>{RunTable::Ending::SpendCap,
                                                    RunTable::Ending::SpendCap}));
  EXPECT_EQ(table_.join("child", "", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::SpendExhausted);
  EXPECT_EQ(table_.join("grandchild", "parent", std::nullopt, canceller()).kind,
            RunTable::Join::Kind::SpendExhausted)
      << "a new child of a capped run is refused as the run is";
  table_.leave("parent", p.task);
  table_.leave("child", c.task);
}

TEST_F(RunTableTest, AChildsOwnCapEndsOnlyTheChild) {
  const auto p = table_.join("parent", "", std::nullopt, canceller());
  const auto c = table_.join("child", "parent", std::nullopt, canceller(), 0.5);
  table_.addSpend("child", 0.5);
  EXPECT_EQ(cancelled_, 1);
  EXPECT_EQ(table_.snapshot("child")->state, "spend_exhausted");
  EXPECT_EQ(table_.snapshot("parent")->state, "running");
  table_.leave("parent", p.task);
  table_.leave("child", c.task);
}

TEST(RunMaxUsdHeader, TakesAPositiveDecimalNumberOnly) {
  EXPECT_EQ(parseRunMaxUsd("2.5"), 2.5);
  EXPECT_EQ(parseRunMaxUsd(" 10 "), 10.0);
  EXPECT_EQ(parseRunMaxUsd(".25"), 0.25);
  for (const char* bad :
       {"", "0", "0.0", "-1", "1e3", "inf", "nan", "1.2.3", ".", "abc", "2000000000"}) {
    EXPECT_FALSE(parseRunMaxUsd(bad)) << bad;
  }
}

TEST_F(RunTableTest, AFloodOfDistinctIdsStaysWithinMaxRuns) {
  for (int i = 0; i < 10'000; ++i) {
    const std::string id = "flood-" + std::to_string(i);
    const auto t = table_.join(id, "", std::nullopt, canceller());
    table_.leave(id, t.task);
    table_.cancel("tomb-" + std::to_string(i));
  }
  EXPECT_LE(table_.size(), 4u);
}

TEST_F(RunTableTest, ConcurrentJoinsLeavesAndCancelsAreConsistent) {
  RunTable table(clock_, [] {
    RunTable::Limits l;
    l.max_runs = 64;
    return l;
  }());
  std::atomic<int> cancels{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string id = "run-" + std::to_string((i + t) % 16);
        const auto j = table.join(id, i % 3 == 0 ? "run-0" : "", std::nullopt,
                                  [&](RunTable::Ending) { ++cancels; });
        if (i % 50 == 0) table.cancel(id);
        if (j.kind == RunTable::Join::Kind::Joined) table.leave(id, j.task);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(table.active(), 0u);
  for (const auto& s : table.snapshot()) EXPECT_EQ(s.tasks_in_flight, 0u) << s.id;
}

}  // namespace
}  // namespace sluice
