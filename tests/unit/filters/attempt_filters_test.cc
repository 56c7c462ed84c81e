// Filter-level tests for the per-attempt filters on fake callbacks
// (tests/unit/filters/fake_filter_callbacks.h): the retry filter's verdicts
// (decideAttempt), the spend filter's booking of a decided attempt
// (onAttemptDone), the circuit breaker filter's admission and reporting, and
// the throttle filter's queue. Each filter is driven the way the Exchange
// drives it (filters/filter.h), on a ManualClock.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "config/loader.h"
#include "filters/circuit_breaker/circuit_breaker_filter.h"
#include "filters/retry/retry_filter.h"
#include "filters/spend/spend_filter.h"
#include "filters/throttle/global_quota.h"
#include "filters/throttle/throttle_filter.h"
#include "proxy/exchange/runtime.h"
#include "tests/unit/filters/fake_filter_callbacks.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::FakeFilterCallbacks;

constexpr const char* kConfig = R"(listen: 127.0.0.1:0
upstreams:
  - name: up
    url: "http://127.0.0.1:9"
    circuit_breaker: {consecutive_failures: 2, cooldown: 10s, max_pending: 1}
    rate_limit: {key: none, reserve: 0}
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: up
    retry: {attempts: 3, on: [429, 503, reset, timeout], backoff: {base: 1ms, max: 1ms}, idempotent: auto}
pricing:
  - {model: "gpt-4o*", input: 2.50, output: 10.00}
)";

class AttemptFiltersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::loadConfigString(kConfig, "attempt_filters_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = Runtime::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
    callbacks_.request_head.method = "POST";
    callbacks_.request_head.path = "/v1/chat/completions";
    callbacks_.destination_value = endpoint().destination;
  }

  const RouteRuntime& route() const { return runtime_->routes().at(0); }
  const UpstreamRuntime& upstream() const { return runtime_->upstreams().at(0); }
  const EndpointRuntime& endpoint() const { return upstream().endpoints.at(0); }

  template <class F>
  F& wire(std::unique_ptr<F> filter) {
    filter->setCallbacks(callbacks_);
    F& f = *filter;
    filters_.push_back(std::move(filter));
    return f;
  }

  static AttemptEnd ended(AttemptOutcome outcome, uint32_t attempt = 1) {
    AttemptEnd end;
    end.outcome = outcome;
    end.attempt = attempt;
    end.status = outcome.isStatus() ? outcome.status : 0;
    return end;
  }

  ManualClock clock_;
  Metrics metrics_;
  RuntimePtr runtime_;
  FakeFilterCallbacks callbacks_{clock_};
  std::vector<StreamFilterPtr> filters_;
};

// --- retry ------------------------------------------------------------------------

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

// --- spend --------------------------------------------------------------------------

TEST(SpendDispositionTest, FromTheEndAndTheVerdict) {
  const AttemptVerdict deliver = AttemptVerdict::deliver();
  const AttemptVerdict retry = AttemptVerdict::retry(1ms, "503");
  const AttemptVerdict fail = AttemptVerdict::fail(Problem{});
  AttemptEnd end;
  end.outcome = AttemptOutcome::fromStatus(200);
  EXPECT_EQ(spendDisposition(end, deliver), AttemptDisposition::Completed);
  end.outcome = AttemptOutcome::fromStatus(503);
  EXPECT_EQ(spendDisposition(end, retry), AttemptDisposition::Abandoned);
  end.outcome = AttemptOutcome::timeout();
  EXPECT_EQ(spendDisposition(end, fail), AttemptDisposition::Abandoned);
  end.outcome = AttemptOutcome::reset();
  EXPECT_EQ(spendDisposition(end, fail), AttemptDisposition::Cancelled);
  end.outcome = AttemptOutcome::cancelled();
  EXPECT_EQ(spendDisposition(end, fail), AttemptDisposition::Cancelled);
  end.outcome = AttemptOutcome::fromStatus(200);
  end.cancel_reason = CancelReason::BudgetExhausted;
  EXPECT_EQ(spendDisposition(end, fail), AttemptDisposition::Cancelled);
  end.finish_draining = true;
  EXPECT_EQ(spendDisposition(end, deliver), AttemptDisposition::Finished);
}

class SpendFilterTest : public AttemptFiltersTest {
 protected:
  /** One attempt of a chat completion whose response reports 1000 in, 500 out. */
  SpendFilter& attempt() {
    auto& f = wire(std::make_unique<SpendFilter>(runtime_->prices(), *route().metrics));
    f.decodeComplete(R"({"model":"gpt-4o","messages":[]})");
    RequestHead upstream_request = callbacks_.request_head;
    f.beforeAttempt(upstream_request);
    ResponseHead head;
    head.status = 200;
    head.headers.add("content-type", "application/json");
    f.encodeHeaders(head, false);
    f.encodeData(kBody.data(), kBody.size(), false);
    f.encodeData(nullptr, 0, true);
    return f;
  }
  double tokens(bool output, Disposition d) {
    return route().metrics->tokens("gpt-4o*", output, d).Value();
  }
  static constexpr std::string_view kBody =
      R"({"model":"gpt-4o","usage":{"prompt_tokens":1000,"completion_tokens":500}})";
};

// What a run is told of its task's spend, call by call.
struct RecordedRunSpend final : RunSpend {
  void addRunSpend(double usd) override { calls.push_back(usd); }
  double total() const {
    double sum = 0;
    for (const double usd : calls) sum += usd;
    return sum;
  }
  std::vector<double> calls;
};

TEST_F(SpendFilterTest, ARunIsFedAsTheStreamsTokensArriveThenTheBookedSpend) {
  RecordedRunSpend run;
  callbacks_.run_spend = &run;
  auto& f = wire(std::make_unique<SpendFilter>(runtime_->prices(), *route().metrics));
  const std::string body = R"({"model":"gpt-4o","stream":true,"messages":[]})";
  f.decodeComplete(body);
  RequestHead upstream_request = callbacks_.request_head;
  f.beforeAttempt(upstream_request);
  ResponseHead head;
  head.status = 200;
  head.headers.add("content-type", "text/event-stream");
  f.encodeHeaders(head, false);
  const double input_usd = ((body.size() + 3) / 4) * 2.50 / 1e6;  // the input estimate
  ASSERT_EQ(run.calls.size(), 1u);
  EXPECT_DOUBLE_EQ(run.calls[0], input_usd);
  const std::string delta = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
  const std::string three = delta + delta + delta;
  f.encodeData(three.data(), three.size(), false);  // one chunk, one call
  ASSERT_EQ(run.calls.size(), 2u);
  EXPECT_DOUBLE_EQ(run.calls[1], 3 * 10.00 / 1e6);
  f.encodeData(delta.data(), 10, false);  // half an event: nothing new, nothing told
  EXPECT_EQ(run.calls.size(), 2u);
  const std::string usage =
      delta.substr(10) +
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":4}}\n\n";
  f.encodeData(usage.data(), usage.size(), false);
  EXPECT_DOUBLE_EQ(run.total(), 1000 * 2.50 / 1e6 + 4 * 10.00 / 1e6)
      << "the provider's count replaces the estimate";
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.cancel_reason = CancelReason::RunSpendCap;
  f.onAttemptDone(end, AttemptVerdict::fail(makeProblem(problems::kRunSpendExhausted, "cap")));
  ASSERT_EQ(callbacks_.usages.size(), 1u);
  EXPECT_DOUBLE_EQ(run.total(), callbacks_.usages[0].spend_usd) << "the run holds what was booked";
}

TEST_F(SpendFilterTest, AnUnbilledAttemptTakesBackWhatItsRunWasTold) {
  RecordedRunSpend run;
  callbacks_.run_spend = &run;
  auto& f = wire(std::make_unique<SpendFilter>(runtime_->prices(), *route().metrics));
  f.decodeComplete(R"({"model":"gpt-4o","messages":[]})");
  RequestHead upstream_request = callbacks_.request_head;
  f.beforeAttempt(upstream_request);
  ResponseHead head;
  head.status = 200;
  head.headers.add("content-type", "application/json");
  f.encodeHeaders(head, false);
  EXPECT_GT(run.total(), 0);
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.unprocessed = true;
  f.onAttemptDone(end, AttemptVerdict::retry(1ms, "refused"));
  EXPECT_DOUBLE_EQ(run.total(), 0);
}

TEST_F(SpendFilterTest, ADeliveredAttemptIsBookedDelivered) {
  SpendFilter& f = attempt();
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.delivered_body_bytes = kBody.size();
  f.onAttemptDone(end, AttemptVerdict::deliver());
  ASSERT_EQ(callbacks_.usages.size(), 1u);
  EXPECT_EQ(callbacks_.usages[0].input_tokens, 1000u);
  EXPECT_EQ(callbacks_.usages[0].output_tokens, 500u);
  EXPECT_EQ(callbacks_.usages[0].leaked_usd, 0);
  EXPECT_EQ(tokens(true, Disposition::Delivered), 500);
  EXPECT_EQ(tokens(true, Disposition::Leaked), 0);
}

TEST_F(SpendFilterTest, ARetriedAttemptLeaksWhateverTheTableOrder) {
  // The decision reaches the spend filter as a value: no need to run after retry.
  SpendFilter& f = attempt();
  f.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::retry(1ms, "200"));
  ASSERT_EQ(callbacks_.usages.size(), 1u);
  EXPECT_GT(callbacks_.usages[0].leaked_usd, 0);
  EXPECT_EQ(callbacks_.usages[0].leaked_usd, callbacks_.usages[0].spend_usd);
  EXPECT_EQ(tokens(false, Disposition::Leaked), 1000);
  EXPECT_EQ(tokens(true, Disposition::Leaked), 500);
}

TEST_F(SpendFilterTest, AFinishDrainedAttemptLeaksEvenWhatWasDelivered) {
  SpendFilter& f = attempt();
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.finish_draining = true;
  end.cancel_reason = CancelReason::ClientDisconnect;
  end.delivered_body_bytes = kBody.size();
  f.onAttemptDone(end, AttemptVerdict::deliver());
  EXPECT_EQ(tokens(true, Disposition::Leaked), 500);
  EXPECT_GT(route().metrics->leakedSpend("gpt-4o*", "client_disconnect").Value(), 0);
}

TEST_F(SpendFilterTest, AnAttemptNeverSentBillsNothing) {
  // Begun (beforeAttempt) but never handed to a connection (max_pending, a
  // cancel): the upstream never saw it.
  auto& f = wire(std::make_unique<SpendFilter>(runtime_->prices(), *route().metrics));
  f.decodeComplete(R"({"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}]})");
  RequestHead upstream_request = callbacks_.request_head;
  f.beforeAttempt(upstream_request);
  callbacks_.cancel_reason = CancelReason::Overloaded;
  f.onDestroy();
  ASSERT_EQ(callbacks_.usages.size(), 1u) << "the model is still told";
  EXPECT_EQ(callbacks_.usages[0].input_tokens, 0u);
  EXPECT_EQ(callbacks_.usages[0].spend_usd, 0);
  EXPECT_EQ(tokens(false, Disposition::Leaked), 0);
  EXPECT_EQ(route().metrics->spend("gpt-4o*", Disposition::Leaked).Value(), 0);
  EXPECT_EQ(route().metrics->leakedSpend("gpt-4o*", "overloaded").Value(), 0);
}

TEST_F(SpendFilterTest, AnAttemptTheUpstreamNeverProcessedBillsNothing) {
  // Connect refused (or never connected, REFUSED_STREAM): retried, not billed.
  auto& f = wire(std::make_unique<SpendFilter>(runtime_->prices(), *route().metrics));
  f.decodeComplete(R"({"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}]})");
  RequestHead upstream_request = callbacks_.request_head;
  f.beforeAttempt(upstream_request);
  AttemptEnd end = ended(AttemptOutcome::connectError());
  end.unprocessed = true;
  f.onAttemptDone(end, AttemptVerdict::retry(0ms, "connect_error"));
  f.onDestroy();
  ASSERT_EQ(callbacks_.usages.size(), 1u);
  EXPECT_EQ(callbacks_.usages[0].input_tokens, 0u);
  EXPECT_EQ(tokens(false, Disposition::Leaked), 0);
  EXPECT_EQ(route().metrics->spend("gpt-4o*", Disposition::Leaked).Value(), 0);
}

TEST_F(SpendFilterTest, ARequestRefusedBeforeAnyAttemptNamesTheBodysModel) {
  auto& f = wire(std::make_unique<SpendFilter>(runtime_->prices(), *route().metrics));
  f.decodeComplete(R"({"model":"gpt-4o","messages":[]})");
  callbacks_.cancel_reason = CancelReason::CircuitOpen;
  f.onDestroy();
  ASSERT_EQ(callbacks_.usages.size(), 1u);
  EXPECT_EQ(callbacks_.usages[0].model, "gpt-4o");
  EXPECT_EQ(callbacks_.usages[0].spend_usd, 0);
}

TEST_F(SpendFilterTest, ARetriedResetLeaksToUpstreamReset) {
  // Every leaked dollar has a cancel_reason: the two leak metrics agree.
  SpendFilter& f = attempt();
  f.onAttemptDone(ended(AttemptOutcome::reset()), AttemptVerdict::retry(0ms, "reset"));
  const double leaked = route().metrics->spend("gpt-4o*", Disposition::Leaked).Value();
  EXPECT_GT(leaked, 0);
  EXPECT_EQ(route().metrics->leakedSpend("gpt-4o*", "upstream_reset").Value(), leaked);
}

// --- circuit breaker ---------------------------------------------------------------------

class CircuitBreakerFilterTest : public AttemptFiltersTest {
 protected:
  CircuitBreakerFilter& breakerFilter() { return wire(std::make_unique<CircuitBreakerFilter>()); }
  FilterStatus admit(CircuitBreakerFilter& f) {
    RequestHead upstream_request = callbacks_.request_head;
    return f.beforeAttempt(upstream_request);
  }
};

TEST_F(CircuitBreakerFilterTest, ReportsEachOutcomeAndOpensOnFailures) {
  CircuitBreakerFilter& f = breakerFilter();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(admit(f), FilterStatus::Continue);
    f.onAttemptDone(ended(AttemptOutcome::fromStatus(503)), AttemptVerdict::deliver());
  }
  EXPECT_EQ(admit(f), FilterStatus::StopIteration);  // consecutive_failures: 2
  ASSERT_EQ(callbacks_.cancels.size(), 1u);
  EXPECT_EQ(callbacks_.cancels[0].first, CancelReason::CircuitOpen);
  EXPECT_EQ(callbacks_.cancels[0].second, milliseconds(10s));
  EXPECT_EQ(callbacks_.refusals, 1) << "a refusal: the Exchange may fall back";
}

TEST_F(CircuitBreakerFilterTest, SuccessAndTeardownDoNotCountAsFailures) {
  CircuitBreakerFilter& f = breakerFilter();
  ASSERT_EQ(admit(f), FilterStatus::Continue);
  f.onAttemptDone(ended(AttemptOutcome::fromStatus(503)), AttemptVerdict::deliver());
  ASSERT_EQ(admit(f), FilterStatus::Continue);
  f.onAttemptDone(ended(AttemptOutcome::cancelled()), AttemptVerdict::fail(Problem{}));
  ASSERT_EQ(admit(f), FilterStatus::Continue);
  f.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  ASSERT_EQ(admit(f), FilterStatus::Continue);
  f.onAttemptDone(ended(AttemptOutcome::fromStatus(503)), AttemptVerdict::deliver());
  EXPECT_EQ(admit(f), FilterStatus::Continue);  // never two failures in a row
  EXPECT_TRUE(callbacks_.cancels.empty());
}

TEST_F(CircuitBreakerFilterTest, AnAdmissionNeverReportedIsFreedOnDestroy) {
  CircuitBreakerFilter& f = breakerFilter();
  ASSERT_EQ(admit(f), FilterStatus::Continue);
  EXPECT_EQ(endpoint().breaker->activeRequests(), 1u);
  f.onDestroy();
  EXPECT_EQ(endpoint().breaker->activeRequests(), 0u);
}

// --- throttle ------------------------------------------------------------------------------

class ThrottleFilterTest : public AttemptFiltersTest {
 protected:
  ThrottleFilter& throttle(FakeFilterCallbacks& callbacks, GlobalQuota* global = nullptr) {
    auto filter = std::make_unique<ThrottleFilter>();
    callbacks.destination_value = endpoint().destination;
    callbacks.destination_value.global_quota = global;
    filter->setCallbacks(callbacks);
    ThrottleFilter& f = *filter;
    filters_.push_back(std::move(filter));
    f.decodeComplete("{}");
    return f;
  }
  static FilterStatus admit(ThrottleFilter& f) {
    RequestHead upstream_request;
    return f.beforeAttempt(upstream_request);
  }
};

TEST_F(ThrottleFilterTest, TheProbeGoesTheNextWaitsForItsHeaders) {
  ThrottleFilter& probe = throttle(callbacks_);
  FakeFilterCallbacks waiter_callbacks(clock_);
  ThrottleFilter& waiter = throttle(waiter_callbacks);
  ASSERT_EQ(admit(probe), FilterStatus::Continue);
  EXPECT_EQ(admit(waiter), FilterStatus::StopIteration);  // queued: no cancel
  EXPECT_TRUE(waiter_callbacks.cancels.empty());
  EXPECT_EQ(endpoint().quota->queueDepth(), 1u);

  ResponseHead head;
  head.status = 200;
  head.headers.add("x-ratelimit-limit-requests", "100");
  head.headers.add("x-ratelimit-remaining-requests", "99");
  probe.encodeHeaders(head, false);  // the waker (here: direct) re-polls the waiter
  EXPECT_EQ(waiter_callbacks.continue_calls, 1);
  EXPECT_EQ(endpoint().quota->queueDepth(), 0u);
  probe.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  waiter.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
}

TEST_F(ThrottleFilterTest, AFullQueueSlotAnswersOverloaded) {
  ThrottleFilter& probe = throttle(callbacks_);
  FakeFilterCallbacks first_callbacks(clock_);
  FakeFilterCallbacks second_callbacks(clock_);
  ThrottleFilter& first = throttle(first_callbacks);
  ThrottleFilter& second = throttle(second_callbacks);
  ASSERT_EQ(admit(probe), FilterStatus::Continue);
  EXPECT_EQ(admit(first), FilterStatus::StopIteration);   // holds the one max_pending slot
  EXPECT_EQ(admit(second), FilterStatus::StopIteration);  // none left
  ASSERT_EQ(second_callbacks.cancels.size(), 1u);
  EXPECT_EQ(second_callbacks.cancels[0].first, CancelReason::Overloaded);
  EXPECT_EQ(second_callbacks.refusals, 1);
  first.onDestroy();  // a client that left while queued is never sent
  EXPECT_EQ(endpoint().quota->queueDepth(), 0u);
}

TEST_F(ThrottleFilterTest, AWaiterWhoseBudgetRanOutIsTheBudgetsEndNot429) {
  // The probe is out (unknown quota): the waiter has no known wait and is only
  // ended by its deadline. When the probe's news wakes it after that deadline
  // (before the Exchange's own deadline timer ran), it is budget_exhausted.
  ThrottleFilter& probe = throttle(callbacks_);
  ASSERT_EQ(admit(probe), FilterStatus::Continue);
  FakeFilterCallbacks waiter_callbacks(clock_);
  waiter_callbacks.setDeadline(clock_.now() + 50ms);
  ThrottleFilter& waiter = throttle(waiter_callbacks);
  EXPECT_EQ(admit(waiter), FilterStatus::StopIteration);
  clock_.advance(60ms);
  probe.onAttemptDone(ended(AttemptOutcome::connectError()), AttemptVerdict::deliver());
  ASSERT_EQ(waiter_callbacks.cancels.size(), 1u);
  EXPECT_EQ(waiter_callbacks.cancels[0].first, CancelReason::BudgetExhausted);
  waiter.onDestroy();
}

TEST_F(ThrottleFilterTest, AnExhaustedQuotaWaitsForItsResetOnATimer) {
  ThrottleFilter& probe = throttle(callbacks_);
  ASSERT_EQ(admit(probe), FilterStatus::Continue);
  ResponseHead head;
  head.status = 200;
  head.headers.add("x-ratelimit-limit-requests", "10");
  head.headers.add("x-ratelimit-remaining-requests", "0");
  head.headers.add("x-ratelimit-reset-requests", "2s");
  probe.encodeHeaders(head, false);
  probe.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());

  FakeFilterCallbacks waiter_callbacks(clock_);
  ThrottleFilter& waiter = throttle(waiter_callbacks);
  EXPECT_EQ(admit(waiter), FilterStatus::StopIteration);
  EXPECT_EQ(waiter_callbacks.armedTimers(), 1u);  // the reset, on the Exchange's timer
  clock_.advance(1s);
  waiter_callbacks.fireDueTimers();
  EXPECT_EQ(waiter_callbacks.continue_calls, 0);
  clock_.advance(2s);  // past the reset (and its latency margin)
  waiter_callbacks.fireDueTimers();
  EXPECT_EQ(waiter_callbacks.continue_calls, 1);
  waiter.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
}

// --- throttle with the fleet's quota (docs/design.md §6)
// -------------------------------------------

// A GlobalQuota that answers what the test tells it, later (as Redis does:
// on a later turn of the loop).
class ScriptedGlobalQuota final : public GlobalQuota {
 public:
  bool reserve(const std::string&, uint64_t token_need, Done done) override {
    ++reserves;
    token_needs.push_back(token_need);
    pending = std::move(done);
    return true;
  }
  void answer() {
    Done done = std::move(pending);
    pending = nullptr;
    ASSERT_TRUE(done) << "nobody asked";
    done(next);
  }
  void report(const std::string&, const Report& report) override {
    ++reports;
    last_report = report;
  }
  void endProbe(const std::string&, bool answered_without_quota) override {
    probe_ends.push_back(answered_without_quota);
  }

  Answer next;
  Done pending;
  int reserves = 0;
  int reports = 0;
  std::vector<uint64_t> token_needs;
  Report last_report;
  std::vector<bool> probe_ends;
};

class GlobalThrottleFilterTest : public ThrottleFilterTest {
 protected:
  ThrottleFilter& throttle(FakeFilterCallbacks& callbacks) {
    return ThrottleFilterTest::throttle(callbacks, &global_);
  }
  ScriptedGlobalQuota global_;
};

TEST_F(GlobalThrottleFilterTest, TheFleetsProbeEndingBeforeHeadersReleasesItsPermit) {
  global_.next.kind = GlobalQuota::Answer::Kind::Probe;
  ThrottleFilter& probe = throttle(callbacks_);
  EXPECT_EQ(admit(probe), FilterStatus::StopIteration);  // asks the fleet
  global_.answer();
  EXPECT_EQ(callbacks_.continue_calls, 1);  // and goes: it is the probe
  probe.onAttemptDone(ended(AttemptOutcome::connectError()), AttemptVerdict::deliver());
  EXPECT_EQ(global_.probe_ends, std::vector<bool>{false}) << "nothing learned: released";
  probe.onDestroy();
  EXPECT_EQ(global_.probe_ends.size(), 1u) << "released once";
}

TEST_F(GlobalThrottleFilterTest, TheFleetsProbeAnsweredWithoutAQuotaLetsEveryReplicaDecide) {
  global_.next.kind = GlobalQuota::Answer::Kind::Probe;
  ThrottleFilter& probe = throttle(callbacks_);
  admit(probe);
  global_.answer();
  ResponseHead head;
  head.status = 200;  // no quota headers at all
  probe.encodeHeaders(head, false);
  EXPECT_EQ(global_.probe_ends, std::vector<bool>{true});
  probe.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  EXPECT_EQ(global_.probe_ends.size(), 1u);
  EXPECT_EQ(global_.reports, 0);
}

TEST_F(GlobalThrottleFilterTest, TheFleetsProbeWithAQuotaReportsIt) {
  global_.next.kind = GlobalQuota::Answer::Kind::Probe;
  ThrottleFilter& probe = throttle(callbacks_);
  admit(probe);
  global_.answer();
  ResponseHead head;
  head.status = 200;
  head.headers.add("x-ratelimit-limit-requests", "100");
  head.headers.add("x-ratelimit-remaining-requests", "99");
  probe.encodeHeaders(head, false);
  probe.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  EXPECT_EQ(global_.reports, 1);
  EXPECT_TRUE(global_.probe_ends.empty()) << "the report ends the probe";
}

TEST_F(GlobalThrottleFilterTest, TheFleetIsAskedForTheTokenNeedAndToldTheTokenQuota) {
  global_.next.kind = GlobalQuota::Answer::Kind::Probe;
  ThrottleFilter& probe = throttle(callbacks_);
  const std::string body = R"({"max_tokens":100,"messages":[]})";
  probe.decodeComplete(body);
  admit(probe);
  ASSERT_EQ(global_.token_needs.size(), 1u);
  EXPECT_EQ(global_.token_needs[0], estimateTokenNeed(body));
  global_.answer();
  ResponseHead head;
  head.status = 200;  // a token quota only: reported, and it ends the fleet's probe
  head.headers.add("x-ratelimit-limit-tokens", "1000");
  head.headers.add("x-ratelimit-remaining-tokens", "900");
  head.headers.add("x-ratelimit-reset-tokens", "2s");
  probe.encodeHeaders(head, false);
  probe.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  EXPECT_EQ(global_.reports, 1);
  EXPECT_TRUE(global_.probe_ends.empty());
  EXPECT_FALSE(global_.last_report.requests);
  ASSERT_TRUE(global_.last_report.tokens);
  EXPECT_EQ(global_.last_report.tokens->limit, 1000);
  EXPECT_EQ(global_.last_report.tokens->remaining, 900);
  EXPECT_EQ(global_.last_report.tokens->reset_in, 2000ms);
  EXPECT_EQ(global_.last_report.tokens->unanswered, 0) << "its own answer is in the report";
}

// The traced order behind false 429s with a fleet: a response's report
// reached Redis while another request of this replica, admitted locally,
// still waited for its fleet reservation. The report subtracted that request
// as in flight and its reservation subtracted it again (167 tokens left, 192
// "in flight", a reservation of 151 told to wait, the window ended at
// 233/400). A request awaiting its reservation is not in the report's
// in-flight count; once reserved, it is.
TEST_F(GlobalThrottleFilterTest, ARequestAwaitingItsReservationIsNotReportedAsInFlight) {
  const auto tokens_head = [](const char* remaining) {
    ResponseHead head;
    head.status = 200;
    head.headers.add("x-ratelimit-limit-tokens", "400");
    head.headers.add("x-ratelimit-remaining-tokens", remaining);
    head.headers.add("x-ratelimit-reset-tokens", "20s");
    return head;
  };
  // The fleet's probe teaches this replica the quota.
  global_.next.kind = GlobalQuota::Answer::Kind::Probe;
  ThrottleFilter& probe = throttle(callbacks_);
  admit(probe);
  global_.answer();
  ResponseHead probe_head = tokens_head("390");
  probe.encodeHeaders(probe_head, false);
  probe.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());

  global_.next.kind = GlobalQuota::Answer::Kind::Admit;
  FakeFilterCallbacks sent_callbacks(clock_);
  ThrottleFilter& sent = throttle(sent_callbacks);
  sent.decodeComplete(R"({"max_tokens":41,"messages":[]})");
  admit(sent);
  global_.answer();  // reserved in the fleet, sent
  ASSERT_EQ(sent_callbacks.continue_calls, 1);

  FakeFilterCallbacks asking_callbacks(clock_);
  ThrottleFilter& asking = throttle(asking_callbacks);
  const std::string asking_body = R"({"max_tokens":151,"messages":[]})";
  asking.decodeComplete(asking_body);
  EXPECT_EQ(admit(asking), FilterStatus::StopIteration) << "admitted locally, asks the fleet";

  ResponseHead sent_head = tokens_head("167");
  sent.encodeHeaders(sent_head, false);  // reported while `asking` awaits Redis
  ASSERT_TRUE(global_.last_report.tokens);
  EXPECT_EQ(global_.last_report.tokens->remaining, 167);
  EXPECT_EQ(global_.last_report.tokens->unanswered, 0)
      << "its reservation will take it from the fleet's count: not here too";
  sent.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());

  global_.answer();  // reserved: from now on it is in flight for the fleet
  ASSERT_EQ(asking_callbacks.continue_calls, 1);
  FakeFilterCallbacks next_callbacks(clock_);
  ThrottleFilter& next = throttle(next_callbacks);
  admit(next);
  global_.answer();
  ResponseHead next_head = tokens_head("100");
  next.encodeHeaders(next_head, false);
  ASSERT_TRUE(global_.last_report.tokens);
  EXPECT_EQ(global_.last_report.tokens->unanswered,
            static_cast<int64_t>(estimateTokenNeed(asking_body)));
  next.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
  asking.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());
}

TEST_F(GlobalThrottleFilterTest, AnAnswerForARequestThatIsGoneIsDropped) {
  global_.next.kind = GlobalQuota::Answer::Kind::Admit;
  ThrottleFilter& f = throttle(callbacks_);
  EXPECT_EQ(admit(f), FilterStatus::StopIteration);
  f.onDestroy();     // the client left while the fleet was asked
  global_.answer();  // Redis answers on a later loop turn
  EXPECT_EQ(callbacks_.continue_calls, 0);
}

TEST_F(GlobalThrottleFilterTest, AnUnknownFleetWaitNeverAnswers429BeforeTheDeadline) {
  // The fleet's remaining is spent and nobody knows its reset: the wait is
  // unknown. A budget shorter than the poll interval must not turn that into
  // rate_limited at once.
  callbacks_.setDeadline(clock_.now() + 50ms);
  global_.next.kind = GlobalQuota::Answer::Kind::Wait;
  ThrottleFilter& waiter = throttle(callbacks_);
  EXPECT_EQ(admit(waiter), FilterStatus::StopIteration);
  global_.answer();
  EXPECT_TRUE(callbacks_.cancels.empty());
  EXPECT_EQ(callbacks_.continue_calls, 0);
  EXPECT_EQ(callbacks_.armedTimers(), 1u);  // asks the fleet again after a short poll
  EXPECT_EQ(endpoint().quota->queueDepth(), 0u) << "the local queue is not held for it";
  global_.next.kind = GlobalQuota::Answer::Kind::Admit;
  clock_.advance(250ms);
  callbacks_.fireDueTimers();
  EXPECT_EQ(global_.reserves, 2);
  global_.answer();
  EXPECT_EQ(callbacks_.continue_calls, 1);
  EXPECT_TRUE(callbacks_.cancels.empty());
  waiter.onDestroy();
}

TEST_F(GlobalThrottleFilterTest, AKnownFleetWaitBeyondTheBudgetAnswers429AtOnce) {
  callbacks_.setDeadline(clock_.now() + 50ms);
  global_.next.kind = GlobalQuota::Answer::Kind::Wait;
  global_.next.wait = 2s;
  ThrottleFilter& waiter = throttle(callbacks_);
  admit(waiter);
  global_.answer();
  ASSERT_EQ(callbacks_.cancels.size(), 1u);
  EXPECT_EQ(callbacks_.cancels[0].first, CancelReason::RateLimited);
  waiter.onDestroy();
}

}  // namespace
}  // namespace sluice
