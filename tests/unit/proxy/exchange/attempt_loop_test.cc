// Tests for the AttemptLoop (proxy/exchange/attempt_loop.h), without an
// Exchange or sockets: a real ConfigSnapshot built from YAML, the part's siblings
// (ExchangeTimers on simulated time, ResponseRelay, AttemptRouter, an empty
// filter chain: the verdicts are the proposal and the router's spill-over),
// a recording owner and a fake pool of streams.

#include "proxy/exchange/attempt_loop.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "config/loader.h"
#include "tests/support/simulated_time.h"
#include "tests/unit/proxy/exchange/recording_client.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// `primary` (endpoints a, b) falls back to `backup` with model `small` on 503 and reset.
constexpr const char* kConfig = R"(
listen: 127.0.0.1:0
upstreams:
  - name: primary
    connect_timeout: 2s
    circuit_breaker: {max_pending: 1}
    endpoints:
      - {name: a, url: "http://127.0.0.1:1"}
      - {name: b, url: "http://127.0.0.1:2"}
  - name: backup
    url: "http://127.0.0.1:3"
routes:
  - name: chat
    match: {path_prefix: /v1}
    upstream: primary
    first_byte_timeout: 5s
    idle_timeout: 1s
    retry: {attempts: 3, on: [503, reset], idempotent: always}
    fallback: [{upstream: backup, model: small}]
    fallback_on: [503, reset]
)";

class RecordingStream final : public UpstreamStream {
 public:
  void sendRequest(const RequestHead& head, RequestBody& body,
                   UpstreamCallbacks* callbacks) override {
    request = head;
    sent_body = std::string(body.prefix());
    callbacks_ = callbacks;
  }
  /** Where the stream reports: the loop. */
  UpstreamCallbacks& callbacks() { return *callbacks_; }
  void onRequestBodyData() override {}
  void pauseReading() override { ++pauses; }
  void resumeReading() override { ++resumes; }
  void detach() override { callbacks_ = nullptr; }
  void release() override { released = true; }
  void reset() override { was_reset = true; }

  bool attached() const { return callbacks_ != nullptr; }
  RequestHead request;
  std::string sent_body;
  int resumes = 0;
  int pauses = 0;
  bool released = false;
  bool was_reset = false;

 private:
  UpstreamCallbacks* callbacks_ = nullptr;
};

class RecordingPool final : public UpstreamStreamSource {
 public:
  bool hasReadyStream() const override { return ready; }
  UpstreamStream* acquire() override {
    streams.push_back(std::make_unique<RecordingStream>());
    return streams.back().get();
  }
  std::vector<std::unique_ptr<RecordingStream>> streams;
  bool ready = true;
};

/** The Exchange's side: its facts are the test's to set; what it is left to decide, recorded. */
class FakeOwner final : public AttemptLoop::Owner, public ExchangeTimers::Owner {
 public:
  bool mayReplay() const override { return may_replay; }
  AttemptLoop::ExchangeFacts attemptFacts() const override { return facts; }
  bool attemptsStopped() const override { return stopped; }
  void onAttemptBodySent(uint64_t offset) override {
    heard.push_back("sent " + std::to_string(offset));
  }
  void onResponseUnderWay() override { heard.push_back("under way"); }
  void onAttemptFailed(AttemptOutcome outcome, const Problem& problem) override {
    heard.push_back("failed " + std::string(causeLabel(outcome)) + " " + problem.slug);
  }
  void onAttemptTimedOut() override { heard.push_back("timed out"); }
  void onAttemptRetry(const AttemptVerdict::Retry& retry) override {
    heard.push_back("retry " + retry.cause);
  }
  void onResponseDelivered(int status) override {
    heard.push_back("delivered " + std::to_string(status));
  }
  void onHeldResponseRefused(const Problem& problem) override {
    heard.push_back("refused " + problem.slug);
  }
  void onSlot(ExchangeSlot slot) override { fired.push_back(slot); }
  bool timersLive() const override { return true; }

  bool may_replay = true;
  bool stopped = false;
  AttemptLoop::ExchangeFacts facts{std::nullopt, false, nullptr, /*running=*/true,
                                   /*request_complete=*/true};
  std::vector<ExchangeSlot> fired;
  std::vector<std::string> heard;
};

/** Records what each attempt's end told it: "sent|unsent <cause> <fallback?>". */
class DoneRecorder final : public StreamFilter {
 public:
  explicit DoneRecorder(std::vector<std::string>& heard) : heard_(heard) {}
  std::string_view name() const override { return "recorder"; }
  void onAttemptDone(const AttemptEnd& end, const AttemptVerdict& verdict) override {
    const auto* retry = verdict.asRetry();
    heard_.push_back(std::string(end.sent ? "sent" : "unsent") + " " +
                     (retry != nullptr ? retry->cause : "no-retry") + " " +
                     (retry != nullptr && retry->target.kind == AttemptTarget::Kind::NextFallback
                          ? "fallback"
                          : "same"));
  }

 private:
  std::vector<std::string>& heard_;
};

class AttemptLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::loadConfigString(kConfig, "attempt_loop_test.yaml");
    ASSERT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error");
    std::string error;
    runtime_ = ConfigSnapshot::build(r.config, metrics_, clock_, &error);
    ASSERT_NE(runtime_, nullptr) << error;
    route_ = runtime_->match("POST", "/v1/chat/completions");
    ASSERT_NE(route_, nullptr);
    router_ = std::make_unique<AttemptRouter>(route_);
    loop_ = std::make_unique<AttemptLoop>(owner_, timers_, response_, *router_, filters_);
    response_.noteRoute(*route_);
    head_.method = "POST";
    head_.path = "/v1/chat/completions";
    head_.headers.add("host", "sluice");
    head_.headers.add("expect", "100-continue");
    const std::string json = R"({"model":"big","messages":[]})";
    ASSERT_TRUE(body_.append(json.data(), json.size()));
    body_.markComplete();
  }

  void begin(const AttemptTarget& target = AttemptTarget::sameUpstream()) {
    loop_->begin(target, {head_, client_, body_, *runtime_});
  }
  bool send() {
    return loop_->send(pool_, loop_->body(body_), *route_->config, /*request_complete=*/true,
                       clock_.now());
  }
  RecordingStream& stream() { return *pool_.streams.back(); }
  /** Where the attempt's stream reports: the loop. */
  UpstreamCallbacks& upstream() { return stream().callbacks(); }
  static ResponseHead responseHead(int status) {
    ResponseHead head;
    head.status = status;
    head.headers.add("content-type", "application/json");
    return head;
  }
  /** The attempt sent answers 503, which the route falls back on: the loop's verdict. */
  AttemptVerdict sendAndEndWith503() {
    EXPECT_TRUE(send());
    loop_->connected(route_->config, true);
    loop_->headArrived(503, clock_.now());
    return loop_->end(AttemptOutcome::fromStatus(503), /*reuse=*/true,
                      AttemptVerdict::fail(makeProblem(problems::kUpstreamReset, "test")));
  }
  double attempts(const EndpointRuntime& e, AttemptResult result) {
    return e.metrics->attempts(result).Value();
  }
  const UpstreamRuntime& primary() const { return *route_->chain[0]; }
  const UpstreamRuntime& backup() const { return *route_->chain[1]; }

  ManualClock clock_;
  Metrics metrics_;
  ConfigSnapshotPtr runtime_;
  const RouteRuntime* route_ = nullptr;
  test::SimulatedScheduler time_{clock_};
  Dispatcher dispatcher_{clock_, &time_};
  FakeOwner owner_;
  ExchangeTimers timers_{dispatcher_, owner_};
  FilterChain filters_;
  std::unique_ptr<AttemptRouter> router_;
  RecordingPool pool_;
  RequestHead head_;
  ExchangeRecord record_;
  RequestIdentity identity_;
  RecordingClient downstream_;
  ClientResponse response_{&downstream_, record_, identity_, head_, MonotonicTime{}};
  ClientInfo client_{"127.0.0.1", false};
  RequestBody body_{nullptr, 0};
  std::unique_ptr<AttemptLoop> loop_;  // destroyed first
};

TEST_F(AttemptLoopTest, BeginPlacesTheAttemptAndRewritesTheRequestForItsEndpoint) {
  begin();
  const AttemptLoop::Attempt& attempt = loop_->current();
  EXPECT_EQ(loop_->started(), 1u);
  EXPECT_EQ(loop_->sent(), 0u);  // not sent yet
  EXPECT_EQ(attempt.upstream, &primary());
  ASSERT_NE(attempt.endpoint, nullptr);
  ASSERT_NE(attempt.request, nullptr);
  EXPECT_FALSE(attempt.request->headers.has("expect"));  // sluice answered it
  EXPECT_EQ(attempt.request->method, "POST");
  EXPECT_EQ(&loop_->body(body_), &body_);  // the client's body: no fallback model
  EXPECT_FALSE(loop_->inFlight());
}

TEST_F(AttemptLoopTest, SendArmsTheAttemptsTimersAndHandsTheRequestToAStream) {
  begin();
  ASSERT_TRUE(send());
  EXPECT_TRUE(loop_->inFlight());
  EXPECT_EQ(loop_->sent(), 1u);
  EXPECT_TRUE(stream().attached());
  EXPECT_EQ(stream().request.method, "POST");
  EXPECT_TRUE(timers_.armed(ExchangeSlot::Connect));
  EXPECT_TRUE(timers_.armed(ExchangeSlot::FirstByte));
  loop_->connected(route_->config, /*request_complete=*/true);
  EXPECT_TRUE(loop_->current().connected);
  EXPECT_FALSE(timers_.armed(ExchangeSlot::Connect));
  time_.advance(2s);
  EXPECT_TRUE(owner_.fired.empty());  // the connect timer ended with the connection
  time_.advance(3s);
  EXPECT_EQ(owner_.fired, std::vector<ExchangeSlot>{ExchangeSlot::FirstByte});
}

TEST_F(AttemptLoopTest, WaitingForAConnectionBeyondMaxPendingIsNotSent) {
  // Another request waits for a connection to each endpoint already.
  PendingSlot others[2];
  for (size_t i = 0; i < 2; ++i) ASSERT_TRUE(others[i].acquire(*primary().endpoints[i].breaker));
  pool_.ready = false;
  begin();
  EXPECT_FALSE(send());  // the caller cancels `overloaded`
  EXPECT_FALSE(loop_->inFlight());
  EXPECT_EQ(loop_->sent(), 0u);
  EXPECT_TRUE(pool_.streams.empty());
  // A connection ready in the pool takes no slot.
  pool_.ready = true;
  begin();
  EXPECT_TRUE(send());
  EXPECT_EQ(loop_->sent(), 1u);
}

TEST_F(AttemptLoopTest, AResponseEndReleasesTheStreamForReuseAndCountsTheAttempt) {
  begin();
  ASSERT_TRUE(send());
  loop_->connected(route_->config, true);
  loop_->headArrived(200, clock_.now());
  const EndpointRuntime& endpoint = *loop_->current().endpoint;
  const AttemptVerdict verdict =
      loop_->end(AttemptOutcome::fromStatus(200), /*reuse=*/true, AttemptVerdict::deliver());
  EXPECT_NE(verdict.asDeliver(), nullptr);
  EXPECT_FALSE(loop_->inFlight());
  EXPECT_TRUE(stream().released);
  EXPECT_FALSE(stream().attached());
  EXPECT_FALSE(timers_.armed(ExchangeSlot::Idle));
  EXPECT_EQ(attempts(endpoint, AttemptResult::Ok), 1);
  EXPECT_EQ(loop_->current().outcome.status, 200);
}

TEST_F(AttemptLoopTest, AFailureTheRouteFallsBackOnMovesToTheFallbackWithItsModel) {
  begin();
  const AttemptVerdict verdict = sendAndEndWith503();
  const auto* retry = verdict.asRetry();
  ASSERT_NE(retry, nullptr);
  EXPECT_EQ(retry->target.kind, AttemptTarget::Kind::NextFallback);

  ExchangeRecord record;
  loop_->scheduleRetry(*retry, *route_->metrics, record, clock_.now());
  EXPECT_EQ(loop_->retryTarget().kind, AttemptTarget::Kind::NextFallback);
  EXPECT_TRUE(timers_.armed(ExchangeSlot::RetryDelay));
  EXPECT_EQ(router_->fallbacks(), 1u);  // a spill-over, not a retry of primary

  begin(loop_->retryTarget());
  EXPECT_EQ(loop_->started(), 2u);
  EXPECT_EQ(loop_->current().upstream, &backup());
  EXPECT_EQ(loop_->current().destination.model, "small");
  RequestBody& sent = loop_->body(body_);
  EXPECT_NE(&sent, &body_);
  EXPECT_NE(std::string(sent.prefix()).find(R"("model":"small")"), std::string::npos);
}

TEST_F(AttemptLoopTest, ARetryIsNotActedOnWhileTheExchangeIsNotRunning) {
  begin();
  ASSERT_TRUE(send());
  loop_->connected(route_->config, true);
  owner_.facts.running = false;  // cancelling
  const AttemptVerdict verdict =
      loop_->end(AttemptOutcome::fromStatus(503), false,
                 AttemptVerdict::fail(makeProblem(problems::kUpstreamReset, "test")));
  EXPECT_NE(verdict.asFail(), nullptr);
  EXPECT_TRUE(stream().was_reset);  // not reused: generation stops
}

TEST_F(AttemptLoopTest, ASentCallThatMayNotRepeatIsNotSentAgainUnlessUnprocessed) {
  loop_->setSentResendable(false);
  begin();
  ASSERT_TRUE(send());
  loop_->connected(route_->config, true);
  AttemptVerdict verdict =
      loop_->end(AttemptOutcome::reset(), false,
                 AttemptVerdict::fail(makeProblem(problems::kUpstreamReset, "test")));
  EXPECT_NE(verdict.asFail(), nullptr);  // it reached the upstream

  begin();
  ASSERT_TRUE(send());  // never connected: the upstream cannot have processed it
  verdict = loop_->end(AttemptOutcome::reset(), false,
                       AttemptVerdict::fail(makeProblem(problems::kUpstreamReset, "test")));
  EXPECT_NE(verdict.asRetry(), nullptr);
}

TEST_F(AttemptLoopTest, TheDescriptionCarriesTheExchangesFacts) {
  begin();
  ASSERT_TRUE(send());
  owner_.facts.cancel_reason = CancelReason::BudgetExhausted;
  owner_.facts.finish_draining = true;
  const AttemptEnd end = loop_->describe(AttemptOutcome::cancelled());
  EXPECT_EQ(end.attempt, 1u);
  EXPECT_TRUE(end.unprocessed);  // never connected
  EXPECT_EQ(end.cancel_reason, CancelReason::BudgetExhausted);
  EXPECT_TRUE(end.finish_draining);
  EXPECT_FALSE(end.response_started);
}

TEST_F(AttemptLoopTest, IdleTimeCountsFromTheLastUpstreamByte) {
  begin();
  ASSERT_TRUE(send());
  loop_->connected(route_->config, true);
  loop_->headArrived(200, clock_.now());
  loop_->armIdle(route_->config, true);
  clock_.advance(600ms);
  loop_->current().last_upstream_byte = clock_.now();  // a byte arrived
  clock_.advance(600ms);
  EXPECT_FALSE(loop_->idleExpired(*route_->config, true, clock_.now()));  // re-armed
  EXPECT_TRUE(timers_.armed(ExchangeSlot::Idle));
  clock_.advance(400ms);
  EXPECT_TRUE(loop_->idleExpired(*route_->config, true, clock_.now()));
}

TEST_F(AttemptLoopTest, AResumedUpstreamIsReadAgainAndIdleTimeRestarts) {
  begin();
  ASSERT_TRUE(send());
  loop_->connected(route_->config, true);
  clock_.advance(5s);
  loop_->resumed(route_->config, true, clock_.now());
  EXPECT_EQ(stream().resumes, 1);
  EXPECT_EQ(loop_->current().last_upstream_byte, clock_.now());
  EXPECT_FALSE(loop_->idleExpired(*route_->config, true, clock_.now()));
}

TEST_F(AttemptLoopTest, AStreamStillHeldWhenTheLoopGoesIsReset) {
  begin();
  ASSERT_TRUE(send());
  RecordingStream& held = stream();
  loop_.reset();
  EXPECT_TRUE(held.was_reset);
  EXPECT_FALSE(held.attached());
}

TEST_F(AttemptLoopTest, ReleasingTheReplayStateFreesTheBodyOnlyOnceTheTransportTookIt) {
  begin();
  ASSERT_TRUE(send());
  const uint64_t size = body_.size();
  loop_->current().body_sent = size - 1;
  loop_->releaseReplayState(body_);
  EXPECT_EQ(loop_->current().request, nullptr);  // the head was sent
  EXPECT_EQ(body_.held(), size);                 // the transport reads the body still

  loop_->current().body_sent = size;
  loop_->releaseReplayState(body_);
  EXPECT_EQ(body_.held(), 0u);
}

TEST_F(AttemptLoopTest, ReleasingTheReplayStateOfAFallbackFreesItsCopyAndTheClientsBody) {
  begin();
  const AttemptVerdict verdict = sendAndEndWith503();
  ASSERT_NE(verdict.asRetry(), nullptr);
  ExchangeRecord record;
  loop_->scheduleRetry(*verdict.asRetry(), *route_->metrics, record, clock_.now());
  begin(loop_->retryTarget());
  ASSERT_TRUE(send());
  RequestBody& copy = loop_->body(body_);
  ASSERT_NE(&copy, &body_);
  loop_->current().body_sent = copy.size();
  loop_->releaseReplayState(body_);
  EXPECT_EQ(copy.held(), 0u);
  EXPECT_EQ(body_.held(), 0u);
}

TEST_F(AttemptLoopTest, ARefusedAttemptThatSpillsOverIsNotAnAttemptAndItsFiltersHearIt) {
  std::vector<std::string> heard;
  filters_ = FilterChain::of<DoneRecorder>(2, [&](size_t) { return DoneRecorder(heard); });
  begin();
  EXPECT_EQ(loop_->started(), 1u);
  loop_->spillOverRefused(CancelReason::CircuitOpen);
  EXPECT_EQ(loop_->started(), 0u);  // never sent: not an attempt
  EXPECT_EQ(loop_->sent(), 0u);
  EXPECT_EQ(router_->fallbacks(), 1u);
  EXPECT_EQ(heard, (std::vector<std::string>{"unsent circuit_open fallback",
                                             "unsent circuit_open fallback"}));

  begin(AttemptTarget::nextFallback());
  EXPECT_EQ(loop_->started(), 1u);
  EXPECT_EQ(loop_->current().upstream, &backup());
}

// --- the attempt's stream reports to the loop (UpstreamCallbacks) ------------------------

TEST_F(AttemptLoopTest, TheLoopForwardsTheResponseAndLeavesItsDeliveryToTheOwner) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamConnected();
  EXPECT_FALSE(timers_.armed(ExchangeSlot::Connect));
  upstream().onUpstreamHeaders(responseHead(200), false);
  EXPECT_FALSE(timers_.armed(ExchangeSlot::FirstByte));
  EXPECT_TRUE(timers_.armed(ExchangeSlot::Idle));
  upstream().onUpstreamData("hello", 5);
  upstream().onUpstreamComplete();

  ASSERT_EQ(downstream_.heads.size(), 1u);
  EXPECT_EQ(downstream_.heads[0].status, 200);
  EXPECT_EQ(downstream_.heads[0].headers.get("x-sluice-attempts"), "1");
  EXPECT_EQ(downstream_.heads[0].headers.get("x-sluice-upstream"), "primary");
  EXPECT_EQ(downstream_.body, "hello");
  EXPECT_TRUE(downstream_.ended);
  EXPECT_EQ(loop_->responseBytes(), 5u);
  EXPECT_EQ(owner_.heard, (std::vector<std::string>{"under way", "delivered 200"}));
  EXPECT_TRUE(stream().released);  // a clean end: the connection is reused
}

TEST_F(AttemptLoopTest, AHeadTheRouteFallsBackOnIsHeldAndItsRetryIsTheOwnersToActOn) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamConnected();
  upstream().onUpstreamHeaders(responseHead(503), false);
  upstream().onUpstreamData("busy", 4);
  EXPECT_TRUE(response_.relay().holding());
  upstream().onUpstreamComplete();

  EXPECT_TRUE(downstream_.heads.empty());  // the fallback may replace it
  EXPECT_TRUE(downstream_.body.empty());
  EXPECT_EQ(owner_.heard, (std::vector<std::string>{"retry http_5xx"}));
}

TEST_F(AttemptLoopTest, AHeldHeadIsReleasedWhenTheOwnerMayNoLongerReplay) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamConnected();
  owner_.may_replay = false;  // e.g. the budget is spent: the 503 is the answer
  upstream().onUpstreamHeaders(responseHead(503), false);
  EXPECT_FALSE(response_.relay().holding());
  upstream().onUpstreamData("busy", 4);
  upstream().onUpstreamComplete();
  ASSERT_EQ(downstream_.heads.size(), 1u);
  EXPECT_EQ(downstream_.heads[0].status, 503);
  EXPECT_EQ(downstream_.body, "busy");
  EXPECT_EQ(owner_.heard, (std::vector<std::string>{"under way", "delivered 503"}));
}

TEST_F(AttemptLoopTest, TransportErrorsAndAConnectTimeoutAreTheOwnersToDecide) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamError(UpstreamError::Refused, "goaway");
  EXPECT_TRUE(loop_->current().unprocessed);  // the upstream said it did not process it
  loop_->onTimer(ExchangeSlot::Connect);
  EXPECT_EQ(owner_.heard,
            (std::vector<std::string>{
                "failed reset " + upstreamErrorProblem(UpstreamError::Refused, "goaway").slug,
                "failed connect_error " + connectTimeoutProblem("primary", "a").slug}));
}

TEST_F(AttemptLoopTest, AnIdleSlotIsATimeoutOnlyOnceTheUpstreamWasSilentPastIdleTimeout) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamConnected();
  upstream().onUpstreamHeaders(responseHead(200), false);
  clock_.advance(500ms);
  upstream().onUpstreamData("x", 1);  // a byte: the idle time starts again
  clock_.advance(600ms);
  loop_->onTimer(ExchangeSlot::Idle);
  EXPECT_TRUE(owner_.heard == std::vector<std::string>{"under way"});
  EXPECT_TRUE(timers_.armed(ExchangeSlot::Idle));  // re-armed for the new due time
  clock_.advance(400ms);
  loop_->onTimer(ExchangeSlot::Idle);
  EXPECT_EQ(owner_.heard, (std::vector<std::string>{"under way", "timed out"}));
  loop_->onTimer(ExchangeSlot::FirstByte);
  EXPECT_EQ(owner_.heard.back(), "timed out");
  EXPECT_EQ(owner_.heard.size(), 3u);
}

TEST_F(AttemptLoopTest, AClientSlowerThanTheUpstreamPausesTheUpstream) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamConnected();
  upstream().onUpstreamHeaders(responseHead(200), false);
  downstream_.buffered = 128 * 1024;  // above the client's high watermark
  upstream().onUpstreamData("x", 1);
  EXPECT_EQ(stream().pauses, 1);
  EXPECT_FALSE(timers_.armed(ExchangeSlot::Idle));  // not idle: held by the client
}

TEST_F(AttemptLoopTest, NothingReachesTheOwnerOrTheClientOnceTheOwnerStopped) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamConnected();
  owner_.stopped = true;
  upstream().onUpstreamHeaders(responseHead(200), false);
  upstream().onUpstreamData("x", 1);
  upstream().onUpstreamComplete();
  upstream().onUpstreamError(UpstreamError::Reset, "gone");
  EXPECT_TRUE(owner_.heard.empty());
  EXPECT_TRUE(downstream_.heads.empty());
  EXPECT_EQ(loop_->responseBytes(), 0u);
}

TEST_F(AttemptLoopTest, AnAttemptSluiceStopsIsResetAndItsPropagationObserved) {
  begin();
  ASSERT_TRUE(send());
  upstream().onUpstreamConnected();
  const CancelContext before = loop_->cancelContext();
  EXPECT_EQ(before.upstream, "primary");
  EXPECT_EQ(before.attempts, 1u);
  const AttemptVerdict verdict = loop_->tearDown(
      AttemptOutcome::timeout(), AttemptVerdict::fail(makeProblem(problems::kUpstreamTimeout, "t")),
      clock_.preciseNow());
  EXPECT_NE(verdict.asFail(), nullptr);
  EXPECT_TRUE(stream().was_reset);  // not reused: generation stops
  EXPECT_FALSE(loop_->inFlight());
  EXPECT_EQ(primary().metrics->cancelPropagation().Collect().histogram.sample_count, 1u);
  loop_->abandon(makeProblem(problems::kUpstreamTimeout, "t"));  // nothing in flight: nothing to do
  EXPECT_EQ(attempts(*loop_->current().endpoint, AttemptResult::Timeout), 1);
}

TEST_F(AttemptLoopTest, AnAttemptStillInFlightWhenTheRequestIsAnsweredIsAbandonedCancelled) {
  begin();
  ASSERT_TRUE(send());
  loop_->abandon(makeProblem(problems::kBadRequest, "answered"));
  EXPECT_FALSE(loop_->inFlight());
  EXPECT_TRUE(stream().was_reset);
  EXPECT_EQ(loop_->current().outcome.kind, OutcomeKind::Cancelled);
}

}  // namespace
}  // namespace sluice
