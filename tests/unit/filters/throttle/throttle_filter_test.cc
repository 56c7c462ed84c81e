// Tests for the throttle filter (filters/throttle/throttle_filter.h): its
// queue, and the fleet's quota (docs/design.md §6).
// On the shared per-attempt fixture (attempt_filter_fixture.h): the filter
// driven the way the Exchange drives it, on fake callbacks and a ManualClock.

#include "filters/throttle/throttle_filter.h"

#include <map>

#include "filters/throttle/global_quota.h"
#include "tests/unit/filters/attempt_filter_fixture.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::AttemptFiltersTest;
using test::FakeFilterCallbacks;

class ThrottleFilterTest : public AttemptFiltersTest {
 protected:
  ThrottleFilter& throttle(FakeFilterCallbacks& callbacks, GlobalQuota* global = nullptr) {
    auto filter = std::make_unique<ThrottleFilter>();
    callbacks.destination_value = endpoint().destination;
    callbacks.destination_value.global_quota = global;
    filter->setCallbacks(callbacks);
    ThrottleFilter& f = *filter;
    filters_.push_back(std::move(filter));
    attempts_[&f] = callbacks.attemptContext();
    f.decodeComplete("{}");
    return f;
  }
  /** Its beforeAttempt, with the attempt its callbacks describe. */
  Admission admit(ThrottleFilter& f) {
    RequestHead upstream_request;
    return f.beforeAttempt(upstream_request, attempts_.at(&f));
  }
  std::map<const ThrottleFilter*, AttemptContext> attempts_;
};

TEST_F(ThrottleFilterTest, TheProbeGoesTheNextWaitsForItsHeaders) {
  ThrottleFilter& probe = throttle(callbacks_);
  FakeFilterCallbacks waiter_callbacks(clock_);
  ThrottleFilter& waiter = throttle(waiter_callbacks);
  ASSERT_EQ(admit(probe).kind, Admission::Kind::Continue);
  EXPECT_EQ(admit(waiter).kind, Admission::Kind::Wait);  // queued: no cancel
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
  ASSERT_EQ(admit(probe).kind, Admission::Kind::Continue);
  EXPECT_EQ(admit(first).kind, Admission::Kind::Wait);  // holds the one max_pending slot
  const Admission refused = admit(second);              // none left
  EXPECT_EQ(refused.kind, Admission::Kind::Refuse);
  EXPECT_EQ(refused.reason, CancelReason::Overloaded);
  EXPECT_TRUE(second_callbacks.cancels.empty())
      << "refused, not cancelled: the Exchange may fall back";
  first.onDestroy();  // a client that left while queued is never sent
  EXPECT_EQ(endpoint().quota->queueDepth(), 0u);
}

TEST_F(ThrottleFilterTest, AWaiterWhoseBudgetRanOutIsTheBudgetsEndNot429) {
  // The probe is out (unknown quota): the waiter has no known wait and is only
  // ended by its deadline. When the probe's news wakes it after that deadline
  // (before the Exchange's own deadline timer ran), it is budget_exhausted.
  ThrottleFilter& probe = throttle(callbacks_);
  ASSERT_EQ(admit(probe).kind, Admission::Kind::Continue);
  FakeFilterCallbacks waiter_callbacks(clock_);
  waiter_callbacks.setDeadline(clock_.now() + 50ms);
  ThrottleFilter& waiter = throttle(waiter_callbacks);
  EXPECT_EQ(admit(waiter).kind, Admission::Kind::Wait);
  clock_.advance(60ms);
  probe.onAttemptDone(ended(AttemptOutcome::connectError()), AttemptVerdict::deliver());
  ASSERT_EQ(waiter_callbacks.cancels.size(), 1u);
  EXPECT_EQ(waiter_callbacks.cancels[0].first, CancelReason::BudgetExhausted);
  waiter.onDestroy();
}

TEST_F(ThrottleFilterTest, AnExhaustedQuotaWaitsForItsResetOnATimer) {
  ThrottleFilter& probe = throttle(callbacks_);
  ASSERT_EQ(admit(probe).kind, Admission::Kind::Continue);
  ResponseHead head;
  head.status = 200;
  head.headers.add("x-ratelimit-limit-requests", "10");
  head.headers.add("x-ratelimit-remaining-requests", "0");
  head.headers.add("x-ratelimit-reset-requests", "2s");
  probe.encodeHeaders(head, false);
  probe.onAttemptDone(ended(AttemptOutcome::fromStatus(200)), AttemptVerdict::deliver());

  FakeFilterCallbacks waiter_callbacks(clock_);
  ThrottleFilter& waiter = throttle(waiter_callbacks);
  EXPECT_EQ(admit(waiter).kind, Admission::Kind::Wait);
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
  EXPECT_EQ(admit(probe).kind, Admission::Kind::Wait);  // asks the fleet
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
  EXPECT_EQ(admit(asking).kind, Admission::Kind::Wait) << "admitted locally, asks the fleet";

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
  EXPECT_EQ(admit(f).kind, Admission::Kind::Wait);
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
  EXPECT_EQ(admit(waiter).kind, Admission::Kind::Wait);
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
