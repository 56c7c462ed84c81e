// Tests for the Exchange (proxy/exchange/exchange.h) on simulated time: a fake
// downstream stream, fake upstream streams, the route's real filter chain,
// and a Dispatcher whose timers run on a ManualClock the test advances
// (tests/support/simulated_time.h). Walks the lifecycle table
// (proxy/exchange/exchange_state.cc, README "How it is built"):
//
//   queued → running          ForwardsAResponse, every test that sends
//   queued → completed        NoRouteIsAnswered404, InvalidBudgetIsAnswered400
//   queued → failed           DeclaredBodyTooLargeIsAnswered413
//   queued → cancelling       ClientLeavesWhileTheBodyIsRead, BudgetExpiresWhileQueuedForQuota,
//                             ClientLeavesWhileQueuedForQuota
//   running → backing_off     RetriesA429AfterItsRetryAfter, FirstByteTimeoutIsRetried
//   running → completed       ForwardsAResponse, FinishModeDrainsAfterTheClientLeft
//   running → failed          ResetOfANonIdempotentRequestFails, ResetMidStreamCutsTheResponse
//   running → cancelling      ClientLeavesWaitingForTheFirstByte, ClientLeavesMidStream,
//                             FirstByteTimeoutCancelsWithUpstreamTimeout,
//                             BudgetExpiresDuringTheRetry, DrainCancelsARunningExchange,
//                             FinishModeGraceExpires
//   backing_off → running     RetriesA429AfterItsRetryAfter,
//   ARetryWaitsInTheQuotaQueueWhileBackingOff backing_off → cancelling ClientLeavesWhileBackingOff,
//   DrainCancelsWhileBackingOff,
//                             ClientLeavesWhileARetryWaitsForQuota, RetryRefusedByTheOpenCircuit
//   cancelling → cancelled    every cancel above
//
// Two rows have no path in today's filter chain: backing_off → completed and
// backing_off → failed (a retry abandoned with an answer of sluice's own
// before its attempt is sent). No filter answers from beforeAttempt; a
// refused retry attempt is a cancel (circuit_open, rate_limited,
// overloaded), e.g. RetryRefusedByTheOpenCircuit. They stay legal for the
// fallback work (docs/design.md §5). The budget cannot run out *inside* a backoff
// sleep: a retry whose wait does not fit the budget is not made
// (RetryWaitBeyondTheBudgetDeliversAtOnce); BudgetExpiresDuringTheRetry
// covers the retry that does fit and then runs out.

#include "proxy/exchange/exchange.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "config/loader.h"
#include "proxy/event/dispatcher.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/http/request_id.h"
#include "tests/support/simulated_time.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// --- fakes ------------------------------------------------------------------------

/** The client's side: records the response as the codec would send it. */
class FakeDownstream final : public DownstreamStream {
 public:
  void encodeHeaders(ResponseHead&& head, bool end_stream) override {
    heads.push_back(std::move(head));
    ended = ended || end_stream;
  }
  void encodeData(const char* data, size_t len, bool end_stream) override {
    body.append(data, len);
    ended = ended || end_stream;
  }
  void resetStream() override { reset = true; }
  void resetStreamAfter(std::string_view final_bytes) override {
    reset = true;
    final_event = std::string(final_bytes);
  }
  bool canWriteWithoutWaiting(size_t) const override { return true; }
  bool aboveHighWatermark() const override { return false; }
  size_t bufferedBytes() const override { return 0; }
  void pauseRequestBody() override {}
  void resumeRequestBody() override {}
  void onExchangeDone() override { done = true; }
  const ClientInfo& clientInfo() const override { return info_; }

  int status() const { return heads.empty() ? 0 : heads.back().status; }
  std::string header(std::string_view name) const {
    if (heads.empty()) return "";
    return std::string(heads.back().headers.get(name).value_or(""));
  }

  std::vector<ResponseHead> heads;
  std::string body;
  std::string final_event;
  bool ended = false;
  bool reset = false;
  bool done = false;

 private:
  ClientInfo info_{"127.0.0.1", false};
};

/** One upstream attempt: records what was sent; the test plays the upstream. */
class FakeUpstreamStream final : public UpstreamStream {
 public:
  void sendRequest(const RequestHead& head, RequestBody&, UpstreamCallbacks* callbacks) override {
    request = head;
    sent = &head;
    callbacks_ = callbacks;
  }
  void onRequestBodyData() override {}
  void pauseReading() override {}
  void resumeReading() override {}
  void detach() override { callbacks_ = nullptr; }
  void release() override { released = true; }
  void reset() override { was_reset = true; }

  bool attached() const { return callbacks_ != nullptr; }
  void connect() { callbacks_->onUpstreamConnected(); }
  /** The transport took the request body up to `offset`. */
  void took(uint64_t offset) { callbacks_->onUpstreamBodySent(offset); }
  void head(int status, std::vector<std::pair<std::string, std::string>> headers = {}) {
    ResponseHead h;
    h.status = status;
    for (auto& [n, v] : headers) h.headers.add(n, v);
    callbacks_->onUpstreamHeaders(std::move(h), false);
  }
  void data(std::string_view bytes) { callbacks_->onUpstreamData(bytes.data(), bytes.size()); }
  void complete() { callbacks_->onUpstreamComplete(); }
  void fail(UpstreamError error) { callbacks_->onUpstreamError(error, "test"); }
  /** A whole response: connected, head, body, end. */
  void respond(int status, std::vector<std::pair<std::string, std::string>> headers = {},
               std::string_view body = "{}") {
    connect();
    head(status, std::move(headers));
    if (!body.empty()) data(body);
    complete();
  }

  RequestHead request;
  const RequestHead* sent = nullptr;  // the head sendRequest was given (the Exchange's)
  bool released = false;
  bool was_reset = false;

 private:
  UpstreamCallbacks* callbacks_ = nullptr;
};

class FakeUpstreams final : public UpstreamStreamSource {
 public:
  bool hasReadyStream() const override { return true; }
  UpstreamStream* acquire() override {
    streams.push_back(std::make_unique<FakeUpstreamStream>());
    return streams.back().get();
  }
  FakeUpstreamStream& last() { return *streams.back(); }
  std::vector<std::unique_ptr<FakeUpstreamStream>> streams;
};

/** The worker's role: a Dispatcher on simulated time, the fake pool, ids. */
class FakeHost final : public ExchangeHost {
 public:
  explicit FakeHost(ManualClock& clock) : time(clock), dispatcher_(clock, &time) {}
  Dispatcher& dispatcher() override { return dispatcher_; }
  UpstreamStreamSource& pool(const ConfigSnapshot&, size_t) override { return upstreams; }
  void retire(Exchange& exchange) override { retired.insert(exchange.id()); }
  bool alive(uint64_t id) const override { return retired.count(id) == 0; }
  IdGenerator& ids() override { return ids_; }
  AccessLogBuffer* accessLog() override { return nullptr; }

  test::SimulatedScheduler time;
  FakeUpstreams upstreams;
  std::set<uint64_t> retired;

 private:
  Dispatcher dispatcher_;
  IdGenerator ids_{42};
};

// --- fixture ---------------------------------------------------------------------------

constexpr const char* kUpstream = R"(listen: 127.0.0.1:0
upstreams:
  - name: up
    url: "http://127.0.0.1:9"
)";

constexpr const char* kRoute = R"(routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: up
)";

// Backoff jitter is at most 1 ms, so a retry's delay is the upstream's wait
// (Retry-After) or within 1 ms.
std::string retryLine(std::string_view idempotent = "always") {
  return "    retry: {attempts: 3, on: [429, 503, connect_error, reset, timeout], "
         "backoff: {base: 1ms, max: 1ms}, idempotent: " +
         std::string(idempotent) + "}\n";
}

class ExchangeTest : public ::testing::Test {
 protected:
  /** Loads kUpstream + `upstream_extra` + kRoute + `retry` + `route_extra` + `tail` (YAML lines).
   */
  void load(const std::string& upstream_extra = "", const std::string& route_extra = "",
            const std::string& tail = "", const std::string& retry = retryLine()) {
    const std::string yaml =
        std::string(kUpstream) + upstream_extra + kRoute + retry + route_extra + tail;
    auto r = config::loadConfigString(yaml, "exchange_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
  }

  static RequestHead post(std::vector<std::pair<std::string, std::string>> headers = {}) {
    RequestHead h;
    h.method = "POST";
    h.path = "/v1/chat/completions";
    h.headers.add("host", "sluice");
    h.headers.add("content-type", "application/json");
    for (auto& [n, v] : headers) h.headers.add(n, v);
    return h;
  }

  /** A new Exchange for `head` on downstream `down` (headers only: call send() for the body). */
  Exchange& open(RequestHead head, FakeDownstream& down) {
    const RouteRuntime* route = runtime_->match(head.method, head.pathOnly());
    exchanges_.push_back(std::make_unique<Exchange>(host_, exchanges_.size() + 1, runtime_, route,
                                                    &down, clock_.now()));
    Exchange& ex = *exchanges_.back();
    ex.decodeHeaders(std::move(head));
    return ex;
  }
  /** The body (if any) and its end. */
  static void send(Exchange& ex, std::string_view body) {
    if (!body.empty()) ex.decodeData(body.data(), body.size());
    ex.decodeComplete();
  }
  /** The common case: a whole request on the fixture's downstream. */
  Exchange& start(RequestHead head = post(), std::string_view body = R"({"model":"gpt-4o"})") {
    Exchange& ex = open(std::move(head), down_);
    if (!host_.retired.count(ex.id())) send(ex, body);
    return ex;
  }

  size_t attemptsSent() const { return host_.upstreams.streams.size(); }
  FakeUpstreamStream& upstream() { return host_.upstreams.last(); }
  RouteMetrics& routeMetrics() { return *runtime_->routes().at(0).metrics; }
  UpstreamMetrics& upstreamMetrics() { return *runtime_->upstreams().at(0).metrics; }
  EndpointMetrics& endpointMetrics() {
    return *runtime_->upstreams().at(0).endpoints.at(0).metrics;
  }
  double cancellations(CancelReason r) { return routeMetrics().cancellations(r).Value(); }
  double requests(int code) { return routeMetrics().requests(code).Value(); }
  double retries(const std::string& cause) { return routeMetrics().retries(cause).Value(); }
  void advance(std::chrono::nanoseconds d) { host_.time.advance(d); }

  ManualClock clock_;
  Metrics metrics_;
  ConfigSnapshotPtr runtime_;
  FakeHost host_{clock_};
  FakeDownstream down_;
  std::vector<std::unique_ptr<Exchange>> exchanges_;  // destroyed first
};

// --- queued → running → completed ----------------------------------------------------

TEST_F(ExchangeTest, ForwardsAResponse) {
  load();
  Exchange& ex = start();
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  ASSERT_EQ(attemptsSent(), 1u);
  EXPECT_EQ(upstream().request.method, "POST");
  upstream().connect();
  upstream().head(200, {{"content-type", "application/json"}});
  EXPECT_EQ(down_.status(), 200);  // not held: 200 is not retriable
  EXPECT_EQ(down_.header("x-sluice-attempts"), "1");
  upstream().data(R"({"ok":true})");
  upstream().complete();
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(down_.body, R"({"ok":true})");
  EXPECT_TRUE(down_.ended);
  EXPECT_TRUE(down_.done);
  EXPECT_TRUE(upstream().released);  // a clean response returns the connection for reuse
  EXPECT_EQ(requests(200), 1);
  EXPECT_EQ(endpointMetrics().attempts(AttemptResult::Ok).Value(), 1);
  EXPECT_EQ(host_.retired.count(ex.id()), 1u);
}

// --- queued → completed / failed ------------------------------------------------------

TEST_F(ExchangeTest, NoRouteIsAnswered404) {
  load();
  RequestHead head = post();
  head.path = "/elsewhere";
  Exchange& ex = open(std::move(head), down_);
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(down_.status(), 404);
  EXPECT_EQ(attemptsSent(), 0u);
}

TEST_F(ExchangeTest, InvalidBudgetIsAnswered400) {
  load();
  Exchange& ex = start(post({{"x-budget-ms", "soon"}}));
  EXPECT_EQ(ex.state(), ExchangeState::Completed);  // a filter's local reply
  EXPECT_EQ(down_.status(), 400);
  EXPECT_EQ(attemptsSent(), 0u);
}

TEST_F(ExchangeTest, DeclaredBodyTooLargeIsAnswered413) {
  load("", "", "limits: {max_body: 16}\n");
  Exchange& ex = open(post({{"content-length", "17"}}), down_);
  EXPECT_EQ(ex.state(), ExchangeState::Failed);
  EXPECT_EQ(down_.status(), 413);
  EXPECT_EQ(attemptsSent(), 0u);
}

// --- retries: running → backing_off → running -------------------------------------------

TEST_F(ExchangeTest, RetriesA429AfterItsRetryAfter) {
  load();
  Exchange& ex = start();
  upstream().connect();
  upstream().head(429, {{"retry-after", "2"}});
  EXPECT_TRUE(down_.heads.empty());  // held: it may be retried
  upstream().data(R"({"error":"slow down"})");
  upstream().complete();
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  EXPECT_TRUE(host_.upstreams.streams[0]->released);
  EXPECT_TRUE(down_.heads.empty());  // the retried answer is never sent
  EXPECT_EQ(retries("429"), 1);

  advance(1999ms);
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  EXPECT_EQ(attemptsSent(), 1u);
  advance(1ms);  // the Retry-After has passed
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  ASSERT_EQ(attemptsSent(), 2u);

  upstream().respond(200);
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(down_.status(), 200);
  EXPECT_EQ(down_.header("x-sluice-attempts"), "2");
  EXPECT_EQ(down_.header("x-should-retry"), "false");  // sluice retried: an SDK retry would stack
  EXPECT_EQ(endpointMetrics().attempts(AttemptResult::Http429).Value(), 1);
  EXPECT_EQ(endpointMetrics().attempts(AttemptResult::Ok).Value(), 1);
}

TEST_F(ExchangeTest, DeliversTheLastHeldAnswerWhenAttemptsRunOut) {
  load();
  Exchange& ex = start();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(attemptsSent(), static_cast<size_t>(i + 1));
    upstream().respond(503, {{"content-type", "application/json"}}, R"({"error":"busy"})");
    advance(1ms);
  }
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(down_.status(), 503);
  EXPECT_EQ(down_.body, R"({"error":"busy"})");  // the held body, released whole
  EXPECT_EQ(down_.header("x-sluice-attempts"), "3");
  EXPECT_EQ(down_.header("x-should-retry"), "false");  // Deliver{discourage_client_retry}
  EXPECT_EQ(retries("503"), 2);
}

TEST_F(ExchangeTest, RetryWaitBeyondTheBudgetDeliversAtOnce) {
  load();
  Exchange& ex = start(post({{"x-budget-ms", "1000"}}));
  upstream().respond(429, {{"retry-after-ms", "1000"}}, R"({"error":"later"})");
  EXPECT_EQ(ex.state(), ExchangeState::Completed);  // an exact fit does not fit either
  EXPECT_EQ(down_.status(), 429);
  EXPECT_EQ(down_.header("x-should-retry"), "false");
  EXPECT_EQ(attemptsSent(), 1u);
}

TEST_F(ExchangeTest, BudgetExpiresDuringTheRetry) {
  load();
  Exchange& ex = start(post({{"x-budget-ms", "1000"}}));
  upstream().respond(503, {{"retry-after-ms", "900"}});
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  advance(900ms);
  ASSERT_EQ(attemptsSent(), 2u);
  upstream().connect();
  advance(99ms);
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  advance(1ms);
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_EQ(down_.status(), 504);
  EXPECT_TRUE(upstream().was_reset);  // torn down: the upstream stops generating
  EXPECT_EQ(cancellations(CancelReason::BudgetExhausted), 1);
  EXPECT_EQ(endpointMetrics().attempts(AttemptResult::Cancelled).Value(), 1);
}

TEST_F(ExchangeTest, FirstByteTimeoutIsRetried) {
  load("", "    first_byte_timeout: 5s\n");
  Exchange& ex = start();
  upstream().connect();
  advance(4999ms);
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  advance(1ms);
  EXPECT_TRUE(host_.upstreams.streams[0]->was_reset);
  EXPECT_EQ(retries("timeout"), 1);
  advance(1ms);  // the full-jitter backoff: at most 1 ms here
  ASSERT_EQ(attemptsSent(), 2u);
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  upstream().respond(200);
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(down_.status(), 200);
}

TEST_F(ExchangeTest, FirstByteTimeoutCancelsWithUpstreamTimeout) {
  load("", "    first_byte_timeout: 5s\n");
  Exchange& ex = start(post(), R"({"model":"gpt-4o"})");
  // Three attempts, each timing out: the last one's timeout ends the exchange.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(attemptsSent(), static_cast<size_t>(i + 1));
    upstream().connect();
    advance(5s);
    advance(1ms);
  }
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_EQ(down_.status(), 504);
  EXPECT_EQ(cancellations(CancelReason::UpstreamTimeout), 1);
  EXPECT_EQ(endpointMetrics().attempts(AttemptResult::Timeout).Value(), 3);
}

TEST_F(ExchangeTest, RetryRefusedByTheOpenCircuit) {
  load("    circuit_breaker: {consecutive_failures: 1, cooldown: 10s}\n");
  Exchange& ex = start();
  upstream().respond(503);  // trips the breaker; the retry asks it again
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  advance(1ms);
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);  // backing_off → cancelling → cancelled
  EXPECT_EQ(down_.status(), 503);
  EXPECT_FALSE(down_.header("retry-after").empty());  // the cooldown left
  EXPECT_EQ(attemptsSent(), 1u);
  EXPECT_EQ(cancellations(CancelReason::CircuitOpen), 1);
}

// --- running → failed --------------------------------------------------------------------

TEST_F(ExchangeTest, ResetOfANonIdempotentRequestFails) {
  // idempotent: auto and a POST without an Idempotency-Key: a reset is not retried.
  load("", "", "", retryLine("auto"));
  Exchange& ex = start();
  upstream().connect();
  upstream().fail(UpstreamError::Reset);
  EXPECT_EQ(ex.state(), ExchangeState::Failed);
  EXPECT_EQ(down_.status(), 502);
  EXPECT_EQ(attemptsSent(), 1u);
  EXPECT_EQ(endpointMetrics().attempts(AttemptResult::Reset).Value(), 1);
}

TEST_F(ExchangeTest, RefusedStreamIsRetriedEvenForAPost) {
  load("", "", "", retryLine("auto"));
  Exchange& ex = start();
  upstream().connect();
  upstream().fail(UpstreamError::Refused);  // unprocessed: safe whatever the method
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  advance(1ms);
  upstream().respond(200);
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(retries("reset"), 1);
}

TEST_F(ExchangeTest, ResetMidStreamCutsTheResponse) {
  load();
  Exchange& ex = start(post({{"idempotency-key", "k1"}}));
  upstream().connect();
  upstream().head(200, {{"content-type", "application/json"}});
  upstream().data("{\"partial\":");
  upstream().fail(UpstreamError::Reset);  // a response under way is never retried
  EXPECT_EQ(ex.state(), ExchangeState::Failed);
  EXPECT_TRUE(down_.reset);
  EXPECT_EQ(attemptsSent(), 1u);
  EXPECT_EQ(requests(200), 1);
}

// --- queue: the throttle holds a request before it goes --------------------------------

constexpr const char* kRateLimit = "    rate_limit: {key: none, reserve: 0}\n";

TEST_F(ExchangeTest, QueuesBehindTheQuotaProbe) {
  load(kRateLimit);
  Exchange& probe = start();  // unknown quota: one probe goes, the rest wait for its headers
  ASSERT_EQ(attemptsSent(), 1u);
  FakeDownstream second_down;
  Exchange& second = open(post(), second_down);
  send(second, "{}");
  EXPECT_EQ(second.state(), ExchangeState::Queued);
  EXPECT_EQ(attemptsSent(), 1u);

  FakeUpstreamStream& first = upstream();
  first.connect();
  first.head(200, {{"x-ratelimit-limit-requests", "100"},
                   {"x-ratelimit-remaining-requests", "99"},
                   {"x-ratelimit-reset-requests", "60s"}});
  host_.dispatcher().runNonBlocking();  // the tracker's wake-up is posted to the worker
  EXPECT_EQ(second.state(), ExchangeState::Running);
  ASSERT_EQ(attemptsSent(), 2u);
  first.complete();
  upstream().respond(200);
  EXPECT_EQ(probe.state(), ExchangeState::Completed);
  EXPECT_EQ(second.state(), ExchangeState::Completed);
  EXPECT_EQ(second_down.status(), 200);
}

TEST_F(ExchangeTest, BudgetExpiresWhileQueuedForQuota) {
  load(kRateLimit);
  start();
  FakeDownstream second_down;
  Exchange& second = open(post({{"x-budget-ms", "500"}}), second_down);
  send(second, "{}");
  EXPECT_EQ(second.state(), ExchangeState::Queued);
  advance(499ms);
  EXPECT_EQ(second.state(), ExchangeState::Queued);
  advance(1ms);
  EXPECT_EQ(second.state(), ExchangeState::Cancelled);
  EXPECT_EQ(second_down.status(), 504);
  EXPECT_EQ(attemptsSent(), 1u);  // never sent
  EXPECT_EQ(cancellations(CancelReason::BudgetExhausted), 1);
}

TEST_F(ExchangeTest, ClientLeavesWhileQueuedForQuota) {
  load(kRateLimit);
  start();
  FakeDownstream second_down;
  Exchange& second = open(post(), second_down);
  send(second, "{}");
  second.onDownstreamDisconnect();
  EXPECT_EQ(second.state(), ExchangeState::Cancelled);
  EXPECT_TRUE(second_down.heads.empty());  // nobody to answer
  upstream().respond(
      200, {{"x-ratelimit-limit-requests", "100"}, {"x-ratelimit-remaining-requests", "99"}});
  host_.dispatcher().runNonBlocking();
  EXPECT_EQ(attemptsSent(), 1u);  // a client that left is never sent
  EXPECT_EQ(requests(499), 1);
}

// A retry waits for the quota like a first attempt, still backing_off: the
// state turns running only when the attempt is sent.
constexpr std::initializer_list<std::pair<const char*, const char*>> kQuotaSpent = {
    {"x-ratelimit-limit-requests", "10"},
    {"x-ratelimit-remaining-requests", "0"},
    {"x-ratelimit-reset-requests", "2s"},
    {"retry-after-ms", "100"}};

TEST_F(ExchangeTest, ARetryWaitsInTheQuotaQueueWhileBackingOff) {
  load(kRateLimit);
  Exchange& ex = start();
  upstream().respond(429, {kQuotaSpent.begin(), kQuotaSpent.end()});
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  advance(100ms);  // the retry starts; the throttle holds it until the reset
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  EXPECT_EQ(attemptsSent(), 1u);
  EXPECT_EQ(runtime_->upstreams().at(0).endpoints[0].quota->queueDepth(), 1u);
  advance(3s);  // past the reset (and the tracker's latency margin)
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  ASSERT_EQ(attemptsSent(), 2u);
  upstream().respond(200);
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(down_.status(), 200);
}

TEST_F(ExchangeTest, ClientLeavesWhileARetryWaitsForQuota) {
  load(kRateLimit);
  Exchange& ex = start();
  upstream().respond(429, {kQuotaSpent.begin(), kQuotaSpent.end()});
  advance(100ms);
  ASSERT_EQ(runtime_->upstreams().at(0).endpoints[0].quota->queueDepth(), 1u);
  ex.onDownstreamDisconnect();
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_EQ(runtime_->upstreams().at(0).endpoints[0].quota->queueDepth(), 0u);
  advance(3s);
  EXPECT_EQ(attemptsSent(), 1u);  // never sent
}

// --- client disconnect in each state -------------------------------------------------------

TEST_F(ExchangeTest, ClientLeavesWhileTheBodyIsRead) {
  load();
  Exchange& ex = open(post({{"content-length", "10"}}), down_);
  EXPECT_EQ(ex.state(), ExchangeState::Queued);
  ex.onDownstreamDisconnect();
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_EQ(attemptsSent(), 0u);
  EXPECT_EQ(cancellations(CancelReason::ClientDisconnect), 1);
  EXPECT_EQ(requests(499), 1);
}

TEST_F(ExchangeTest, ClientLeavesWaitingForTheFirstByte) {
  load();
  Exchange& ex = start();
  upstream().connect();
  ex.onDownstreamDisconnect();
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_TRUE(upstream().was_reset);
  EXPECT_FALSE(upstream().attached());
  EXPECT_EQ(endpointMetrics().attempts(AttemptResult::Cancelled).Value(), 1);
  EXPECT_EQ(requests(499), 1);
}

TEST_F(ExchangeTest, ClientLeavesMidStream) {
  load();
  Exchange& ex = start();
  upstream().connect();
  upstream().head(200, {{"content-type", "text/event-stream"}});
  upstream().data("data: {}\n\n");
  ex.onDownstreamDisconnect();
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_TRUE(upstream().was_reset);
  EXPECT_EQ(cancellations(CancelReason::ClientDisconnect), 1);
}

TEST_F(ExchangeTest, ClientLeavesWhileBackingOff) {
  load();
  Exchange& ex = start();
  upstream().respond(429, {{"retry-after", "3"}});
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  ex.onDownstreamDisconnect();
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  advance(10s);  // the backoff timer died with the cancel
  EXPECT_EQ(attemptsSent(), 1u);
  EXPECT_EQ(requests(499), 1);
}

// --- finish mode -----------------------------------------------------------------------------

constexpr const char* kFinish = "    on_client_disconnect: finish\n    finish_grace: 5s\n";

TEST_F(ExchangeTest, FinishModeDrainsAfterTheClientLeft) {
  load("", kFinish);
  Exchange& ex = start();
  upstream().connect();
  upstream().head(200, {{"content-type", "application/json"}});
  ex.onDownstreamDisconnect();
  EXPECT_EQ(ex.state(), ExchangeState::Running);  // the call completes, its output discarded
  EXPECT_FALSE(upstream().was_reset);
  EXPECT_EQ(cancellations(CancelReason::ClientDisconnect), 1);
  upstream().data(R"({"done":true})");
  upstream().complete();
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_TRUE(upstream().released);
  EXPECT_EQ(down_.body, "");  // nothing written after the client left
  EXPECT_EQ(requests(499), 1);
}

TEST_F(ExchangeTest, FinishModeGraceExpires) {
  load("", kFinish);
  Exchange& ex = start();
  upstream().connect();
  ex.onDownstreamDisconnect();
  advance(4999ms);
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  advance(1ms);
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_TRUE(upstream().was_reset);
  EXPECT_EQ(cancellations(CancelReason::ClientDisconnect), 1);  // counted once
}

// --- drain -------------------------------------------------------------------------------------

TEST_F(ExchangeTest, DrainCancelsARunningExchange) {
  load();
  Exchange& ex = start();
  upstream().connect();
  ex.cancel(CancelReason::Draining);
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_EQ(down_.status(), 503);
  EXPECT_TRUE(upstream().was_reset);
  EXPECT_EQ(cancellations(CancelReason::Draining), 1);
}

TEST_F(ExchangeTest, DrainCancelsWhileBackingOff) {
  load();
  Exchange& ex = start();
  upstream().respond(503);
  EXPECT_EQ(ex.state(), ExchangeState::BackingOff);
  ex.cancel(CancelReason::Draining);
  EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
  EXPECT_EQ(down_.status(), 503);
  advance(1s);
  EXPECT_EQ(attemptsSent(), 1u);
}

// --- memory held by a response under way --------------------------------------------------------

TEST_F(ExchangeTest, AResponseUnderWayReleasesWhatOnlyAReplayReads) {
  load();
  const std::string body = R"({"model":"gpt-4o"})";
  Exchange& ex = start(post(), body);
  const BodyMemory& memory = runtime_->bodyMemory();
  EXPECT_EQ(memory.used(), body.size());
  upstream().connect();
  upstream().took(body.size());
  EXPECT_EQ(memory.used(), body.size());  // a retry may still replay it
  EXPECT_TRUE(ex.request().headers.has("content-type"));
  upstream().head(200, {{"content-type", "text/event-stream"}});
  EXPECT_EQ(memory.used(), 0u);  // no retry can happen now
  EXPECT_FALSE(ex.request().headers.has("content-type"));
  EXPECT_EQ(ex.snapshot().method, "POST");  // the access log's and the snapshot's stay
  EXPECT_EQ(ex.snapshot().path, "/v1/chat/completions");
  EXPECT_EQ(ex.requestId(), down_.header("x-request-id"));
  upstream().data("data: {}\n\n");
  upstream().complete();
  EXPECT_EQ(ex.state(), ExchangeState::Completed);
  EXPECT_EQ(down_.body, "data: {}\n\n");
}

// Released means freed: the heads' heap buffers go, not only their fields
// (an empty value assigned over a string keeps its buffer). The attempt's
// head is an object of its own, deleted.
TEST_F(ExchangeTest, AResponseUnderWayFreesTheHeadsBuffers) {
  load();
  const std::string big(20000, 'v');
  start(post({{"x-big", big}}));
  const RequestHead* sent = upstream().sent;
  ASSERT_NE(sent, nullptr);
  ASSERT_TRUE(sent->headers.has("x-big"));
  ASSERT_GT(sent->path.capacity(), std::string().capacity());
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  const size_t before = mallinfo2().uordblks;
#endif
  upstream().connect();
  upstream().head(200, {{"content-type", "text/event-stream"}});
  // The attempt's head (what `sent` pointed at) is freed whole, not emptied:
  // it is no longer read here (the malloc figure below shows it went).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // The client's head and the upstream's copy each held the 20,000 bytes;
  // the response head and the rest allocated meanwhile are far smaller.
  const size_t after = mallinfo2().uordblks;
  EXPECT_LT(after + 2 * big.size() - 4096, before) << before << " -> " << after;
#endif
}

TEST_F(ExchangeTest, AHeldAnswerKeepsTheBodyForTheRetry) {
  load();
  const std::string body = R"({"model":"gpt-4o"})";
  Exchange& ex = start(post(), body);
  upstream().connect();
  upstream().took(body.size());
  upstream().head(503);  // held: the retry filter may replace it
  EXPECT_EQ(runtime_->bodyMemory().used(), body.size());
  EXPECT_TRUE(ex.request().headers.has("content-type"));
  upstream().complete();
  advance(1ms);
  ASSERT_EQ(attemptsSent(), 2u);
  EXPECT_TRUE(upstream().request.headers.has("content-type"));
}

TEST_F(ExchangeTest, TheBodyStaysUntilTheTransportTookAllOfIt) {
  load();
  const std::string body = R"({"model":"gpt-4o"})";
  start(post(), body);
  upstream().connect();
  upstream().took(5);
  upstream().head(200);  // the upstream answered early: the rest is still to be sent
  EXPECT_EQ(runtime_->bodyMemory().used(), body.size());
  upstream().took(body.size());
  EXPECT_EQ(runtime_->bodyMemory().used(), 0u);
}

// --- timers ------------------------------------------------------------------------------------
// One wake event per Exchange, armed lazily: moved only earlier while armed.

TEST_F(ExchangeTest, ALaterTimerDoesNotRearmTheWakeAnEarlierOneDoes) {
  load();
  Exchange& ex = start();  // the connect timer: 2 s
  const MonotonicTime t0 = clock_.now();
  ASSERT_EQ(host_.time.nextDue(), t0 + 2s);
  const uint64_t arms = host_.time.arms();
  std::vector<std::string> ran;
  ex.armTimer(t0 + 10s, [&] { ran.push_back("late"); });
  EXPECT_EQ(host_.time.arms(), arms);  // later than the wake: left as it is
  EXPECT_EQ(host_.time.nextDue(), t0 + 2s);
  ex.armTimer(t0 + 1s, [&] { ran.push_back("early"); });
  EXPECT_EQ(host_.time.arms(), arms + 1);
  EXPECT_EQ(host_.time.nextDue(), t0 + 1s);
  upstream().connect();  // the connect timer goes; the idle timer (30 s) is later: no re-arm
  EXPECT_EQ(host_.time.arms(), arms + 1);
  advance(1s);
  EXPECT_EQ(ran, std::vector<std::string>{"early"});
  EXPECT_EQ(host_.time.nextDue(), t0 + 10s);  // re-armed for the earliest still pending
  advance(9s);
  EXPECT_EQ(ran, (std::vector<std::string>{"early", "late"}));
  EXPECT_EQ(host_.time.nextDue(), t0 + 30s);  // the idle timer
  EXPECT_EQ(ex.state(), ExchangeState::Running);
}

TEST_F(ExchangeTest, DisarmingTheEarliestTimerKeepsTheOthers) {
  load();
  Exchange& ex = start();
  const MonotonicTime t0 = clock_.now();
  bool ran = false;
  const TimerId early = ex.armTimer(t0 + 1s, [] { FAIL() << "disarmed"; });
  ex.armTimer(t0 + 5s, [&] { ran = true; });
  ex.disarmTimer(early);
  upstream().connect();                      // disarms the connect timer (2 s) too
  EXPECT_EQ(host_.time.nextDue(), t0 + 1s);  // the wake stays where it was armed...
  advance(1s);                               // ...fires, finds nothing due...
  EXPECT_FALSE(ran);
  EXPECT_EQ(host_.time.nextDue(), t0 + 5s);  // ...and sleeps until the next one
  advance(4s);
  EXPECT_TRUE(ran);
  EXPECT_EQ(ex.state(), ExchangeState::Running);
  EXPECT_EQ(host_.time.nextDue(), t0 + 30s);  // the idle timer is still there
}

TEST_F(ExchangeTest, TimersDueTogetherRunInTheOrderArmed) {
  load();
  {
    Exchange& ex = start();
    const MonotonicTime at = clock_.now() + 1s;
    bool ran = false;
    ex.armTimer(at, [&] { ran = true; });
    ex.setDeadline(at);  // armed second: runs second
    advance(1s);
    EXPECT_TRUE(ran);
    EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
    EXPECT_EQ(cancellations(CancelReason::BudgetExhausted), 1);
  }
  {
    FakeDownstream down;
    Exchange& ex = open(post(), down);
    send(ex, R"({"model":"gpt-4o"})");
    const MonotonicTime at = clock_.now() + 1s;
    bool ran = false;
    ex.setDeadline(at);  // armed first: its cancel clears the other timer
    ex.armTimer(at, [&] { ran = true; });
    advance(1s);
    EXPECT_FALSE(ran);
    EXPECT_EQ(ex.state(), ExchangeState::Cancelled);
    EXPECT_EQ(cancellations(CancelReason::BudgetExhausted), 2);
  }
}

}  // namespace
}  // namespace sluice
