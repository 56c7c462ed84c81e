#include "filters/runs/run_table.h"

#include <gtest/gtest.h>

#include <algorithm>
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

/** A fleet that answers when the test says so. */
class FakeFleet final : public RunTable::Fleet {
 public:
  void lookup(const std::string& id, const std::string& parent,
              std::function<void(const Known&)> done) override {
    lookups.emplace_back(id, parent);
    if (answer_lookups_at_once) {
      done(Known{});
    } else {
      lookup_done.push_back(std::move(done));
    }
  }
  void addSpend(const std::string& id, double usd, std::chrono::milliseconds ttl,
                std::function<void(std::optional<double>)> done) override {
    additions.push_back({id, usd, ttl});
    addition_done.push_back(std::move(done));
  }
  void ended(const std::string& id, RunTable::Ending why, std::chrono::milliseconds) override {
    endings.emplace_back(id, why);
  }
  struct Addition {
    std::string id;
    double usd;
    std::chrono::milliseconds ttl;
  };
  bool answer_lookups_at_once = true;
  std::vector<std::pair<std::string, std::string>> lookups;
  std::vector<std::function<void(const Known&)>> lookup_done;
  std::vector<Addition> additions;
  std::vector<std::function<void(std::optional<double>)>> addition_done;
  std::vector<std::pair<std::string, RunTable::Ending>> endings;
};

/** join(), and again after the fleet answered (as the run filter does). */
RunTable::Join joinNow(RunTable& table, const std::string& id, RunTable::Canceller canceller,
                       std::optional<double> max_usd = std::nullopt) {
  RunTable::Join join = table.join(id, "", std::nullopt, canceller, max_usd);
  if (join.kind == RunTable::Join::Kind::Pending && !table.awaitFleet(id, [] {})) {
    join = table.join(id, "", std::nullopt, canceller, max_usd);
  }
  return join;
}

/** A task that counts the cancellers asked of it and the times one was called. */
struct CountingOwner : RunTable::TaskOwner {
  int made = 0;
  int called = 0;
  std::function<void()> canceller() override {
    ++made;
    return [this] { ++called; };
  }
};

TEST_F(RunTableTest, ATaskOwnerMakesItsCancellerOnlyWhenItsRunEndsAndByHandleItLeavesAndSpends) {
  CountingOwner quiet;
  CountingOwner a;
  CountingOwner b;
  const auto q = table_.join("quiet", "", std::nullopt, quiet);
  ASSERT_EQ(q.kind, RunTable::Join::Kind::Joined);
  table_.addSpend(q, 0.5);
  EXPECT_DOUBLE_EQ(table_.snapshot("quiet")->spend_usd, 0.5) << "by handle, as by id";
  table_.addSpend(q, -0.75);  // a correction (the provider's count below the estimate)
  EXPECT_DOUBLE_EQ(table_.snapshot("quiet")->spend_usd, 0) << "never below 0";
  table_.addSpend(q, 0.5);
  table_.leave(q);
  EXPECT_EQ(table_.snapshot("quiet")->tasks_in_flight, 0u);
  EXPECT_EQ(quiet.made, 0) << "a run that never ends asks no canceller";

  const auto parent = table_.join("p", "", std::nullopt, a);
  const auto child = table_.join("c", "p", std::nullopt, b);
  ASSERT_EQ(child.kind, RunTable::Join::Kind::Joined);
  table_.addSpend(child, 0.25);
  EXPECT_DOUBLE_EQ(table_.snapshot("p")->spend_usd, 0.25) << "a child's spend counts in its parent";
  EXPECT_EQ(table_.cancel("p"), 2u);
  EXPECT_EQ(a.made, 1);
  EXPECT_EQ(b.made, 1);
  EXPECT_EQ(a.called, 1);
  EXPECT_EQ(b.called, 1);
  table_.leave(parent);
  table_.leave(child);
  EXPECT_EQ(table_.active(), 0u);
  EXPECT_EQ(table_.cancel("p"), 0u) << "left: not asked again";
  EXPECT_EQ(a.made, 1);
}

TEST_F(RunTableTest, ACancelIsToldToTheFleetBeforeAnyTaskHereIsCut) {
  // The peers' cuts wait for the fleet's message; this process's cuts may
  // be work on the very loop that sends it: the message goes first.
  auto fleet = std::make_shared<FakeFleet>();
  auto table = std::make_shared<RunTable>(clock_, limits());
  table->setFleet(fleet);
  std::vector<size_t> told_when;  // the fleet's endings when each task was cut
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(joinNow(*table, "run",
                      [&](RunTable::Ending) { told_when.push_back(fleet->endings.size()); })
                  .kind,
              RunTable::Join::Kind::Joined);
  }
  EXPECT_EQ(table->cancel("run"), 3u);
  ASSERT_EQ(fleet->endings.size(), 1u);
  EXPECT_EQ(told_when, (std::vector<size_t>{1, 1, 1}));
}

TEST_F(RunTableTest, WithAFleetSpendGoesToItsCounterInBatchesAndTheCapIsTheFleets) {
  auto fleet = std::make_shared<FakeFleet>();
  RunTable::Limits l = limits();
  l.max_usd = 1.0;
  auto table = std::make_shared<RunTable>(clock_, l);
  table->setFleet(fleet);
  int told = 0;
  const auto task = joinNow(*table, "run", [&](RunTable::Ending) { ++told; });
  ASSERT_EQ(task.kind, RunTable::Join::Kind::Joined);
  EXPECT_EQ(fleet->lookups.size(), 1u);
  // Chunks below 1% of the cap (0.01) and within 100 ms: nothing sent.
  for (int i = 0; i < 5; ++i) table->addSpend("run", 0.001);
  EXPECT_TRUE(fleet->additions.empty()) << "never per chunk";
  table->addSpend("run", 0.006);  // 0.011 unflushed: one addition
  ASSERT_EQ(fleet->additions.size(), 1u);
  EXPECT_NEAR(fleet->additions[0].usd, 0.011, 1e-12);
  EXPECT_EQ(fleet->additions[0].ttl, l.idle_expiry);
  clock_.advance(100ms);
  table->addSpend("run", 0.001);  // the interval passed: sent however small
  ASSERT_EQ(fleet->additions.size(), 2u);
  table->addSpend("run", 0.002);  // unflushed
  // The fleet answers the first: the peers spent 0.98 meanwhile.
  fleet->addition_done[0](0.991);
  EXPECT_NEAR(table->snapshot("run")->spend_usd, 0.991 + 0.001 + 0.002, 1e-12);
  EXPECT_EQ(told, 0);
  // The second answer takes the fleet to its cap: the run ends here, and the
  // fleet is told (tombstone, peers).
  fleet->addition_done[1](1.0);
  EXPECT_EQ(told, 1);
  EXPECT_EQ(table->snapshot("run")->state, "spend_exhausted");
  ASSERT_EQ(fleet->endings.size(), 1u);
  EXPECT_EQ(fleet->endings[0], std::make_pair(std::string("run"), RunTable::Ending::SpendCap));
  EXPECT_EQ(table->join("run", "", std::nullopt, nullptr).kind,
            RunTable::Join::Kind::SpendExhausted);
  // The task's end sends what is left.
  table->leave("run", task.task);
  ASSERT_EQ(fleet->additions.size(), 3u);
  EXPECT_NEAR(fleet->additions[2].usd, 0.002, 1e-12);
}

TEST_F(RunTableTest, WithAFleetAnAdditionThatFailsIsSentAgainAndCountsLocally) {
  auto fleet = std::make_shared<FakeFleet>();
  auto table = std::make_shared<RunTable>(clock_, limits());
  table->setFleet(fleet);
  int told = 0;
  const auto task = joinNow(
      *table, "run", [&](RunTable::Ending) { ++told; }, 0.1);
  table->addSpend("run", 0.05);
  ASSERT_EQ(fleet->additions.size(), 1u);
  fleet->addition_done[0](std::nullopt);  // Redis down
  EXPECT_NEAR(table->snapshot("run")->spend_usd, 0.05, 1e-12) << "kept locally";
  table->addSpend("run", 0.05);  // the local spend alone reaches the cap
  EXPECT_EQ(told, 1);
  ASSERT_EQ(fleet->additions.size(), 2u);
  EXPECT_NEAR(fleet->additions[1].usd, 0.1, 1e-12) << "the failed addition goes again";
  table->leave("run", task.task);
}

TEST_F(RunTableTest, WithAFleetARunNewHereWaitsForOneLookupAndItsTombstoneRefusesIt) {
  auto fleet = std::make_shared<FakeFleet>();
  fleet->answer_lookups_at_once = false;
  auto table = std::make_shared<RunTable>(clock_, limits());
  table->setFleet(fleet);
  EXPECT_EQ(table->join("gone", "", std::nullopt, nullptr).kind, RunTable::Join::Kind::Pending);
  EXPECT_EQ(table->join("gone", "", std::nullopt, nullptr).kind, RunTable::Join::Kind::Pending);
  int woken = 0;
  EXPECT_TRUE(table->awaitFleet("gone", [&] { ++woken; }));
  EXPECT_TRUE(table->awaitFleet("gone", [&] { ++woken; }));
  ASSERT_EQ(fleet->lookups.size(), 1u) << "one lookup per run new here, not per task";
  // Waiting runs are never forgotten, however full the table.
  for (int i = 0; i < 10; ++i) table->cancel("filler-" + std::to_string(i));
  fleet->endings.clear();
  RunTable::Fleet::Known known;
  known.ended = RunTable::Ending::Cancelled;
  fleet->lookup_done[0](known);
  EXPECT_EQ(woken, 2);
  EXPECT_EQ(table->join("gone", "", std::nullopt, nullptr).kind, RunTable::Join::Kind::Cancelled);
  EXPECT_TRUE(fleet->endings.empty()) << "the fleet's own tombstone is not told again";
  EXPECT_FALSE(table->awaitFleet("gone", [] {}));

  // A child of a run the fleet capped is refused as its parent is.
  EXPECT_EQ(table->join("child", "capped", std::nullopt, nullptr).kind,
            RunTable::Join::Kind::Pending);
  EXPECT_EQ(fleet->lookups.back(), std::make_pair(std::string("child"), std::string("capped")));
  RunTable::Fleet::Known parent_capped;
  parent_capped.parent_ended = RunTable::Ending::SpendCap;
  fleet->lookup_done.back()(parent_capped);
  EXPECT_EQ(table->join("child", "", std::nullopt, nullptr).kind,
            RunTable::Join::Kind::SpendExhausted);
}

TEST_F(RunTableTest, WithAFleetTheRunsHeldAreRecheckedAndThoseEndedElsewhereEndHere) {
  auto fleet = std::make_shared<FakeFleet>();
  fleet->answer_lookups_at_once = false;
  RunTable::Limits l = limits();
  l.max_runs = 10;
  auto table = std::make_shared<RunTable>(clock_, l);
  table->setFleet(fleet);
  std::vector<RunTable::Ending> told;
  const auto task = [&](const std::string& id) {
    const auto join =
        table->join(id, "", std::nullopt, [&](RunTable::Ending e) { told.push_back(e); });
    if (join.kind == RunTable::Join::Kind::Pending) {
      fleet->lookup_done.back()(RunTable::Fleet::Known{});
      return table->join(id, "", std::nullopt, [&](RunTable::Ending e) { told.push_back(e); });
    }
    return join;
  };
  const auto a = task("held-a");
  const auto b = task("held-b");
  const auto c = task("held-c");
  table->leave("held-c", c.task);  // idle, still held: its later tasks would not be looked up
  table->cancel("ended-here");
  EXPECT_EQ(table->join("checking", "", std::nullopt, nullptr).kind, RunTable::Join::Kind::Pending);
  std::vector<std::string> running = table->running(100);
  std::sort(running.begin(), running.end());
  EXPECT_EQ(running, (std::vector<std::string>{"held-a", "held-b", "held-c"}))
      << "neither a tombstone nor a run whose lookup is out";
  EXPECT_EQ(table->running(2).size(), 2u) << "bounded";

  fleet->endings.clear();
  // The fleet's tombstones say: held-a cancelled, held-b capped (both while
  // this process could not hear it).
  EXPECT_EQ(table->endedInFleet("held-a", RunTable::Ending::Cancelled), 1u);
  EXPECT_EQ(table->endedInFleet("held-b", RunTable::Ending::SpendCap), 1u);
  EXPECT_EQ(told, (std::vector<RunTable::Ending>{RunTable::Ending::Cancelled,
                                                 RunTable::Ending::SpendCap}));
  EXPECT_EQ(table->snapshot("held-a")->state, "cancelled");
  EXPECT_EQ(table->snapshot("held-b")->state, "spend_exhausted");
  EXPECT_EQ(table->join("held-c", "", std::nullopt, nullptr).kind, RunTable::Join::Kind::Joined);
  EXPECT_EQ(table->endedInFleet("held-c", RunTable::Ending::Cancelled), 0u);
  EXPECT_EQ(table->join("held-c", "", std::nullopt, nullptr).kind, RunTable::Join::Kind::Cancelled)
      << "an idle run held here refuses its later tasks";
  EXPECT_TRUE(fleet->endings.empty()) << "the fleet's own tombstones are not told again";

  // Heard already (a second re-check, or the pub/sub message came too): not told twice.
  EXPECT_EQ(table->endedInFleet("held-a", RunTable::Ending::Cancelled), 0u);
  EXPECT_EQ(told.size(), 2u);
  // A run not held is not created by a re-check.
  EXPECT_EQ(table->endedInFleet("unknown", RunTable::Ending::Cancelled), 0u);
  EXPECT_FALSE(table->snapshot("unknown").has_value());
  EXPECT_TRUE(table->running(100).empty());
  table->leave("held-a", a.task);
  table->leave("held-b", b.task);
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
