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
#include <memory>

#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"

namespace sluice {

class SendStallWatch {
 public:
  /** The owner's timer, shared with the watch, and its reaction to a stall. */
  class Alarm {
   public:
    /**
     * Have onAlarm() called at `at` or earlier (an earlier wake is fine: the
     * watch asks again). Every firing of the owner's timer must call
     * onAlarm() until stop().
     */
    virtual void wakeBy(MonotonicTime at) = 0;
    /** No byte accepted for the timeout: close (may delete the owner). */
    virtual void onSendStalled() = 0;

   protected:
    ~Alarm() = default;
  };

  /**
   * `timeout` zero = off (watch() then does nothing). Wakes on a Timer of its
   * own (allocated here), and calls `on_stalled` on a stall.
   */
  SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout,
                 std::function<void()> on_stalled);
  /** Likewise, waking and reporting through `alarm` (which outlives the watch). */
  SendStallWatch(Dispatcher& dispatcher, std::chrono::milliseconds timeout, Alarm& alarm);
  ~SendStallWatch();
  SendStallWatch(const SendStallWatch&) = delete;
  SendStallWatch& operator=(const SendStallWatch&) = delete;

  /** Starts watching `output` (a connection's socket output buffer, which outlives the watch). */
  void watch(evbuffer* output);
  /** Stops for good: no callback after this. */
  void stop();
  /**
   * The alarm fired (any reason). Calls Alarm::onSendStalled (which may
   * delete the owner) and returns true if the client stalled; false otherwise.
   */
  bool onAlarm();

 private:
  class OwnTimer;  // the Alarm of the first constructor

  static void onBufferCb(evbuffer*, const evbuffer_cb_info* info, void* arg);
  void onBufferChanged(const evbuffer_cb_info& info);

  Dispatcher& dispatcher_;
  const std::chrono::milliseconds timeout_;
  evbuffer* output_ = nullptr;
  evbuffer_cb_entry* entry_ = nullptr;
  std::unique_ptr<OwnTimer> own_;  // the first constructor's
  Alarm* alarm_;                   // the owner's, or own_
  MonotonicTime last_progress_{};  // last byte accepted, or when output became pending
  bool wake_pending_ = false;      // a wake is requested (the alarm fires by then)
};

}  // namespace sluice
