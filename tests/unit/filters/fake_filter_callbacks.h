#pragma once

// A fake Exchange for filter unit tests (Envoy filter-test style): records
// everything a filter asks of its FilterCallbacks, serves time from a
// ManualClock, and holds the timers a filter arms so a test can fire them.

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "filters/filter.h"
#include "proxy/exchange/config_snapshot.h"

namespace sluice::test {

class FakeFilterCallbacks : public FilterCallbacks, public RequestRecord {
 public:
  explicit FakeFilterCallbacks(ManualClock& clock) : clock_(clock), start_(clock.now()) {}

  void continueDecoding() override { ++continue_calls; }
  /**
   * Recorded, then acted on as the Exchange does when no fallback is left:
   * Continue resumes the chain (continue_calls), Refuse cancels (cancels,
   * refusals).
   */
  void resolveAttempt(const Admission& admission) override {
    resolutions.push_back(admission);
    if (admission.proceeds()) ++continue_calls;
    if (admission.refuses()) {
      ++refusals;
      cancels.emplace_back(admission.reason, admission.retry_after);
    }
  }
  void sendLocalReply(const Problem& problem) override { local_replies.push_back(problem); }
  void cancel(CancelReason reason, std::optional<std::chrono::milliseconds> retry_after) override {
    cancels.emplace_back(reason, retry_after);
  }
  TimerId armTimer(MonotonicTime at, std::function<void()> cb) override {
    const TimerId id = ++timers_armed;
    timers_.push_back({id, at, std::move(cb)});
    return id;
  }
  void disarmTimer(TimerId id) override {
    ++timers_disarmed;
    timers_.erase(std::remove_if(timers_.begin(), timers_.end(),
                                 [id](const Pending& t) { return t.id == id; }),
                  timers_.end());
  }
  const Clock& clock() const override { return clock_; }
  MonotonicTime deadline() const override { return deadline_; }
  void setDeadline(MonotonicTime deadline) override {
    deadline_ = deadline;
    ++set_deadline_calls;
  }
  MonotonicTime startTime() const override { return start_; }
  const RequestHead& request() const override { return request_head; }
  uint32_t attemptNumber() const override { return attempt; }
  /** The AttemptContext the Exchange hands beforeAttempt: `attempt` to `destination_value`. */
  AttemptContext attemptContext() const { return AttemptContext{attempt, destination_value}; }
  bool requestBodyReplayable() const override { return body_replayable; }
  std::function<void()> crossThreadWaker(std::function<void()> fn) override { return fn; }
  void lowerDeadline(MonotonicTime deadline, CancelReason reason) override {
    if (deadline >= deadline_) return;
    deadline_ = deadline;
    deadline_reason = reason;
  }
  RequestRecord& record() override { return *this; }
  // RequestRecord: recorded in the fields below.
  void addUsage(const AttemptUsage& usage) override { usages.push_back(usage); }
  void setRun(std::string_view run_id, std::string_view parent_run_id) override {
    run = std::string(run_id);
    parent_run = std::string(parent_run_id);
  }
  std::optional<CancelReason> cancelReason() const override { return cancel_reason; }
  void setJsonRpc(std::string_view method, std::optional<std::string_view> id,
                  std::string_view tool) override {
    jsonrpc_method = std::string(method);
    jsonrpc_id = id ? std::optional<std::string>(std::string(*id)) : std::nullopt;
    jsonrpc_tool = std::string(tool);
  }
  void setSentResendable(bool resendable) override { sent_resendable = resendable; }
  void setRunSpend(RunSpend* spend) override { run_spend = spend; }
  RunSpend* runSpend() const override { return run_spend; }
  bool holdUntilRead(std::unique_ptr<ReadReceipt>& receipt) override {
    if (!confirms_reads) return false;
    held.push_back(std::move(receipt));
    return true;
  }

  /** Runs the armed timers due by now (the clock), earliest first. */
  void fireDueTimers() {
    for (;;) {
      auto it = std::min_element(timers_.begin(), timers_.end(),
                                 [](const Pending& a, const Pending& b) { return a.at < b.at; });
      if (it == timers_.end() || it->at > clock_.now()) return;
      auto cb = std::move(it->cb);
      timers_.erase(it);
      cb();
    }
  }
  size_t armedTimers() const { return timers_.size(); }

  // What the test sets.
  RequestHead request_head;
  uint32_t attempt = 1;
  bool body_replayable = true;
  std::optional<CancelReason> cancel_reason;
  bool confirms_reads = false;  // holdUntilRead takes the receipt (an HTTP/1.1 client)

  // What the filter did.
  int continue_calls = 0;
  int set_deadline_calls = 0;
  uint64_t timers_armed = 0;
  int timers_disarmed = 0;
  std::vector<Problem> local_replies;
  std::vector<std::pair<CancelReason, std::optional<std::chrono::milliseconds>>> cancels;
  std::vector<Admission> resolutions;  // resolveAttempt's, in order
  int refusals = 0;                    // of the cancels, those that came through resolveAttempt
  AttemptDestination destination_value;
  std::vector<AttemptUsage> usages;
  std::string jsonrpc_method;
  std::optional<std::string> jsonrpc_id;
  std::string jsonrpc_tool;
  std::optional<bool> sent_resendable;  // nullopt: never said
  RunSpend* run_spend = nullptr;
  std::optional<CancelReason> deadline_reason;  // of the last lowerDeadline that lowered it
  std::string run;
  std::string parent_run;
  std::vector<std::unique_ptr<ReadReceipt>> held;  // handed over by holdUntilRead

 private:
  struct Pending {
    TimerId id;
    MonotonicTime at;
    std::function<void()> cb;
  };
  ManualClock& clock_;
  MonotonicTime start_;
  MonotonicTime deadline_ = MonotonicTime::max();
  std::vector<Pending> timers_;
};

}  // namespace sluice::test
