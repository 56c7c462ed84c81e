#pragma once

// limits.send_timeout (nginx's send_timeout): a client that accepts no byte
// for that long while sluice has output pending for it has stopped reading.
// Both downstream codecs own one SendStallWatch over their socket's output
// buffer and close the connection when it fires (cancel_reason
// `client_stalled`).
//
// The watch follows the output buffer's own changes (an evbuffer callback):
// bytes drained to the socket are progress; bytes added to an empty buffer
// start the wait. One timer, armed while output is pending; it only notes
// the time per change and re-arms for what is left when it wakes early, so
// a busy connection costs a clock read per write, not a timer operation.

#include <event2/buffer.h>

#include <chrono>
#include <functional>

#include "proxy/dispatcher.h"
#include "proxy/event_util.h"

namespace sluice {

class SendStallWatch {
 public:
  /** `timeout` zero = off (watch() then does nothing). */
  SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                 std::function<void()> on_stalled);
  ~SendStallWatch();
  SendStallWatch(const SendStallWatch&) = delete;
  SendStallWatch& operator=(const SendStallWatch&) = delete;

  /** Starts watching `output` (a connection's socket output buffer, which outlives the watch). */
  void watch(evbuffer* output);
  /** Stops for good: no callback after this. */
  void stop();

 private:
  static void onBufferCb(evbuffer*, const evbuffer_cb_info* info, void* arg);
  void onBufferChanged(const evbuffer_cb_info& info);
  void onTimer();

  Dispatcher& dispatcher_;
  const std::chrono::milliseconds timeout_;
  std::function<void()> on_stalled_;
  evbuffer* output_ = nullptr;
  evbuffer_cb_entry* entry_ = nullptr;
  Timer timer_;
  MonotonicTime last_progress_{};  // last byte accepted, or when output became pending
};

}  // namespace sluice
