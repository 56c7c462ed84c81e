// Tests for the AttemptRouter (proxy/exchange/attempt_router.h): where a
// request's attempts go, as a table of (target, failed endpoints, gates,
// may_replay) -> (upstream, endpoint, spill-overs). A real ConfigSnapshot built from
// YAML; circuits opened the way a peer replica opens them (applyPeer).

#include "proxy/exchange/attempt_router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>

#include "common/metrics.h"
#include "config/loader.h"
#include "filters/throttle/quota_tracker.h"

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
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
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
    return router.place(target, last, may_replay, QuotaAsk{nullptr, ""}, uniformFrom(engine_));
  }

  static AttemptEnd ended(AttemptOutcome outcome) {
    AttemptEnd end;
    end.outcome = outcome;
    return end;
  }

  ManualClock clock_;
  Metrics metrics_;
  std::shared_ptr<const ConfigSnapshot> runtime_;
  const RouteRuntime* route_ = nullptr;
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
    const auto p = router.place(AttemptTarget::sameUpstream(), nullptr, true, QuotaAsk{nullptr, ""},
                                uniformFrom(engine_), &b());
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
      const auto p = router.place(AttemptTarget::sameUpstream(), last, true, QuotaAsk{nullptr, ""},
                                  uniformFrom(engine_), preferred);
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

// --- the quota key: the one the throttle filter computes ----------------------------

// Upstream `metered` has two endpoints (a, b) and a quota per API key; its
// `headers:` replace the client's key with the provider's.
constexpr const char* kQuotaConfig = R"(
listen: 127.0.0.1:0
upstreams:
  - name: metered
    headers: {authorization: "Bearer provider-key"}
    rate_limit: {key: header:authorization, reserve: 0}
    endpoints:
      - {name: a, url: "http://127.0.0.1:1"}
      - {name: b, url: "http://127.0.0.1:2"}
  - name: open
    rate_limit: {key: header:authorization, reserve: 0}
    endpoints:
      - {name: c, url: "http://127.0.0.1:3"}
      - {name: d, url: "http://127.0.0.1:4"}
routes:
  - name: metered
    match: {path_prefix: /v1}
    upstream: metered
  - name: open
    match: {path_prefix: /open}
    upstream: open
)";

class AttemptRouterQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::loadConfigString(kQuotaConfig, "attempt_router_quota_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
    client_.method = "POST";
    client_.path = "/v1/chat/completions";
  }

  const RouteRuntime& route(std::string_view path) const { return *runtime_->match("POST", path); }
  /** `key`'s quota at `e` is spent for a minute (as a response reporting 0 left says). */
  void spend(const EndpointRuntime& e, const std::string& key) {
    QuotaObservation spent;
    spent.requests = Quota{100, 0, clock_.now() + 60s};
    e.quota->observe(key, spent);
  }
  /** The endpoints 40 placements choose with `key_for`. */
  std::set<std::string> chosen(const RouteRuntime& route, const QuotaAsk& ask) {
    std::set<std::string> names;
    for (int i = 0; i < 40; ++i) {
      AttemptRouter router(&route);
      const auto p =
          router.place(AttemptTarget::sameUpstream(), nullptr, true, ask, uniformFrom(engine_));
      names.insert(p.endpoint->name());
    }
    return names;
  }

  ManualClock clock_;
  Metrics metrics_;
  std::shared_ptr<const ConfigSnapshot> runtime_;
  RequestHead client_;
  std::mt19937_64 engine_{42};
};

TEST_F(AttemptRouterQuotaTest, TheKeyIsTheRewrittenHeadsAsTheThrottleComputesIt) {
  const RouteRuntime& metered = route("/v1/chat/completions");
  const UpstreamRuntime& up = *metered.upstream;
  const config::RateLimitConfig& rate_limit = *up.config->rate_limit;
  const auto keyOf = [&](std::string_view value) {
    HeaderMap h;
    h.add("authorization", std::string(value));
    return quotaKeyFor(rate_limit, h);
  };
  // Row: the upstream's `headers:` replace the client's key.
  client_.headers.add("authorization", "Bearer client-dummy");
  EXPECT_EQ(quotaKeyAt(client_, up, up.endpoints[0], ClientInfo{}), keyOf("Bearer provider-key"));

  const RouteRuntime& open = route("/open/chat/completions");
  const UpstreamRuntime& plain = *open.upstream;
  // Row: no `headers:` for it: the client's own key goes upstream.
  EXPECT_EQ(quotaKeyAt(client_, plain, plain.endpoints[0], ClientInfo{}),
            keyOf("Bearer client-dummy"));
  // Row: a key the client named in Connection is hop-by-hop: the provider
  // never sees it, the request counts as keyless ("-"), as in the throttle.
  client_.headers.add("connection", "authorization");
  EXPECT_EQ(quotaKeyAt(client_, plain, plain.endpoints[0], ClientInfo{}), "-");
}

TEST_F(AttemptRouterQuotaTest, AnEndpointWhoseQuotaIsSpentForTheKeyIsAvoided) {
  const RouteRuntime& open = route("/open/chat/completions");
  const UpstreamRuntime& up = *open.upstream;
  spend(up.endpoints[0], "k1");  // c is spent for k1
  std::vector<std::string> asked;
  const QuotaAsk k1{[&](const UpstreamRuntime& u, const EndpointRuntime& e) {
                      EXPECT_EQ(&u, &up);
                      asked.push_back(e.name());
                      return std::string("k1");
                    },
                    ""};
  EXPECT_EQ(chosen(open, k1), std::set<std::string>{"d"});
  EXPECT_NE(std::find(asked.begin(), asked.end(), "c"), asked.end()) << "asked per endpoint";
  // Another key has c's quota whole: both are chosen.
  const QuotaAsk k2{[](const UpstreamRuntime&, const EndpointRuntime&) { return "k2"; }, ""};
  EXPECT_EQ(chosen(open, k2), (std::set<std::string>{"c", "d"}));
  // No key function: the quota is not consulted.
  EXPECT_EQ(chosen(open, QuotaAsk{nullptr, ""}), (std::set<std::string>{"c", "d"}));
}

TEST_F(AttemptRouterQuotaTest, TheRouterWeighsTheKeyTheProviderSeesNotTheClients) {
  // The client's key is spent nowhere; the provider's key (from `headers:`)
  // is spent on a: the router avoids a, as the throttle there would wait.
  const RouteRuntime& metered = route("/v1/chat/completions");
  const UpstreamRuntime& up = *metered.upstream;
  client_.headers.add("authorization", "Bearer client-dummy");
  spend(up.endpoints[0], quotaKeyAt(client_, up, up.endpoints[0], ClientInfo{}));
  const QuotaAsk ask{[&](const UpstreamRuntime& u, const EndpointRuntime& e) {
                       return quotaKeyAt(client_, u, e, ClientInfo{});
                     },
                     ""};
  EXPECT_EQ(chosen(metered, ask), std::set<std::string>{"b"});
}

}  // namespace
}  // namespace sluice
