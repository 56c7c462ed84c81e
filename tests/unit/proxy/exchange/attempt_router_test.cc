// Tests for the AttemptRouter (proxy/exchange/attempt_router.h): where a
// request's attempts go, as a table of (target, failed endpoints, gates,
// may_replay) -> (upstream, endpoint, spill-overs). A real Runtime built from
// YAML; circuits opened the way a peer replica opens them (applyPeer).

#include "proxy/exchange/attempt_router.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/metrics.h"
#include "config/loader.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// Upstream `primary` has two endpoints (a, b); `backup` one (c); the route
// falls back from primary to backup on circuit_open, 503 and reset.
constexpr const char* kConfig = R"(
listen: 127.0.0.1:0
upstreams:
  - name: primary
    endpoints:
      - {name: a, url: "http://127.0.0.1:1"}
      - {name: b, url: "http://127.0.0.1:2"}
  - name: backup
    url: "http://127.0.0.1:3"
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: primary
    retry: {attempts: 3, on: [503, reset], idempotent: always}
    fallback: [{upstream: backup, model: small}]
    fallback_on: [circuit_open, 503, reset]
)";

class AttemptRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::loadConfigString(kConfig, "attempt_router_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = Runtime::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
    route_ = runtime_->match("POST", "/v1/chat/completions");
    ASSERT_NE(route_, nullptr);
  }

  const UpstreamRuntime& primary() const { return *route_->chain[0]; }
  const UpstreamRuntime& backup() const { return *route_->chain[1]; }
  const EndpointRuntime& a() const { return primary().endpoints[0]; }
  const EndpointRuntime& b() const { return primary().endpoints[1]; }
  static void open(const EndpointRuntime& e) { e.breaker->applyPeer(CircuitState::Open, 10s); }

  AttemptRouter::Placement place(AttemptRouter& router, const AttemptTarget& target,
                                 const EndpointRuntime* last = nullptr, bool may_replay = true) {
    return router.place(target, last, may_replay, QuotaAsk{&headers_, ""}, uniformFrom(engine_));
  }

  static AttemptEnd ended(AttemptOutcome outcome) {
    AttemptEnd end;
    end.outcome = outcome;
    return end;
  }

  ManualClock clock_;
  Metrics metrics_;
  std::shared_ptr<const Runtime> runtime_;
  const RouteRuntime* route_ = nullptr;
  HeaderMap headers_;
  std::mt19937_64 engine_{42};
};

TEST_F(AttemptRouterTest, TheFirstAttemptGoesToTheRoutesOwnUpstream) {
  AttemptRouter router(route_);
  const auto p = place(router, AttemptTarget::sameUpstream());
  EXPECT_EQ(p.upstream, &primary());
  EXPECT_TRUE(p.endpoint == &a() || p.endpoint == &b());
  EXPECT_EQ(router.chainIndex(), 0u);
  EXPECT_EQ(router.fallbacks(), 0u);
  EXPECT_EQ(router.fallbackModel(), "");
}

TEST_F(AttemptRouterTest, ARetryOnTheSameUpstreamAvoidsTheEndpointThatFailed) {
  AttemptRouter router(route_);
  for (const EndpointRuntime* failed : {&a(), &b()}) {
    const auto p = place(router, AttemptTarget::sameUpstream(), failed);
    EXPECT_EQ(p.upstream, &primary());
    EXPECT_NE(p.endpoint, failed);
  }
}

TEST_F(AttemptRouterTest, NextFallbackMovesOneStepDownTheChainAndNamesItsModel) {
  AttemptRouter router(route_);
  place(router, AttemptTarget::sameUpstream());
  const auto p = place(router, AttemptTarget::nextFallback(), &a());
  EXPECT_EQ(p.upstream, &backup());
  EXPECT_EQ(p.endpoint, &backup().endpoints[0]);
  EXPECT_EQ(router.chainIndex(), 1u);
  EXPECT_EQ(router.fallbackModel(), "small");
  EXPECT_EQ(router.fallbacks(), 0u);  // the filters' spill-over: counted by whoever asked for it
}

TEST_F(AttemptRouterTest, AnUpstreamWhoseCircuitsAreAllOpenIsSkippedWhenTheRouteFallsBackOnIt) {
  open(a());
  open(b());
  AttemptRouter router(route_);
  const auto p = place(router, AttemptTarget::sameUpstream());
  EXPECT_EQ(p.upstream, &backup());
  EXPECT_EQ(router.fallbacks(), 1u);
  EXPECT_EQ(router.chainIndex(), 1u);
}

TEST_F(AttemptRouterTest, WithoutReplayTheAttemptGoesToTheOpenCircuitAndItsFilterAnswers) {
  open(a());
  open(b());
  AttemptRouter router(route_);
  const auto p = place(router, AttemptTarget::sameUpstream(), nullptr, /*may_replay=*/false);
  EXPECT_EQ(p.upstream, &primary());
  EXPECT_TRUE(p.endpoint == &a() || p.endpoint == &b());
  EXPECT_EQ(router.fallbacks(), 0u);
}

TEST_F(AttemptRouterTest, OneOpenCircuitIsAvoidedWithinTheUpstream) {
  open(a());
  AttemptRouter router(route_);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(place(router, AttemptTarget::sameUpstream()).endpoint, &b());
  }
  EXPECT_EQ(router.fallbacks(), 0u);
}

TEST_F(AttemptRouterTest, FallsBackOnListedRefusalsOnlyWhileAnUpstreamIsLeftAndReplayIsAllowed) {
  AttemptRouter router(route_);
  EXPECT_TRUE(router.fallsBackOn(CancelReason::CircuitOpen, true));
  EXPECT_FALSE(router.fallsBackOn(CancelReason::CircuitOpen, false));
  EXPECT_FALSE(router.fallsBackOn(CancelReason::RateLimited, true));  // not in fallback_on
  place(router, AttemptTarget::nextFallback());
  EXPECT_FALSE(router.fallsBackOn(CancelReason::CircuitOpen, true));  // the chain's end
}

TEST_F(AttemptRouterTest, FallsBackOnListedOutcomesWhileAttemptsAreLeft) {
  AttemptRouter router(route_);
  struct Row {
    AttemptOutcome outcome;
    uint32_t attempts;
    bool may_replay;
    bool expected;
  };
  const Row rows[] = {
      {AttemptOutcome::fromStatus(503), 1, true, true},
      {AttemptOutcome::reset(), 2, true, true},
      {AttemptOutcome::fromStatus(503), 3, true, false},  // attempts spent
      {AttemptOutcome::fromStatus(503), 1, false, false},
      {AttemptOutcome::fromStatus(429), 1, true, false},  // not in fallback_on
      {AttemptOutcome::timeout(), 1, true, false},
      {AttemptOutcome::cancelled(), 1, true, false},  // sluice tore it down
  };
  for (const Row& row : rows) {
    EXPECT_EQ(router.fallsBackOn(row.outcome, row.attempts, row.may_replay), row.expected)
        << causeLabel(row.outcome) << " after " << row.attempts;
  }
}

TEST_F(AttemptRouterTest, AfterFailureRetriesTheOtherEndpointThenSpillsOver) {
  AttemptRouter router(route_);
  const AttemptVerdict retry = AttemptVerdict::retry(0ms, "503", AttemptTarget::sameUpstream());
  // a failed, b untried: the filters' retry stands (on b).
  AttemptVerdict v = router.afterFailure(ended(AttemptOutcome::fromStatus(503)), retry, &a(),
                                         /*may_retry=*/true, 1, true);
  ASSERT_TRUE(v.isRetry());
  EXPECT_EQ(v.asRetry()->target.kind, AttemptTarget::Kind::SameUpstream);
  // b failed too: every endpoint failed for this request, the next upstream takes it.
  v = router.afterFailure(ended(AttemptOutcome::fromStatus(503)), retry, &b(), true, 2, true);
  ASSERT_TRUE(v.isRetry());
  EXPECT_EQ(v.asRetry()->target.kind, AttemptTarget::Kind::NextFallback);
  EXPECT_EQ(v.asRetry()->delay, 0ms);
}

TEST_F(AttemptRouterTest, AfterFailureSpillsOverWhenTheFiltersWouldNotRetry) {
  AttemptRouter router(route_);
  const AttemptVerdict fail = AttemptVerdict::fail(makeProblem(problems::kUpstreamReset, "x"));
  const AttemptVerdict v =
      router.afterFailure(ended(AttemptOutcome::reset()), fail, &a(), true, 1, true);
  ASSERT_TRUE(v.isRetry());
  EXPECT_EQ(v.asRetry()->target.kind, AttemptTarget::Kind::NextFallback);
}

TEST_F(AttemptRouterTest, AfterFailureLeavesTheVerdictWhenNoRetryCanBeActedOn) {
  AttemptRouter router(route_);
  const AttemptVerdict fail = AttemptVerdict::fail(makeProblem(problems::kUpstreamReset, "x"));
  for (const bool may_retry : {false, true}) {
    const bool may_replay = !may_retry;  // one gate closed in each row
    const AttemptVerdict v =
        router.afterFailure(ended(AttemptOutcome::reset()), fail, &a(), may_retry, 1, may_replay);
    EXPECT_NE(v.asFail(), nullptr);
  }
  EXPECT_EQ(router.fallbacks(), 0u);
}

TEST_F(AttemptRouterTest, CountedFallbacksAreTheRoutesMetric) {
  AttemptRouter router(route_);
  router.countFallback("circuit_open");
  EXPECT_EQ(router.fallbacks(), 1u);
  EXPECT_EQ(route_->metrics->fallbacks("primary", "backup", "circuit_open").Value(), 1);
}

// --- an MCP session's endpoint (preferred) ------------------------------------------

TEST_F(AttemptRouterTest, ThePreferredEndpointTakesEveryAttemptWhileItCan) {
  AttemptRouter router(route_);
  for (int i = 0; i < 20; ++i) {
    const auto p = router.place(AttemptTarget::sameUpstream(), nullptr, true,
                                QuotaAsk{&headers_, ""}, uniformFrom(engine_), &b());
    EXPECT_EQ(p.upstream, &primary());
    EXPECT_EQ(p.endpoint, &b());
  }
}

TEST_F(AttemptRouterTest, APreferredEndpointThatCannotTakeItIsChosenAsUsual) {
  struct Row {
    const char* what;
    bool open_b;
    bool b_failed;
    bool elsewhere;  // the preferred endpoint is not of this upstream (gone after a reload)
  };
  for (const Row& row :
       {Row{"circuit open", true, false, false}, Row{"failed for this request", false, true, false},
        Row{"of another upstream", false, false, true}}) {
    SetUp();  // a fresh runtime: closed circuits
    if (row.open_b) open(b());
    AttemptRouter router(route_);
    const EndpointRuntime* preferred = row.elsewhere ? &backup().endpoints[0] : &b();
    const EndpointRuntime* last = row.b_failed ? &b() : nullptr;
    int on_a = 0;
    for (int i = 0; i < 20; ++i) {
      const auto p = router.place(AttemptTarget::sameUpstream(), last, true,
                                  QuotaAsk{&headers_, ""}, uniformFrom(engine_), preferred);
      EXPECT_EQ(p.upstream, &primary()) << row.what;
      on_a += p.endpoint == &a() ? 1 : 0;
    }
    if (row.elsewhere) {
      EXPECT_GT(on_a, 0) << row.what;  // the usual spread over a and b
      EXPECT_LT(on_a, 20) << row.what;
    } else {
      EXPECT_EQ(on_a, 20) << row.what;
    }
  }
}

}  // namespace
}  // namespace sluice
