#include "proxy/event/dispatcher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

#include "proxy/event/socket_io.h"

namespace sluice {

Dispatcher::Dispatcher(const Clock& clock, Scheduler* scheduler) : clock_(clock) {
  // No evthread_use_pthreads(): an event_base is touched by its own thread
  // only. libevent's locks cost ~18 lock/unlock pairs per proxied request;
  // the one thing other threads do, post(), wakes the loop through wake_fd_.
  base_.reset(event_base_new());
  if (scheduler == nullptr) {
    own_scheduler_ = std::make_unique<LibeventScheduler>(base_.get());
    scheduler = own_scheduler_.get();
  }
  scheduler_ = scheduler;
  dns_ = evdns_base_new(base_.get(),
                        EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
  if (dns_ == nullptr) {
    // No usable resolv.conf (sealed sandboxes): /etc/hosts and IP literals still work.
    dns_ = evdns_base_new(base_.get(), 0);
    if (dns_ != nullptr) evdns_base_load_hosts(dns_, nullptr);
  }
  deferred_event_.reset(event_new(base_.get(), -1, 0, &Dispatcher::onDeferred, this));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  wake_event_.reset(
      event_new(base_.get(), wake_fd_, EV_READ | EV_PERSIST, &Dispatcher::onWake, this));
  event_add(wake_event_.get(), nullptr);
}

Dispatcher::~Dispatcher() {
  clearDeferred();
  deferred_event_.reset();
  wake_event_.reset();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  write_flusher_.reset();
  if (dns_ != nullptr) evdns_base_free(dns_, 0);
}

WriteFlusher& Dispatcher::writeFlusher() {
  if (!write_flusher_) write_flusher_ = std::make_unique<WriteFlusher>(base_.get());
  return *write_flusher_;
}

void Dispatcher::deferredDelete(DeferredDeletablePtr obj) {
  if (!obj) return;
  to_delete_.push_back(std::move(obj));
  if (to_delete_.size() == 1) event_active(deferred_event_.get(), 0, 0);
}

void Dispatcher::onDeferred(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  static_cast<Dispatcher*>(arg)->clearDeferred();
}

void Dispatcher::clearDeferred() {
  // Deleting one object may retire others; loop until quiet. The vectors'
  // capacity is kept for the next turn (no allocation per loop turn); a
  // nested call finds spare_ empty and is still correct.
  while (!to_delete_.empty()) {
    std::vector<DeferredDeletablePtr> batch = std::move(to_delete_);
    to_delete_ = std::move(spare_);
    to_delete_.clear();
    batch.clear();
    spare_ = std::move(batch);
  }
}

void Dispatcher::post(std::function<void()> fn) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    first = posted_.empty();
    posted_.push_back(std::move(fn));
  }
  // Only the post that made the inbox non-empty wakes the loop: onWake
  // resets the eventfd before it takes the inbox, so a later post either
  // finds its work taken with this batch or wakes the loop again.
  if (first) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
}

void Dispatcher::onWake(evutil_socket_t fd, short, void* arg) {
  const EventTimeScope event_time;
  auto* self = static_cast<Dispatcher*>(arg);
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd, &count, sizeof(count));
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(self->posted_mu_);
    work.swap(self->posted_);
  }
  for (auto& fn : work) fn();
}

void Dispatcher::run() { event_base_loop(base_.get(), EVLOOP_NO_EXIT_ON_EMPTY); }

void Dispatcher::exit() {
  // From any thread: the loop itself ends its run.
  post([base = base_.get()] { event_base_loopexit(base, nullptr); });
}

void Dispatcher::runNonBlocking() { event_base_loop(base_.get(), EVLOOP_NONBLOCK); }

}  // namespace sluice
