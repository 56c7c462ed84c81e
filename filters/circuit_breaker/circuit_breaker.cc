#include "filters/circuit_breaker/circuit_breaker.h"

#include <algorithm>

namespace sluice {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// The failure-rate window is kept as this many buckets (Hystrix's rolling
// window): the rate forgets old traffic in window/10 steps, not all at once.
constexpr size_t kWindowBuckets = 10;

nanoseconds bucketWidth(const config::CircuitBreakerConfig& c) {
  const auto width = std::chrono::duration_cast<nanoseconds>(c.failure_rate.window) /
                     static_cast<int64_t>(kWindowBuckets);
  return std::max(width, nanoseconds(std::chrono::milliseconds(1)));
}

milliseconds clampCooldown(milliseconds value, const config::CircuitBreakerConfig& c) {
  const milliseconds lo = std::max(c.cooldown, milliseconds(0));
  const milliseconds hi = std::max(c.max_cooldown, lo);
  return std::clamp(value, lo, hi);
}

}  // namespace

std::string_view toString(CircuitState state) {
  switch (state) {
    case CircuitState::Closed:
      return "closed";
    case CircuitState::Open:
      return "open";
    case CircuitState::HalfOpen:
      return "half_open";
  }
  return "unknown";
}

std::string_view toString(CircuitEvent event) {
  switch (event) {
    case CircuitEvent::Trip:
      return "trip";
    case CircuitEvent::CooldownElapsed:
      return "cooldown_elapsed";
    case CircuitEvent::ProbesSucceeded:
      return "probes_succeeded";
    case CircuitEvent::ProbeFailed:
      return "probe_failed";
    case CircuitEvent::PeerOpened:
      return "peer_opened";
    case CircuitEvent::PeerClosed:
      return "peer_closed";
  }
  return "unknown";
}

std::optional<CircuitState> circuitTransition(CircuitState from, CircuitEvent event) {
  struct Row {
    CircuitState from;
    CircuitEvent event;
    CircuitState to;
  };
  static constexpr Row kTable[] = {
      {CircuitState::Closed, CircuitEvent::Trip, CircuitState::Open},
      {CircuitState::Open, CircuitEvent::CooldownElapsed, CircuitState::HalfOpen},
      {CircuitState::HalfOpen, CircuitEvent::ProbesSucceeded, CircuitState::Closed},
      {CircuitState::HalfOpen, CircuitEvent::ProbeFailed, CircuitState::Open},
      {CircuitState::Closed, CircuitEvent::PeerOpened, CircuitState::Open},
      {CircuitState::HalfOpen, CircuitEvent::PeerOpened, CircuitState::Open},
      {CircuitState::Open, CircuitEvent::PeerClosed, CircuitState::Closed},
      {CircuitState::HalfOpen, CircuitEvent::PeerClosed, CircuitState::Closed},
  };
  for (const Row& row : kTable) {
    if (row.from == from && row.event == event) return row.to;
  }
  return std::nullopt;
}

CircuitBreaker::CircuitBreaker(const config::CircuitBreakerConfig& config, const Clock& clock,
                               TransitionListener listener, TransitionListener reporter)
    : clock_(clock),
      listener_(std::move(listener)),
      reporter_(std::move(reporter)),
      config_(config),
      current_cooldown_(clampCooldown(config.cooldown, config)),
      bucket_width_(bucketWidth(config)),
      buckets_(kWindowBuckets) {}

CircuitBreaker::Lock::~Lock() {
  const size_t n = breaker_.unreported_count_;
  if (n == 0) return;  // lock_ unlocks
  const std::array<Transition, kMaxUnreported> fired = breaker_.unreported_;
  breaker_.unreported_count_ = 0;
  lock_.unlock();
  for (size_t i = 0; i < n; ++i) breaker_.reporter_(fired[i].from, fired[i].to);
}

CircuitAdmission CircuitBreaker::admit(PermitWaiter waiter) {
  const MonotonicTime now = clock_.now();
  Lock lock(*this);
  maybeEndCooldownLocked(now);

  CircuitAdmission a;
  a.generation = generation_;
  if (state_ == CircuitState::Open) {
    a.result = CircuitAdmission::Result::Rejected;
    a.retry_after = cooldownLeftLocked(now);
    return a;
  }
  if (config_.max_requests != 0 && active_ >= config_.max_requests) {
    ++overloaded_;
    a.result = CircuitAdmission::Result::Overloaded;
    return a;
  }
  if (state_ == CircuitState::HalfOpen) {
    if (probes_admitted_ >= std::max<uint32_t>(1, config_.half_open_probes)) {
      a.result = CircuitAdmission::Result::Rejected;
      a.retry_after = std::min(config_.cooldown, kHalfOpenRetryAfter);
      return a;
    }
    bool deferred = false;
    if (!holdsProbePermitLocked(now, &waiter, &deferred)) {
      // Asked on this caller's behalf (the waiter was taken): it waits for the answer.
      a.result = deferred ? CircuitAdmission::Result::Deferred : CircuitAdmission::Result::Rejected;
      a.retry_after = std::min(config_.cooldown, kHalfOpenRetryAfter);
      return a;
    }
    ++probes_admitted_;
    a.probe = true;
  }
  ++active_;
  a.result = CircuitAdmission::Result::Admitted;
  return a;
}

void CircuitBreaker::onResult(const CircuitAdmission& admission, const AttemptOutcome& outcome) {
  if (!admission.admitted()) return;
  const MonotonicTime now = clock_.now();
  Lock lock(*this);
  if (active_ > 0) --active_;
  if (admission.generation != generation_) return;  // admitted under an earlier state

  const bool cancelled = outcome.kind == OutcomeKind::Cancelled;
  const bool failure = outcomeIn(config_.failure_on, outcome);

  if (state_ == CircuitState::HalfOpen) {
    if (!admission.probe) return;
    if (cancelled) {
      // The probe told us nothing: free its slot for another one. The fleet's
      // permit goes back too (unless another probe here still uses it): a
      // peer may probe at once rather than wait for the permit to expire.
      if (probes_admitted_ > 0) --probes_admitted_;
      if (global_ && permit_ == ProbePermit::Won && probes_admitted_ == 0) {
        permit_ = ProbePermit::None;
        global_->releaseProbe();
      }
      return;
    }
    if (failure) {
      fireLocked(CircuitEvent::ProbeFailed, now);
    } else if (++probe_successes_ >= std::max<uint32_t>(1, config_.half_open_probes)) {
      fireLocked(CircuitEvent::ProbesSucceeded, now);
    }
    return;
  }

  if (state_ != CircuitState::Closed || cancelled) return;
  recordLocked(failure, now);
  if (!failure) {
    consecutive_failures_ = 0;
    return;
  }
  ++consecutive_failures_;
  const bool consecutive_trip =
      config_.consecutive_failures != 0 && consecutive_failures_ >= config_.consecutive_failures;
  if (consecutive_trip || rateTripsLocked(now)) fireLocked(CircuitEvent::Trip, now);
}

bool CircuitBreaker::judgeProbe(const CircuitAdmission& admission, const AttemptOutcome& outcome) {
  if (!admission.admitted() || !admission.probe || outcome.kind == OutcomeKind::Cancelled) {
    return false;
  }
  const MonotonicTime now = clock_.now();
  Lock lock(*this);
  if (admission.generation != generation_ || state_ != CircuitState::HalfOpen) return false;
  if (outcomeIn(config_.failure_on, outcome)) {
    fireLocked(CircuitEvent::ProbeFailed, now);
  } else if (++probe_successes_ >= std::max<uint32_t>(1, config_.half_open_probes)) {
    fireLocked(CircuitEvent::ProbesSucceeded, now);
  }
  return true;
}

bool CircuitBreaker::tryEnterPending() {
  std::lock_guard lock(mutex_);
  if (config_.max_pending != 0 && pending_ >= config_.max_pending) {
    ++overloaded_;
    return false;
  }
  ++pending_;
  return true;
}

void CircuitBreaker::leavePending() {
  std::lock_guard lock(mutex_);
  if (pending_ > 0) --pending_;
}

CircuitState CircuitBreaker::state() {
  const MonotonicTime now = clock_.now();
  Lock lock(*this);
  maybeEndCooldownLocked(now);
  return state_;
}

milliseconds CircuitBreaker::cooldownLeft() {
  const MonotonicTime now = clock_.now();
  Lock lock(*this);
  maybeEndCooldownLocked(now);
  return cooldownLeftLocked(now);
}

milliseconds CircuitBreaker::currentCooldown() const {
  std::lock_guard lock(mutex_);
  return current_cooldown_;
}

uint32_t CircuitBreaker::consecutiveFailures() const {
  std::lock_guard lock(mutex_);
  return consecutive_failures_;
}

uint32_t CircuitBreaker::activeRequests() const {
  std::lock_guard lock(mutex_);
  return active_;
}

uint32_t CircuitBreaker::pendingRequests() const {
  std::lock_guard lock(mutex_);
  return pending_;
}

uint64_t CircuitBreaker::overloadedCount() const {
  std::lock_guard lock(mutex_);
  return overloaded_;
}

void CircuitBreaker::updateConfig(const config::CircuitBreakerConfig& config) {
  std::lock_guard lock(mutex_);
  config_ = config;
  current_cooldown_ = clampCooldown(current_cooldown_, config_);
  bucket_width_ = bucketWidth(config_);
  resetCountersLocked();
}

void CircuitBreaker::setGlobal(std::shared_ptr<GlobalCircuit> global) {
  std::lock_guard lock(mutex_);
  global_ = std::move(global);
}

void CircuitBreaker::applyPeer(CircuitState to, milliseconds open_for) {
  const MonotonicTime now = clock_.now();
  Lock lock(*this);
  maybeEndCooldownLocked(now);
  if (to == CircuitState::Open) {
    // A peer's word (or anyone's who can write to the store): never longer
    // than this breaker would stay open by itself.
    open_for = clampCooldown(open_for, config_);
    current_cooldown_ = open_for;
    if (state_ == CircuitState::Open) {
      open_until_ = std::max(open_until_, now + open_for);  // already open: the later end
      return;
    }
    fireLocked(CircuitEvent::PeerOpened, now);
    open_until_ = now + open_for;
  } else if (to == CircuitState::Closed) {
    fireLocked(CircuitEvent::PeerClosed, now);
  }
}

bool CircuitBreaker::holdsProbePermitLocked(MonotonicTime now, PermitWaiter* waiter,
                                            bool* deferred) {
  if (!global_ || permit_ == ProbePermit::Won) return true;
  if (permit_ == ProbePermit::Asking) return false;
  if (permit_ == ProbePermit::Lost && now < permit_retry_at_) return false;
  permit_ = ProbePermit::Asking;
  const std::weak_ptr<CircuitBreaker> self = weak_from_this();
  const uint64_t generation = generation_;
  // The caller's waiter goes into the answer's callback only when the fleet
  // is asked (an answer at once is the caller's own).
  auto holder = std::make_shared<PermitWaiter>();
  const std::optional<bool> at_once = global_->claimProbe([self, generation, holder](bool won) {
    if (auto breaker = self.lock()) breaker->onProbeClaim(generation, won, std::move(*holder));
  });
  if (!at_once) {
    // Asked: the caller waits for the answer, or is rejected until it comes.
    if (waiter != nullptr && *waiter) {
      *holder = std::move(*waiter);
      *deferred = true;
    }
    return false;
  }
  permit_ = *at_once ? ProbePermit::Won : ProbePermit::Lost;
  permit_retry_at_ = now + kHalfOpenRetryAfter;
  return *at_once;
}

CircuitAdmission CircuitBreaker::admitProbeLocked() {
  CircuitAdmission a;
  a.generation = generation_;
  ++probes_admitted_;
  ++active_;
  a.probe = true;
  a.result = CircuitAdmission::Result::Admitted;
  return a;
}

void CircuitBreaker::onProbeClaim(uint64_t generation, bool won, PermitWaiter waiter) {
  const MonotonicTime now = clock_.now();
  CircuitAdmission verdict;  // Rejected unless the waiter is the probe
  verdict.retry_after = kHalfOpenRetryAfter;
  bool release = false;
  std::shared_ptr<GlobalCircuit> global;
  {
    std::lock_guard lock(mutex_);
    verdict.retry_after = std::min(config_.cooldown, kHalfOpenRetryAfter);
    verdict.generation = generation_;
    if (generation != generation_ || permit_ != ProbePermit::Asking) {
      // The circuit moved on (a peer's verdict, a reload): nobody here will
      // probe with this permit, so it goes back at once.
      release = won && global_ != nullptr;
    } else {
      permit_ = won ? ProbePermit::Won : ProbePermit::Lost;
      permit_retry_at_ = now + kHalfOpenRetryAfter;
      const bool slot_free = probes_admitted_ < std::max<uint32_t>(1, config_.half_open_probes) &&
                             (config_.max_requests == 0 || active_ < config_.max_requests);
      if (won && waiter && slot_free) {
        verdict = admitProbeLocked();
      } else if (won && waiter && probes_admitted_ == 0) {
        // Won, but the one who asked cannot probe (every slot is taken): give
        // it back rather than hold the fleet's permit with nothing sent. (A
        // caller without a waiter probes with it on its next admit().)
        permit_ = ProbePermit::None;
        release = true;
      }
    }
    if (release) global = global_;
  }
  if (global) global->releaseProbe();
  if (waiter) waiter(verdict);
}

void CircuitBreaker::maybeEndCooldownLocked(MonotonicTime now) {
  if (state_ == CircuitState::Open && now >= open_until_) {
    fireLocked(CircuitEvent::CooldownElapsed, now);
  }
}

void CircuitBreaker::fireLocked(CircuitEvent event, MonotonicTime now) {
  const auto next = circuitTransition(state_, event);
  if (!next) return;
  const CircuitState from = state_;
  state_ = *next;
  ++generation_;  // results of attempts admitted before this point no longer count

  switch (event) {
    case CircuitEvent::Trip:
      open_until_ = now + current_cooldown_;
      break;
    case CircuitEvent::ProbeFailed:
      // Re-trip: the upstream is still broken, so wait twice as long (capped).
      current_cooldown_ = clampCooldown(current_cooldown_ * 2, config_);
      open_until_ = now + current_cooldown_;
      break;
    case CircuitEvent::CooldownElapsed:
      probes_admitted_ = 0;
      probe_successes_ = 0;
      permit_ = ProbePermit::None;
      break;
    case CircuitEvent::ProbesSucceeded:
    case CircuitEvent::PeerClosed:
      current_cooldown_ = clampCooldown(config_.cooldown, config_);
      break;
    case CircuitEvent::PeerOpened:
      break;  // applyPeer() sets the open period
  }
  resetCountersLocked();
  // Our own transitions go to the fleet; a peer's came from it.
  if (global_ && (event == CircuitEvent::Trip || event == CircuitEvent::ProbeFailed ||
                  event == CircuitEvent::ProbesSucceeded)) {
    global_->publish(state_, current_cooldown_);
  }
  if (listener_) listener_(from, state_);
  if (reporter_ && unreported_count_ < unreported_.size()) {
    unreported_[unreported_count_++] = Transition{from, state_};  // reported once unlocked
  }
}

void CircuitBreaker::resetCountersLocked() {
  consecutive_failures_ = 0;
  for (Bucket& b : buckets_) b = Bucket{};
}

int64_t CircuitBreaker::bucketIndexLocked(MonotonicTime now) const {
  return now.time_since_epoch() / bucket_width_;
}

void CircuitBreaker::recordLocked(bool failure, MonotonicTime now) {
  const int64_t index = bucketIndexLocked(now);
  Bucket& b = buckets_[static_cast<size_t>(index) % buckets_.size()];
  if (b.index != index) b = Bucket{index, 0, 0};
  if (failure) {
    ++b.failures;
  } else {
    ++b.successes;
  }
}

bool CircuitBreaker::rateTripsLocked(MonotonicTime now) const {
  const int64_t current = bucketIndexLocked(now);
  const int64_t oldest = current - static_cast<int64_t>(buckets_.size()) + 1;
  uint64_t failures = 0;
  uint64_t total = 0;
  for (const Bucket& b : buckets_) {
    if (b.index < oldest || b.index > current) continue;
    failures += b.failures;
    total += b.failures + b.successes;
  }
  if (failures == 0 || total < config_.failure_rate.min_requests) return false;
  return static_cast<double>(failures) >=
         config_.failure_rate.threshold * static_cast<double>(total);
}

milliseconds CircuitBreaker::cooldownLeftLocked(MonotonicTime now) const {
  if (state_ != CircuitState::Open || now >= open_until_) return milliseconds(0);
  return std::chrono::ceil<milliseconds>(open_until_ - now);
}

}  // namespace sluice
