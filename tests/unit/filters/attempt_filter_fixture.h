#pragma once

// The fixture the per-attempt filter tests share: a real ConfigSnapshot built from
// one YAML (an upstream with a circuit breaker and a rate limit, a route with
// retries, a price), fake callbacks (fake_filter_callbacks.h) and a
// ManualClock. Each filter is driven the way the Exchange drives it
// (filters/filter.h).

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "config/loader.h"
#include "proxy/exchange/config_snapshot.h"
#include "tests/unit/filters/fake_filter_callbacks.h"

namespace sluice::test {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

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
    auto r = config::loadConfigString(kConfig, "attempt_filter_fixture.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
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
  ConfigSnapshotPtr runtime_;
  FakeFilterCallbacks callbacks_{clock_};
  std::vector<StreamFilterPtr> filters_;
};

}  // namespace sluice::test
