#pragma once

// Choosing the endpoint of an upstream for one attempt (docs/design.md §5).
//
// Among the lowest priority level that has an available endpoint (circuit
// not open, quota admits now), pick by weighted least outstanding requests
// with two random choices (Mitzenmacher's "power of two choices", as Envoy's
// LEAST_REQUEST balancer): draw two distinct endpoints of that level with
// probability proportional to their weight, keep the one with fewer
// outstanding requests per unit of weight, the first drawn on a tie. With no
// load every endpoint's share is its weight's; under load the outstanding
// requests settle in proportion to the weights, so a slower endpoint (whose
// requests stay outstanding longer) gets fewer. A retry prefers an endpoint
// this request has not failed on yet; among those it has, one other than the
// one that just failed: that one is a candidate only when no other is available.
//
// After a failed attempt, routeAfterFailure() decides where the next one goes
// (the attempt router): the same upstream while one of its endpoints with a
// closed circuit has not failed for this request, otherwise the next fallback
// upstream when the route allows one now.
//
// Pure: the caller describes the endpoints as it sees them now and injects
// the randomness, so tests are exact.

#include <cstdint>
#include <optional>
#include <span>

#include "common/random.h"

namespace sluice {

/** One endpoint as the picker sees it. */
struct EndpointView {
  uint32_t weight = 1;
  uint32_t priority = 0;
  bool available = true;     // circuit not open and quota admits now
  uint32_t outstanding = 0;  // attempts in flight to it, every worker
  bool failed = false;       // an attempt of this request failed on it
};

/**
 * The index of the endpoint for the next attempt, or nullopt when none is
 * available. Endpoints this request has not `failed` on come first; `avoid`
 * (the endpoint the previous attempt failed on) is chosen only when no other
 * endpoint is available.
 */
std::optional<size_t> pickEndpoint(std::span<const EndpointView> endpoints,
                                   std::optional<size_t> avoid, const UniformRandom& random);

/** Where the attempt after a failed one goes. */
enum class AttemptRoute {
  Stop,          // no further attempt: the filters' verdict stands
  SameUpstream,  // the filters' retry, on another endpoint of this upstream if it has one
  NextFallback,  // the route's next fallback upstream
};

/**
 * The attempt router's rule after a failed attempt. `endpoints`: the current
 * upstream's, `available` = circuit not open, `failed` = an attempt of this
 * request failed on it (the one that just failed included). `filters_retry`:
 * the filters' verdict retries. `may_fall_back`: the gates of a spill-over
 * hold (a next upstream exists, the outcome is in fallback_on, the request is
 * retry-safe, nothing was sent to the client, attempts and budget are left).
 * Spills over when the filters do not retry, or when every endpoint has
 * failed for this request or has an open circuit: retrying an endpoint that
 * already failed while a fallback is up only spends an attempt.
 */
AttemptRoute routeAfterFailure(std::span<const EndpointView> endpoints, bool filters_retry,
                               bool may_fall_back);

}  // namespace sluice
