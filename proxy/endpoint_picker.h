#pragma once

// Choosing the endpoint of an upstream for one attempt (DESIGN §5).
//
// Among the lowest priority level that has an available endpoint (circuit
// not open, quota admits now), pick by weighted least outstanding requests
// with two random choices (Mitzenmacher's "power of two choices", as Envoy's
// LEAST_REQUEST balancer): draw two distinct endpoints of that level with
// probability proportional to their weight, keep the one with fewer
// outstanding requests per unit of weight, the first drawn on a tie. With no
// load every endpoint's share is its weight's; under load the outstanding
// requests settle in proportion to the weights, so a slower endpoint (whose
// requests stay outstanding longer) gets fewer. A retry prefers an endpoint other than the one
// that just failed: it is a candidate only when no other is available.
//
// Pure: the caller describes the endpoints as it sees them now and injects
// the randomness, so tests are exact.

#include <cstdint>
#include <optional>
#include <span>

#include "filters/retry/backoff.h"

namespace sluice {

/** One endpoint as the picker sees it. */
struct EndpointView {
  uint32_t weight = 1;
  uint32_t priority = 0;
  bool available = true;     // circuit not open and quota admits now
  uint32_t outstanding = 0;  // attempts in flight to it, every worker
};

/**
 * The index of the endpoint for the next attempt, or nullopt when none is
 * available. `avoid` (the endpoint the previous attempt failed on) is chosen
 * only when no other endpoint is available.
 */
std::optional<size_t> pickEndpoint(std::span<const EndpointView> endpoints,
                                   std::optional<size_t> avoid, const UniformRandom& random);

}  // namespace sluice
