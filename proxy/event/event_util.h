#pragma once

// RAII ownership for libevent objects, and a one-shot timer built on them.
// libevent is a C API; these keep every event/bufferevent/evbuffer owned by
// exactly one C++ object so nothing outlives the thing that armed it.

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <chrono>
#include <functional>
#include <memory>

#include "common/clock.h"

namespace sluice {

struct EventBaseDeleter {
  void operator()(event_base* b) const { event_base_free(b); }
};
struct EventDeleter {
  void operator()(event* e) const { event_free(e); }
};
struct BufferEventDeleter {
  void operator()(bufferevent* b) const { bufferevent_free(b); }
};
struct EvBufferDeleter {
  void operator()(evbuffer* b) const { evbuffer_free(b); }
};
struct ListenerDeleter {
  void operator()(evconnlistener* l) const { evconnlistener_free(l); }
};

using EventBasePtr = std::unique_ptr<event_base, EventBaseDeleter>;
using EventPtr = std::unique_ptr<event, EventDeleter>;
using BufferEventPtr = std::unique_ptr<bufferevent, BufferEventDeleter>;
using EvBufferPtr = std::unique_ptr<evbuffer, EvBufferDeleter>;
using ListenerPtr = std::unique_ptr<evconnlistener, ListenerDeleter>;

/** Converts a std::chrono duration to a timeval (negative → zero). */
inline timeval toTimeval(std::chrono::nanoseconds d) {
  if (d.count() < 0) d = std::chrono::nanoseconds::zero();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

/**
 * A re-armable one-shot timer on an event_base. Disarmed on destruction, so a
 * callback can never run after its owner is gone.
 */
class Timer {
 public:
  Timer(event_base* base, std::function<void()> cb)
      : cb_(std::move(cb)), ev_(evtimer_new(base, &Timer::onFire, this)) {}
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  /** (Re)arms the timer to fire once after `d`. */
  void arm(std::chrono::nanoseconds d) {
    const timeval tv = toTimeval(d);
    armed_ = evtimer_add(ev_.get(), &tv) == 0;
  }
  void disarm() {
    if (!armed_) return;
    armed_ = false;
    evtimer_del(ev_.get());
  }
  /**
   * Kept beside the event rather than asked of libevent (`event_pending`
   * locks the base and reads the event's flags: it was a tenth of the
   * send-stall watch's cost per streamed chunk). Only this class adds or
   * deletes the event, and a one-shot timer stops being pending as it fires.
   */
  bool armed() const { return armed_; }

 private:
  static void onFire(evutil_socket_t, short, void* arg) {
    const EventTimeScope event_time;
    auto* self = static_cast<Timer*>(arg);
    self->armed_ = false;
    self->cb_();
  }

  std::function<void()> cb_;
  EventPtr ev_;
  bool armed_ = false;
};

}  // namespace sluice
