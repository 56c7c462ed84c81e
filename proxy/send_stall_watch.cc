#include "proxy/send_stall_watch.h"

namespace sluice {

SendStallWatch::SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                               std::function<void()> on_stalled)
    : dispatcher_(dispatcher),
      timeout_(timeout),
      on_stalled_(std::move(on_stalled)),
      timer_(dispatcher.base(), [this] { onTimer(); }) {}

SendStallWatch::~SendStallWatch() { stop(); }

void SendStallWatch::watch(evbuffer* output) {
  if (timeout_.count() <= 0 || output == nullptr) return;
  stop();
  output_ = output;
  entry_ = evbuffer_add_cb(output_, &SendStallWatch::onBufferCb, this);
  if (evbuffer_get_length(output_) > 0) {
    last_progress_ = dispatcher_.clock().now();
    timer_.arm(timeout_);
  }
}

void SendStallWatch::stop() {
  if (entry_ != nullptr) {
    evbuffer_remove_cb_entry(output_, entry_);
    entry_ = nullptr;
  }
  output_ = nullptr;
  timer_.disarm();
}

void SendStallWatch::onBufferCb(evbuffer*, const evbuffer_cb_info* info, void* arg) {
  static_cast<SendStallWatch*>(arg)->onBufferChanged(*info);
}

void SendStallWatch::onBufferChanged(const evbuffer_cb_info& info) {
  // Drained to the socket: the client accepted bytes. Added to an empty
  // buffer: output is pending from now on.
  if (info.n_deleted > 0 || info.orig_size == 0) last_progress_ = dispatcher_.clock().now();
  // Armed while anything is pending; an empty buffer lets it lapse (onTimer).
  if (evbuffer_get_length(output_) > 0 && !timer_.armed()) timer_.arm(timeout_);
}

void SendStallWatch::onTimer() {
  if (output_ == nullptr || evbuffer_get_length(output_) == 0) return;  // nothing pending
  const MonotonicTime deadline = last_progress_ + timeout_;
  const MonotonicTime now = dispatcher_.clock().now();
  if (now < deadline) {
    timer_.arm(deadline - now);
    return;
  }
  stop();
  on_stalled_();  // may delete the owner: nothing after this
}

}  // namespace sluice
