#pragma once

// limits.send_timeout (nginx's send_timeout): a client that accepts no byte
// for that long while sluice has output pending for it has stopped reading.
// Both downstream codecs own one SendStallWatch over their socket's output
// buffer and close the connection when it fires (cancel_reason
// `client_stalled`).
//
// The watch follows the output buffer's own changes (an evbuffer callback):
// bytes drained to the socket are progress; bytes added to an empty buffer
// start the wait. One wake, requested while output is pending; it only notes
// the time per change and asks again for what is left when it wakes early,
// so a busy connection costs a clock read per write, not a timer operation.
//
// The wake is the watch's own Timer, or — so that a held connection keeps
// one libevent timer, not two (128 bytes each) — the owner's (an Alarm: the
// HTTP/1.1 connection's read timer, which moves only earlier and calls
// onAlarm() whenever it fires).

#include <event2/buffer.h>

#include <chrono>
#include <functional>
#include <optional>

#include "proxy/dispatcher.h"
#include "proxy/event_util.h"

namespace sluice {

class SendStallWatch {
 public:
  /** The owner's timer, shared with the watch. */
  class Alarm {
   public:
    /**
     * Have onAlarm() called at `at` or earlier (an earlier wake is fine: the
     * watch asks again). Every firing of the owner's timer must call
     * onAlarm() until stop().
     */
    virtual void wakeBy(MonotonicTime at) = 0;

   protected:
    ~Alarm() = default;
  };

  /** `timeout` zero = off (watch() then does nothing). Wakes on a Timer of its own. */
  SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                 std::function<void()> on_stalled);
  /** Likewise, waking through `alarm` (which outlives the watch's use of it). */
  SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                 std::function<void()> on_stalled, Alarm& alarm);
  ~SendStallWatch();
  SendStallWatch(const SendStallWatch&) = delete;
  SendStallWatch& operator=(const SendStallWatch&) = delete;

  /** Starts watching `output` (a connection's socket output buffer, which outlives the watch). */
  void watch(evbuffer* output);
  /** Stops for good: no callback after this. */
  void stop();
  /**
   * The shared alarm fired (any reason). Calls on_stalled (which may delete
   * the owner) and returns true if the client stalled; false otherwise.
   */
  bool onAlarm() { return onWake(); }

 private:
  static void onBufferCb(evbuffer*, const evbuffer_cb_info* info, void* arg);
  void onBufferChanged(const evbuffer_cb_info& info);
  /** Asks for a wake after `d` (own timer) or at now + d (alarm). */
  void requestWake(std::chrono::nanoseconds d, MonotonicTime now);
  bool onWake();

  Dispatcher& dispatcher_;
  const std::chrono::milliseconds timeout_;
  std::function<void()> on_stalled_;
  evbuffer* output_ = nullptr;
  evbuffer_cb_entry* entry_ = nullptr;
  Alarm* alarm_ = nullptr;         // the owner's timer, or
  std::optional<Timer> timer_;     // one of the watch's own
  bool wake_pending_ = false;      // a wake is armed or requested
  MonotonicTime last_progress_{};  // last byte accepted, or when output became pending
};

}  // namespace sluice
