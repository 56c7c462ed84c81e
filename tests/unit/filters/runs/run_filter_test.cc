// Tests for the run filter (filters/runs/run_filter.h) on fake callbacks and
// a real RunTable: joining a run, the run's deadline lowering the task's,
// refusals of a cancelled, expired or capped run, a cancel reaching the task,
// its headers' validation, and what goes upstream.

#include "filters/runs/run_filter.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/unit/filters/fake_filter_callbacks.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using test::FakeFilterCallbacks;

class RunFilterTest : public ::testing::Test {
 protected:
  /** A task with `headers` through decodeHeaders: its filter and what it returned. */
  struct Task {
    std::unique_ptr<FakeFilterCallbacks> callbacks;
    std::unique_ptr<RunFilter> filter;
    FilterStatus status = FilterStatus::Continue;
  };
  Task start(std::vector<std::pair<std::string, std::string>> headers) {
    Task t;
    t.callbacks = std::make_unique<FakeFilterCallbacks>(clock_);
    t.filter = std::make_unique<RunFilter>(config_, table_);
    t.filter->setCallbacks(*t.callbacks);
    RequestHead head;
    head.method = "POST";
    head.path = "/v1/chat/completions";
    for (auto& [name, value] : headers) head.headers.add(name, value);
    t.status = t.filter->decodeHeaders(head);
    return t;
  }
  static std::string slug(const Task& t) {
    return t.callbacks->local_replies.empty() ? "" : t.callbacks->local_replies[0].slug;
  }

  ManualClock clock_;
  config::RunsConfig config_;
  RunTable table_{clock_, RunTable::Limits{}};
};

TEST(RunIdTest, EveryLengthAndPlaceOfAnInvisibleByteIsRefused) {
  // The check reads eight bytes at a time: each length from 1 to 128, each
  // position, the bytes at and around both ends of 0x21..0x7e.
  for (size_t n = 1; n <= 128; ++n) {
    std::string id(n, 'a');
    for (size_t i = 0; i < n; ++i)
      std::string(1, static_cast<char>(0x21 + (i * 7) % 94)).copy(&id[i], 1);
    ASSERT_TRUE(validRunId(id)) << n;
    for (size_t at = 0; at < n; ++at) {
      for (const int bad : {0x00, 0x09, 0x20, 0x7f, 0x80, 0xa0, 0xff}) {
        std::string broken = id;
        broken[at] = static_cast<char>(bad);
        EXPECT_FALSE(validRunId(broken)) << "length " << n << ", byte " << bad << " at " << at;
      }
      for (const int good : {0x21, 0x7e}) {
        std::string edge = id;
        edge[at] = static_cast<char>(good);
        EXPECT_TRUE(validRunId(edge)) << "length " << n << ", byte " << good << " at " << at;
      }
    }
  }
  EXPECT_FALSE(validRunId(""));
  EXPECT_FALSE(validRunId(std::string(129, 'a')));
}

TEST_F(RunFilterTest, ARequestWithoutTheHeaderIsNoRunsTask) {
  Task t = start({});
  EXPECT_EQ(t.status, FilterStatus::Continue);
  EXPECT_EQ(t.callbacks->run, "");
  EXPECT_EQ(t.callbacks->deadline(), MonotonicTime::max());
  EXPECT_FALSE(table_.snapshot("r1").has_value());
}

TEST_F(RunFilterTest, ATaskJoinsItsRunAndTakesTheRunsDeadline) {
  Task t = start({{"x-run-id", "r1"}, {"x-parent-run-id", "p1"}, {"x-run-budget-ms", "5000"}});
  EXPECT_EQ(t.status, FilterStatus::Continue);
  EXPECT_EQ(t.callbacks->run, "r1");
  EXPECT_EQ(t.callbacks->parent_run, "p1");
  EXPECT_EQ(t.callbacks->deadline(), clock_.now() + 5000ms);
  EXPECT_EQ(t.callbacks->deadline_reason, CancelReason::RunDeadline);
  EXPECT_EQ(t.callbacks->run_spend, t.filter.get());
  ASSERT_TRUE(table_.snapshot("r1").has_value());
  EXPECT_EQ(table_.snapshot("r1")->tasks_in_flight, 1u);
  t.filter->onDestroy();
  EXPECT_EQ(table_.snapshot("r1")->tasks_in_flight, 0u);
}

TEST_F(RunFilterTest, TheRunHeadersAreReadAnywhereAmongOthersInAnyCaseTheFirstOfEachCounting) {
  // Other fields of the same lengths as the run headers (13, 15 and 8
  // characters) sit before them; each run header's first value counts.
  Task t = start({{"authorization", "Bearer sk"},
                  {"accept-encoding", "gzip"},
                  {"x-other", "1"},
                  {"X-Run-Max-USD", "0.5"},
                  {"user-agen", "a"},
                  {"X-RUN-ID", "r1"},
                  {"x-run-id", "r2"},
                  {"x-run-budget-ms", "4000"},
                  {"x-run-budget-ms", "9000"},
                  {"x-parent-run-id", "p1"},
                  {"x-parent-run-id", "p2"}});
  EXPECT_EQ(t.status, FilterStatus::Continue);
  EXPECT_EQ(t.callbacks->run, "r1");
  EXPECT_EQ(t.callbacks->parent_run, "p1");
  EXPECT_EQ(t.callbacks->deadline(), clock_.now() + 4000ms);
  ASSERT_TRUE(table_.snapshot("r1").has_value());
  EXPECT_EQ(table_.snapshot("r1")->max_usd, 0.5);
  EXPECT_EQ(table_.snapshot("r1")->parent, "p1");
  EXPECT_FALSE(table_.snapshot("r2").has_value());
  t.filter->onDestroy();

  // A configured header name of another length is found too.
  config_.header = "x-agent-run-identifier";
  Task other = start({{"x-run-id", "ignored"}, {"x-agent-run-identifier", "r3"}});
  EXPECT_EQ(other.callbacks->run, "r3");
  other.filter->onDestroy();
}

TEST_F(RunFilterTest, ACancelOfTheRunCancelsItsTaskAndRefusesTheNextWith409) {
  Task t = start({{"x-run-id", "r1"}});
  EXPECT_EQ(table_.cancel("r1"), 1u);
  ASSERT_EQ(t.callbacks->cancels.size(), 1u);
  EXPECT_EQ(t.callbacks->cancels[0].first, CancelReason::RunCancelled);
  t.filter->onDestroy();
  Task later = start({{"x-run-id", "r1"}});
  EXPECT_EQ(later.status, FilterStatus::StopIteration);
  EXPECT_EQ(slug(later), "run-cancelled");
  EXPECT_EQ(later.callbacks->local_replies[0].status, 409);
}

TEST_F(RunFilterTest, ATaskAfterTheRunsDeadlineIsRefusedWith504) {
  Task first = start({{"x-run-id", "r1"}, {"x-run-budget-ms", "100"}});
  first.filter->onDestroy();
  clock_.advance(150ms);
  Task late = start({{"x-run-id", "r1"}});
  EXPECT_EQ(late.status, FilterStatus::StopIteration);
  EXPECT_EQ(slug(late), "run-deadline-exceeded");
}

TEST_F(RunFilterTest, AtTheSpendCapTheTaskIsCutAndTheNextRefusedWith402) {
  Task t = start({{"x-run-id", "r1"}, {"x-run-max-usd", "0.01"}});
  t.filter->addRunSpend(0.004);
  EXPECT_TRUE(t.callbacks->cancels.empty());
  t.filter->addRunSpend(0.007);  // crosses 0.01
  ASSERT_EQ(t.callbacks->cancels.size(), 1u);
  EXPECT_EQ(t.callbacks->cancels[0].first, CancelReason::RunSpendCap);
  t.filter->onDestroy();
  Task later = start({{"x-run-id", "r1"}});
  EXPECT_EQ(slug(later), "run-spend-exhausted");
  EXPECT_EQ(later.callbacks->local_replies[0].status, 402);
}

TEST_F(RunFilterTest, InvalidHeadersAreRefusedBeforeTheRunIsTouched) {
  struct Row {
    std::vector<std::pair<std::string, std::string>> headers;
    std::string slug;
  };
  const Row rows[] = {
      {{{"x-run-id", std::string(129, 'a')}}, "bad-request"},
      {{{"x-run-id", "has space"}}, "bad-request"},
      {{{"x-run-id", "r1"}, {"x-parent-run-id", "bad\x01"}}, "bad-request"},
      {{{"x-run-id", "r1"}, {"x-run-budget-ms", "-5"}}, "invalid-run-budget"},
      {{{"x-run-id", "r1"}, {"x-run-max-usd", "1e3"}}, "invalid-run-max-usd"},
      {{{"x-run-id", "r1"}, {"x-run-max-usd", "0"}}, "invalid-run-max-usd"},
  };
  for (const Row& row : rows) {
    Task t = start(row.headers);
    EXPECT_EQ(t.status, FilterStatus::StopIteration) << row.slug;
    EXPECT_EQ(slug(t), row.slug);
  }
  EXPECT_FALSE(table_.snapshot("r1").has_value());
}

TEST_F(RunFilterTest, TheRunsLimitHeadersNeverGoUpstreamButTheRunIdDoes) {
  Task t = start({{"x-run-id", "r1"}, {"x-run-budget-ms", "5000"}, {"x-run-max-usd", "2"}});
  RequestHead upstream;
  upstream.headers.add("x-run-id", "r1");
  upstream.headers.add("x-run-budget-ms", "5000");
  upstream.headers.add("x-run-max-usd", "2");
  EXPECT_EQ(t.filter->beforeAttempt(upstream, t.callbacks->attemptContext()).kind,
            Admission::Kind::Continue);
  EXPECT_EQ(upstream.headers.get("x-run-id"), "r1");
  EXPECT_FALSE(upstream.headers.has("x-run-budget-ms"));
  EXPECT_FALSE(upstream.headers.has("x-run-max-usd"));
  t.filter->onDestroy();
}

TEST_F(RunFilterTest, WithoutTheRunHeaderTheRunsLimitHeadersStillNeverGoUpstream) {
  Task t = start({{"x-run-budget-ms", "5000"}, {"x-run-max-usd", "2"}});
  RequestHead upstream;
  upstream.headers.add("x-run-budget-ms", "5000");
  upstream.headers.add("x-run-max-usd", "2");
  EXPECT_EQ(t.filter->beforeAttempt(upstream, t.callbacks->attemptContext()).kind,
            Admission::Kind::Continue);
  EXPECT_FALSE(upstream.headers.has("x-run-budget-ms"));
  EXPECT_FALSE(upstream.headers.has("x-run-max-usd"));
  t.filter->onDestroy();
}

}  // namespace
}  // namespace sluice
