#pragma once

// Runs an Exchange's filter chain on the request path (after Envoy's
// FilterManager): it owns the filters, the phase the request is in
// (decodeHeaders → decodeComplete → beforeAttempt of each attempt → done),
// and where a filter that returned StopIteration (or an Admission that
// waits) left the phase, to resume there (continueDecoding) or to resolve a
// waiting admission (resolveAttempt). Held by value in the Exchange; it
// decides nothing: it tells its Owner when a phase ran to its end and when
// a filter refused the attempt, and asks it whether to stop (the request
// finished or is being cancelled). It installs the route's chain (again
// when the body's model picks another route), passes sluice's own answers
// through encodeLocalReply, and tells every filter once when the request
// ends (onDestroy). The response path (encodeHeaders, encodeData, the
// attempt's verdict) is the AttemptLoop's: it iterates filters() directly.

#include <chrono>
#include <cstddef>
#include <optional>

#include "common/cancel_reason.h"
#include "common/http_message.h"
#include "common/problem.h"
#include "filters/filter.h"
#include "proxy/exchange/filter_chain.h"
#include "proxy/http/request_body.h"

namespace sluice {

class ChainRunner {
 public:
  enum class Phase { DecodeHeaders, DecodeComplete, BeforeAttempt, Done };

  class Owner {
   public:
    virtual ~Owner() = default;
    /** True once the request finished or is being cancelled: the run stops. */
    virtual bool chainStopped() const = 0;
    /**
     * `phase` ran to its end. After DecodeHeaders the runner is in
     * DecodeComplete (run it when the body allows); after BeforeAttempt it
     * is Done and the attempt goes.
     */
    virtual void onPhaseDone(Phase phase) = 0;
    /** A filter refused the attempt being prepared (Admission::refuse). */
    virtual void onAttemptRefused(CancelReason reason,
                                  std::optional<std::chrono::milliseconds> retry_after) = 0;
  };

  /** `request` (decodeHeaders) and `body` (decodeComplete's prefix) outlive the runner. */
  ChainRunner(Owner& owner, RequestHead& request, const RequestBody& body)
      : owner_(owner), request_(request), body_(body) {}

  FilterChain& filters() { return filters_; }
  const FilterChain& filters() const { return filters_; }
  Phase phase() const { return phase_; }
  /** A filter stopped the phase and has not resumed it yet. */
  bool held() const { return held_; }
  /** decodeComplete is next and nobody holds it: it runs once the body allows. */
  bool waitsForBody() const { return phase_ == Phase::DecodeComplete && !held_; }

  /**
   * Installs the route's `filters`, each given `callbacks`. A chain
   * installed before is destroyed unrun (onDestroy: none of it ran, nothing
   * to undo); the request path starts again at decodeHeaders.
   */
  void install(FilterChain filters, FilterCallbacks& callbacks);
  /** Every filter sees (and may rewrite) an answer of sluice's own before it is sent. */
  void encodeLocalReply(Problem& problem);
  /**
   * The request ended: every filter hears it (onDestroy). They stay alive
   * with the runner (what they handed out may still point at them).
   */
  void destroy();

  /** Runs the current phase from its first filter. */
  void run() { runFrom(0); }
  /** The attempt `request` (as its upstream will see it) is prepared: runs beforeAttempt. */
  void beginAttempt(RequestHead& request, const AttemptContext& attempt);
  /** continueDecoding: resumes the held phase after the filter that stopped it. */
  void resume();
  /** resolveAttempt: a waiting admission proceeds (resume) or refuses (the Owner hears). */
  void resolve(const Admission& admission);
  /** The request ended: nothing more runs. */
  void stop() { phase_ = Phase::Done; }

 private:
  void runFrom(size_t from);

  Owner& owner_;
  RequestHead& request_;
  const RequestBody& body_;
  FilterChain filters_;
  Phase phase_ = Phase::DecodeHeaders;
  size_t resume_index_ = 0;
  bool held_ = false;
  // The attempt beforeAttempt runs for (BeforeAttempt only).
  RequestHead* attempt_request_ = nullptr;
  AttemptContext attempt_;
};

}  // namespace sluice
