#include "filters/retry/retry_decision.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace sluice {
namespace {

using std::chrono::milliseconds;
using Headers = std::vector<std::pair<std::string, std::string>>;
using config::IdempotencyMode;

constexpr const char* kProblem = "application/problem+json";

// One row of the decision table. Defaults: a POST on the default route
// config (attempts 3, on 429/500/502/503/504/connect_error/reset/timeout,
// idempotent: always), first attempt, 60 s of budget left, jitter r = 0.5.
struct Case {
  std::string name;
  AttemptOutcome outcome = AttemptOutcome::fromStatus(503);
  Headers headers = {};
  std::string body = {};
  uint32_t attempt = 1;
  bool response_started = false;
  std::string method = "POST";
  bool idempotency_key = false;
  bool unprocessed = false;
  IdempotencyMode idempotent = IdempotencyMode::Always;
  bool respect_retry_after = true;
  bool body_replayable = true;
  int64_t remaining_budget_ms = 60'000;

  bool retry = false;
  NoRetryReason reason = NoRetryReason::None;
  std::string cause = {};
  int64_t delay_ms = 0;
  std::optional<int64_t> upstream_wait_ms = std::nullopt;
};

RetryDecision run(const Case& c, const ManualClock& clock, RetryBudget* budget = nullptr) {
  config::RetryConfig cfg;
  cfg.idempotent = c.idempotent;
  cfg.respect_retry_after = c.respect_retry_after;
  HeaderMap headers;
  for (const auto& [k, v] : c.headers) headers.add(k, v);
  RetryInput in;
  in.config = &cfg;
  in.attempt = c.attempt;
  in.outcome = c.outcome;
  in.response_headers = c.outcome.isStatus() ? &headers : nullptr;
  in.response_body = c.body;
  in.response_started = c.response_started;
  in.method = c.method;
  in.has_idempotency_key = c.idempotency_key;
  in.unprocessed = c.unprocessed;
  in.body_replayable = c.body_replayable;
  in.remaining_budget = milliseconds(c.remaining_budget_ms);
  in.retry_budget = budget;
  in.clock = &clock;
  in.random = [] { return 0.5; };
  return decideRetry(in);
}

const auto S = AttemptOutcome::fromStatus;
constexpr auto kRetry = NoRetryReason::None;

TEST(RetryDecisionTest, Table) {
  // Jitter with r = 0.5: floor(0.5 * (ceiling + 1)): 125 of 250 (retry 0), 250 of 500 (retry 1).
  const std::vector<Case> cases = {
      {.name = "503 is retried with jitter",
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "second retry doubles the ceiling",
       .attempt = 2,
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 250},
      {.name = "500",
       .outcome = S(500),
       .retry = true,
       .reason = kRetry,
       .cause = "500",
       .delay_ms = 125},
      {.name = "connect_error",
       .outcome = AttemptOutcome::connectError(),
       .retry = true,
       .reason = kRetry,
       .cause = "connect_error",
       .delay_ms = 125},
      {.name = "reset",
       .outcome = AttemptOutcome::reset(),
       .retry = true,
       .reason = kRetry,
       .cause = "reset",
       .delay_ms = 125},
      {.name = "timeout",
       .outcome = AttemptOutcome::timeout(),
       .retry = true,
       .reason = kRetry,
       .cause = "timeout",
       .delay_ms = 125},
      {.name = "cancelled is never retried",
       .outcome = AttemptOutcome::cancelled(),
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "cancelled",
       .delay_ms = 0},
      {.name = "501 is not in `on`",
       .outcome = S(501),
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "501",
       .delay_ms = 0},
      {.name = "400",
       .outcome = S(400),
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "400",
       .delay_ms = 0},
      {.name = "200",
       .outcome = S(200),
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "200",
       .delay_ms = 0},
      {.name = "response already started",
       .response_started = true,
       .retry = false,
       .reason = NoRetryReason::ResponseStarted,
       .cause = "503",
       .delay_ms = 0},
      {.name = "last attempt",
       .attempt = 3,
       .retry = false,
       .reason = NoRetryReason::AttemptsExhausted,
       .cause = "503",
       .delay_ms = 0},
      {.name = "body too large to replay",
       .body_replayable = false,
       .retry = false,
       .reason = NoRetryReason::BodyTooLarge,
       .cause = "503",
       .delay_ms = 0},

      // Idempotency
      {.name = "auto: POST",
       .idempotent = IdempotencyMode::Auto,
       .retry = false,
       .reason = NoRetryReason::NotIdempotent,
       .cause = "503",
       .delay_ms = 0},
      {.name = "auto: POST with Idempotency-Key",
       .idempotency_key = true,
       .idempotent = IdempotencyMode::Auto,
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "auto: GET",
       .method = "GET",
       .idempotent = IdempotencyMode::Auto,
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "auto: DELETE",
       .method = "DELETE",
       .idempotent = IdempotencyMode::Auto,
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "auto: PATCH",
       .method = "PATCH",
       .idempotent = IdempotencyMode::Auto,
       .retry = false,
       .reason = NoRetryReason::NotIdempotent,
       .cause = "503",
       .delay_ms = 0},
      {.name = "never: GET",
       .method = "GET",
       .idempotent = IdempotencyMode::Never,
       .retry = false,
       .reason = NoRetryReason::NotIdempotent,
       .cause = "503",
       .delay_ms = 0},
      // Nothing was processed (HTTP/2 REFUSED_STREAM / GOAWAY, connect error):
      // safe whatever the method.
      {.name = "never: POST refused unprocessed",
       .outcome = AttemptOutcome::reset(),
       .unprocessed = true,
       .idempotent = IdempotencyMode::Never,
       .retry = true,
       .reason = kRetry,
       .cause = "reset",
       .delay_ms = 125},
      {.name = "auto: POST connect error, unprocessed",
       .outcome = AttemptOutcome::connectError(),
       .unprocessed = true,
       .idempotent = IdempotencyMode::Auto,
       .retry = true,
       .reason = kRetry,
       .cause = "connect_error",
       .delay_ms = 125},
      {.name = "never: POST reset mid-response is not unprocessed",
       .outcome = AttemptOutcome::reset(),
       .idempotent = IdempotencyMode::Never,
       .retry = false,
       .reason = NoRetryReason::NotIdempotent,
       .cause = "reset",
       .delay_ms = 0},

      // The upstream's wait
      {.name = "429 Retry-After: 2",
       .outcome = S(429),
       .headers = {{"Retry-After", "2"}},
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 2000,
       .upstream_wait_ms = 2000},
      {.name = "429 retry-after-ms wins",
       .outcome = S(429),
       .headers = {{"retry-after-ms", "1500"}, {"Retry-After", "2"}},
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 1500,
       .upstream_wait_ms = 1500},
      {.name = "hint shorter than jitter",
       .outcome = S(429),
       .headers = {{"retry-after-ms", "10"}},
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 125,
       .upstream_wait_ms = 10},
      {.name = "Retry-After ignored when not respected",
       .outcome = S(429),
       .headers = {{"Retry-After", "30"}},
       .respect_retry_after = false,
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 125,
       .upstream_wait_ms = 30000},
      {.name = "wait longer than the budget left",
       .outcome = S(429),
       .headers = {{"Retry-After", "30"}},
       .remaining_budget_ms = 10'000,
       .retry = false,
       .reason = NoRetryReason::WaitExceedsBudget,
       .cause = "429",
       .delay_ms = 30000,
       .upstream_wait_ms = 30000},
      {.name = "wait exactly the budget left",
       .outcome = S(429),
       .headers = {{"Retry-After", "10"}},
       .remaining_budget_ms = 10'000,
       .retry = false,
       .reason = NoRetryReason::WaitExceedsBudget,
       .cause = "429",
       .delay_ms = 10000,
       .upstream_wait_ms = 10000},
      {.name = "jitter alone exceeds a tiny budget",
       .remaining_budget_ms = 100,
       .retry = false,
       .reason = NoRetryReason::WaitExceedsBudget,
       .cause = "503",
       .delay_ms = 125},
      {.name = "budget already gone",
       .remaining_budget_ms = 0,
       .retry = false,
       .reason = NoRetryReason::WaitExceedsBudget,
       .cause = "503",
       .delay_ms = 125},
      {.name = "exhausted quota reset as the hint",
       .outcome = S(429),
       .headers = {{"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-reset-requests", "1s"}},
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 1000,
       .upstream_wait_ms = 1000},
      {.name = "quota not exhausted: no hint",
       .outcome = S(429),
       .headers = {{"x-ratelimit-remaining-requests", "3"}, {"x-ratelimit-reset-requests", "1s"}},
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 125},
      {.name = "Retry-After beats the quota reset",
       .outcome = S(429),
       .headers = {{"Retry-After", "3"},
                   {"x-ratelimit-remaining-tokens", "0"},
                   {"x-ratelimit-reset-tokens", "6m0s"}},
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 3000,
       .upstream_wait_ms = 3000},
      {.name = "garbage Retry-After is ignored",
       .outcome = S(429),
       .headers = {{"Retry-After", "-1"}},
       .retry = true,
       .reason = kRetry,
       .cause = "429",
       .delay_ms = 125},

      // The upstream's own verdict
      {.name = "problem+json is_retriable:true overrides 400",
       .outcome = S(400),
       .headers = {{"Content-Type", kProblem}},
       .body = R"({"status":400,"is_retriable":true})",
       .retry = true,
       .reason = kRetry,
       .cause = "400",
       .delay_ms = 125},
      {.name = "problem+json is_retriable:false overrides 503",
       .headers = {{"Content-Type", "Application/Problem+JSON; charset=utf-8"}},
       .body = R"({"is_retriable":false})",
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "503",
       .delay_ms = 0},
      {.name = "problem+json retryable:false",
       .headers = {{"Content-Type", kProblem}},
       .body = R"({"retryable":false})",
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "503",
       .delay_ms = 0},
      {.name = "is_retriable wins over retryable",
       .outcome = S(400),
       .headers = {{"Content-Type", kProblem}},
       .body = R"({"is_retriable":true,"retryable":false})",
       .retry = true,
       .reason = kRetry,
       .cause = "400",
       .delay_ms = 125},
      {.name = "non-boolean is_retriable is ignored",
       .headers = {{"Content-Type", kProblem}},
       .body = R"({"is_retriable":"false"})",
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "malformed problem body is ignored",
       .headers = {{"Content-Type", kProblem}},
       .body = R"({"is_retriable":fals)",
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "problem body that is not an object",
       .headers = {{"Content-Type", kProblem}},
       .body = "[false]",
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "plain JSON body is not a problem body",
       .headers = {{"Content-Type", "application/json"}},
       .body = R"({"is_retriable":false})",
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "x-should-retry: false",
       .headers = {{"x-should-retry", "false"}},
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "503",
       .delay_ms = 0},
      {.name = "x-should-retry: true on 409",
       .outcome = S(409),
       .headers = {{"x-should-retry", " TRUE "}},
       .retry = true,
       .reason = kRetry,
       .cause = "409",
       .delay_ms = 125},
      {.name = "x-should-retry: maybe is ignored",
       .headers = {{"x-should-retry", "maybe"}},
       .retry = true,
       .reason = kRetry,
       .cause = "503",
       .delay_ms = 125},
      {.name = "problem body beats x-should-retry",
       .outcome = S(400),
       .headers = {{"Content-Type", kProblem}, {"x-should-retry", "false"}},
       .body = R"({"is_retriable":true})",
       .retry = true,
       .reason = kRetry,
       .cause = "400",
       .delay_ms = 125},
      {.name = "verdict cannot make a 200 retriable",
       .outcome = S(200),
       .headers = {{"x-should-retry", "true"}},
       .retry = false,
       .reason = NoRetryReason::NotRetriable,
       .cause = "200",
       .delay_ms = 0},
      {.name = "verdict does not beat response_started",
       .outcome = S(400),
       .headers = {{"x-should-retry", "true"}},
       .response_started = true,
       .retry = false,
       .reason = NoRetryReason::ResponseStarted,
       .cause = "400",
       .delay_ms = 0},
  };

  ManualClock clock;
  for (const auto& c : cases) {
    const RetryDecision d = run(c, clock);
    EXPECT_EQ(d.retry, c.retry) << c.name;
    EXPECT_EQ(toString(d.reason), toString(c.reason)) << c.name;
    EXPECT_EQ(d.cause, c.cause) << c.name;
    EXPECT_EQ(d.delay.count(), c.delay_ms) << c.name;
    EXPECT_EQ(d.upstream_wait ? std::optional<int64_t>(d.upstream_wait->count()) : std::nullopt,
              c.upstream_wait_ms)
        << c.name;
    EXPECT_FALSE(d.budget_acquired) << c.name;
  }
}

TEST(RetryDecisionTest, RetryAfterHttpDateUsesTheClock) {
  ManualClock clock;  // 2026-01-01T00:00:00Z
  clock.advance(std::chrono::seconds(10));
  Case c{.name = "HTTP-date",
         .outcome = S(503),
         .headers = {{"Retry-After", "Thu, 01 Jan 2026 00:00:30 GMT"}},
         .retry = true,
         .reason = kRetry,
         .cause = "503",
         .delay_ms = 20000};
  const auto d = run(c, clock);
  EXPECT_TRUE(d.retry);
  EXPECT_EQ(d.delay, milliseconds(20'000));
}

TEST(RetryDecisionTest, ReasonStrings) {
  EXPECT_EQ(toString(NoRetryReason::None), "");
  EXPECT_EQ(toString(NoRetryReason::ResponseStarted), "response_started");
  EXPECT_EQ(toString(NoRetryReason::NotRetriable), "not_retriable");
  EXPECT_EQ(toString(NoRetryReason::NotIdempotent), "not_idempotent");
  EXPECT_EQ(toString(NoRetryReason::BodyTooLarge), "body_too_large");
  EXPECT_EQ(toString(NoRetryReason::AttemptsExhausted), "attempts_exhausted");
  EXPECT_EQ(toString(NoRetryReason::WaitExceedsBudget), "wait_exceeds_budget");
  EXPECT_EQ(toString(NoRetryReason::RetryBudgetExhausted), "retry_budget_exhausted");
}

// DESIGN.md §3 "No retry storms across layers", §8: when an agent SDK may
// retry an error sluice made. One row per rule, and its boundary.
TEST(ClientRetryTest, Table) {
  struct Row {
    const char* name;
    uint32_t attempts;
    std::optional<int64_t> wait_ms;
    int64_t remaining_ms;
    bool wait_exceeded;
    bool may_help;
  };
  const Row kRows[] = {
      {"first attempt, no wait", 1, std::nullopt, 60'000, false, true},
      {"refused before any attempt", 0, std::nullopt, 60'000, false, true},
      {"sluice already retried once", 2, std::nullopt, 60'000, false, false},
      {"three connect attempts (the 3 x 3 = 9 storm)", 3, std::nullopt, 60'000, false, false},
      {"wait fits the budget", 1, 5'000, 60'000, false, true},
      {"wait just fits", 1, 59'999, 60'000, false, true},
      {"wait exactly the budget", 1, 60'000, 60'000, false, false},
      {"circuit cooldown 120 s, budget 120 s", 1, 120'000, 119'990, false, false},
      {"quota reset beyond the budget", 1, 30'000, 1'000, false, false},
      {"budget spent, zero wait", 1, 0, 0, false, false},
      {"budget spent, no wait", 1, std::nullopt, 0, false, false},
      {"sluice's own retry wait did not fit", 1, std::nullopt, 60'000, true, false},
      {"retried and the wait fits", 2, 1'000, 60'000, false, false},
      // The SDKs' own cap: a wait they would not honour is never handed to them.
      {"circuit cooldown 119 s within a 120 s budget", 1, 119'000, 120'000, false, false},
      {"wait exactly the SDKs' 60 s cap", 1, 60'000, 300'000, false, false},
      {"wait just under the SDKs' cap", 1, 59'999, 300'000, false, true},
  };
  for (const Row& row : kRows) {
    ClientRetryInput in;
    in.attempts = row.attempts;
    if (row.wait_ms) in.wait = milliseconds(*row.wait_ms);
    in.remaining_budget = milliseconds(row.remaining_ms);
    in.retry_wait_exceeded_budget = row.wait_exceeded;
    EXPECT_EQ(clientRetryMayHelp(in), row.may_help) << row.name;
  }
}

TEST(RetryDecisionTest, IsRetrySafe) {
  for (const char* m : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}) {
    EXPECT_TRUE(isRetrySafe(IdempotencyMode::Auto, m, false)) << m;
    EXPECT_FALSE(isRetrySafe(IdempotencyMode::Never, m, true)) << m;
  }
  for (const char* m : {"POST", "PATCH", "CONNECT", "get", ""}) {
    EXPECT_FALSE(isRetrySafe(IdempotencyMode::Auto, m, false)) << m;
    EXPECT_TRUE(isRetrySafe(IdempotencyMode::Auto, m, true)) << m;
    EXPECT_TRUE(isRetrySafe(IdempotencyMode::Always, m, false)) << m;
  }
}

TEST(RetryDecisionTest, RetryBudgetIsTakenOnlyWhenEverythingElseAllows) {
  ManualClock clock;
  RetryBudget budget(20);  // min 3 in flight
  const Case retriable{
      .name = "503", .retry = true, .reason = kRetry, .cause = "503", .delay_ms = 125};

  // Not retried for another reason: the budget is untouched.
  Case exhausted = retriable;
  exhausted.attempt = 3;
  EXPECT_EQ(run(exhausted, clock, &budget).reason, NoRetryReason::AttemptsExhausted);
  EXPECT_EQ(budget.retriesInFlight(), 0u);
  EXPECT_EQ(budget.overflows(), 0u);

  for (int i = 0; i < 3; ++i) {
    const auto d = run(retriable, clock, &budget);
    EXPECT_TRUE(d.retry);
    EXPECT_TRUE(d.budget_acquired);
  }
  EXPECT_EQ(budget.retriesInFlight(), 3u);

  const auto refused = run(retriable, clock, &budget);
  EXPECT_FALSE(refused.retry);
  EXPECT_EQ(refused.reason, NoRetryReason::RetryBudgetExhausted);
  EXPECT_FALSE(refused.budget_acquired);
  EXPECT_EQ(refused.delay, milliseconds(0));
  EXPECT_EQ(budget.overflows(), 1u);

  budget.releaseRetry();
  EXPECT_TRUE(run(retriable, clock, &budget).retry);
  EXPECT_EQ(budget.retriesInFlight(), 3u);
}

TEST(RetryBudgetTest, CapFollowsActiveRequests) {
  struct Case {
    uint32_t percent;
    int active;
    uint64_t cap;
  };
  const Case cases[] = {
      {20, 0, 3},      {20, 10, 3},  {20, 15, 3},   {20, 20, 4}, {20, 100, 20},
      {20, 1000, 200}, {0, 1000, 3}, {100, 50, 50}, {50, 7, 3},
  };
  for (const auto& c : cases) {
    RetryBudget budget(c.percent);
    for (int i = 0; i < c.active; ++i) budget.onRequestStart();
    EXPECT_EQ(budget.maxRetriesInFlight(), c.cap) << c.percent << "% of " << c.active;
    uint64_t acquired = 0;
    while (budget.tryAcquireRetry()) ++acquired;
    EXPECT_EQ(acquired, c.cap);
    EXPECT_EQ(budget.overflows(), 1u);
  }
}

TEST(RetryBudgetTest, RequestsEndingShrinkTheCapAndReloadChangesIt) {
  RetryBudget budget(20);
  for (int i = 0; i < 100; ++i) budget.onRequestStart();
  EXPECT_EQ(budget.maxRetriesInFlight(), 20u);
  for (int i = 0; i < 50; ++i) budget.onRequestEnd();
  EXPECT_EQ(budget.activeRequests(), 50u);
  EXPECT_EQ(budget.maxRetriesInFlight(), 10u);
  budget.setBudgetPercent(50);
  EXPECT_EQ(budget.maxRetriesInFlight(), 25u);
}

TEST(RetryBudgetTest, ConcurrentAcquireNeverExceedsTheCap) {
  RetryBudget budget(10);
  for (int i = 0; i < 100; ++i) budget.onRequestStart();  // cap 10
  std::atomic<uint64_t> max_seen{0};
  std::atomic<uint64_t> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (budget.tryAcquireRetry()) {
          granted.fetch_add(1);
          uint64_t now = budget.retriesInFlight();
          uint64_t prev = max_seen.load();
          while (now > prev && !max_seen.compare_exchange_weak(prev, now)) {
          }
          budget.releaseRetry();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(max_seen.load(), 10u);
  EXPECT_GT(granted.load(), 0u);
  EXPECT_EQ(budget.retriesInFlight(), 0u);
  EXPECT_EQ(granted.load() + budget.overflows(), 4u * 20000u);
}

TEST(AttemptOutcomeTest, Labels) {
  EXPECT_EQ(causeLabel(S(429)), "429");
  EXPECT_EQ(causeLabel(AttemptOutcome::connectError()), "connect_error");

  config::OutcomeSet set{{429}, false, true, true, false, false};
  EXPECT_TRUE(outcomeIn(set, S(429)));
  EXPECT_TRUE(outcomeIn(set, S(502)));
  EXPECT_FALSE(outcomeIn(set, S(404)));
  EXPECT_TRUE(outcomeIn(set, AttemptOutcome::connectError()));
  EXPECT_FALSE(outcomeIn(set, AttemptOutcome::reset()));
  EXPECT_FALSE(outcomeIn(set, AttemptOutcome::timeout()));
  EXPECT_FALSE(outcomeIn(set, AttemptOutcome::cancelled()));
}

}  // namespace
}  // namespace sluice
