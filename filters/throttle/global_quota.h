#pragma once

// The fleet-wide side of a quota (DESIGN §6): what every replica in front of
// one provider quota shares. The ThrottleFilter asks it once per admitted
// request, after the local QuotaTracker admitted it; the local tracker stays
// the FIFO and the fallback. Implemented on Redis by proxy/shared_state.h;
// absent (null) means local state only.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "filters/throttle/quota_headers.h"

namespace sluice {

class GlobalQuota {
 public:
  virtual ~GlobalQuota() = default;

  /** The fleet's answer for one request. */
  struct Answer {
    enum class Kind {
      Admit,    // a slot of the global remaining is taken for it
      Wait,     // the global remaining is spent: hold it until `wait` has passed
      Unknown,  // the fleet knows nothing of this key yet: decide locally
      Failed,   // Redis did not answer in time or errored: decide locally
    };
    Kind kind = Kind::Failed;
    // Wait: until the global reset; nullopt = unknown (poll again shortly).
    std::optional<std::chrono::milliseconds> wait;
  };
  using Done = std::function<void(const Answer&)>;

  /**
   * Asks for one slot of quota key `key`. False when the store cannot be
   * asked right now (down, or not on a worker thread): decide locally at once,
   * `done` is never called. Otherwise `done` is called exactly once, on the
   * calling thread's event loop, within `shared_state.timeout`.
   */
  virtual bool reserve(const std::string& key, Done done) = 0;

  /**
   * Feeds the fleet one response's request quota (`reset_in`: its reset,
   * relative to now; Redis adds its own clock). `sent_ago` is how long ago
   * the request was admitted (it bounds a relative reset's jitter, as in
   * QuotaTracker::observe); `unanswered` the requests this replica has in
   * flight on the key, which the report cannot include yet. Newest wins: the
   * store compares reset times. Fire and forget; while the store is down the
   * latest report per key is kept and merged back when it returns.
   */
  virtual void report(const std::string& key, const Quota& requests,
                      std::optional<std::chrono::milliseconds> reset_in,
                      std::chrono::milliseconds sent_ago, int64_t unanswered) = 0;
};

}  // namespace sluice
