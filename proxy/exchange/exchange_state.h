#pragma once

// The Exchange lifecycle as an explicit transition table (docs/design.md §1):
//
//   queued → running ⇄ backing_off → completed | failed | cancelling → cancelled
//
// `queued`: headers arrived, the request is being read or waits for admission.
// `running`: an upstream attempt is in flight. `backing_off`: between attempts.
// `completed` / `failed` / `cancelled` are terminal. `cancelling` is the short
// window in which a cancel tears the attempt down. Any transition not in the
// table is a bug: Exchange asserts in debug builds and refuses it in release.

#include <string_view>

namespace sluice {

enum class ExchangeState { Queued, Running, BackingOff, Completed, Failed, Cancelling, Cancelled };

/** The state's name as shown on `/exchanges` ("backing_off", ...). */
std::string_view toString(ExchangeState s);

/** True when `from → to` is in the lifecycle table. */
bool isLegalTransition(ExchangeState from, ExchangeState to);

/**
 * Moves `state` to `to` when the edge is in the table and returns true;
 * otherwise asserts (debug builds), leaves `state` as it is and returns false.
 */
bool transition(ExchangeState& state, ExchangeState to);

/** True for completed, failed and cancelled. */
bool isTerminal(ExchangeState s);

}  // namespace sluice
