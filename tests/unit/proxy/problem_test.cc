// Tests for the problem+json replies sluice makes itself (proxy/problem.h,
// DESIGN.md §3): exactly the six documented fields, framing headers that match
// the body, Retry-After rounded up and retry-after-ms exact, and
// `x-should-retry: false` exactly when the problem is not retriable.

#include "proxy/problem.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace sluice {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

json parseBody(const LocalReply& r) {
  // Throws (and fails the test) on invalid JSON.
  return json::parse(r.body);
}

std::set<std::string> keysOf(const json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

Problem basic() {
  Problem p;
  p.status = 503;
  p.slug = "circuit-open";
  p.title = "Upstream circuit open";
  p.detail = "upstream openai is cooling down";
  p.cancel_reason = CancelReason::CircuitOpen;
  p.is_retriable = true;
  p.retry_after = 1500ms;
  return p;
}

TEST(ProblemReplyTest, BodyHasExactlyTheDocumentedFields) {
  const LocalReply r = makeProblemReply(basic());
  const json j = parseBody(r);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(keysOf(j), (std::set<std::string>{"type", "title", "status", "detail",
                                              "cancel_reason", "is_retriable"}));
  EXPECT_EQ(j["type"], "urn:sluice:problem:circuit-open");
  EXPECT_EQ(j["title"], "Upstream circuit open");
  ASSERT_TRUE(j["status"].is_number_integer());
  EXPECT_EQ(j["status"], 503);
  EXPECT_EQ(j["detail"], "upstream openai is cooling down");
  EXPECT_EQ(j["cancel_reason"], "circuit_open");
  ASSERT_TRUE(j["is_retriable"].is_boolean());
  EXPECT_EQ(j["is_retriable"], true);
  EXPECT_EQ(r.head.status, 503);
}

TEST(ProblemReplyTest, CancelReasonIsNullWhenAbsent) {
  Problem p = basic();
  p.cancel_reason.reset();
  const json j = parseBody(makeProblemReply(p));
  ASSERT_TRUE(j.contains("cancel_reason"));
  EXPECT_TRUE(j["cancel_reason"].is_null());
}

TEST(ProblemReplyTest, CancelReasonIsTheLabelForEveryReason) {
  const std::pair<CancelReason, const char*> kLabels[] = {
      {CancelReason::ClientDisconnect, "client_disconnect"},
      {CancelReason::ClientStalled, "client_stalled"},
      {CancelReason::BudgetExhausted, "budget_exhausted"},
      {CancelReason::CircuitOpen, "circuit_open"},
      {CancelReason::RateLimited, "rate_limited"},
      {CancelReason::Overloaded, "overloaded"},
      {CancelReason::UpstreamTimeout, "upstream_timeout"},
      {CancelReason::Draining, "draining"},
  };
  for (const auto& [reason, label] : kLabels) {
    Problem p = basic();
    p.cancel_reason = reason;
    EXPECT_EQ(parseBody(makeProblemReply(p))["cancel_reason"], label) << label;
  }
}

TEST(ProblemReplyTest, StatusInBodyAndHeadMatch) {
  for (int status : {400, 404, 429, 499, 500, 502, 503, 504}) {
    Problem p = basic();
    p.status = status;
    const LocalReply r = makeProblemReply(p);
    EXPECT_EQ(r.head.status, status);
    EXPECT_EQ(parseBody(r)["status"], status);
  }
}

TEST(ProblemReplyTest, EmptySlugStillGivesAType) {
  Problem p = basic();
  p.slug.clear();
  const json j = parseBody(makeProblemReply(p));
  ASSERT_TRUE(j["type"].is_string());
  EXPECT_EQ(j["type"].get<std::string>().rfind("urn:sluice:problem:", 0), 0u);
  EXPECT_GT(j["type"].get<std::string>().size(), std::string("urn:sluice:problem:").size());
}

TEST(ProblemReplyTest, ContentTypeAndContentLengthMatchTheBody) {
  Problem p = basic();
  p.detail = "d\xC3\xA9tail with multi-byte UTF-8 \xE2\x9C\x93";  // length is in bytes
  const LocalReply r = makeProblemReply(p);
  EXPECT_EQ(r.head.headers.getAll("content-type"),
            std::vector<std::string_view>{"application/problem+json"});
  const auto lengths = r.head.headers.getAll("content-length");
  ASSERT_EQ(lengths.size(), 1u);
  EXPECT_EQ(std::string(lengths[0]), std::to_string(r.body.size()));
}

TEST(ProblemReplyTest, RetryAfterRoundsUpAndRetryAfterMsIsExact) {
  struct Row {
    std::chrono::milliseconds wait;
    const char* seconds;
    const char* ms;
  };
  const Row kRows[] = {
      {0ms, "0", "0"},           {1ms, "1", "1"},           {999ms, "1", "999"},
      {1000ms, "1", "1000"},     {1001ms, "2", "1001"},     {1500ms, "2", "1500"},
      {2000ms, "2", "2000"},     {59999ms, "60", "59999"},  {60000ms, "60", "60000"},
      {3600001ms, "3601", "3600001"},
      {-5ms, "0", "0"},  // a wait in the past is no wait, never a negative header
  };
  for (const auto& row : kRows) {
    Problem p = basic();
    p.retry_after = row.wait;
    const LocalReply r = makeProblemReply(p);
    EXPECT_EQ(r.head.headers.getAll("retry-after"), std::vector<std::string_view>{row.seconds})
        << row.wait.count() << "ms";
    EXPECT_EQ(r.head.headers.getAll("retry-after-ms"), std::vector<std::string_view>{row.ms})
        << row.wait.count() << "ms";
  }
}

TEST(ProblemReplyTest, NoRetryHeadersWithoutAKnownWait) {
  Problem p = basic();
  p.retry_after.reset();
  const LocalReply r = makeProblemReply(p);
  EXPECT_FALSE(r.head.headers.has("retry-after"));
  EXPECT_FALSE(r.head.headers.has("retry-after-ms"));
}

TEST(ProblemReplyTest, ShouldRetryFalseIffNotRetriable) {
  for (bool retriable : {true, false}) {
    for (bool with_wait : {true, false}) {
      Problem p = basic();
      p.is_retriable = retriable;
      if (!with_wait) p.retry_after.reset();
      const LocalReply r = makeProblemReply(p);
      if (retriable) {
        EXPECT_FALSE(r.head.headers.has("x-should-retry")) << "wait=" << with_wait;
      } else {
        EXPECT_EQ(r.head.headers.getAll("x-should-retry"),
                  std::vector<std::string_view>{"false"})
            << "wait=" << with_wait;
      }
      EXPECT_EQ(parseBody(r)["is_retriable"], retriable);
    }
  }
}

TEST(ProblemReplyTest, HostileDetailAndTitleStayValidJson) {
  const std::string kDetails[] = {
      "x-budget-ms must be a positive integer of milliseconds, got \"abc\"",
      "line one\nline two\r\n\ttabbed",
      "back\\slash and \"quotes\" and '}' and {\"injected\": true}",
      "control \x01\x02\x1f bytes",
      "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x9A\x80",  // é, 日本, 🚀
      std::string("embedded\0nul", 12),
      "",
  };
  for (const auto& detail : kDetails) {
    Problem p = basic();
    p.detail = detail;
    p.title = detail;
    const LocalReply r = makeProblemReply(p);
    json j;
    ASSERT_NO_THROW(j = parseBody(r)) << r.body;
    EXPECT_EQ(j["detail"].get<std::string>(), detail);  // round-trips byte for byte
    EXPECT_EQ(j["title"].get<std::string>(), detail);
    EXPECT_EQ(keysOf(j).size(), 6u);  // nothing injected
  }
}

// Details quote client input (a header value, a path) and HTTP header values
// may carry obs-text bytes 0x80-0xFF: invalid UTF-8 must still give a valid
// body (U+FFFD), never an exception on the data path.
TEST(ProblemReplyTest, InvalidUtf8DetailDoesNotThrow) {
  for (const std::string& detail : {std::string("got \"\xff\""), std::string("cut \xC3"),
                                   std::string("\xE6\x97 truncated")}) {
    Problem p = basic();
    p.detail = detail;
    LocalReply r;
    ASSERT_NO_THROW(r = makeProblemReply(p));
    json j;
    ASSERT_NO_THROW(j = parseBody(r)) << r.body;
    ASSERT_TRUE(j["detail"].is_string());
    EXPECT_NE(j["detail"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
    EXPECT_EQ(std::string(r.head.headers.get("content-length").value_or("")),
              std::to_string(r.body.size()));
  }
}

}  // namespace
}  // namespace sluice
