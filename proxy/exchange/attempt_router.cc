#include "proxy/exchange/attempt_router.h"

#include <algorithm>

#include "filters/attempt_outcome.h"
#include "filters/throttle/quota_tracker.h"
#include "filters/throttle/throttle_filter.h"
#include "proxy/upstream/endpoint_picker.h"

namespace sluice {

std::string quotaKeyAt(const RequestHead& client, const UpstreamRuntime& upstream,
                       const EndpointRuntime& endpoint, const ClientInfo& info) {
  if (!upstream.config->rate_limit) return "";
  const RequestHead rewritten =
      requestForUpstream(client, *upstream.config, endpoint.config->url, info);
  return quotaKeyFor(*upstream.config->rate_limit, rewritten.headers);
}

void AttemptRouter::reroute(const RouteRuntime* route) {
  route_ = route;
  chain_index_ = 0;
  failed_.clear();
}

bool AttemptRouter::hasNext() const {
  return route_->config != nullptr && chain_index_ + 1 < route_->chain.size();
}

bool AttemptRouter::failedOn(const EndpointRuntime& endpoint) const {
  return std::find(failed_.begin(), failed_.end(), &endpoint) != failed_.end();
}

const std::string& AttemptRouter::fallbackModel() const {
  static const std::string kNone;
  if (chain_index_ == 0 || route_->config == nullptr) return kNone;
  return route_->config->fallback[chain_index_ - 1].model;
}

AttemptRouter::Placement AttemptRouter::place(const AttemptTarget& target,
                                              const EndpointRuntime* last, bool may_replay,
                                              const QuotaAsk& ask, const UniformRandom& random,
                                              const EndpointRuntime* preferred) {
  const EndpointRuntime* failed = last;
  if (target.kind == AttemptTarget::Kind::NextFallback) {
    ++chain_index_;
    failed = nullptr;
    failed_.clear();
  }
  for (;;) {
    const UpstreamRuntime& upstream = *route_->chain[chain_index_];
    const Choice choice = choose(upstream, failed, may_replay && hasNext(), ask, random, preferred);
    // None can take it now: spill over to the next upstream when the route
    // says so; otherwise go anyway and let the filters answer (503
    // circuit_open) or wait (the quota).
    if (choice.endpoint != nullptr || !fallsBackOn(choice.refusal, may_replay)) {
      return {&upstream, choice.endpoint != nullptr ? choice.endpoint : choice.anyway};
    }
    countFallback(toString(choice.refusal));
    ++chain_index_;
    failed = nullptr;
    failed_.clear();
  }
}

AttemptRouter::Choice AttemptRouter::choose(const UpstreamRuntime& upstream,
                                            const EndpointRuntime* failed, bool may_spill,
                                            const QuotaAsk& ask, const UniformRandom& random,
                                            const EndpointRuntime* preferred) const {
  const auto& endpoints = upstream.endpoints;
  // An MCP session lives on one endpoint: go there while it can take the
  // attempt (a session moved elsewhere is lost: the server answers 404 and
  // the client initializes again).
  if (preferred != nullptr && preferred != failed && !failedOn(*preferred) &&
      preferred->breaker->state() != CircuitState::Open) {
    for (const EndpointRuntime& e : endpoints) {
      if (&e == preferred) return {preferred, nullptr};
    }
  }
  const bool avoid_waiting =
      may_spill && route_->config->fallback_wait == config::FallbackWait::Avoid;
  // One endpoint and nowhere else to go: nothing to choose (the common case, no cost).
  if (endpoints.size() == 1 && !may_spill) return {&endpoints[0], &endpoints[0]};

  // The quota matters to the choice only among several endpoints, or when the
  // route would rather spill over than wait.
  const bool check_quota = upstream.config->rate_limit && (endpoints.size() > 1 || avoid_waiting) &&
                           static_cast<bool>(ask.key_for);
  const uint64_t need = check_quota ? estimateTokenNeed(ask.body) : 0;
  std::vector<EndpointView> views(endpoints.size());
  std::vector<bool> circuit_ok(endpoints.size());
  std::optional<size_t> avoid;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const EndpointRuntime& e = endpoints[i];
    if (&e == failed) avoid = i;
    circuit_ok[i] = e.breaker->state() != CircuitState::Open;
    views[i].weight = e.config->weight;
    views[i].priority = e.config->priority;
    views[i].outstanding = e.breaker->activeRequests();
    views[i].failed = failedOn(e);
    // The key as the provider will see it, as the throttle filter computes it.
    views[i].available = circuit_ok[i] && (!check_quota || e.quota == nullptr ||
                                           e.quota->admitsNow(ask.key_for(upstream, e), need));
  }
  if (const auto pick = pickEndpoint(views, avoid, random)) return {&endpoints[*pick], nullptr};

  // None available now. With a healthy circuit left it is the quota: the
  // throttle may wait for it (or answer 429); otherwise the circuit breaker
  // answers 503 circuit_open.
  Choice choice;
  bool any_circuit_ok = false;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    views[i].available = circuit_ok[i];
    any_circuit_ok = any_circuit_ok || circuit_ok[i];
  }
  if (!any_circuit_ok) {
    for (auto& view : views) view.available = true;
  }
  choice.refusal = any_circuit_ok ? CancelReason::RateLimited : CancelReason::CircuitOpen;
  // With a healthy circuit and the route preferring to wait, waiting is not a refusal.
  if (any_circuit_ok && !avoid_waiting) {
    choice.endpoint = &endpoints[*pickEndpoint(views, avoid, random)];
    return choice;
  }
  choice.anyway = &endpoints[*pickEndpoint(views, avoid, random)];
  return choice;
}

bool AttemptRouter::fallsBackOn(CancelReason refusal, bool may_replay) const {
  const config::FallbackOn& on =
      route_->config != nullptr ? route_->config->fallback_on : config::FallbackOn{};
  const bool listed = (refusal == CancelReason::CircuitOpen && on.circuit_open) ||
                      (refusal == CancelReason::RateLimited && on.rate_limited) ||
                      (refusal == CancelReason::Overloaded && on.overloaded);
  return listed && may_replay && hasNext();
}

bool AttemptRouter::fallsBackOn(const AttemptOutcome& outcome, uint32_t attempts,
                                bool may_replay) const {
  return outcome.kind != OutcomeKind::Cancelled && may_replay && hasNext() &&
         attempts < route_->config->retry.attempts &&
         outcomeIn(route_->config->fallback_on.outcomes, outcome);
}

AttemptVerdict AttemptRouter::afterFailure(const AttemptEnd& end, AttemptVerdict verdict,
                                           const EndpointRuntime* endpoint, bool may_retry,
                                           uint32_t attempts, bool may_replay) {
  if (!may_retry) return verdict;
  const bool may_fall_back = fallsBackOn(end.outcome, attempts, may_replay);
  if (!verdict.isRetry() && !may_fall_back) return verdict;  // delivered, or no attempt follows
  // Another attempt may follow: this endpoint failed for this request.
  if (!failedOn(*endpoint)) failed_.push_back(endpoint);
  if (!may_fall_back) return verdict;
  const auto& endpoints = route_->chain[chain_index_]->endpoints;
  std::vector<EndpointView> views(endpoints.size());  // (only after a failed attempt)
  for (size_t i = 0; i < endpoints.size(); ++i) {
    views[i].available = endpoints[i].breaker->state() != CircuitState::Open;
    views[i].failed = failedOn(endpoints[i]);
  }
  if (routeAfterFailure(views, verdict.isRetry(), may_fall_back) != AttemptRoute::NextFallback) {
    return verdict;
  }
  return AttemptVerdict::retry(std::chrono::milliseconds(0),
                               std::string(toString(attemptResultFor(end.outcome))),
                               AttemptTarget::nextFallback());
}

void AttemptRouter::countFallback(std::string_view cause) {
  ++fallbacks_;
  route_->metrics
      ->fallbacks(route_->chain[chain_index_]->name(), route_->chain[chain_index_ + 1]->name(),
                  std::string(cause))
      .Increment();
}

}  // namespace sluice
