#pragma once

// The fleet-wide side of a quota (docs/design.md §6): what every replica in front of
// one provider quota shares. The ThrottleFilter asks it once per admitted
// request, after the local QuotaTracker admitted it; the local tracker stays
// the FIFO and the fallback. Implemented on Redis by proxy/shared_state/shared_state.h;
// absent (null) means local state only.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace sluice {

class GlobalQuota {
 public:
  virtual ~GlobalQuota() = default;

  /** The fleet's answer for one request. */
  struct Answer {
    enum class Kind {
      Admit,    // a slot of the global remaining is taken for it
      Wait,     // the global remaining is spent: hold it until `wait` has passed
      Probe,    // the fleet knows nothing of this key: this request is its one
                // probe (endProbe() unless its response reports a quota)
      Unknown,  // neither a request nor a token quota of this key is global: decide locally
      Failed,   // Redis did not answer in time or errored: decide locally
    };
    Kind kind = Kind::Failed;
    // Wait: until the global reset; nullopt = unknown (the fleet's probe is
    // out, or a refill was assumed): ask again shortly, and never reject the
    // request for it before its own deadline.
    std::optional<std::chrono::milliseconds> wait;
  };
  using Done = std::function<void(const Answer&)>;

  /**
   * Asks for one slot of quota key `key`: one request and `token_need`
   * tokens (0 = unknown: the token quota is not checked). Admitted only when
   * both the request and the token counter allow it (a counter the fleet does
   * not know is decided locally). False when the store cannot be
   * asked right now (down, or not on a worker thread): decide locally at once,
   * `done` is never called. Otherwise `done` is called exactly once, on the
   * calling thread's event loop, within `shared_state.timeout`.
   */
  virtual bool reserve(const std::string& key, uint64_t token_need, Done done) = 0;

  /** One counter (requests or tokens) of a response's quota, as the fleet takes it. */
  struct Counter {
    int64_t limit = -1;  // -1 = not said
    int64_t remaining = 0;
    // Its reset, relative to now (Redis adds its own clock); nullopt = not said.
    std::optional<std::chrono::milliseconds> reset_in;
    // What this replica has in flight on the key (requests, or their estimated
    // token needs), which the report cannot include yet.
    int64_t unanswered = 0;
  };
  /** One response's quota: whichever counters it reported. */
  struct Report {
    std::optional<Counter> requests;
    std::optional<Counter> tokens;  // QuotaObservation::tokens: the most restrictive
    // How long ago the request was admitted: it bounds a relative reset's
    // jitter, as in QuotaTracker::observe.
    std::chrono::milliseconds sent_ago{0};
  };

  /**
   * Feeds the fleet one response's quota. Newest wins, per counter: the
   * store compares reset times; a counter the report lacks is left as it is.
   * Fire and forget; while the store is down the latest report per key is
   * kept and merged back when it returns.
   */
  virtual void report(const std::string& key, const Report& report) = 0;

  /**
   * The fleet's probe for `key` (an Answer::Kind::Probe) ended without a
   * quota report: its response carried neither a request nor a token quota
   * (`answered_without_quota`: every replica decides this key locally from
   * now on, until a quota shows up), or it ended before any header (an
   * error, a cancel: the next request anywhere probes at once instead of
   * after the permit expires). Fire and forget.
   */
  virtual void endProbe(const std::string& key, bool answered_without_quota) = 0;
};

}  // namespace sluice
