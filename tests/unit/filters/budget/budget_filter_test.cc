// Tests for the budget filter (filters/budget/budget_filter.h, docs/design.md §3
// "Budget"), Envoy filter-test style: inline YAML route config, the filter on
// fake callbacks with a ManualClock, assertions on the returned status AND on
// its effects (deadline set, local reply sent, upstream header rewritten).

#include "filters/budget/budget_filter.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/loader.h"
#include "proxy/exchange/config_snapshot.h"
#include "tests/unit/filters/fake_filter_callbacks.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------
// parseBudgetMs

TEST(ParseBudgetMsTest, Valid) {
  const std::pair<std::string_view, long long> kRows[] = {
      {"1", 1},
      {"250", 250},
      {" 300 ", 300},
      {"\t42\t", 42},
      {"  7", 7},
      {"120000", 120000},
      {"007", 7},                              // leading zeros are still an integer
      {"999999999999999", 999999999999999LL},  // 15 digits: the longest accepted
  };
  for (const auto& [text, ms] : kRows) {
    const auto parsed = parseBudgetMs(text);
    ASSERT_TRUE(parsed.has_value()) << "\"" << text << "\"";
    EXPECT_EQ(parsed->count(), ms) << "\"" << text << "\"";
  }
}

TEST(ParseBudgetMsTest, Invalid) {
  const std::string_view kRows[] = {
      "",
      " ",
      "\t",
      "0",
      "000",
      "-1",
      "+5",
      "1.5",
      "1e3",
      "abc",
      "12ms",
      "1 000",
      "1,000",
      "0x10",
      "5s",
      "\xD9\xA1",             // ARABIC-INDIC DIGIT ONE is not ASCII
      "1000000000000000",     // 16 digits
      "9999999999999999999",  // 19 digits: would overflow if parsed
      "123456789012345678901234567890",
      std::string_view("12\0", 3),  // embedded NUL
      "\n12",                       // only spaces and tabs are trimmed
  };
  for (const auto& text : kRows) {
    EXPECT_FALSE(parseBudgetMs(text).has_value()) << "\"" << text << "\"";
  }
}

// ---------------------------------------------------------------------------
// BudgetFilter on fake callbacks

using test::FakeFilterCallbacks;

constexpr const char* kConfigHead = R"(listen: 127.0.0.1:0
upstreams:
  - {name: up, url: "http://127.0.0.1:9001"}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: up
)";

class BudgetFilterTest : public ::testing::Test {
 protected:
  // Loads the route with `budget_yaml` (a `budget:` line, or "" for defaults)
  // and wires a fresh filter to fresh callbacks.
  void setUpFilter(const std::string& budget_yaml) {
    auto r = config::loadConfigString(std::string(kConfigHead) + budget_yaml, "budget_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    config_ = r.config;
    callbacks_ = std::make_unique<FakeFilterCallbacks>(clock_);
    filter_ = std::make_unique<BudgetFilter>(config_->routes.at(0).budget);
    filter_->setCallbacks(*callbacks_);
  }

  static RequestHead requestWith(std::vector<std::pair<std::string, std::string>> headers) {
    RequestHead h;
    h.method = "POST";
    h.path = "/v1/chat/completions";
    for (const auto& [n, v] : headers) h.headers.add(n, v);
    return h;
  }

  // The deadline as an offset from the request's start.
  milliseconds deadlineOffset() const {
    return std::chrono::duration_cast<milliseconds>(callbacks_->deadline() -
                                                    callbacks_->startTime());
  }

  void expectNoSideChannels() const {
    EXPECT_TRUE(callbacks_->cancels.empty());
    EXPECT_EQ(callbacks_->continue_calls, 0);
    EXPECT_EQ(callbacks_->timers_armed, 0u);  // the Exchange enforces the deadline, not the filter
  }

  ManualClock clock_;
  config::ConfigPtr config_;
  std::unique_ptr<FakeFilterCallbacks> callbacks_;
  std::unique_ptr<BudgetFilter> filter_;
};

constexpr const char* kBudget =
    "    budget: {header: x-budget-ms, default: 2s, max: 10s, propagate: true}\n";

TEST_F(BudgetFilterTest, Name) {
  setUpFilter(kBudget);
  EXPECT_EQ(filter_->name(), "budget");
}

TEST_F(BudgetFilterTest, MissingHeaderUsesTheDefault) {
  setUpFilter(kBudget);
  auto req = requestWith({{"content-type", "application/json"}});
  EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  EXPECT_EQ(callbacks_->set_deadline_calls, 1);
  EXPECT_EQ(deadlineOffset(), 2000ms);
  EXPECT_TRUE(callbacks_->local_replies.empty());
  expectNoSideChannels();
}

TEST_F(BudgetFilterTest, ContractDefaultsWhenTheRouteSaysNothing) {
  setUpFilter("");  // no budget: key → header x-budget-ms, default 120s, max 600s, propagate
  auto req = requestWith({});
  EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  EXPECT_EQ(deadlineOffset(), 120s);
  auto over = requestWith({{"x-budget-ms", "900000"}});
  EXPECT_EQ(filter_->decodeHeaders(over), FilterStatus::Continue);
  EXPECT_EQ(deadlineOffset(), 600s);
}

TEST_F(BudgetFilterTest, DeadlineCountsFromWhenHeadersArrivedNotFromNow) {
  setUpFilter(kBudget);
  clock_.advance(300ms);  // e.g. time spent reading the request before the chain ran
  auto req = requestWith({{"x-budget-ms", "1000"}});
  EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  EXPECT_EQ(callbacks_->deadline(), callbacks_->startTime() + 1000ms);
  EXPECT_EQ(callbacks_->deadline(), clock_.now() + 700ms);
}

TEST_F(BudgetFilterTest, HeaderValuesTable) {
  struct Row {
    std::string header_name;
    std::string value;
    milliseconds expected;
  };
  const Row kRows[] = {
      {"x-budget-ms", "1", 1ms},
      {"x-budget-ms", "250", 250ms},
      {"X-Budget-Ms", " 300 ", 300ms},  // lookup ignores case; value trimmed
      {"X-BUDGET-MS", "9999", 9999ms},
      {"x-budget-ms", "10000", 10000ms},  // exactly max
      {"x-budget-ms", "10001", 10000ms},  // above max: clamped
      {"x-budget-ms", "999999999999999", 10000ms},
  };
  for (const auto& row : kRows) {
    setUpFilter(kBudget);
    auto req = requestWith({{row.header_name, row.value}});
    EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue) << row.value;
    EXPECT_EQ(callbacks_->set_deadline_calls, 1) << row.value;
    EXPECT_EQ(deadlineOffset(), row.expected) << row.value;
    EXPECT_TRUE(callbacks_->local_replies.empty()) << row.value;
    expectNoSideChannels();
  }
}

TEST_F(BudgetFilterTest, InvalidHeaderAnswers400InvalidBudget) {
  for (const std::string& value : std::vector<std::string>{"", "0", "-1", "+5", "1.5", "1e3", "abc",
                                                           "12ms", "1000000000000000", " "}) {
    setUpFilter(kBudget);
    auto req = requestWith({{"x-budget-ms", value}});
    EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::StopIteration) << "\"" << value << "\"";
    ASSERT_EQ(callbacks_->local_replies.size(), 1u) << "\"" << value << "\"";
    const Problem& p = callbacks_->local_replies[0];
    EXPECT_EQ(p.status, 400);
    EXPECT_EQ(p.slug, "invalid-budget");
    EXPECT_FALSE(p.title.empty());
    EXPECT_FALSE(p.is_retriable);  // the same request would fail the same way
    EXPECT_FALSE(p.cancel_reason.has_value());
    EXPECT_FALSE(p.retry_after.has_value());
    EXPECT_NE(p.detail.find("x-budget-ms"), std::string::npos) << p.detail;
    EXPECT_NE(p.detail.find("\"" + value + "\""), std::string::npos) << p.detail;
    // No deadline was armed for a request that is being refused.
    EXPECT_EQ(callbacks_->set_deadline_calls, 0);
    EXPECT_EQ(callbacks_->deadline(), MonotonicTime::max());
    expectNoSideChannels();

    // What the client receives: a problem+json 400 that says not to retry.
    const LocalReply reply = makeProblemReply(p);
    EXPECT_EQ(reply.head.status, 400);
    EXPECT_EQ(*reply.head.headers.get("x-should-retry"), "false");
    const auto body = nlohmann::json::parse(reply.body);
    EXPECT_EQ(body["type"], "urn:sluice:problem:invalid-budget");
    EXPECT_EQ(body["detail"], p.detail);
  }
}

TEST_F(BudgetFilterTest, InvalidValueShownInDetailIsBounded) {
  setUpFilter(kBudget);
  const std::string huge(10000, 'x');
  auto req = requestWith({{"x-budget-ms", huge}});
  EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::StopIteration);
  ASSERT_EQ(callbacks_->local_replies.size(), 1u);
  EXPECT_LT(callbacks_->local_replies[0].detail.size(), 200u);
  EXPECT_NE(callbacks_->local_replies[0].detail.find(std::string(64, 'x')), std::string::npos);
}

// The invalid value is quoted into `detail` byte for byte and cut at 64 bytes
// (which can split a UTF-8 sequence); `x-budget-ms: \xff` is legal obs-text.
// The client must still get a 400 problem+json, not an exception.
TEST_F(BudgetFilterTest, NonUtf8HeaderStillGivesA400ProblemReply) {
  for (const std::string& value : {std::string("\xff"), std::string(63, '1') + "\xC3\xA9"}) {
    setUpFilter(kBudget);
    auto req = requestWith({{"x-budget-ms", value}});
    EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::StopIteration);
    ASSERT_EQ(callbacks_->local_replies.size(), 1u);
    LocalReply reply;
    ASSERT_NO_THROW(reply = makeProblemReply(callbacks_->local_replies[0]));
    EXPECT_EQ(reply.head.status, 400);
    nlohmann::json body;
    EXPECT_NO_THROW(body = nlohmann::json::parse(reply.body));
    EXPECT_EQ(body["status"], 400);
  }
}

TEST_F(BudgetFilterTest, ConfiguredHeaderNameIsUsed) {
  setUpFilter("    budget: {header: X-Deadline-Ms, default: 5s, max: 30s}\n");
  // The default header name means nothing on this route.
  auto other = requestWith({{"x-budget-ms", "100"}});
  EXPECT_EQ(filter_->decodeHeaders(other), FilterStatus::Continue);
  EXPECT_EQ(deadlineOffset(), 5s);
  auto req = requestWith({{"x-deadline-ms", "1234"}});
  EXPECT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  EXPECT_EQ(deadlineOffset(), 1234ms);
  auto bad = requestWith({{"X-DEADLINE-MS", "soon"}});
  EXPECT_EQ(filter_->decodeHeaders(bad), FilterStatus::StopIteration);
  ASSERT_EQ(callbacks_->local_replies.size(), 1u);
  EXPECT_NE(callbacks_->local_replies[0].detail.find("x-deadline-ms"), std::string::npos);
}

TEST_F(BudgetFilterTest, PropagateSendsTheRemainingMilliseconds) {
  setUpFilter(kBudget);
  auto req = requestWith({{"x-budget-ms", "1000"}});
  ASSERT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);

  // Attempt 1 after 250ms of queueing.
  clock_.advance(250ms);
  RequestHead upstream1 = req;
  EXPECT_EQ(filter_->beforeAttempt(upstream1, callbacks_->attemptContext()).kind,
            Admission::Kind::Continue);
  EXPECT_EQ(upstream1.headers.getAll("x-budget-ms"), std::vector<std::string_view>{"750"});

  // Attempt 2 after another 400ms (first attempt + backoff): the header shrinks.
  clock_.advance(400ms);
  RequestHead upstream2 = req;
  EXPECT_EQ(filter_->beforeAttempt(upstream2, callbacks_->attemptContext()).kind,
            Admission::Kind::Continue);
  EXPECT_EQ(upstream2.headers.getAll("x-budget-ms"), std::vector<std::string_view>{"350"});

  EXPECT_TRUE(callbacks_->local_replies.empty());
  EXPECT_EQ(callbacks_->set_deadline_calls, 1);  // attempts never move the deadline
  expectNoSideChannels();
}

TEST_F(BudgetFilterTest, PropagateNeverPromisesMoreThanIsLeft) {
  setUpFilter(kBudget);
  auto req = requestWith({{"x-budget-ms", "1000"}});
  ASSERT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  clock_.advance(250ms + std::chrono::microseconds(400));  // 749.6ms left
  RequestHead upstream = req;
  filter_->beforeAttempt(upstream, callbacks_->attemptContext());
  EXPECT_EQ(upstream.headers.getAll("x-budget-ms"), std::vector<std::string_view>{"749"});
}

TEST_F(BudgetFilterTest, PropagateAddsTheHeaderWhenTheClientSentNone) {
  setUpFilter(kBudget);
  auto req = requestWith({});
  ASSERT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  clock_.advance(500ms);
  RequestHead upstream = req;
  EXPECT_EQ(filter_->beforeAttempt(upstream, callbacks_->attemptContext()).kind,
            Admission::Kind::Continue);
  EXPECT_EQ(upstream.headers.getAll("x-budget-ms"), std::vector<std::string_view>{"1500"});
}

TEST_F(BudgetFilterTest, PropagateReplacesEveryClientCopy) {
  setUpFilter(kBudget);
  auto req = requestWith({{"X-Budget-Ms", "20000"}, {"accept", "*/*"}, {"x-budget-ms", "5"}});
  ASSERT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  EXPECT_EQ(deadlineOffset(), 10s);  // the first copy, clamped
  clock_.advance(1s);
  RequestHead upstream = req;
  filter_->beforeAttempt(upstream, callbacks_->attemptContext());
  EXPECT_EQ(upstream.headers.getAll("x-budget-ms"), std::vector<std::string_view>{"9000"});
  EXPECT_EQ(upstream.headers.getAll("accept"), std::vector<std::string_view>{"*/*"});
}

TEST_F(BudgetFilterTest, PropagateAfterTheDeadlineSendsOneNotZero) {
  setUpFilter(kBudget);
  auto req = requestWith({{"x-budget-ms", "100"}});
  ASSERT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  for (auto step : {100ms, 5000ms}) {  // exactly at, then well past, the deadline
    clock_.advance(step);
    RequestHead upstream = req;
    EXPECT_EQ(filter_->beforeAttempt(upstream, callbacks_->attemptContext()).kind,
              Admission::Kind::Continue);
    // 0 or a negative number would be an invalid budget for a downstream sluice.
    EXPECT_EQ(upstream.headers.getAll("x-budget-ms"), std::vector<std::string_view>{"1"});
  }
}

TEST_F(BudgetFilterTest, WithoutPropagateTheHeaderIsRemoved) {
  setUpFilter("    budget: {header: x-budget-ms, default: 2s, max: 10s, propagate: false}\n");
  auto req = requestWith({{"X-Budget-Ms", "800"}, {"accept", "*/*"}, {"x-budget-ms", "900"}});
  ASSERT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  EXPECT_EQ(deadlineOffset(), 800ms);
  clock_.advance(100ms);
  RequestHead upstream = req;
  EXPECT_EQ(filter_->beforeAttempt(upstream, callbacks_->attemptContext()).kind,
            Admission::Kind::Continue);
  EXPECT_FALSE(upstream.headers.has("x-budget-ms"));
  EXPECT_EQ(upstream.headers.entries(), (std::vector<HeaderMap::Entry>{{"accept", "*/*"}}));
  // The client's request as received is untouched.
  EXPECT_EQ(req.headers.getAll("x-budget-ms").size(), 2u);
  expectNoSideChannels();
}

TEST_F(BudgetFilterTest, WithoutPropagateAndNoHeaderNothingIsAdded) {
  setUpFilter("    budget: {propagate: false}\n");
  auto req = requestWith({{"accept", "*/*"}});
  ASSERT_EQ(filter_->decodeHeaders(req), FilterStatus::Continue);
  RequestHead upstream = req;
  EXPECT_EQ(filter_->beforeAttempt(upstream, callbacks_->attemptContext()).kind,
            Admission::Kind::Continue);
  EXPECT_EQ(upstream.headers.entries(), req.headers.entries());
}

}  // namespace
}  // namespace sluice
