#pragma once

// A per-upstream circuit breaker (docs/design.md §3 "Circuit breakers"), shared by
// every worker thread. It stops sending to an upstream that is failing, then
// lets a few probe attempts find out whether it recovered:
//
//   closed ──trip──► open ──cooldown elapsed──► half_open ──all probes ok──► closed
//                     ▲                             │
//                     └──────── probe failed ───────┘   (cooldown doubles, capped)
//
// The state machine is the table in circuitTransition(), tested on its own;
// CircuitBreaker only decides *when* an event happens. It has no timers: the
// open → half_open step happens lazily on the first admit() (or state()) after
// the cooldown, read from the injected Clock.
//
// It also bounds concurrency (Envoy's circuit-breaker thresholds):
// `max_requests` attempts in flight and `max_pending` requests waiting (in
// the throttle queue, or for an upstream connection: PendingSlot); past
// either the caller answers 503 `overloaded`.
//
// One mutex guards everything; each call does O(buckets) work at most, and
// none happens per byte.
//
// With a GlobalCircuit (shared_state, docs/design.md §6) the circuit is the fleet's:
// this breaker publishes its trips and recoveries, applies its peers' as the
// PeerOpened / PeerClosed events, and in half_open probes only after it won
// the fleet's one probe permit. The caller whose admit() asked for the permit
// waits for the answer (PermitWaiter) and, when it won, is the probe: a
// permit is never held by a replica that sends nothing (every replica would
// wait for it to expire). Other callers meanwhile are rejected as half_open
// does with every probe slot taken. A probe that is cancelled gives the
// permit back at once. A peer's open period is trusted only up to this
// breaker's own `max_cooldown`. Failures are still counted here, locally.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "filters/attempt_outcome.h"
#include "filters/circuit_breaker/circuit_breaker_config.h"
#include "filters/circuit_breaker/global_circuit.h"

namespace sluice {

/** Breaker states. The values are the `sluice_circuit_state` gauge values. */
enum class CircuitState : int { Closed = 0, Open = 1, HalfOpen = 2 };

/** "closed", "open", "half_open": the `to` label of sluice_circuit_transitions_total. */
std::string_view toString(CircuitState state);

/** What can happen to a breaker. */
enum class CircuitEvent {
  Trip,             // consecutive failures or the failure rate reached the threshold
  CooldownElapsed,  // the open period is over
  ProbesSucceeded,  // every admitted half-open probe succeeded
  ProbeFailed,      // a half-open probe failed
  PeerOpened,       // another replica's circuit for this endpoint opened (shared state)
  PeerClosed,       // another replica's probes succeeded (shared state)
};

/** "trip", "cooldown_elapsed", "probes_succeeded", "probe_failed", "peer_opened", "peer_closed". */
std::string_view toString(CircuitEvent event);

/**
 * The transition table: the state after `event` in state `from`, or nullopt
 * when the event does not apply there (e.g. a probe result while closed) and
 * must be ignored.
 */
std::optional<CircuitState> circuitTransition(CircuitState from, CircuitEvent event);

/** Half-open with every probe slot taken: how long a rejected caller is told to wait at most. */
inline constexpr std::chrono::milliseconds kHalfOpenRetryAfter = std::chrono::seconds(1);

/** Over `max_requests` / `max_pending`: the Retry-After of the 503 `overloaded`. */
inline constexpr std::chrono::milliseconds kOverloadedRetryAfter = std::chrono::seconds(1);

/** The answer of CircuitBreaker::admit(). Pass it back to onResult(). */
struct CircuitAdmission {
  enum class Result {
    Admitted,    // go ahead; report the outcome with onResult()
    Rejected,    // circuit open (or half-open with every probe in flight): 503 circuit_open
    Overloaded,  // max_requests attempts already in flight: 503 overloaded
    Deferred,    // half-open: the fleet is asked for the probe permit; the waiter gets the answer
  };
  Result result = Result::Rejected;
  // Rejected: how long until the breaker may admit again (the cooldown left).
  std::chrono::milliseconds retry_after{0};
  bool probe = false;       // admitted as a half-open probe
  uint64_t generation = 0;  // the breaker's state generation at admission

  bool admitted() const { return result == Result::Admitted; }
};

class CircuitBreaker : public std::enable_shared_from_this<CircuitBreaker> {
 public:
  /**
   * `listener` is called on every state change, *under the breaker's lock*,
   * so calls arrive in transition order (a gauge set from them is never
   * stale). It must be cheap (a metric update), must not log or do I/O, and
   * must not call back into this breaker.
   *
   * `reporter` hears the same changes *after the lock is released*, from the
   * thread that caused them: the place for logging and anything slow. It may
   * call back into the breaker; reports from different threads may arrive
   * out of transition order.
   */
  using TransitionListener = std::function<void(CircuitState from, CircuitState to)>;
  /**
   * The answer to a Deferred admit(): Admitted (as the probe: report it with
   * onResult() as usual, Cancelled if the caller is gone) or Rejected. Called
   * once, on the thread that called admit(), from its event loop, without
   * the breaker's lock.
   */
  using PermitWaiter = std::function<void(const CircuitAdmission& admission)>;

  CircuitBreaker(const config::CircuitBreakerConfig& config, const Clock& clock,
                 TransitionListener listener = {}, TransitionListener reporter = {});

  /**
   * Asks to start one attempt. When Admitted, the attempt holds one of
   * `max_requests` slots until onResult() — which must then be called exactly
   * once, with OutcomeKind::Cancelled if the attempt was abandoned. With a
   * `waiter`, a half-open breaker that must first ask the fleet for the probe
   * permit answers Deferred and gives the verdict to `waiter` later; without
   * one it answers Rejected meanwhile.
   */
  CircuitAdmission admit(PermitWaiter waiter = {});

  /**
   * Reports how an admitted attempt ended and frees its slot. Failures are
   * outcomes in `failure_on`; Cancelled counts as neither; anything else is a
   * success. Results of attempts admitted under an earlier state generation
   * (e.g. before the circuit opened) free their slot but do not count.
   * Ignores admissions that were not Admitted.
   */
  void onResult(const CircuitAdmission& admission, const AttemptOutcome& outcome);

  /**
   * Judges a half-open probe by its response head, before the attempt ends: a
   * streamed LLM answer may take minutes, and every other request would be
   * rejected meanwhile. The slot stays held until onResult(). Returns true
   * when the probe was judged (call onResult() later with a non-probe copy,
   * see CircuitBreakerFilter). Anything but a live half-open probe: false.
   */
  bool judgeProbe(const CircuitAdmission& admission, const AttemptOutcome& outcome);

  /** Takes a waiting-request slot (`max_pending`); false = overloaded. */
  bool tryEnterPending();
  /** Frees a slot taken by tryEnterPending(). */
  void leavePending();

  /** The current state (applies an elapsed cooldown first). */
  CircuitState state();
  /** Open: the cooldown left; otherwise 0. */
  std::chrono::milliseconds cooldownLeft();
  /** The open period the next trip will use (doubles on each re-trip). */
  std::chrono::milliseconds currentCooldown() const;
  uint32_t consecutiveFailures() const;
  uint32_t activeRequests() const;
  uint32_t pendingRequests() const;
  /** Rejections by max_requests / max_pending since construction. */
  uint64_t overloadedCount() const;

  /**
   * Applies a reloaded config. The state is kept; the rolling window and the
   * consecutive count restart, and the current cooldown is clamped to the new
   * bounds.
   */
  void updateConfig(const config::CircuitBreakerConfig& config);

  /**
   * Shares this circuit with the fleet (null = local only). Set once, before
   * use. The breaker must be owned by a shared_ptr (the probe permit's answer
   * arrives later and holds only a weak reference).
   */
  void setGlobal(std::shared_ptr<GlobalCircuit> global);

  /**
   * A peer replica's transition, from the fleet: Open (tripped or a failed
   * probe: open for `open_for`, which also becomes this breaker's cooldown)
   * or Closed (its probes succeeded). Applied as PeerOpened / PeerClosed;
   * never published again.
   */
  void applyPeer(CircuitState to, std::chrono::milliseconds open_for);

 private:
  enum class ProbePermit { None, Asking, Won, Lost };

  /**
   * Holds mutex_; on destruction releases it, then hands the transitions
   * fired meanwhile to reporter_ (so no report runs under the lock).
   */
  class Lock {
   public:
    explicit Lock(CircuitBreaker& breaker) : breaker_(breaker), lock_(breaker.mutex_) {}
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    CircuitBreaker& breaker_;
    std::unique_lock<std::mutex> lock_;
  };
  struct Transition {
    CircuitState from = CircuitState::Closed;
    CircuitState to = CircuitState::Closed;
  };
  // One call fires at most two transitions (a cooldown ends, then a peer's event).
  static constexpr size_t kMaxUnreported = 4;

  /** Half-open with a GlobalCircuit: may this replica probe now? Asks the fleet when needed. */
  /** `waiter` (may be null) is taken, and `deferred` set, when the fleet is asked. */
  bool holdsProbePermitLocked(MonotonicTime now, PermitWaiter* waiter, bool* deferred);
  void onProbeClaim(uint64_t generation, bool won, PermitWaiter waiter);
  /** Admits a probe (the slot checks passed): counts it. */
  CircuitAdmission admitProbeLocked();
  // One slice of the rolling failure-rate window.
  struct Bucket {
    int64_t index = -1;  // which slice of time this bucket currently holds
    uint32_t successes = 0;
    uint32_t failures = 0;
  };

  void maybeEndCooldownLocked(MonotonicTime now);
  void fireLocked(CircuitEvent event, MonotonicTime now);
  void recordLocked(bool failure, MonotonicTime now);
  bool rateTripsLocked(MonotonicTime now) const;
  int64_t bucketIndexLocked(MonotonicTime now) const;
  void resetCountersLocked();
  std::chrono::milliseconds cooldownLeftLocked(MonotonicTime now) const;

  const Clock& clock_;
  const TransitionListener listener_;
  const TransitionListener reporter_;
  mutable std::mutex mutex_;
  std::array<Transition, kMaxUnreported> unreported_{};  // fired, not yet reported (under mutex_)
  size_t unreported_count_ = 0;

  config::CircuitBreakerConfig config_;
  CircuitState state_ = CircuitState::Closed;
  uint64_t generation_ = 0;
  std::chrono::milliseconds current_cooldown_;
  MonotonicTime open_until_{};
  uint32_t consecutive_failures_ = 0;
  uint32_t probes_admitted_ = 0;
  uint32_t probe_successes_ = 0;
  uint32_t active_ = 0;
  uint32_t pending_ = 0;
  uint64_t overloaded_ = 0;
  std::chrono::nanoseconds bucket_width_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<GlobalCircuit> global_;
  ProbePermit permit_ = ProbePermit::None;
  MonotonicTime permit_retry_at_{};  // Lost: ask again from then (the winner may be gone)
};

/**
 * One `max_pending` slot of a breaker, held while a request waits — in the
 * throttle queue, or for an upstream connection — and freed when the wait
 * ends or the holder is destroyed. A request holds at most one per slot
 * object however often it asks.
 */
class PendingSlot {
 public:
  PendingSlot() = default;
  ~PendingSlot() { release(); }
  PendingSlot(const PendingSlot&) = delete;
  PendingSlot& operator=(const PendingSlot&) = delete;

  /** Takes a slot of `breaker` unless one is held; false = `max_pending` reached (overloaded). */
  bool acquire(CircuitBreaker& breaker) {
    if (breaker_ != nullptr) return true;
    if (!breaker.tryEnterPending()) return false;
    breaker_ = &breaker;
    return true;
  }
  void release() {
    if (breaker_ != nullptr) breaker_->leavePending();
    breaker_ = nullptr;
  }
  bool held() const { return breaker_ != nullptr; }

 private:
  CircuitBreaker* breaker_ = nullptr;
};

}  // namespace sluice
