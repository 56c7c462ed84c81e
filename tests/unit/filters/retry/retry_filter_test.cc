// Tests for the retry filter (filters/retry/retry_filter.h): its verdicts on
// an ended attempt (decideAttempt).
// On the shared per-attempt fixture (attempt_filter_fixture.h): the filter
// driven the way the Exchange drives it, on fake callbacks and a ManualClock.

#include "filters/retry/retry_filter.h"

#include "tests/unit/filters/attempt_filter_fixture.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::AttemptFiltersTest;
using test::FakeFilterCallbacks;

class RetryFilterTest : public AttemptFiltersTest {
 protected:
  RetryFilter& retry(const std::string& method = "POST", bool idempotency_key = true) {
    auto& f = wire(std::make_unique<RetryFilter>(route().config->retry, *route().retry_budget));
    callbacks_.request_head.method = method;
    if (idempotency_key) callbacks_.request_head.headers.set("idempotency-key", "k");
    RequestHead head = callbacks_.request_head;
    f.decodeHeaders(head);
    return f;
  }
};

TEST_F(RetryFilterTest, HoldsARetriableAnswerAndRetriesIt) {
  RetryFilter& f = retry();
  ResponseHead held;
  held.status = 429;
  held.headers.add("retry-after", "2");
  EXPECT_EQ(f.encodeHeaders(held, false), FilterStatus::StopIteration);
  AttemptEnd end = ended(AttemptOutcome::fromStatus(429));
  end.held_response = &held;
  const AttemptVerdict verdict = f.decideAttempt(end, AttemptVerdict::deliver());
  ASSERT_TRUE(verdict.isRetry());
  EXPECT_EQ(verdict.asRetry()->delay, 2000ms);  // the upstream's wait
  EXPECT_EQ(verdict.asRetry()->cause, "429");
  EXPECT_EQ(verdict.asRetry()->target, AttemptTarget::sameUpstream());
  EXPECT_EQ(route().retry_budget->retriesInFlight(), 1u);  // the retry holds a slot
  f.onAttemptDone(end, verdict);
  EXPECT_EQ(route().retry_budget->retriesInFlight(), 1u);  // until the retry attempt ends
  callbacks_.attempt = 2;
  f.decideAttempt(ended(AttemptOutcome::fromStatus(200), 2), AttemptVerdict::deliver());
  EXPECT_EQ(route().retry_budget->retriesInFlight(), 0u);
}

TEST_F(RetryFilterTest, PassesAnAnswerItCannotImprove) {
  RetryFilter& f = retry();
  ResponseHead ok;
  ok.status = 200;
  EXPECT_EQ(f.encodeHeaders(ok, false), FilterStatus::Continue);
  EXPECT_FALSE(ok.headers.has("x-should-retry"));  // first attempt: the SDK may decide
  const AttemptVerdict verdict =
      f.decideAttempt(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  ASSERT_NE(verdict.asDeliver(), nullptr);
  EXPECT_FALSE(verdict.asDeliver()->discourage_client_retry);
}

TEST_F(RetryFilterTest, TheLastHeldAnswerIsDeliveredWithXShouldRetryFalse) {
  RetryFilter& f = retry();
  callbacks_.attempt = 3;
  ResponseHead held;
  held.status = 503;
  AttemptEnd end = ended(AttemptOutcome::fromStatus(503), 3);
  end.held_response = &held;
  const AttemptVerdict verdict = f.decideAttempt(end, AttemptVerdict::deliver());
  ASSERT_NE(verdict.asDeliver(), nullptr);
  EXPECT_TRUE(verdict.asDeliver()->discourage_client_retry);
  EXPECT_FALSE(held.headers.has("x-should-retry"));  // the Exchange edits, not the filter
}

TEST_F(RetryFilterTest, AFailKeepsItsProblemWhenNotRetried) {
  RetryFilter& f = retry("POST", /*idempotency_key=*/false);
  const AttemptVerdict verdict =
      f.decideAttempt(ended(AttemptOutcome::reset()),
                      AttemptVerdict::fail(makeProblem(problems::kUpstreamReset, "gone")));
  ASSERT_NE(verdict.asFail(), nullptr);  // a POST without a key is not retry-safe
  EXPECT_EQ(verdict.asFail()->problem.status, 502);
}

TEST_F(RetryFilterTest, UnprocessedAttemptsAreRetriedWhateverTheMethod) {
  RetryFilter& f = retry("POST", /*idempotency_key=*/false);
  AttemptEnd end = ended(AttemptOutcome::reset());
  end.unprocessed = true;  // REFUSED_STREAM
  EXPECT_TRUE(f.decideAttempt(end, AttemptVerdict::fail(Problem{})).isRetry());
}

TEST_F(RetryFilterTest, ATornDownAttemptIsNeverRetried) {
  RetryFilter& f = retry();
  const AttemptVerdict verdict =
      f.decideAttempt(ended(AttemptOutcome::cancelled()), AttemptVerdict::fail(Problem{}));
  EXPECT_NE(verdict.asFail(), nullptr);
  EXPECT_EQ(route().retry_budget->retriesInFlight(), 0u);
}

TEST_F(RetryFilterTest, AResponseUnderWayIsNeverRetried) {
  RetryFilter& f = retry();
  AttemptEnd end = ended(AttemptOutcome::reset());
  end.response_started = true;
  EXPECT_FALSE(f.decideAttempt(end, AttemptVerdict::fail(Problem{})).isRetry());
}

TEST_F(RetryFilterTest, ARetryTheExchangeDidNotMakeReturnsItsSlot) {
  RetryFilter& f = retry();
  const AttemptEnd end = ended(AttemptOutcome::timeout());
  ASSERT_TRUE(f.decideAttempt(end, AttemptVerdict::fail(Problem{})).isRetry());
  EXPECT_EQ(route().retry_budget->retriesInFlight(), 1u);
  f.onAttemptDone(end, AttemptVerdict::fail(Problem{}));  // e.g. the exchange is cancelling
  EXPECT_EQ(route().retry_budget->retriesInFlight(), 0u);
}

TEST_F(RetryFilterTest, AWaitBeyondTheBudgetMakesLocalRepliesNotRetriable) {
  RetryFilter& f = retry();
  callbacks_.setDeadline(clock_.now() + 1s);
  ResponseHead held;
  held.status = 429;
  held.headers.add("retry-after", "5");
  AttemptEnd end = ended(AttemptOutcome::fromStatus(429));
  end.held_response = &held;
  const AttemptVerdict verdict = f.decideAttempt(end, AttemptVerdict::deliver());
  ASSERT_NE(verdict.asDeliver(), nullptr);
  EXPECT_TRUE(verdict.asDeliver()->discourage_client_retry);
  Problem problem = makeProblem(problems::kUpstreamTimeout, "x", CancelReason::UpstreamTimeout);
  problem.is_retriable = true;
  f.encodeLocalReply(problem);
  EXPECT_FALSE(problem.is_retriable);
}

}  // namespace
}  // namespace sluice
