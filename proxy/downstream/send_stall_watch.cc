#include "proxy/downstream/send_stall_watch.h"

namespace sluice {

/** A Timer of the watch's own (HTTP/2: its connection has no timer to share). */
class SendStallWatch::OwnTimer final : public SendStallWatch::Alarm {
 public:
  OwnTimer(SendStallWatch& watch, std::function<void()> on_stalled)
      : watch_(watch),
        on_stalled_(std::move(on_stalled)),
        timer_(watch.dispatcher_.base(), [this] { watch_.onAlarm(); }) {}

  void wakeBy(MonotonicTime at) override { timer_.arm(at - watch_.dispatcher_.clock().now()); }
  void onSendStalled() override { on_stalled_(); }
  void disarm() { timer_.disarm(); }

 private:
  SendStallWatch& watch_;
  std::function<void()> on_stalled_;
  Timer timer_;
};

SendStallWatch::SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                               std::function<void()> on_stalled)
    : dispatcher_(dispatcher),
      timeout_(timeout),
      own_(std::make_unique<OwnTimer>(*this, std::move(on_stalled))),
      alarm_(own_.get()) {}

SendStallWatch::SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                               Alarm& alarm)
    : dispatcher_(dispatcher), timeout_(timeout), alarm_(&alarm) {}

SendStallWatch::~SendStallWatch() { stop(); }

void SendStallWatch::watch(evbuffer* output) {
  if (timeout_.count() <= 0 || output == nullptr) return;
  stop();
  output_ = output;
  entry_ = evbuffer_add_cb(output_, &SendStallWatch::onBufferCb, this);
  if (evbuffer_get_length(output_) > 0) {
    last_progress_ = dispatcher_.clock().now();
    wake_pending_ = true;
    alarm_->wakeBy(last_progress_ + timeout_);
  }
}

void SendStallWatch::stop() {
  if (entry_ != nullptr) {
    evbuffer_remove_cb_entry(output_, entry_);
    entry_ = nullptr;
  }
  output_ = nullptr;
  wake_pending_ = false;
  // An owner's alarm is not withdrawn: its next firing finds nothing watched.
  if (own_) own_->disarm();
}

void SendStallWatch::onBufferCb(evbuffer*, const evbuffer_cb_info* info, void* arg) {
  static_cast<SendStallWatch*>(arg)->onBufferChanged(*info);
}

void SendStallWatch::onBufferChanged(const evbuffer_cb_info& info) {
  // Drained to the socket: the client accepted bytes. Added to an empty
  // buffer: output is pending from now on.
  if (info.n_deleted > 0 || info.orig_size == 0) last_progress_ = dispatcher_.clock().now();
  // A wake is pending while anything is; an empty buffer lets it lapse (onAlarm).
  if (evbuffer_get_length(output_) > 0 && !wake_pending_) {
    wake_pending_ = true;
    alarm_->wakeBy(dispatcher_.clock().now() + timeout_);
  }
}

bool SendStallWatch::onAlarm() {
  wake_pending_ = false;
  if (output_ == nullptr || evbuffer_get_length(output_) == 0) return false;  // nothing pending
  const MonotonicTime deadline = last_progress_ + timeout_;
  if (dispatcher_.clock().now() < deadline) {
    wake_pending_ = true;
    alarm_->wakeBy(deadline);
    return false;
  }
  Alarm& alarm = *alarm_;
  stop();
  alarm.onSendStalled();  // may delete the owner (and this): nothing after this
  return true;
}

}  // namespace sluice
