// Tests for the ChainRunner (proxy/exchange/chain_runner.h): the request
// path through the filters, phase by phase, with fake filters that answer
// as each test says and an Owner that records what it is told.

#include "proxy/exchange/chain_runner.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sluice {
namespace {

using namespace std::chrono_literals;
using Phase = ChainRunner::Phase;

// What the fake filters were asked, in order: "<filter>:<phase>".
using Log = std::vector<std::string>;

/** Answers each phase as scripted; `during` runs inside the call (a cancel, a finish). */
class FakeFilter final : public StreamFilter {
 public:
  FakeFilter(size_t index, Log& log) : index_(index), log_(log) {}
  std::string_view name() const override { return "fake"; }

  FilterStatus decodeHeaders(RequestHead&) override { return answer("headers", headers); }
  FilterStatus decodeComplete(std::string_view body) override {
    seen_body = std::string(body);
    return answer("complete", complete);
  }
  Admission beforeAttempt(RequestHead& request, const AttemptContext& attempt) override {
    seen_path = request.path;
    seen_number = attempt.number;
    log_.push_back(std::to_string(index_) + ":attempt");
    if (during) during();
    return admission;
  }
  void encodeLocalReply(Problem& problem) override {
    log_.push_back(std::to_string(index_) + ":local");
    problem.detail += "+" + std::to_string(index_);
  }
  void onDestroy() override { log_.push_back(std::to_string(index_) + ":destroy"); }

  FilterStatus headers = FilterStatus::Continue;
  FilterStatus complete = FilterStatus::Continue;
  Admission admission = Admission::proceed();
  std::function<void()> during;
  std::string seen_body;
  std::string seen_path;
  uint32_t seen_number = 0;

 private:
  FilterStatus answer(const char* phase, FilterStatus status) {
    log_.push_back(std::to_string(index_) + ":" + phase);
    if (during) during();
    return status;
  }

  size_t index_;
  Log& log_;
};

class ChainRunnerTest : public ::testing::Test, public ChainRunner::Owner {
 protected:
  void SetUp() override {
    request_.method = "POST";
    request_.path = "/v1/chat/completions";
    body_.append("{\"model\":\"m\"}", 13);
    body_.markComplete();
  }

  void build(size_t n) {
    runner_.filters() =
        FilterChain::of<FakeFilter>(n, [this](size_t i) { return FakeFilter(i, log_); });
  }
  FakeFilter& filter(size_t i) { return static_cast<FakeFilter&>(*runner_.filters()[i]); }

  // ChainRunner::Owner
  bool chainStopped() const override { return stopped_; }
  void onPhaseDone(Phase phase) override {
    log_.push_back("done:" + std::to_string(static_cast<int>(phase)));
  }
  void onAttemptRefused(CancelReason reason,
                        std::optional<std::chrono::milliseconds> retry_after) override {
    refused_ = reason;
    refused_retry_after_ = retry_after;
    log_.push_back("refused");
  }

  static std::string done(Phase phase) { return "done:" + std::to_string(static_cast<int>(phase)); }

  RequestHead request_;
  RequestBody body_;
  Log log_;
  bool stopped_ = false;
  std::optional<CancelReason> refused_;
  std::optional<std::chrono::milliseconds> refused_retry_after_;
  ChainRunner runner_{*this, request_, body_};
};

TEST_F(ChainRunnerTest, EachPhaseRunsEveryFilterInOrderThenTellsTheOwner) {
  build(3);
  EXPECT_EQ(runner_.phase(), Phase::DecodeHeaders);
  runner_.run();
  EXPECT_EQ(log_, (Log{"0:headers", "1:headers", "2:headers", done(Phase::DecodeHeaders)}));
  EXPECT_EQ(runner_.phase(), Phase::DecodeComplete);

  log_.clear();
  runner_.run();
  EXPECT_EQ(log_, (Log{"0:complete", "1:complete", "2:complete", done(Phase::DecodeComplete)}));
  EXPECT_EQ(filter(2).seen_body, "{\"model\":\"m\"}");
  EXPECT_EQ(runner_.phase(), Phase::DecodeComplete);  // until the attempt begins

  log_.clear();
  RequestHead upstream_request;
  upstream_request.path = "/chat";
  runner_.beginAttempt(upstream_request, AttemptContext{4, {}});
  EXPECT_EQ(log_, (Log{"0:attempt", "1:attempt", "2:attempt", done(Phase::BeforeAttempt)}));
  EXPECT_EQ(filter(1).seen_path, "/chat");
  EXPECT_EQ(filter(1).seen_number, 4u);
  EXPECT_EQ(runner_.phase(), Phase::Done);  // the attempt goes: nothing more runs
  EXPECT_FALSE(runner_.held());
}

TEST_F(ChainRunnerTest, AnEmptyChainEndsEachPhaseAtOnce) {
  runner_.run();
  EXPECT_EQ(log_, (Log{done(Phase::DecodeHeaders)}));
}

TEST_F(ChainRunnerTest, StopIterationHoldsThePhaseUntilResumedAfterThatFilter) {
  build(3);
  filter(1).headers = FilterStatus::StopIteration;
  runner_.run();
  EXPECT_EQ(log_, (Log{"0:headers", "1:headers"}));
  EXPECT_TRUE(runner_.held());
  EXPECT_EQ(runner_.phase(), Phase::DecodeHeaders);

  log_.clear();
  runner_.resume();
  EXPECT_EQ(log_, (Log{"2:headers", done(Phase::DecodeHeaders)}));
  EXPECT_FALSE(runner_.held());

  log_.clear();
  runner_.resume();  // nothing held: nothing runs
  EXPECT_TRUE(log_.empty());
}

TEST_F(ChainRunnerTest, ARefusalStopsThePhaseAndTheOwnerHearsIt) {
  build(3);
  runner_.run();
  runner_.run();
  log_.clear();
  filter(1).admission = Admission::refuse(CancelReason::CircuitOpen, 7s);
  RequestHead upstream_request;
  runner_.beginAttempt(upstream_request, AttemptContext{1, {}});
  EXPECT_EQ(log_, (Log{"0:attempt", "1:attempt", "refused"}));
  EXPECT_EQ(refused_, CancelReason::CircuitOpen);
  EXPECT_EQ(refused_retry_after_, std::chrono::milliseconds(7s));
  EXPECT_EQ(runner_.phase(), Phase::BeforeAttempt);
  EXPECT_FALSE(runner_.held());
}

TEST_F(ChainRunnerTest, ARefusalOfARequestAlreadyStoppingIsNotActedOn) {
  build(2);
  runner_.run();
  runner_.run();
  log_.clear();
  filter(0).admission = Admission::refuse(CancelReason::RateLimited, std::nullopt);
  filter(0).during = [this] { stopped_ = true; };  // the filter cancelled the request first
  RequestHead upstream_request;
  runner_.beginAttempt(upstream_request, AttemptContext{1, {}});
  EXPECT_EQ(log_, (Log{"0:attempt"}));
  EXPECT_FALSE(refused_.has_value());
}

TEST_F(ChainRunnerTest, AWaitingAdmissionResolvedToProceedRunsTheRestAndSends) {
  build(3);
  runner_.run();
  runner_.run();
  log_.clear();
  filter(0).admission = Admission::wait();
  RequestHead upstream_request;
  runner_.beginAttempt(upstream_request, AttemptContext{1, {}});
  EXPECT_EQ(log_, (Log{"0:attempt"}));
  EXPECT_TRUE(runner_.held());

  log_.clear();
  runner_.resolve(Admission::wait());  // not a resolution: ignored
  EXPECT_TRUE(log_.empty());
  EXPECT_TRUE(runner_.held());

  runner_.resolve(Admission::proceed());
  EXPECT_EQ(log_, (Log{"1:attempt", "2:attempt", done(Phase::BeforeAttempt)}));
  EXPECT_FALSE(runner_.held());

  log_.clear();
  runner_.resolve(Admission::proceed());  // once only
  EXPECT_TRUE(log_.empty());
}

TEST_F(ChainRunnerTest, AWaitingAdmissionResolvedToRefuseTellsTheOwner) {
  build(2);
  runner_.run();
  runner_.run();
  filter(1).admission = Admission::wait();
  RequestHead upstream_request;
  runner_.beginAttempt(upstream_request, AttemptContext{1, {}});
  log_.clear();
  runner_.resolve(Admission::refuse(CancelReason::BudgetExhausted, std::nullopt));
  EXPECT_EQ(log_, (Log{"refused"}));
  EXPECT_EQ(refused_, CancelReason::BudgetExhausted);
  EXPECT_FALSE(runner_.held());
}

TEST_F(ChainRunnerTest, ResolveOutsideAnAttemptIsIgnored) {
  build(2);
  filter(0).headers = FilterStatus::StopIteration;
  runner_.run();
  log_.clear();
  runner_.resolve(Admission::proceed());  // a decodeHeaders hold: only continueDecoding resumes
  EXPECT_TRUE(log_.empty());
  EXPECT_TRUE(runner_.held());
}

TEST_F(ChainRunnerTest, AStopMidPhaseEndsTheRunWithoutTellingTheOwner) {
  build(3);
  filter(1).during = [this] { stopped_ = true; };  // a cancel from inside the filter
  runner_.run();
  EXPECT_EQ(log_, (Log{"0:headers", "1:headers"}));
  EXPECT_EQ(runner_.phase(), Phase::DecodeHeaders);
  EXPECT_FALSE(runner_.held());
}

TEST_F(ChainRunnerTest, AfterStopNothingRuns) {
  build(2);
  filter(0).headers = FilterStatus::StopIteration;
  runner_.run();
  runner_.stop();
  log_.clear();
  runner_.resume();
  runner_.run();
  EXPECT_TRUE(log_.empty());
  EXPECT_EQ(runner_.phase(), Phase::Done);
}

TEST_F(ChainRunnerTest, AnAnswerOfSluicesOwnPassesEveryFilterInOrder) {
  build(2);
  Problem problem = makeProblem(problems::kUpstreamTimeout, "x");
  runner_.encodeLocalReply(problem);
  EXPECT_EQ(log_, (Log{"0:local", "1:local"}));
  EXPECT_EQ(problem.detail, "x+0+1");
}

TEST_F(ChainRunnerTest, DestroyTellsEveryFilterOnceAndNothingRunsAfter) {
  build(2);
  runner_.run();
  log_.clear();
  runner_.destroy();
  EXPECT_EQ(log_, (Log{"0:destroy", "1:destroy"}));
  EXPECT_EQ(runner_.phase(), Phase::Done);
  EXPECT_EQ(runner_.filters().size(), 2u);  // alive: what they handed out may point at them
  log_.clear();
  runner_.run();
  EXPECT_TRUE(log_.empty());
}

}  // namespace
}  // namespace sluice
