#include "proxy/upstream/endpoint_picker.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace sluice {

namespace {

/** A draw from `candidates` with probability proportional to weight. */
size_t weightedDraw(const std::vector<size_t>& candidates, std::span<const EndpointView> endpoints,
                    const UniformRandom& random) {
  uint64_t total = 0;
  for (size_t i : candidates) total += endpoints[i].weight;
  double u = random();
  if (!(u >= 0.0)) u = 0.0;  // NaN or negative: clamp, never trust
  if (u >= 1.0) u = std::nextafter(1.0, 0.0);
  auto target = static_cast<uint64_t>(u * static_cast<double>(total));
  for (size_t k = 0; k < candidates.size(); ++k) {
    const uint32_t w = endpoints[candidates[k]].weight;
    if (target < w) return k;
    target -= w;
  }
  return candidates.size() - 1;
}

}  // namespace

std::optional<size_t> pickEndpoint(std::span<const EndpointView> endpoints,
                                   std::optional<size_t> avoid, const UniformRandom& random) {
  const auto lowestLevel = [&](bool allow_failed, bool allow_avoided) -> std::vector<size_t> {
    const auto eligible = [&](size_t i) {
      return endpoints[i].available && (allow_failed || !endpoints[i].failed) &&
             (allow_avoided || avoid != i);
    };
    uint32_t level = std::numeric_limits<uint32_t>::max();
    for (size_t i = 0; i < endpoints.size(); ++i) {
      if (eligible(i)) level = std::min(level, endpoints[i].priority);
    }
    std::vector<size_t> out;
    for (size_t i = 0; i < endpoints.size(); ++i) {
      if (eligible(i) && endpoints[i].priority == level) out.push_back(i);
    }
    return out;
  };
  std::vector<size_t> candidates = lowestLevel(/*allow_failed=*/false, /*allow_avoided=*/false);
  if (candidates.empty()) candidates = lowestLevel(/*allow_failed=*/true, /*allow_avoided=*/false);
  if (candidates.empty()) candidates = lowestLevel(/*allow_failed=*/true, /*allow_avoided=*/true);
  if (candidates.empty()) return std::nullopt;
  if (candidates.size() == 1) return candidates[0];

  const size_t first_k = weightedDraw(candidates, endpoints, random);
  const size_t first = candidates[first_k];
  candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(first_k));
  const size_t second = candidates[weightedDraw(candidates, endpoints, random)];
  // Fewer outstanding per unit of weight wins, the first drawn on a tie: with
  // nothing outstanding every endpoint's share is its weight's, under load
  // the outstanding requests settle in proportion to the weights.
  const auto load = [&](size_t i) {
    return static_cast<uint64_t>(endpoints[i].outstanding) *
           static_cast<uint64_t>(endpoints[i == first ? second : first].weight);
  };
  return load(second) < load(first) ? second : first;
}

AttemptRoute routeAfterFailure(std::span<const EndpointView> endpoints, bool filters_retry,
                               bool may_fall_back) {
  if (!may_fall_back) return filters_retry ? AttemptRoute::SameUpstream : AttemptRoute::Stop;
  if (!filters_retry) return AttemptRoute::NextFallback;
  const bool untried_left = std::any_of(endpoints.begin(), endpoints.end(),
                                        [](const auto& e) { return e.available && !e.failed; });
  return untried_left ? AttemptRoute::SameUpstream : AttemptRoute::NextFallback;
}

}  // namespace sluice
