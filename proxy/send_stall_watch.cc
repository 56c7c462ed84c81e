#include "proxy/send_stall_watch.h"

namespace sluice {

SendStallWatch::SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                               std::function<void()> on_stalled)
    : dispatcher_(dispatcher), timeout_(timeout), on_stalled_(std::move(on_stalled)) {
  timer_.emplace(dispatcher.base(), [this] { onWake(); });
}

SendStallWatch::SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                               std::function<void()> on_stalled, Alarm& alarm)
    : dispatcher_(dispatcher),
      timeout_(timeout),
      on_stalled_(std::move(on_stalled)),
      alarm_(&alarm) {}

SendStallWatch::~SendStallWatch() { stop(); }

void SendStallWatch::watch(evbuffer* output) {
  if (timeout_.count() <= 0 || output == nullptr) return;
  stop();
  output_ = output;
  entry_ = evbuffer_add_cb(output_, &SendStallWatch::onBufferCb, this);
  if (evbuffer_get_length(output_) > 0) {
    last_progress_ = dispatcher_.clock().now();
    requestWake(timeout_, last_progress_);
  }
}

void SendStallWatch::stop() {
  if (entry_ != nullptr) {
    evbuffer_remove_cb_entry(output_, entry_);
    entry_ = nullptr;
  }
  output_ = nullptr;
  wake_pending_ = false;
  if (timer_) timer_->disarm();
  // A shared alarm cannot be withdrawn: its next firing finds nothing watched.
}

void SendStallWatch::requestWake(std::chrono::nanoseconds d, MonotonicTime now) {
  wake_pending_ = true;
  if (timer_) {
    timer_->arm(d);
  } else {
    alarm_->wakeBy(now + d);
  }
}

void SendStallWatch::onBufferCb(evbuffer*, const evbuffer_cb_info* info, void* arg) {
  static_cast<SendStallWatch*>(arg)->onBufferChanged(*info);
}

void SendStallWatch::onBufferChanged(const evbuffer_cb_info& info) {
  // Drained to the socket: the client accepted bytes. Added to an empty
  // buffer: output is pending from now on.
  if (info.n_deleted > 0 || info.orig_size == 0) last_progress_ = dispatcher_.clock().now();
  // A wake is pending while anything is; an empty buffer lets it lapse (onWake).
  if (evbuffer_get_length(output_) > 0 && !wake_pending_) {
    requestWake(timeout_, alarm_ != nullptr ? dispatcher_.clock().now() : MonotonicTime{});
  }
}

bool SendStallWatch::onWake() {
  wake_pending_ = false;
  if (output_ == nullptr || evbuffer_get_length(output_) == 0) return false;  // nothing pending
  const MonotonicTime deadline = last_progress_ + timeout_;
  const MonotonicTime now = dispatcher_.clock().now();
  if (now < deadline) {
    requestWake(deadline - now, now);
    return false;
  }
  stop();
  on_stalled_();  // may delete the owner: nothing after this
  return true;
}

}  // namespace sluice
