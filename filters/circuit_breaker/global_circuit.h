#pragma once

// The fleet-wide side of a circuit (docs/design.md §6). A CircuitBreaker with one
// publishes its own trips and recoveries, applies its peers' (through
// CircuitBreaker::applyPeer), and takes the fleet's single half-open probe
// before it probes. Failure counting stays local: each replica trips on its
// own evidence (README "Running several replicas" says why). Implemented on
// Redis pub/sub by proxy/shared_state/shared_state.h; absent (null) = local only.

#include <chrono>
#include <functional>
#include <optional>

namespace sluice {

enum class CircuitState : int;

class GlobalCircuit {
 public:
  virtual ~GlobalCircuit() = default;

  /**
   * This replica's circuit turned `to` (Open: for `open_for`). Called under
   * the breaker's lock: it must not block and never calls back. Publishing
   * Open or Closed also gives back a probe permit this replica held.
   */
  virtual void publish(CircuitState to, std::chrono::milliseconds open_for) = 0;

  /**
   * Asks for the fleet's one half-open probe. Returns the answer at once when
   * the store cannot be asked (then true: probe locally); nullopt when asked,
   * and `done(won)` follows on the calling thread's loop, without any lock,
   * within `shared_state.timeout` (a failed call answers true).
   */
  virtual std::optional<bool> claimProbe(std::function<void(bool won)> done) = 0;

  /**
   * Gives back a permit this replica won but will not use (its probe was
   * cancelled, or the circuit moved on before the answer came): the fleet
   * may probe again at once instead of waiting for the permit to expire.
   */
  virtual void releaseProbe() {}
};

}  // namespace sluice
