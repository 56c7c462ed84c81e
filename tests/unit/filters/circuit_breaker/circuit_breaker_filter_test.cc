// Tests for the circuit breaker filter
// (filters/circuit_breaker/circuit_breaker_filter.h): admission and reporting.
// On the shared per-attempt fixture (attempt_filter_fixture.h): the filter
// driven the way the Exchange drives it, on fake callbacks and a ManualClock.

#include "filters/circuit_breaker/circuit_breaker_filter.h"

#include "tests/unit/filters/attempt_filter_fixture.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::AttemptFiltersTest;
using test::FakeFilterCallbacks;

class CircuitBreakerFilterTest : public AttemptFiltersTest {
 protected:
  CircuitBreakerFilter& breakerFilter() { return wire(std::make_unique<CircuitBreakerFilter>()); }
  Admission admit(CircuitBreakerFilter& f) {
    RequestHead upstream_request = callbacks_.request_head;
    return f.beforeAttempt(upstream_request, callbacks_.attemptContext());
  }
};

TEST_F(CircuitBreakerFilterTest, ReportsEachOutcomeAndOpensOnFailures) {
  CircuitBreakerFilter& f = breakerFilter();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(admit(f).kind, Admission::Kind::Continue);
    f.onAttemptDone(ended(AttemptOutcome::fromStatus(503)), AttemptVerdict::deliver());
  }
  const Admission refused = admit(f);  // consecutive_failures: 2
  EXPECT_EQ(refused.kind, Admission::Kind::Refuse);
  EXPECT_EQ(refused.reason, CancelReason::CircuitOpen);
  EXPECT_EQ(refused.retry_after, milliseconds(10s));
  EXPECT_TRUE(callbacks_.cancels.empty()) << "a refusal, not a cancel: the Exchange may fall back";
}

TEST_F(CircuitBreakerFilterTest, SuccessAndTeardownDoNotCountAsFailures) {
  CircuitBreakerFilter& f = breakerFilter();
  ASSERT_EQ(admit(f).kind, Admission::Kind::Continue);
  f.onAttemptDone(ended(AttemptOutcome::fromStatus(503)), AttemptVerdict::deliver());
  ASSERT_EQ(admit(f).kind, Admission::Kind::Continue);
  f.onAttemptDone(ended(AttemptOutcome::cancelled()), AttemptVerdict::fail(Problem{}));
  ASSERT_EQ(admit(f).kind, Admission::Kind::Continue);
  f.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  ASSERT_EQ(admit(f).kind, Admission::Kind::Continue);
  f.onAttemptDone(ended(AttemptOutcome::fromStatus(503)), AttemptVerdict::deliver());
  EXPECT_EQ(admit(f).kind, Admission::Kind::Continue);  // never two failures in a row
  EXPECT_TRUE(callbacks_.cancels.empty());
}

TEST_F(CircuitBreakerFilterTest, AnAdmissionNeverReportedIsFreedOnDestroy) {
  CircuitBreakerFilter& f = breakerFilter();
  ASSERT_EQ(admit(f).kind, Admission::Kind::Continue);
  EXPECT_EQ(endpoint().breaker->activeRequests(), 1u);
  f.onDestroy();
  EXPECT_EQ(endpoint().breaker->activeRequests(), 0u);
}

}  // namespace
}  // namespace sluice
