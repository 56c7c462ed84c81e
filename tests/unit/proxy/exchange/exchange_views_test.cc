// Tests for the Exchange's two views (proxy/exchange/exchange_views.h): the
// access log line and the `/exchanges` row, each built from parts lent in an
// ExchangeView — a real ConfigSnapshot built from YAML, no sockets.

#include "proxy/exchange/exchange_views.h"

#include <gtest/gtest.h>

#include <string>

#include "common/metrics.h"
#include "config/loader.h"
#include "tests/unit/proxy/exchange/recording_client.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

constexpr const char* kConfig = R"(
listen: 127.0.0.1:0
upstreams:
  - name: primary
    endpoints:
      - {name: a, url: "http://127.0.0.1:1"}
  - name: backup
    url: "http://127.0.0.1:3"
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: primary
    fallback: [{upstream: backup}]
    fallback_on: [503]
)";

class ExchangeViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::loadConfigString(kConfig, "exchange_views_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
    route_ = runtime_->match("POST", "/v1/chat/completions");
    ASSERT_NE(route_, nullptr);
    request_.method = "POST";
    request_.path = "/v1/chat/completions?key=secret";
    request_.version_major = 1;
    request_.version_minor = 1;
    identity_.request_id = "req-1";
    identity_.trace_id = "0af7651916cd43dd8448eb211c80319c";
  }

  ExchangeView view(const RouteRuntime& route) const {
    return {.id = 7,
            .request = request_,
            .identity = identity_,
            .route = route,
            .record = record_,
            .start = start_};
  }

  const UpstreamRuntime& backup() const { return *route_->chain[1]; }

  ManualClock clock_;
  Metrics metrics_;
  std::shared_ptr<const ConfigSnapshot> runtime_;
  const RouteRuntime* route_ = nullptr;
  RequestHead request_;
  RequestIdentity identity_;
  ExchangeRecord record_;
  const MonotonicTime start_ = MonotonicTime{} + 100s;
};

TEST_F(ExchangeViewsTest, TheAccessRecordOfAnAnsweredRequestComesFromItsParts) {
  ExchangeView v = view(*route_);
  v.upstream = &backup();
  v.endpoint = &backup().endpoints[0];
  v.attempts_sent = 2;
  v.fallbacks = 1;
  v.bytes_in = 1024;
  record_.noteRetry("503");
  record_.noteFirstByte(start_ + 40ms);
  const SystemTime wall_now = SystemTime{} + 5000s;

  const AccessRecord r = accessRecordOf(v, 200, start_ + 250ms, wall_now);

  EXPECT_EQ(r.start, wall_now - 250ms);
  EXPECT_EQ(r.request_id, "req-1");
  EXPECT_EQ(r.trace_id, "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(r.route, "chat");
  EXPECT_EQ(r.upstream, "backup");
  EXPECT_EQ(r.endpoint, backup().endpoints[0].name());
  EXPECT_EQ(r.fallbacks, 1u);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/chat/completions");  // never the query string
  EXPECT_EQ(r.protocol, "HTTP/1.1");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.attempts, 2u);
  EXPECT_DOUBLE_EQ(r.duration_ms, 250.0);
  EXPECT_EQ(r.bytes_in, 1024u);
  ASSERT_EQ(r.retry_causes.size(), 1u);  // the record's own fields
  EXPECT_EQ(r.retry_causes[0], "503");
  ASSERT_TRUE(r.ttfb_ms.has_value());
  EXPECT_DOUBLE_EQ(*r.ttfb_ms, 40.0);
}

TEST_F(ExchangeViewsTest, BeforeAnyAttemptTheRoutesUpstreamAnswersAndTheEndpointIsNull) {
  request_.version_major = 2;
  request_.version_minor = 0;
  const AccessRecord r = accessRecordOf(view(*route_), 503, start_, SystemTime{} + 10s);
  EXPECT_EQ(r.upstream, "primary");
  EXPECT_EQ(r.endpoint, "");
  EXPECT_EQ(r.protocol, "HTTP/2");
  EXPECT_EQ(r.attempts, 0u);

  request_.version_major = 1;
  EXPECT_EQ(accessRecordOf(view(*route_), 503, start_, SystemTime{}).protocol, "HTTP/1.0");
}

TEST_F(ExchangeViewsTest, ARequestNoRouteMatchedNamesNoUpstream) {
  const RouteRuntime& none = runtime_->noRoute();
  const AccessRecord r = accessRecordOf(view(none), 404, start_, SystemTime{} + 10s);
  EXPECT_EQ(r.upstream, "none");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(snapshotOf(view(none), start_).upstream, "none");
}

TEST_F(ExchangeViewsTest, TheSnapshotOfARequestUnderWay) {
  RecordingClient client;
  client.buffered = 4096;
  ExchangeView v = view(*route_);
  v.upstream = route_->chain[0];
  v.endpoint = &route_->chain[0]->endpoints[0];
  v.state = ExchangeState::Running;
  v.deadline = start_ + 30s;
  v.attempts_started = 3;
  v.attempts_sent = 2;
  v.fallbacks = 0;
  v.response_bytes = 512;
  v.client = &client;
  v.upstream_paused = true;

  const ExchangeSnapshot s = snapshotOf(v, start_ + 10s);

  EXPECT_EQ(s.id, 7u);
  EXPECT_EQ(s.request_id, "req-1");
  EXPECT_EQ(s.route, "chat");
  EXPECT_EQ(s.upstream, "primary");
  EXPECT_EQ(s.endpoint, route_->chain[0]->endpoints[0].name());
  EXPECT_EQ(s.method, "POST");
  EXPECT_EQ(s.path, "/v1/chat/completions");
  EXPECT_EQ(s.state, "running");
  EXPECT_EQ(s.cancel_reason, "");
  EXPECT_EQ(s.attempts, 3u);  // started, not sent: the one being prepared counts
  EXPECT_DOUBLE_EQ(s.age_seconds, 10.0);
  EXPECT_DOUBLE_EQ(s.budget_left_seconds, 20.0);
  EXPECT_TRUE(s.client_attached);
  EXPECT_TRUE(s.upstream_paused);
  EXPECT_EQ(s.downstream_buffered_bytes, 4096u);
  EXPECT_EQ(s.response_bytes, 512u);
}

TEST_F(ExchangeViewsTest, TheSnapshotOfACancelledRequestWithoutItsClientOrBudget) {
  record_.noteCancel(CancelReason::ClientDisconnect);
  record_.noteCancel(CancelReason::BudgetExhausted);  // first cause wins
  ExchangeView v = view(*route_);
  v.state = ExchangeState::Cancelling;
  const ExchangeSnapshot s = snapshotOf(v, start_ + 1s);
  EXPECT_EQ(s.state, "cancelling");
  EXPECT_EQ(s.cancel_reason, "client_disconnect");
  EXPECT_DOUBLE_EQ(s.budget_left_seconds, -1);
  EXPECT_FALSE(s.client_attached);
  EXPECT_EQ(s.downstream_buffered_bytes, 0u);
  EXPECT_EQ(s.upstream, "primary");
  EXPECT_EQ(s.endpoint, "");
}

}  // namespace
}  // namespace sluice
