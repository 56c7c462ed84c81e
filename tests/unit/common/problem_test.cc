// Tests for the problem+json replies sluice makes itself (common/problem.h,
// docs/design.md §3, §8): exactly the documented fields, the SDK-shaped `error`
// member, framing headers that match the body, Retry-After rounded up and
// retry-after-ms exact, `x-should-retry: false` exactly when the problem is
// not retriable; the catalogue of kinds; the final SSE error event per dialect.

#include "common/problem.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  EXPECT_EQ(keysOf(j), (std::set<std::string>{"type", "title", "status", "detail", "cancel_reason",
                                              "is_retriable", "error"}));
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

// The openai SDKs build their exception from body.error (message, type,
// code); without it they said "503 status code (no body)".
TEST(ProblemReplyTest, ErrorMemberHasTheSdkShape) {
  const json j = parseBody(makeProblemReply(basic()));
  ASSERT_TRUE(j["error"].is_object());
  EXPECT_EQ(keysOf(j["error"]), (std::set<std::string>{"message", "type", "code"}));
  EXPECT_EQ(j["error"]["message"], "sluice circuit-open: upstream openai is cooling down");
  EXPECT_EQ(j["error"]["type"], "circuit-open");
  EXPECT_EQ(j["error"]["code"], "circuit_open");
}

TEST(ProblemReplyTest, ErrorCodeIsNullWithoutACancelReason) {
  Problem p = basic();
  p.cancel_reason.reset();
  const json j = parseBody(makeProblemReply(p));
  ASSERT_TRUE(j["error"].contains("code"));
  EXPECT_TRUE(j["error"]["code"].is_null());
}

TEST(ProblemReplyTest, ErrorMessageWithoutDetailIsTheSlug) {
  Problem p = basic();
  p.detail.clear();
  EXPECT_EQ(parseBody(makeProblemReply(p))["error"]["message"], "sluice circuit-open");
}

// --- the catalogue ------------------------------------------------------------------

constexpr const ProblemKind* kCatalogue[] = {
    &problems::kBadRequest,       &problems::kMalformedRequest,
    &problems::kInvalidBudget,    &problems::kNoRoute,
    &problems::kHostNotAllowed,   &problems::kRequestTimeout,
    &problems::kBodyTooLarge,     &problems::kHeaderTooLarge,
    &problems::kClientDisconnect, &problems::kUpstreamConnectError,
    &problems::kUpstreamReset,    &problems::kUpstreamProtocolError,
    &problems::kUpstreamRefused,  &problems::kUpstreamConnectTimeout,
    &problems::kUpstreamTimeout,  &problems::kBudgetExhausted,
    &problems::kCircuitOpen,      &problems::kRateLimited,
    &problems::kOverloaded,       &problems::kDraining,
    &problems::kClientStalled,
};

TEST(ProblemCatalogueTest, SlugsAreUniqueLowercaseWords) {
  std::set<std::string_view> slugs;
  for (const ProblemKind* kind : kCatalogue) {
    EXPECT_TRUE(slugs.insert(kind->slug).second) << kind->slug;
    for (char c : kind->slug) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '-') << kind->slug;
    EXPECT_FALSE(kind->title.empty()) << kind->slug;
    EXPECT_GE(kind->status, 400) << kind->slug;
    EXPECT_LE(kind->status, 599) << kind->slug;
  }
}

// Errors in the client's request, and a spent budget, repeat the same way when
// retried; what the upstream or sluice's policies refused may pass later.
TEST(ProblemCatalogueTest, ClientErrorsAndASpentBudgetAreNotRetriable) {
  for (const ProblemKind* kind : kCatalogue) {
    const bool client_side = kind->status < 500 && kind->status != 429;
    if (client_side || kind == &problems::kBudgetExhausted) {
      EXPECT_FALSE(kind->retriable) << kind->slug;
    } else {
      EXPECT_TRUE(kind->retriable) << kind->slug;
    }
  }
}

TEST(ProblemCatalogueTest, MakeProblemTakesTheKindAndTheOccurrence) {
  const Problem p =
      makeProblem(problems::kRateLimited, "quota of mock", CancelReason::RateLimited, 2500ms);
  EXPECT_EQ(p.status, 429);
  EXPECT_EQ(p.slug, "rate-limited");
  EXPECT_EQ(p.title, "Upstream quota exhausted");
  EXPECT_EQ(p.detail, "quota of mock");
  EXPECT_EQ(p.cancel_reason, CancelReason::RateLimited);
  EXPECT_TRUE(p.is_retriable);
  EXPECT_EQ(p.retry_after, 2500ms);
  const Problem q = makeProblem(problems::kInvalidBudget, "bad");
  EXPECT_FALSE(q.is_retriable);
  EXPECT_FALSE(q.cancel_reason.has_value());
  EXPECT_FALSE(q.retry_after.has_value());
}

// --- the final SSE error event (docs/design.md §8) -----------------------------------------

constexpr std::string_view kSse = "text/event-stream; charset=utf-8";

TEST(SseErrorEventTest, DialectFromThePath) {
  const std::pair<const char*, SseDialect> kRows[] = {
      {"/v1/chat/completions", SseDialect::OpenAI},
      {"/v1/chat/completions?x=1", SseDialect::OpenAI},
      {"/openai/deployments/gpt4o/chat/completions", SseDialect::OpenAI},  // Azure
      {"/v1/completions", SseDialect::OpenAI},
      {"/v1/responses", SseDialect::OpenAI},
      {"/v1/responses/", SseDialect::OpenAI},
      {"/v1/messages", SseDialect::Anthropic},
      {"/anthropic/v1/messages?beta=true", SseDialect::Anthropic},
      {"/v1/embeddings", SseDialect::None},
      {"/mcp/sse", SseDialect::None},
      {"/", SseDialect::None},
      {"", SseDialect::None},
      {"/v1/messages/batches", SseDialect::None},
      {"/v1/chat/completionsX", SseDialect::None},
  };
  for (const auto& [path, dialect] : kRows) {
    EXPECT_EQ(sseDialectFor(path, kSse), dialect) << path;
  }
}

TEST(SseErrorEventTest, OnlyAnEventStreamHasADialect) {
  for (std::string_view type : {"text/event-stream", "Text/Event-Stream", " text/event-stream ",
                                "text/event-stream;charset=UTF-8"}) {
    EXPECT_EQ(sseDialectFor("/v1/chat/completions", type), SseDialect::OpenAI) << type;
  }
  for (std::string_view type : {"application/json", "", "text/event", "text/plain",
                                "application/x-ndjson", "text/html; text/event-stream"}) {
    EXPECT_EQ(sseDialectFor("/v1/chat/completions", type), SseDialect::None) << type;
    EXPECT_EQ(sseDialectFor("/v1/messages", type), SseDialect::None) << type;
  }
}

/** The JSON of the single `data:` line of `event`. */
json dataOf(const std::string& event) {
  const auto at = event.find("data: ");
  EXPECT_NE(at, std::string::npos) << event;
  const auto end = event.find('\n', at);
  return json::parse(event.substr(at + 6, end - at - 6));
}

TEST(SseErrorEventTest, OpenAiEventIsADataLineWithTheErrorMember) {
  Problem p = basic();
  p.slug = "budget-exhausted";
  p.detail = "the request's time budget ran out";
  p.cancel_reason = CancelReason::BudgetExhausted;
  const std::string event = sseErrorEvent(SseDialect::OpenAI, p);
  EXPECT_EQ(event.rfind("data: {", 0), 0u) << event;  // no event: line (the SDK reads data.error)
  ASSERT_GE(event.size(), 2u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  EXPECT_EQ(std::count(event.begin(), event.end(), '\n'), 2) << "one line, one blank line";
  const json j = dataOf(event);
  EXPECT_EQ(keysOf(j), std::set<std::string>{"error"});
  EXPECT_EQ(j["error"], parseBody(makeProblemReply(p))["error"]) << "the same member as the body";
  EXPECT_EQ(j["error"]["code"], "budget_exhausted");
}

TEST(SseErrorEventTest, AnthropicEventIsAnErrorEvent) {
  Problem p = basic();
  p.slug = "upstream-timeout";
  p.detail = "upstream claude stopped sending";
  const std::string event = sseErrorEvent(SseDialect::Anthropic, p);
  EXPECT_EQ(event.rfind("event: error\ndata: {", 0), 0u) << event;
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  const json j = dataOf(event);
  EXPECT_EQ(j["type"], "error");
  EXPECT_EQ(j["error"]["type"], "upstream-timeout");
  EXPECT_EQ(j["error"]["message"], "sluice upstream-timeout: upstream claude stopped sending");
}

TEST(SseErrorEventTest, NoDialectNoEvent) {
  EXPECT_EQ(sseErrorEvent(SseDialect::None, basic()), "");
}

TEST(SseErrorEventTest, HostileDetailCannotBreakTheEventFraming) {
  Problem p = basic();
  p.detail = "line\n\ndata: [DONE]\n\r\n \xff";
  for (SseDialect dialect : {SseDialect::OpenAI, SseDialect::Anthropic}) {
    const std::string event = sseErrorEvent(dialect, p);
    // JSON escapes the newlines: the only blank line is the event's end.
    EXPECT_EQ(event.find("\n\n"), event.size() - 2) << event;
    EXPECT_EQ(event.find('\r'), std::string::npos);
    ASSERT_NO_THROW(dataOf(event));
  }
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
      {0ms, "0", "0"},          {1ms, "1", "1"},
      {999ms, "1", "999"},      {1000ms, "1", "1000"},
      {1001ms, "2", "1001"},    {1500ms, "2", "1500"},
      {2000ms, "2", "2000"},    {59999ms, "60", "59999"},
      {60000ms, "60", "60000"}, {3600001ms, "3601", "3600001"},
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
        EXPECT_EQ(r.head.headers.getAll("x-should-retry"), std::vector<std::string_view>{"false"})
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
    EXPECT_EQ(keysOf(j).size(), 7u);  // nothing injected
  }
}

// Details quote client input (a header value, a path) and HTTP header values
// may carry obs-text bytes 0x80-0xFF: invalid UTF-8 must still give a valid
// body (U+FFFD), never an exception on the data path.
TEST(ProblemReplyTest, InvalidUtf8DetailDoesNotThrow) {
  for (const std::string& detail :
       {std::string("got \"\xff\""), std::string("cut \xC3"), std::string("\xE6\x97 truncated")}) {
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
