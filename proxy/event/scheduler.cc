#include "proxy/event/scheduler.h"

#include "proxy/event/event_util.h"

namespace sluice {

namespace {

class LibeventTimer final : public ScheduledTimer {
 public:
  LibeventTimer(event_base* base, std::function<void()> cb) : timer_(base, std::move(cb)) {}
  void arm(std::chrono::nanoseconds d) override {
    timer_.arm(d);  // a negative delay fires on the next loop turn
  }
  void disarm() override { timer_.disarm(); }
  bool armed() const override { return timer_.armed(); }

 private:
  Timer timer_;
};

}  // namespace

ScheduledTimerPtr LibeventScheduler::createTimer(std::function<void()> cb) {
  return std::make_unique<LibeventTimer>(base_, std::move(cb));
}

}  // namespace sluice
