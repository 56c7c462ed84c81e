#include "proxy/dispatcher.h"

#include <event2/thread.h>

#include "proxy/socket_io.h"

namespace sluice {

Dispatcher::Dispatcher(const Clock& clock, Scheduler* scheduler) : clock_(clock) {
  // Cross-thread post()/exit() need libevent's locking and wake-up support,
  // which must be on before the first event_base is made. Idempotent.
  static const int threads_enabled = evthread_use_pthreads();
  (void)threads_enabled;
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
  posted_event_.reset(event_new(base_.get(), -1, 0, &Dispatcher::onPosted, this));
}

Dispatcher::~Dispatcher() {
  clearDeferred();
  deferred_event_.reset();
  posted_event_.reset();
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
  static_cast<Dispatcher*>(arg)->clearDeferred();
}

void Dispatcher::clearDeferred() {
  // Deleting one object may retire others; loop until quiet.
  while (!to_delete_.empty()) {
    std::vector<DeferredDeletablePtr> batch;
    batch.swap(to_delete_);
    batch.clear();
  }
}

void Dispatcher::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    posted_.push_back(std::move(fn));
  }
  event_active(posted_event_.get(), 0, 0);
}

void Dispatcher::onPosted(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Dispatcher*>(arg);
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(self->posted_mu_);
    work.swap(self->posted_);
  }
  for (auto& fn : work) fn();
}

void Dispatcher::run() { event_base_loop(base_.get(), EVLOOP_NO_EXIT_ON_EMPTY); }

void Dispatcher::exit() { event_base_loopexit(base_.get(), nullptr); }

void Dispatcher::runNonBlocking() { event_base_loop(base_.get(), EVLOOP_NONBLOCK); }

}  // namespace sluice
