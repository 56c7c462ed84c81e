// Tests for the spend filter (filters/spend/spend_filter.h): the booking of
// a decided attempt (onAttemptDone) and the run it feeds.
// On the shared per-attempt fixture (attempt_filter_fixture.h): the filter
// driven the way the Exchange drives it, on fake callbacks and a ManualClock.

#include "filters/spend/spend_filter.h"

#include "tests/unit/filters/attempt_filter_fixture.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::AttemptFiltersTest;
using test::FakeFilterCallbacks;

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
  /** An attempt of `request` answered 200 with `content_type`, its head passed, no body yet. */
  SpendFilter& answering(std::string_view content_type,
                         std::string_view request = R"({"model":"gpt-4o","messages":[]})") {
    auto& f = wire(std::make_unique<SpendFilter>(runtime_->prices(), *route().metrics));
    f.decodeComplete(request);
    RequestHead upstream_request = callbacks_.request_head;
    f.beforeAttempt(upstream_request, callbacks_.attemptContext());
    ResponseHead head;
    head.status = 200;
    head.headers.add("content-type", content_type);
    f.encodeHeaders(head, false);
    return f;
  }
  /** One attempt of a chat completion whose response reports 1000 in, 500 out. */
  SpendFilter& attempt() {
    SpendFilter& f = answering("application/json");
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
  const std::string body = R"({"model":"gpt-4o","stream":true,"messages":[]})";
  SpendFilter& f = answering("text/event-stream", body);
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
  SpendFilter& f = answering("text/event-stream");
  EXPECT_GT(run.total(), 0) << "a stream feeds its run as it goes: the input at once";
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.unprocessed = true;
  f.onAttemptDone(end, AttemptVerdict::retry(1ms, "refused"));
  EXPECT_DOUBLE_EQ(run.total(), 0);
}

TEST_F(SpendFilterTest, AJsonAnswerFeedsItsRunOnceBooked) {
  RecordedRunSpend run;
  callbacks_.run_spend = &run;
  SpendFilter& f = answering("application/json");
  EXPECT_DOUBLE_EQ(run.total(), 0) << "its usage comes with its end";
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  f.onAttemptDone(end, AttemptVerdict::deliver());
  EXPECT_GT(run.total(), 0);
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
  f.beforeAttempt(upstream_request, callbacks_.attemptContext());
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
  f.beforeAttempt(upstream_request, callbacks_.attemptContext());
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

// ---- delivered means read: a response handed over until its reading is known ----------

TEST_F(SpendFilterTest, AWholeAnswerWaitsForItsReadingThenBooksWhatWasRead) {
  callbacks_.confirms_reads = true;
  RecordedRunSpend run;
  callbacks_.run_spend = &run;
  SpendFilter& f = attempt();
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.delivered_body_bytes = kBody.size();
  f.onAttemptDone(end, AttemptVerdict::deliver());
  ASSERT_EQ(callbacks_.held.size(), 1u) << "handed over, not booked";
  EXPECT_TRUE(callbacks_.usages.empty());
  EXPECT_EQ(tokens(true, Disposition::Delivered) + tokens(true, Disposition::Leaked), 0);
  EXPECT_DOUBLE_EQ(run.total(), 1000 * 2.50 / 1e6 + 500 * 10.00 / 1e6)
      << "its run is told what it costs at once: the reading splits it, it does not change it";
  EXPECT_EQ(callbacks_.held[0]->reason(), std::nullopt);
  const AttemptUsage booked = callbacks_.held[0]->settle(0);
  EXPECT_EQ(booked.leaked_usd, 0);
  EXPECT_EQ(tokens(true, Disposition::Delivered), 500);
  EXPECT_EQ(tokens(false, Disposition::Delivered), 1000);
}

TEST_F(SpendFilterTest, AnAnswerLeftUnreadLeaksUnderClientAbandoned) {
  callbacks_.confirms_reads = true;
  SpendFilter& f = attempt();
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.delivered_body_bytes = kBody.size();
  f.onAttemptDone(end, AttemptVerdict::deliver());
  ASSERT_EQ(callbacks_.held.size(), 1u);
  const AttemptUsage booked = callbacks_.held[0]->settle(UINT64_MAX);
  EXPECT_DOUBLE_EQ(booked.leaked_usd, booked.spend_usd);
  EXPECT_EQ(tokens(true, Disposition::Leaked), 500);
  EXPECT_EQ(tokens(false, Disposition::Leaked), 1000) << "no output read: its input leaks too";
  EXPECT_DOUBLE_EQ(route().metrics->leakedSpend("gpt-4o*", "client_abandoned").Value(),
                   booked.leaked_usd);
}

TEST_F(SpendFilterTest, ACutResponseWaitsTooAndItsLeakKeepsTheCutsReason) {
  callbacks_.confirms_reads = true;
  SpendFilter& f = answering("text/event-stream");
  const std::string delta = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
  for (int i = 0; i < 4; ++i) f.encodeData(delta.data(), delta.size(), false);
  AttemptEnd end = ended(AttemptOutcome::cancelled());
  end.cancel_reason = CancelReason::BudgetExhausted;
  end.delivered_body_bytes = 4 * delta.size();
  f.onAttemptDone(end, AttemptVerdict::fail(Problem{}));
  ASSERT_EQ(callbacks_.held.size(), 1u);
  EXPECT_EQ(callbacks_.held[0]->reason(), CancelReason::BudgetExhausted);
  // The client read the first event, not the three after it.
  callbacks_.held[0]->settle(3 * delta.size());
  EXPECT_EQ(tokens(true, Disposition::Delivered), 1);
  EXPECT_EQ(tokens(true, Disposition::Leaked), 3);
  EXPECT_GT(route().metrics->leakedSpend("gpt-4o*", "budget_exhausted").Value(), 0);
  EXPECT_EQ(route().metrics->leakedSpend("gpt-4o*", "client_abandoned").Value(), 0);
}

TEST_F(SpendFilterTest, WithoutAConnectionThatConfirmsReadsTheAnswerIsBookedAtOnce) {
  SpendFilter& f = attempt();  // (an HTTP/2 client)
  AttemptEnd end = ended(AttemptOutcome::fromStatus(200));
  end.delivered_body_bytes = kBody.size();
  f.onAttemptDone(end, AttemptVerdict::deliver());
  EXPECT_TRUE(callbacks_.held.empty());
  ASSERT_EQ(callbacks_.usages.size(), 1u);
  EXPECT_EQ(tokens(true, Disposition::Delivered), 500);
}

}  // namespace
}  // namespace sluice
