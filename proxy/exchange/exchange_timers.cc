#include "proxy/exchange/exchange_timers.h"

#include <algorithm>

namespace sluice {

ExchangeTimers::ExchangeTimers(Dispatcher& dispatcher, Owner& owner)
    : clock_(dispatcher.clock()),
      owner_(owner),
      wake_(dispatcher.createTimer([this] { onWake(); })) {}

void ExchangeTimers::arm(ExchangeSlot slot, MonotonicTime at) {
  slots_[index(slot)] = SlotTimer{next_id_++, at};
  wakeBy(at);
}

TimerId ExchangeTimers::armCallback(MonotonicTime at, std::function<void()> cb) {
  const TimerId id = next_id_++;
  callbacks_.push_back(CallbackTimer{id, at, std::move(cb)});
  wakeBy(at);
  return id;
}

void ExchangeTimers::disarmCallback(TimerId id) {
  if (id == 0) return;
  callbacks_.erase(std::remove_if(callbacks_.begin(), callbacks_.end(),
                                  [id](const CallbackTimer& t) { return t.id == id; }),
                   callbacks_.end());
  // The wake event may now fire early; onWake() finds nothing due and re-arms.
}

void ExchangeTimers::setDeadline(MonotonicTime at) {
  deadline_ = at;
  deadline_reason_ = CancelReason::BudgetExhausted;
  arm(ExchangeSlot::Deadline, at);
}

void ExchangeTimers::lowerDeadline(MonotonicTime at, CancelReason reason) {
  if (at >= deadline_) return;
  deadline_ = at;
  deadline_reason_ = reason;
  arm(ExchangeSlot::Deadline, at);
}

void ExchangeTimers::clear() {
  slots_.fill(SlotTimer{});
  callbacks_.clear();
  wake_->disarm();
  wake_at_ = MonotonicTime::max();
}

void ExchangeTimers::wakeBy(MonotonicTime at) {
  if (at >= wake_at_) return;  // armed for earlier (or as early) already
  wake_at_ = at;
  wake_->arm(at - clock_.now());
}

MonotonicTime ExchangeTimers::earliest() const {
  MonotonicTime earliest = MonotonicTime::max();
  for (const SlotTimer& t : slots_) {
    if (t.id != 0) earliest = std::min(earliest, t.at);
  }
  for (const CallbackTimer& t : callbacks_) earliest = std::min(earliest, t.at);
  return earliest;
}

void ExchangeTimers::onWake() {
  wake_at_ = MonotonicTime::max();  // fired: nothing armed now
  // Run every due timer, the first armed first; each may arm, disarm or end the exchange.
  while (owner_.timersLive()) {
    const MonotonicTime now = clock_.now();
    TimerId first = 0;
    size_t slot = kSlots;
    for (size_t i = 0; i < kSlots; ++i) {
      const SlotTimer& t = slots_[i];
      if (t.id != 0 && t.at <= now && (first == 0 || t.id < first)) {
        first = t.id;
        slot = i;
      }
    }
    auto callback = callbacks_.end();
    for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it) {
      if (it->at <= now && (first == 0 || it->id < first)) {
        first = it->id;
        callback = it;
      }
    }
    if (first == 0) break;
    if (callback != callbacks_.end()) {
      std::function<void()> cb = std::move(callback->cb);
      callbacks_.erase(callback);
      cb();
    } else {
      slots_[slot].id = 0;
      owner_.onSlot(static_cast<ExchangeSlot>(slot));
    }
  }
  if (!owner_.timersLive()) return;
  // Sleep until the earliest pending timer (a callback may have armed wake_ for a due one).
  const MonotonicTime next = earliest();
  if (next == wake_at_) return;
  if (next == MonotonicTime::max()) {
    wake_->disarm();
    wake_at_ = next;
    return;
  }
  wake_at_ = MonotonicTime::max();
  wakeBy(next);
}

}  // namespace sluice
