#include "proxy/exchange/exchange_state.h"

#include <array>
#include <cassert>
#include <utility>

namespace sluice {

namespace {

using S = ExchangeState;

// Every legal edge; everything else is illegal. Kept as data so the test can
// walk it and so the diagram in the header stays checkable.
constexpr std::array<std::pair<S, S>, 13> kTransitions{{
    {S::Queued, S::Running},         // admitted, first attempt starts
    {S::Queued, S::Completed},       // answered locally (404, 400, ...) before any attempt
    {S::Queued, S::Failed},          // request unreadable (bad body, too large)
    {S::Queued, S::Cancelling},      // client left / budget gone while queued
    {S::Running, S::BackingOff},     // attempt failed, retry scheduled
    {S::Running, S::Completed},      // response fully delivered
    {S::Running, S::Failed},         // upstream error, no retry left
    {S::Running, S::Cancelling},     // client left, budget, drain
    {S::BackingOff, S::Running},     // next attempt starts
    {S::BackingOff, S::Completed},   // retry abandoned, last answer delivered
    {S::BackingOff, S::Failed},      // retry abandoned with a local error
    {S::BackingOff, S::Cancelling},  // cancel wakes the backoff sleep
    {S::Cancelling, S::Cancelled},   // attempt torn down
}};

}  // namespace

std::string_view toString(ExchangeState s) {
  switch (s) {
    case S::Queued:
      return "queued";
    case S::Running:
      return "running";
    case S::BackingOff:
      return "backing_off";
    case S::Completed:
      return "completed";
    case S::Failed:
      return "failed";
    case S::Cancelling:
      return "cancelling";
    case S::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

bool isLegalTransition(ExchangeState from, ExchangeState to) {
  for (const auto& [f, t] : kTransitions) {
    if (f == from && t == to) return true;
  }
  return false;
}

bool isTerminal(ExchangeState s) {
  return s == S::Completed || s == S::Failed || s == S::Cancelled;
}

bool transition(ExchangeState& state, ExchangeState to) {
  if (!isLegalTransition(state, to)) {
    assert(false && "illegal Exchange transition");
    return false;
  }
  state = to;
  return true;
}

}  // namespace sluice
