#pragma once

// Where a request's next attempt goes (docs/design.md §5): which upstream of
// its route's chain and which endpoint of that upstream. One per Exchange,
// held by value; the Exchange asks, the router answers from three things
// only: the target the filters asked for (same upstream or next fallback),
// the endpoints this request already failed on, and the gates of each
// endpoint (its circuit, its quota). What it remembers between attempts is
// the chain position, the failed endpoints and the spill-overs made.
//
// Whether the request may leave its upstream at all (nothing reached the
// client, the body can be sent again, the method is safe to repeat, budget
// left) is the Exchange's to know: it passes that as `may_replay`.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/attempt.h"
#include "common/cancel_reason.h"
#include "common/random.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/http/header_rewrite.h"

namespace sluice {

/**
 * The request as a quota weighs it: its key at an endpoint and its body (the
 * token need).
 */
struct QuotaAsk {
  /**
   * The request's quota key at `endpoint` of `upstream`: the key the
   * throttle filter computes, from the request head as rewritten for that
   * endpoint (the upstream's `headers:` replace the client's, hop-by-hop and
   * sluice's own headers are gone). Asked only for an upstream with
   * `rate_limit` whose quota matters to the choice; empty: no quota is
   * consulted.
   */
  std::function<std::string(const UpstreamRuntime& upstream, const EndpointRuntime& endpoint)>
      key_for;
  std::string_view body;
};

/**
 * The quota key the throttle filter computes for `client`'s request at
 * `endpoint` of `upstream`: from the head as rewritten for that endpoint
 * (requestForUpstream), so what the router weighs is what the provider
 * will see.
 */
std::string quotaKeyAt(const RequestHead& client, const UpstreamRuntime& upstream,
                       const EndpointRuntime& endpoint, const ClientInfo& info);

class AttemptRouter {
 public:
  explicit AttemptRouter(const RouteRuntime* route) : route_(route) {}
  /** The request's route (reroute() changes it). */
  const RouteRuntime& route() const { return *route_; }

  /** The request moved to another route before its first attempt (`match.model`). */
  void reroute(const RouteRuntime* route);

  /** Where an attempt goes. */
  struct Placement {
    const UpstreamRuntime* upstream = nullptr;
    const EndpointRuntime* endpoint = nullptr;
  };

  /**
   * Places the attempt toward `target`. NextFallback moves one step down the
   * chain. An upstream none of whose endpoints can take the attempt now is
   * skipped when the route falls back on why (circuit open, rate limited);
   * otherwise the attempt goes there anyway and its filters answer (503) or
   * wait (the quota). `last` is the previous attempt's endpoint: a retry on
   * the same upstream prefers another. `preferred` (an MCP session's
   * endpoint, docs/design.md §10; null: none) is taken whenever it belongs
   * to the upstream being placed on, its circuit is not open and this
   * request has not failed on it; otherwise the choice is the usual one.
   * Spill-overs are counted.
   */
  Placement place(const AttemptTarget& target, const EndpointRuntime* last, bool may_replay,
                  const QuotaAsk& ask, const UniformRandom& random,
                  const EndpointRuntime* preferred = nullptr);

  /** A next upstream exists and the route falls back on `refusal` (a filter's refusal). */
  bool fallsBackOn(CancelReason refusal, bool may_replay) const;
  /** A next upstream exists, attempts are left and the route falls back on `outcome`. */
  bool fallsBackOn(const AttemptOutcome& outcome, uint32_t attempts, bool may_replay) const;

  /**
   * After the filters' verdict on a failed attempt on `endpoint` (of the
   * current upstream): remembers the endpoint as failed when another
   * attempt may follow, and turns the verdict into a spill-over to the next
   * upstream when the outcome is one the route falls back on and retrying
   * this upstream cannot help (routeAfterFailure()). `may_retry`: the
   * Exchange can act on a retry at all.
   */
  AttemptVerdict afterFailure(const AttemptEnd& end, AttemptVerdict verdict,
                              const EndpointRuntime* endpoint, bool may_retry, uint32_t attempts,
                              bool may_replay);

  /** Counts one spill-over from the current upstream to the next, for `cause`. */
  void countFallback(std::string_view cause);

  /** The chain position: 0 is the route's own upstream. */
  size_t chainIndex() const { return chain_index_; }
  /** Spill-overs so far. */
  uint32_t fallbacks() const { return fallbacks_; }
  /** The `model` the current fallback names, or "" (the route's own upstream, or none named). */
  const std::string& fallbackModel() const;

 private:
  struct Choice {
    const EndpointRuntime* endpoint = nullptr;  // null: none available now
    const EndpointRuntime* anyway = nullptr;    // the best unavailable one, to go to regardless
    CancelReason refusal = CancelReason::CircuitOpen;  // why none is available
  };
  Choice choose(const UpstreamRuntime& upstream, const EndpointRuntime* failed, bool may_spill,
                const QuotaAsk& ask, const UniformRandom& random,
                const EndpointRuntime* preferred) const;
  bool hasNext() const;
  bool failedOn(const EndpointRuntime& endpoint) const;

  const RouteRuntime* route_;
  size_t chain_index_ = 0;
  // Endpoints of the current upstream an attempt of this request failed on.
  std::vector<const EndpointRuntime*> failed_;
  uint32_t fallbacks_ = 0;
};

}  // namespace sluice
