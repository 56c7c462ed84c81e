#pragma once

// Proactive rate-limit throttling for one upstream (DESIGN.md §3 "Rate-limit
// throttling"), shared by every worker thread.
//
// Per quota key (one per API key, or one per upstream) the tracker keeps what
// the upstream last reported — limit, remaining and reset, for requests and,
// when reported, tokens — and what sluice has sent since. Before each upstream
// attempt a request asks admit(); the answer is Admitted, Queued (FIFO per
// key, until the reset or a new report) or Rejected (429 `rate_limited`).
// Every response's quota headers come back through observe().
//
//   unknown ──probe's headers carry a quota──► known ◄──┐ a later report replaces
//      │                                          │      │ the assumption
//      │                                          └──────┘ reset passed: assumed
//      └──probe's headers carry no quota──► unthrottled     refilled to `limit`
//
// Accounting ("effective remaining"). A report can only include requests the
// upstream had seen when it answered; with LLM latencies, others sluice sent
// meanwhile are missing from it. So effective remaining = reported remaining −
// the requests admitted and not yet answered (response headers not yet
// observed) when the report was taken − the requests admitted since. That is the
// contract's "admitted since the last header", made safe for concurrent
// requests: 50 requests in flight cannot all spend the same `remaining: 5`,
// and a report that overtakes an older one cannot undo the count either.
// Reports are also checked for staleness: within one window a report with
// *more* remaining than the last one is an older response arriving late and is
// ignored, as is a report about a window that is already over. "One window" is
// decided with the report's earliest possible reset (see observe(ticket, ...)):
// resets parsed from relative values carry the response latency as jitter, so
// a report only counts as a new window when even its earliest possible reset
// is after the current one; the reset kept for a window is the latest reported
// (a reset estimate must never be early, or a refill would overrun the quota).
//
// Unknown quota: one request (the probe) goes; the rest wait until some
// response's headers are observed, or the probe ends without headers (then the
// next request is the probe). The same single probe is used whenever a key is
// blocked with no known reset and nothing in flight could bring news — so a
// quota can never wedge a queue forever. Reports of a key whose responses carry
// no quota headers at all make it "unthrottled": everything is admitted until
// a quota shows up (e.g. a 429 with Retry-After).
//
// Every Queued answer without a wake_at has someone bound to wake it: a
// request awaiting its answer (observe()/onAttemptDone() re-examine the queue
// and wake tickets whose wait became known or earlier than they were told), or
// else the probe is granted at once.
//
// No timers, no I/O: time comes from the injected Clock, a reset is applied
// lazily by the next call after it. The caller arms a timer at `wake_at` (and
// at its deadline) and polls. One mutex guards all state; Wakers are always
// invoked after it is released.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/http_headers.h"
#include "filters/throttle/quota_headers.h"
#include "filters/throttle/rate_limit_config.h"

namespace sluice {

/** A key that is idle (nothing queued or in flight) this long past its reset is forgotten. */
inline constexpr std::chrono::minutes kQuotaKeyIdleExpiry{10};

/** Retry-After given when a request is rejected and no reset is known. */
inline constexpr std::chrono::milliseconds kUnknownQuotaRetryAfter = std::chrono::seconds(1);

/**
 * The quota key for a request: "" for key kind None; for Header, the first 16
 * hex chars of the SHA-256 of the header's (first) value. Raw keys — API keys —
 * are never stored, logged or exposed. A missing header gives the key "-".
 * Each thread keeps its last keys by a keyed MAC of the value (SipHash-128
 * under a per-process random secret, never the value itself), so a repeated
 * API key costs a MAC rather than a SHA-256.
 */
std::string quotaKeyFor(const config::RateLimitConfig& config, const HeaderMap& request_headers);

namespace detail {
/** SipHash-2-4 with its 128-bit output (the quota key cache's MAC). */
std::array<uint64_t, 2> sipHash128(const std::array<uint64_t, 2>& key, std::string_view data);
/** The first 16 hex chars of SHA-256(value): quotaKeyFor()'s key, computed afresh. */
std::string digestQuotaKey(std::string_view value);
}  // namespace detail

/**
 * Throttling state for one upstream, across all its quota keys. Thread-safe.
 *
 * Ticket lifecycle: admit() → Admitted ─ onAttemptDone() (exactly once)
 *                          → Queued ─ poll() … → Admitted | Rejected, or abandon()
 *                          → Rejected (ticket 0: nothing to release).
 * A ticket that was Admitted must end with onAttemptDone(), or with abandon()
 * if its attempt was never sent; otherwise its quota slot is never returned.
 * A queued ticket is admitted (its slot reserved, its waker called) the moment
 * quota frees up; its next poll() just reads that. So poll promptly when woken:
 * a released ticket nobody polls holds its slot.
 */
class QuotaTracker {
 public:
  /**
   * Called from ANY thread when a queued ticket should call poll() again. Must
   * be cheap and thread-safe (e.g. post to the waiter's event loop); it may call
   * back into the tracker. Never called with the tracker's lock held. May fire
   * after the ticket was abandoned (the caller must tolerate that).
   */
  using Waker = std::function<void()>;

  /** The answer of admit() and poll(). */
  struct Admission {
    enum class Kind { Admitted, Queued, Rejected };
    Kind kind;
    // Identifies a Queued request (and an Admitted one, for onAttemptDone). 0 when Rejected.
    uint64_t ticket = 0;
    // Queued: poll() again at this time at the latest (the reset), if known.
    std::optional<MonotonicTime> wake_at;
    // Rejected: how long until the quota is expected back (for Retry-After).
    std::chrono::milliseconds retry_after{0};
  };

  QuotaTracker(const config::RateLimitConfig& config, const Clock& clock);

  /**
   * Asks to send one request on `key`. `token_need` = estimated tokens (0 =
   * unknown/ignore); `deadline` = the request's budget deadline
   * (MonotonicTime::max() = none). Queued requests wait FIFO per key; a request
   * is Rejected at once when the key's queue holds `max_queue` requests, or
   * when the known wait (until the reset) ends at or after its deadline. An
   * unknown wait (waiting for a probe's answer) is only rejected once the
   * deadline has passed.
   */
  Admission admit(const std::string& key, uint64_t token_need, MonotonicTime deadline, Waker waker);

  /**
   * A Queued ticket asks again (its waker fired, or wake_at passed): Admitted,
   * still Queued, or Rejected (its wait no longer fits its deadline; the ticket
   * is then gone). Idempotent for an Admitted ticket; an unknown (finished)
   * ticket gets Rejected with retry_after 0.
   */
  Admission poll(uint64_t ticket);

  /**
   * A queued ticket's request went away (client left, cancelled): drop it,
   * never admit it. Also accepted for an Admitted ticket whose attempt was
   * never sent: its quota slot is returned. Unknown tickets are ignored.
   */
  void abandon(uint64_t ticket);

  /**
   * An admitted request's attempt ended; `headers_seen` = its response headers
   * were fed to observe() before. Without headers, the request stops counting
   * as "awaiting an answer", which lets the next probe go on an unknown key.
   */
  void onAttemptDone(uint64_t ticket, bool headers_seen);

  /**
   * Feeds a response's quota headers (parsed with observeQuota(headers,
   * status, clock), which folds a 429's Retry-After into remaining 0 until
   * then). Call it once per response, also when the observation is empty.
   * Wakes whatever can now proceed, and queued requests whose wait no longer
   * fits their deadline (their poll() rejects them).
   */
  void observe(const std::string& key, const QuotaObservation& observation);

  /**
   * The same, for the response to `ticket` (an Admitted ticket; unknown tickets
   * are treated like the overload above). The ticket's grant time bounds when
   * the upstream took the report: a relative reset ("1.996s") parsed on arrival
   * lies up to the response's latency after the upstream's real reset, so two
   * reports of one window differ by their latencies. Knowing the bound tells a
   * late report of an old window, or a jittered one of the same window, from a
   * report of a new window.
   */
  void observe(uint64_t ticket, const QuotaObservation& observation);

  /**
   * The fleet (GlobalQuota, DESIGN §6) refused an Admitted ticket: it becomes
   * Queued again at the head of its key's FIFO, its slot is returned, and the
   * key admits nothing before `until` (the global reset). Returns its
   * Queued answer (wake_at = `until`); unknown tickets get Rejected.
   */
  Admission deferAdmitted(uint64_t ticket, MonotonicTime until);

  /**
   * True when admit() would admit a request on `key` needing `token_need`
   * tokens at once (nobody queued, the quota fits or a probe may go). Changes
   * nothing; the endpoint choice asks it (DESIGN §5).
   */
  bool admitsNow(const std::string& key, uint64_t token_need);

  /** True when `key`'s responses carry no quota at all (the fleet need not be asked). */
  bool unthrottled(const std::string& key) const;

  /** `key`'s admitted requests still awaiting their response headers. */
  int64_t unanswered(const std::string& key) const;
  /** Their token needs (estimated: see observe()). */
  int64_t unansweredTokens(const std::string& key) const;

  /**
   * The fleet (GlobalQuota) is being asked for an Admitted ticket's slot
   * (`waiting` = true), or answered (false). While it waits, the ticket is
   * not in the fleet's count yet: its reservation will take it. A report to
   * the fleet must not subtract it as well (fleetUnanswered()), or the one
   * request is counted twice and the fleet refuses requests the quota has
   * room for. Unknown or non-Admitted tickets are ignored.
   */
  void awaitingFleet(uint64_t ticket, bool waiting);

  /** unanswered() and unansweredTokens() without the tickets awaitingFleet(). */
  struct InFlight {
    int64_t requests = 0;
    int64_t tokens = 0;
  };
  InFlight fleetUnanswered(const std::string& key) const;

  /** Requests queued, all keys (the sluice_throttle_queue_depth gauge). */
  size_t queueDepth() const;

  /**
   * The latest reported remaining requests (`tokens` = false) or tokens, any
   * key, for the sluice_ratelimit_remaining gauge. nullopt until reported.
   */
  std::optional<int64_t> lastRemaining(bool tokens) const;

  /**
   * queueDepth() and both lastRemaining() at once, read without the lock (each
   * is kept in an atomic written under it): what the gauges show, several
   * times per request.
   */
  struct GaugeValues {
    size_t queue_depth = 0;
    std::optional<int64_t> remaining_requests;
    std::optional<int64_t> remaining_tokens;
  };
  /** What the throttle's gauges show, read together (several times per request). */
  GaugeValues gaugeValues() const;

  /** Keys currently tracked (for tests of the idle expiry). */
  size_t keyCount() const;

 private:
  // One quota (requests or tokens) of one key.
  struct QuotaState {
    bool known = false;                       // a usable report (or refill) is in force
    int64_t limit = -1;                       // last reported limit; -1 = never reported
    int64_t remaining = 0;                    // reported, or `limit` after a refill
    std::optional<MonotonicTime> reset_at;    // when it refills; nullopt = not said
    std::optional<MonotonicTime> window_end;  // the reset last refilled at: reports
                                              // resetting at or before it are stale
    int64_t charged = 0;                      // sent but not in `remaining` (see top)
  };

  struct KeyState {
    QuotaState requests;
    QuotaState tokens;
    bool unthrottled = false;       // responses carry no quota headers at all
    int64_t unanswered = 0;         // admitted, response headers not yet observed
    int64_t unanswered_tokens = 0;  // their token needs (estimated, see observe())
    InFlight awaiting_fleet;        // Admitted, their fleet reservation not answered yet
    size_t in_flight = 0;           // Admitted tickets not yet done
    size_t expired = 0;             // Expired tickets not yet polled or abandoned
    std::deque<uint64_t> queue;     // Queued tickets, FIFO
    MonotonicTime last_active{};
    std::optional<MonotonicTime> held_until;  // the fleet's quota is spent until then
  };

  struct Ticket {
    enum class State { Queued, Admitted, Expired };
    // Its key's state: a ticket keeps its key from the sweep (Queued: in the
    // key's queue; Admitted: in_flight; Expired: expired), and unordered_map
    // elements never move, so this stays valid while the ticket exists. (A
    // copy of the key's name was an allocation per admitted request, and
    // looking it up again a hash per call: PROFILE.md, eighth round.)
    KeyState* key;
    int64_t token_need = 0;
    MonotonicTime deadline;
    Waker waker;
    State state = State::Queued;
    MonotonicTime granted_at{};              // Admitted: when
    std::optional<MonotonicTime> told_wake;  // Queued: the wake_at last answered
    bool awaiting_fleet = false;             // Admitted: see awaitingFleet()
  };

  using Wakers = std::vector<Waker>;

  int64_t reserveFor(const QuotaState& quota) const;
  int64_t tokenNeed(const KeyState& key, int64_t need) const;
  bool fitsLocked(const KeyState& key, int64_t need) const;
  bool fitsQuotaLocked(const KeyState& key, int64_t need) const;
  std::optional<MonotonicTime> quotaWaitLocked(const KeyState& key, int64_t need,
                                               MonotonicTime now) const;
  std::optional<MonotonicTime> waitUntilLocked(const KeyState& key, int64_t need,
                                               MonotonicTime now) const;
  bool canProbeLocked(const KeyState& key, int64_t need, MonotonicTime now) const;
  std::optional<MonotonicTime> ticketWaitLocked(const KeyState& key, const Ticket& ticket,
                                                MonotonicTime now) const;
  void refreshLocked(KeyState& key, MonotonicTime now);
  void grantLocked(KeyState& key, Ticket& ticket);
  void releaseLocked(KeyState& key, MonotonicTime now, uint64_t caller, Wakers& wakers);
  void removeFromQueueLocked(KeyState& key, uint64_t ticket);
  void maybeSweepLocked(MonotonicTime now);
  static bool applyQuota(QuotaState& state, const Quota& reported, MonotonicTime now,
                         MonotonicTime sent_at, int64_t unanswered);
  // `reporter`: the Admitted ticket the report answers, if known.
  void observeLocked(KeyState& key, const QuotaObservation& observation, MonotonicTime now,
                     MonotonicTime sent_at, const Ticket* reporter, Wakers& wakers);
  void expireLocked(Ticket& ticket);
  static void setAwaitingFleetLocked(Ticket& ticket, bool waiting);
  void eraseTicketLocked(std::unordered_map<uint64_t, Ticket>::iterator it);
  void wakeChangedLocked(KeyState& key, MonotonicTime now, Wakers& wakers);
  Admission queuedLocked(Ticket& ticket, uint64_t id, std::optional<MonotonicTime> wait);
  static void wakeAll(Wakers& wakers);

  const config::RateLimitConfig config_;
  const Clock& clock_;
  mutable std::mutex mutex_;

  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<uint64_t, Ticket> tickets_;
  uint64_t next_ticket_ = 1;
  MonotonicTime last_sweep_{};
  // Written under mutex_, read without it by the gauges (gaugeValues()).
  // A reported remaining is never negative: kNoRemaining is "not reported yet".
  static constexpr int64_t kNoRemaining = std::numeric_limits<int64_t>::min();
  std::atomic<size_t> queued_{0};
  std::atomic<int64_t> last_remaining_requests_{kNoRemaining};
  std::atomic<int64_t> last_remaining_tokens_{kNoRemaining};
};

}  // namespace sluice
