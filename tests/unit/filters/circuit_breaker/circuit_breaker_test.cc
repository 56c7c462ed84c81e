#include "filters/circuit_breaker/circuit_breaker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using Result = CircuitAdmission::Result;

const AttemptOutcome kOk = AttemptOutcome::fromStatus(200);
const AttemptOutcome kFail = AttemptOutcome::fromStatus(503);

// A breaker on a ManualClock that records every transition.
class CircuitBreakerTest : public ::testing::Test {
 protected:
  static config::CircuitBreakerConfig baseConfig() {
    config::CircuitBreakerConfig c;
    c.consecutive_failures = 3;
    c.failure_rate.min_requests = 1000;  // rate trips off unless a test turns them on
    c.cooldown = 5s;
    c.max_cooldown = 60s;
    return c;
  }

  void make(const config::CircuitBreakerConfig& c) {
    breaker_ = std::make_unique<CircuitBreaker>(
        c, clock_,
        [this](CircuitState from, CircuitState to) { transitions_.emplace_back(from, to); });
  }

  // One admitted attempt with the given outcome; fails the test if not admitted.
  void attempt(const AttemptOutcome& outcome) {
    const auto a = breaker_->admit();
    ASSERT_EQ(a.result, Result::Admitted);
    breaker_->onResult(a, outcome);
  }

  void trip() {
    for (uint32_t i = 0; i < 3; ++i) attempt(kFail);
    ASSERT_EQ(breaker_->state(), CircuitState::Open);
  }

  ManualClock clock_;
  std::unique_ptr<CircuitBreaker> breaker_;
  std::vector<std::pair<CircuitState, CircuitState>> transitions_;
};

TEST(CircuitTransitionTableTest, EveryStateAndEvent) {
  using S = CircuitState;
  using E = CircuitEvent;
  struct Row {
    S from;
    E event;
    std::optional<S> to;
  };
  const Row rows[] = {
      {S::Closed, E::Trip, S::Open},
      {S::Closed, E::CooldownElapsed, std::nullopt},
      {S::Closed, E::ProbesSucceeded, std::nullopt},
      {S::Closed, E::ProbeFailed, std::nullopt},
      {S::Open, E::Trip, std::nullopt},
      {S::Open, E::CooldownElapsed, S::HalfOpen},
      {S::Open, E::ProbesSucceeded, std::nullopt},
      {S::Open, E::ProbeFailed, std::nullopt},
      {S::HalfOpen, E::Trip, std::nullopt},
      {S::HalfOpen, E::CooldownElapsed, std::nullopt},
      {S::HalfOpen, E::ProbesSucceeded, S::Closed},
      {S::HalfOpen, E::ProbeFailed, S::Open},
      // A peer replica's transitions (shared state, docs/design.md §6).
      {S::Closed, E::PeerOpened, S::Open},
      {S::Open, E::PeerOpened, std::nullopt},
      {S::HalfOpen, E::PeerOpened, S::Open},
      {S::Closed, E::PeerClosed, std::nullopt},
      {S::Open, E::PeerClosed, S::Closed},
      {S::HalfOpen, E::PeerClosed, S::Closed},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(circuitTransition(r.from, r.event), r.to)
        << toString(r.from) << " + " << toString(r.event);
  }
}

TEST(CircuitTransitionTableTest, Labels) {
  EXPECT_EQ(toString(CircuitState::Closed), "closed");
  EXPECT_EQ(toString(CircuitState::Open), "open");
  EXPECT_EQ(toString(CircuitState::HalfOpen), "half_open");
  // The gauge values of sluice_circuit_state.
  EXPECT_EQ(static_cast<int>(CircuitState::Closed), 0);
  EXPECT_EQ(static_cast<int>(CircuitState::Open), 1);
  EXPECT_EQ(static_cast<int>(CircuitState::HalfOpen), 2);
}

TEST_F(CircuitBreakerTest, ConsecutiveFailuresTrip) {
  make(baseConfig());
  attempt(kFail);
  attempt(kFail);
  EXPECT_EQ(breaker_->consecutiveFailures(), 2u);
  attempt(kOk);  // a success resets the streak
  EXPECT_EQ(breaker_->consecutiveFailures(), 0u);
  attempt(kFail);
  attempt(kFail);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  EXPECT_TRUE(transitions_.empty());
  attempt(kFail);
  EXPECT_EQ(breaker_->state(), CircuitState::Open);
  ASSERT_EQ(transitions_.size(), 1u);
  EXPECT_EQ(transitions_[0], std::pair(CircuitState::Closed, CircuitState::Open));

  // Open: fail fast with the cooldown left, nothing admitted.
  auto a = breaker_->admit();
  EXPECT_EQ(a.result, Result::Rejected);
  EXPECT_EQ(a.retry_after, 5000ms);
  clock_.advance(2s);
  a = breaker_->admit();
  EXPECT_EQ(a.result, Result::Rejected);
  EXPECT_EQ(a.retry_after, 3000ms);
  EXPECT_EQ(breaker_->cooldownLeft(), 3000ms);
  clock_.advance(2999ms + 500us);
  EXPECT_EQ(breaker_->admit().retry_after, 1ms);  // rounded up, never 0 while open
  EXPECT_EQ(breaker_->activeRequests(), 0u);
}

TEST_F(CircuitBreakerTest, WhatCountsAsFailure) {
  make(baseConfig());  // failure_on: 5xx, connect_error, reset, timeout
  struct Case {
    AttemptOutcome outcome;
    bool failure;
  };
  const Case cases[] = {
      {AttemptOutcome::fromStatus(500), true},  {AttemptOutcome::fromStatus(503), true},
      {AttemptOutcome::connectError(), true},   {AttemptOutcome::reset(), true},
      {AttemptOutcome::timeout(), true},        {AttemptOutcome::fromStatus(429), false},
      {AttemptOutcome::fromStatus(404), false}, {AttemptOutcome::fromStatus(200), false},
  };
  for (const auto& c : cases) {
    attempt(kFail);  // streak of 1
    attempt(c.outcome);
    EXPECT_EQ(breaker_->consecutiveFailures(), c.failure ? 2u : 0u) << causeLabel(c.outcome);
    attempt(kOk);
  }
  // Cancelled is neither: the streak is kept, not reset or extended.
  attempt(kFail);
  attempt(AttemptOutcome::cancelled());
  EXPECT_EQ(breaker_->consecutiveFailures(), 1u);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
}

TEST_F(CircuitBreakerTest, FailureRateTripsOnlyWithMinRequests) {
  auto c = baseConfig();
  c.consecutive_failures = 0;  // off
  c.failure_rate = {0.5, 10s, 20};
  make(c);

  // 100% failures, but below min_requests: no trip.
  for (int i = 0; i < 5; ++i) attempt(kFail);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  // 5 failures so far; 10 successes and 4 more failures: 9 of 19.
  for (int i = 0; i < 10; ++i) attempt(kOk);
  for (int i = 0; i < 4; ++i) attempt(kFail);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  // The 20th request, a failure: 10 of 20 = 0.5 >= threshold.
  attempt(kFail);
  EXPECT_EQ(breaker_->state(), CircuitState::Open);
}

TEST_F(CircuitBreakerTest, FailureRateBelowThresholdDoesNotTrip) {
  auto c = baseConfig();
  c.consecutive_failures = 0;
  c.failure_rate = {0.5, 10s, 20};
  make(c);
  for (int i = 0; i < 100; ++i) attempt(i % 3 == 0 ? kFail : kOk);  // 34%
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
}

TEST_F(CircuitBreakerTest, FailureRateWindowRolls) {
  auto c = baseConfig();
  c.consecutive_failures = 0;
  c.failure_rate = {0.5, 10s, 20};
  make(c);
  for (int i = 0; i < 15; ++i) attempt(kFail);  // 15 of 15, below min_requests
  clock_.advance(11s);                          // all of them age out
  for (int i = 0; i < 10; ++i) attempt(kOk);
  for (int i = 0; i < 9; ++i) attempt(kFail);
  // Without rolling this would be 24 of 34; within the window it is 9 of 19.
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  attempt(kOk);  // 9 of 20 = 0.45
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  attempt(kFail);  // 10 of 21 = 0.476
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  attempt(kFail);  // 11 of 22 = 0.5
  EXPECT_EQ(breaker_->state(), CircuitState::Open);
}

TEST_F(CircuitBreakerTest, CooldownDoublesOnReTripUpToTheCapAndResetsAfterRecovery) {
  make(baseConfig());  // cooldown 5s, max 60s
  trip();
  const std::vector<int64_t> expected_cooldowns_ms = {10'000, 20'000, 40'000, 60'000, 60'000};
  milliseconds open_for = 5s;
  for (int64_t want : expected_cooldowns_ms) {
    clock_.advance(open_for - 1ms);
    EXPECT_EQ(breaker_->state(), CircuitState::Open);
    clock_.advance(1ms);
    EXPECT_EQ(breaker_->state(), CircuitState::HalfOpen);
    const auto probe = breaker_->admit();
    ASSERT_EQ(probe.result, Result::Admitted);
    EXPECT_TRUE(probe.probe);
    breaker_->onResult(probe, kFail);  // still broken: re-trip
    EXPECT_EQ(breaker_->state(), CircuitState::Open);
    EXPECT_EQ(breaker_->currentCooldown().count(), want);
    EXPECT_EQ(breaker_->admit().retry_after.count(), want);
    open_for = milliseconds(want);
  }
  // Recovery: a successful probe closes it and the cooldown starts over.
  clock_.advance(open_for);
  const auto probe = breaker_->admit();
  ASSERT_TRUE(probe.probe);
  breaker_->onResult(probe, kOk);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  EXPECT_EQ(breaker_->currentCooldown(), 5s);
  trip();
  EXPECT_EQ(breaker_->cooldownLeft(), 5s);

  // Every transition was reported, in order, and each one is in the table.
  ASSERT_FALSE(transitions_.empty());
  EXPECT_EQ(transitions_.front().first, CircuitState::Closed);
  for (size_t i = 1; i < transitions_.size(); ++i) {
    EXPECT_EQ(transitions_[i].first, transitions_[i - 1].second) << i;
  }
  EXPECT_EQ(transitions_.size(), 1 + 2 * expected_cooldowns_ms.size() + 2 + 1);
}

TEST_F(CircuitBreakerTest, HalfOpenAdmitsExactlyTheProbes) {
  auto c = baseConfig();
  c.half_open_probes = 2;
  make(c);
  trip();
  clock_.advance(5s);

  const auto p1 = breaker_->admit();
  const auto p2 = breaker_->admit();
  ASSERT_TRUE(p1.admitted() && p1.probe);
  ASSERT_TRUE(p2.admitted() && p2.probe);
  const auto p3 = breaker_->admit();
  EXPECT_EQ(p3.result, Result::Rejected);
  EXPECT_EQ(p3.retry_after, kHalfOpenRetryAfter);

  // A cancelled probe told us nothing: its slot goes to another probe.
  breaker_->onResult(p1, AttemptOutcome::cancelled());
  EXPECT_EQ(breaker_->state(), CircuitState::HalfOpen);
  const auto p4 = breaker_->admit();
  ASSERT_TRUE(p4.admitted() && p4.probe);
  EXPECT_EQ(breaker_->admit().result, Result::Rejected);

  // Closed only once every probe succeeded.
  breaker_->onResult(p2, kOk);
  EXPECT_EQ(breaker_->state(), CircuitState::HalfOpen);
  breaker_->onResult(p4, kOk);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  EXPECT_EQ(breaker_->activeRequests(), 0u);
}

TEST_F(CircuitBreakerTest, OneFailedProbeReopens) {
  auto c = baseConfig();
  c.half_open_probes = 2;
  make(c);
  trip();
  clock_.advance(5s);
  const auto p1 = breaker_->admit();
  const auto p2 = breaker_->admit();
  breaker_->onResult(p1, kOk);
  breaker_->onResult(p2, AttemptOutcome::connectError());
  EXPECT_EQ(breaker_->state(), CircuitState::Open);
  EXPECT_EQ(breaker_->currentCooldown(), 10s);
}

// A streamed probe is judged by its response head: the circuit closes while
// the probe's stream is still running, and its end only frees the slot.
TEST_F(CircuitBreakerTest, ProbeJudgedByItsHeadClosesBeforeTheStreamEnds) {
  make(baseConfig());
  trip();
  clock_.advance(5s);
  auto probe = breaker_->admit();
  ASSERT_TRUE(probe.probe);
  EXPECT_TRUE(breaker_->judgeProbe(probe, AttemptOutcome::fromStatus(200)));
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  EXPECT_EQ(breaker_->admit().result, Result::Admitted) << "others get through at once";
  EXPECT_EQ(breaker_->activeRequests(), 2u);           // the probe still holds its slot
  probe.probe = false;                                 // as CircuitBreakerFilter does once judged
  breaker_->onResult(probe, AttemptOutcome::reset());  // the stream broke later: stale
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  EXPECT_EQ(breaker_->consecutiveFailures(), 0u);
  EXPECT_EQ(breaker_->activeRequests(), 1u);
}

TEST_F(CircuitBreakerTest, ProbeHeadInFailureOnReopens) {
  make(baseConfig());
  trip();
  clock_.advance(5s);
  const auto probe = breaker_->admit();
  EXPECT_TRUE(breaker_->judgeProbe(probe, AttemptOutcome::fromStatus(503)));
  EXPECT_EQ(breaker_->state(), CircuitState::Open);
  // Not a probe (or not half-open any more): nothing to judge.
  EXPECT_FALSE(breaker_->judgeProbe(probe, AttemptOutcome::fromStatus(200)));
  EXPECT_FALSE(breaker_->judgeProbe(CircuitAdmission{}, AttemptOutcome::fromStatus(200)));
}

TEST_F(CircuitBreakerTest, StaleResultsDoNotCount) {
  make(baseConfig());
  const auto slow = breaker_->admit();  // admitted while closed, finishes much later
  trip();
  clock_.advance(5s);
  const auto probe = breaker_->admit();
  ASSERT_TRUE(probe.probe);
  // The slow attempt's failure arrives while half-open: not a probe, ignored.
  breaker_->onResult(slow, kFail);
  EXPECT_EQ(breaker_->state(), CircuitState::HalfOpen);
  breaker_->onResult(probe, kOk);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
  EXPECT_EQ(breaker_->activeRequests(), 0u);
  // Reporting a rejection is harmless.
  breaker_->onResult(CircuitAdmission{}, kFail);
  EXPECT_EQ(breaker_->consecutiveFailures(), 0u);
}

TEST_F(CircuitBreakerTest, MaxRequestsBoundsAttemptsInFlight) {
  auto c = baseConfig();
  c.max_requests = 2;
  make(c);
  const auto a1 = breaker_->admit();
  const auto a2 = breaker_->admit();
  ASSERT_TRUE(a1.admitted() && a2.admitted());
  EXPECT_EQ(breaker_->activeRequests(), 2u);
  EXPECT_EQ(breaker_->admit().result, Result::Overloaded);
  EXPECT_EQ(breaker_->overloadedCount(), 1u);
  breaker_->onResult(a1, kOk);
  const auto a3 = breaker_->admit();
  EXPECT_TRUE(a3.admitted());
  breaker_->onResult(a2, kOk);
  breaker_->onResult(a3, AttemptOutcome::cancelled());
  EXPECT_EQ(breaker_->activeRequests(), 0u);
  EXPECT_EQ(breaker_->state(), CircuitState::Closed);
}

TEST_F(CircuitBreakerTest, OpenRejectsBeforeOverload) {
  auto c = baseConfig();
  c.max_requests = 1;
  make(c);
  trip();
  EXPECT_EQ(breaker_->admit().result, Result::Rejected);
  EXPECT_EQ(breaker_->overloadedCount(), 0u);
}

TEST_F(CircuitBreakerTest, MaxPendingBoundsWaitingRequests) {
  auto c = baseConfig();
  c.max_pending = 2;
  make(c);
  EXPECT_TRUE(breaker_->tryEnterPending());
  EXPECT_TRUE(breaker_->tryEnterPending());
  EXPECT_FALSE(breaker_->tryEnterPending());
  EXPECT_EQ(breaker_->pendingRequests(), 2u);
  EXPECT_EQ(breaker_->overloadedCount(), 1u);
  breaker_->leavePending();
  EXPECT_TRUE(breaker_->tryEnterPending());
  breaker_->leavePending();
  breaker_->leavePending();
  breaker_->leavePending();  // an extra leave does not underflow
  EXPECT_EQ(breaker_->pendingRequests(), 0u);
}

// The throttle queue and the wait for an upstream connection hold their
// max_pending slot through a PendingSlot: one slot per holder, freed on
// release() or when the holder goes away.
TEST_F(CircuitBreakerTest, PendingSlotHoldsOneSlotUntilReleasedOrDestroyed) {
  auto c = baseConfig();
  c.max_pending = 2;
  make(c);
  PendingSlot queued;
  EXPECT_TRUE(queued.acquire(*breaker_));
  EXPECT_TRUE(queued.acquire(*breaker_));  // already held: still one slot
  EXPECT_TRUE(queued.held());
  EXPECT_EQ(breaker_->pendingRequests(), 1u);
  {
    PendingSlot connecting;
    EXPECT_TRUE(connecting.acquire(*breaker_));
    PendingSlot one_too_many;
    EXPECT_FALSE(one_too_many.acquire(*breaker_));  // overloaded
    EXPECT_FALSE(one_too_many.held());
    EXPECT_EQ(breaker_->pendingRequests(), 2u);
    EXPECT_EQ(breaker_->overloadedCount(), 1u);
  }  // `connecting` goes away: its slot is free again
  EXPECT_EQ(breaker_->pendingRequests(), 1u);
  queued.release();
  queued.release();  // idempotent
  EXPECT_FALSE(queued.held());
  EXPECT_EQ(breaker_->pendingRequests(), 0u);
}

TEST_F(CircuitBreakerTest, UpdateConfigKeepsStateAndClampsCooldown) {
  make(baseConfig());
  trip();
  clock_.advance(5s);
  breaker_->onResult(breaker_->admit(), kFail);  // cooldown 10s
  auto c = baseConfig();
  c.cooldown = 1s;
  c.max_cooldown = 4s;
  breaker_->updateConfig(c);
  EXPECT_EQ(breaker_->state(), CircuitState::Open);
  EXPECT_EQ(breaker_->currentCooldown(), 4s);
}

TEST_F(CircuitBreakerTest, ThreadSafetySmoke) {
  auto c = baseConfig();
  c.consecutive_failures = 5;
  c.failure_rate = {0.5, 1s, 50};
  c.cooldown = 10ms;
  c.max_cooldown = 80ms;
  c.half_open_probes = 2;
  c.max_requests = 3;
  std::mutex seen_mutex;
  std::vector<std::pair<CircuitState, CircuitState>> seen;
  CircuitBreaker breaker(c, clock_, [&](CircuitState from, CircuitState to) {
    std::lock_guard lock(seen_mutex);
    seen.emplace_back(from, to);
  });

  constexpr int kIterations = 20000;
  std::atomic<int> admitted{0}, rejected{0}, overloaded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        if (t == 0 && i % 16 == 0) clock_.advance(1ms);  // time moves, no sleeps
        const auto a = breaker.admit();
        switch (a.result) {
          case Result::Admitted:
            ++admitted;
            break;
          case Result::Rejected:
          case Result::Deferred:  // never without a waiter
            ++rejected;
            break;
          case Result::Overloaded:
            ++overloaded;
            break;
        }
        // Failure-heavy phases alternate with healthy ones.
        const bool bad_phase = (i / 2000) % 2 == 0;
        const AttemptOutcome outcome = (bad_phase && (i + t) % 3 != 0)
                                           ? kFail
                                           : (i % 7 == 0 ? AttemptOutcome::cancelled() : kOk);
        breaker.onResult(a, outcome);
        if (i % 5 == 0 && breaker.tryEnterPending()) breaker.leavePending();
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_EQ(admitted + rejected + overloaded, 4 * kIterations);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(breaker.activeRequests(), 0u);
  EXPECT_EQ(breaker.pendingRequests(), 0u);
  // The breaker did move, and the listener saw a consistent chain of legal transitions.
  ASSERT_GT(seen.size(), 2u);
  EXPECT_EQ(seen.front().first, CircuitState::Closed);
  for (size_t i = 0; i < seen.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(seen[i].first, seen[i - 1].second) << i;
    }
    bool legal = false;
    for (auto e : {CircuitEvent::Trip, CircuitEvent::CooldownElapsed, CircuitEvent::ProbesSucceeded,
                   CircuitEvent::ProbeFailed, CircuitEvent::PeerOpened, CircuitEvent::PeerClosed}) {
      legal = legal || circuitTransition(seen[i].first, e) == seen[i].second;
    }
    EXPECT_TRUE(legal) << i;
  }
  EXPECT_EQ(breaker.state(), seen.back().second);
}

// The reporter (where the proxy logs) runs after the breaker's lock is
// released: it may call back into the breaker, which a call under the lock
// could not (the same thread would wait on the lock it holds).
TEST_F(CircuitBreakerTest, ReporterRunsOutsideTheLockAfterTheListener) {
  auto c = baseConfig();
  c.consecutive_failures = 1;
  std::vector<std::string> calls;
  std::unique_ptr<CircuitBreaker> breaker;
  breaker = std::make_unique<CircuitBreaker>(
      c, clock_,
      [&](CircuitState, CircuitState to) {
        calls.push_back("listener " + std::string(toString(to)));
      },
      [&](CircuitState from, CircuitState to) {
        // Re-entering the breaker: only possible with its lock released.
        calls.push_back("report " + std::string(toString(from)) + "->" + std::string(toString(to)) +
                        " state=" + std::string(toString(breaker->state())) +
                        " failures=" + std::to_string(breaker->consecutiveFailures()));
      });
  const auto a = breaker->admit();
  ASSERT_TRUE(a.admitted());
  breaker->onResult(a, kFail);
  clock_.advance(c.cooldown);
  EXPECT_EQ(breaker->state(), CircuitState::HalfOpen);
  EXPECT_EQ(calls, (std::vector<std::string>{
                       "listener open",
                       "report closed->open state=open failures=0",
                       "listener half_open",
                       "report open->half_open state=half_open failures=0",
                   }));
}

// --- shared with the fleet (GlobalCircuit, docs/design.md §6) ---------------------------

// Records what the breaker publishes; answers probe claims as the test says.
class FakeGlobalCircuit final : public GlobalCircuit {
 public:
  void publish(CircuitState to, milliseconds open_for) override {
    published.emplace_back(to, open_for);
  }
  std::optional<bool> claimProbe(std::function<void(bool)> done) override {
    ++claims;
    if (answer_at_once) return *answer_at_once;
    pending = std::move(done);
    return std::nullopt;
  }
  std::vector<std::pair<CircuitState, milliseconds>> published;
  void releaseProbe() override { ++released; }
  std::optional<bool> answer_at_once;
  std::function<void(bool)> pending;
  int claims = 0;
  int released = 0;
};

class SharedCircuitTest : public CircuitBreakerTest {
 protected:
  void SetUp() override {
    auto c = baseConfig();
    shared_ = std::make_shared<CircuitBreaker>(
        c, clock_,
        [this](CircuitState from, CircuitState to) { transitions_.emplace_back(from, to); });
    global_ = std::make_shared<FakeGlobalCircuit>();
    shared_->setGlobal(global_);
  }
  void fail() {
    const auto a = shared_->admit();
    ASSERT_EQ(a.result, Result::Admitted);
    shared_->onResult(a, kFail);
  }
  std::shared_ptr<CircuitBreaker> shared_;
  std::shared_ptr<FakeGlobalCircuit> global_;
};

TEST_F(SharedCircuitTest, OwnTripsAndVerdictsArePublishedPeersAreApplied) {
  for (int i = 0; i < 3; ++i) fail();
  ASSERT_EQ(shared_->state(), CircuitState::Open);
  ASSERT_EQ(global_->published.size(), 1u);
  EXPECT_EQ(global_->published[0], std::make_pair(CircuitState::Open, milliseconds(5000)));

  // A peer's recovery closes it without a probe here, and is not published again.
  shared_->applyPeer(CircuitState::Closed, milliseconds(0));
  EXPECT_EQ(shared_->state(), CircuitState::Closed);
  EXPECT_EQ(global_->published.size(), 1u);

  // A peer's trip opens it for the peer's open period (not this breaker's cooldown).
  shared_->applyPeer(CircuitState::Open, milliseconds(12000));
  EXPECT_EQ(shared_->state(), CircuitState::Open);
  EXPECT_EQ(shared_->cooldownLeft(), milliseconds(12000));
  EXPECT_EQ(shared_->admit().result, Result::Rejected);
  EXPECT_EQ(global_->published.size(), 1u);
  EXPECT_EQ(transitions_.back(), std::make_pair(CircuitState::Closed, CircuitState::Open));
}

TEST_F(SharedCircuitTest, HalfOpenProbesOnlyWithTheFleetsPermit) {
  for (int i = 0; i < 3; ++i) fail();
  clock_.advance(5s);
  // The first caller asks the fleet and is turned away while the answer is pending.
  EXPECT_EQ(shared_->admit().result, Result::Rejected);
  EXPECT_EQ(shared_->state(), CircuitState::HalfOpen);
  EXPECT_EQ(global_->claims, 1);
  EXPECT_EQ(shared_->admit().result, Result::Rejected);
  EXPECT_EQ(global_->claims, 1) << "one question at a time";
  // A peer holds the permit: still no probe here, and no new claim for a while.
  global_->pending(false);
  EXPECT_EQ(shared_->admit().result, Result::Rejected);
  EXPECT_EQ(global_->claims, 1);
  // The peer's probe succeeded: closed here too.
  shared_->applyPeer(CircuitState::Closed, milliseconds(0));
  EXPECT_EQ(shared_->admit().result, Result::Admitted);
}

TEST_F(SharedCircuitTest, TheWinnerProbesAndPublishesTheVerdict) {
  for (int i = 0; i < 3; ++i) fail();
  clock_.advance(5s);
  EXPECT_EQ(shared_->admit().result, Result::Rejected);
  global_->pending(true);
  const auto probe = shared_->admit();
  ASSERT_EQ(probe.result, Result::Admitted);
  EXPECT_TRUE(probe.probe);
  shared_->onResult(probe, kFail);
  EXPECT_EQ(shared_->state(), CircuitState::Open);
  ASSERT_EQ(global_->published.size(), 2u);
  EXPECT_EQ(global_->published[1], std::make_pair(CircuitState::Open, milliseconds(10000)));
}

TEST_F(SharedCircuitTest, StoreUnreachableProbesLocally) {
  global_->answer_at_once = true;  // Redis down: the claim answers at once
  for (int i = 0; i < 3; ++i) fail();
  clock_.advance(5s);
  const auto probe = shared_->admit();
  ASSERT_EQ(probe.result, Result::Admitted);
  EXPECT_TRUE(probe.probe);
}

TEST_F(SharedCircuitTest, TheRequestThatAskedForThePermitIsTheProbe) {
  for (int i = 0; i < 3; ++i) fail();
  clock_.advance(5s);
  std::optional<CircuitAdmission> answer;
  const auto waiter = [&](const CircuitAdmission& a) { answer = a; };
  EXPECT_EQ(shared_->admit(waiter).result, Result::Deferred);
  EXPECT_EQ(shared_->admit(waiter).result, Result::Rejected) << "one asker at a time";
  global_->pending(true);
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->result, Result::Admitted) << "the asker must be the probe";
  EXPECT_TRUE(answer->probe);
  shared_->onResult(*answer, kOk);
  EXPECT_EQ(shared_->state(), CircuitState::Closed);
  EXPECT_EQ(global_->released, 0);
}

TEST_F(SharedCircuitTest, AProbeCancelledWithThePermitGivesItBackAtOnce) {
  for (int i = 0; i < 3; ++i) fail();
  clock_.advance(5s);
  std::optional<CircuitAdmission> answer;
  ASSERT_EQ(shared_->admit([&](const CircuitAdmission& a) { answer = a; }).result,
            Result::Deferred);
  global_->pending(true);
  ASSERT_TRUE(answer && answer->admitted());
  shared_->onResult(*answer, AttemptOutcome::cancelled());  // the client went away
  EXPECT_EQ(global_->released, 1);
  // A lost permit answers the asker at once: rejected, nothing to give back.
  answer.reset();
  ASSERT_EQ(shared_->admit([&](const CircuitAdmission& a) { answer = a; }).result,
            Result::Deferred);
  global_->pending(false);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->result, Result::Rejected);
  EXPECT_EQ(global_->released, 1);
}

TEST_F(SharedCircuitTest, APeersOpenPeriodIsCappedByTheLocalMaxCooldown) {
  // A forged or broken peer: "open for 35 years".
  shared_->applyPeer(CircuitState::Open, milliseconds(int64_t{1} << 40));
  EXPECT_EQ(shared_->state(), CircuitState::Open);
  EXPECT_EQ(shared_->cooldownLeft(), baseConfig().max_cooldown);
  clock_.advance(baseConfig().max_cooldown);
  EXPECT_EQ(shared_->state(), CircuitState::HalfOpen);
}

}  // namespace
}  // namespace sluice
