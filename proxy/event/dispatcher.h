#pragma once

// One worker thread's event loop and the services every object on that
// thread shares: the event_base, the clock and the timers that follow it
// (a Scheduler: libevent's, or a simulated one in tests), async DNS,
// deferred deletion and a thread-safe inbox for work posted from other
// threads (admin queries, drain, reload). Objects that live on a worker never touch another
// worker's Dispatcher directly; they post().

#include <event2/dns.h>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/clock.h"
#include "proxy/event/event_util.h"
#include "proxy/event/scheduler.h"

namespace sluice {

/** Something the Dispatcher can delete later, outside the callback that retired it. */
class DeferredDeletable {
 public:
  virtual ~DeferredDeletable() = default;
};
using DeferredDeletablePtr = std::unique_ptr<DeferredDeletable>;

class WriteFlusher;

class Dispatcher {
 public:
  /**
   * Timers come from `scheduler` when given (tests: simulated time on the
   * same clock), else from libevent on this dispatcher's event_base.
   */
  explicit Dispatcher(const Clock& clock, Scheduler* scheduler = nullptr);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  event_base* base() const { return base_.get(); }
  evdns_base* dns() const { return dns_; }
  const Clock& clock() const { return clock_; }
  /**
   * The one event that writes every plain socket's output added during a
   * loop turn (proxy/event/socket_io.h), shared by the connections of this loop.
   */
  WriteFlusher& writeFlusher();

  /** A one-shot timer whose callback runs on this dispatcher's thread. */
  ScheduledTimerPtr createTimer(std::function<void()> cb) {
    return scheduler_->createTimer(std::move(cb));
  }

  /**
   * Deletes `obj` on the next loop iteration (Envoy's deferred deletion): an
   * object may retire itself from inside its own callback safely.
   */
  void deferredDelete(DeferredDeletablePtr obj);

  /** Runs `fn` on this dispatcher's thread. Safe to call from any thread. */
  void post(std::function<void()> fn);

  /** Runs the loop until exit() (call from the owning thread). */
  void run();
  /** Makes run() return, once the work posted before it has run. Safe from any thread. */
  void exit();
  /** Runs what is ready now (posted work, deferred deletions, due events) without blocking. */
  void runNonBlocking();

 private:
  static void onDeferred(evutil_socket_t, short, void* arg);
  static void onWake(evutil_socket_t, short, void* arg);
  void clearDeferred();

  const Clock& clock_;
  EventBasePtr base_;
  std::unique_ptr<WriteFlusher> write_flusher_;  // made on first use; freed before base_
  std::unique_ptr<Scheduler> own_scheduler_;     // libevent's, unless one was given
  Scheduler* scheduler_ = nullptr;
  evdns_base* dns_ = nullptr;
  EventPtr deferred_event_;
  std::vector<DeferredDeletablePtr> to_delete_;
  std::vector<DeferredDeletablePtr> spare_;  // to_delete_'s capacity between turns
  // The inbox: post() appends under the mutex and, when it was empty, wakes
  // the loop through an eventfd. Nothing else crosses threads, so libevent
  // runs without its locks (PROFILE.md, sixth round).
  int wake_fd_ = -1;
  EventPtr wake_event_;
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
};

}  // namespace sluice
