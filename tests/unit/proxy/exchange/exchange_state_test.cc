// Tests for the Exchange lifecycle table (proxy/exchange/exchange_state.h, docs/design.md §1):
//
//   queued → running ⇄ backing_off → completed | failed | cancelling → cancelled
//
// The expected edges are written out here independently of the table in
// exchange_state.cc, and the whole 7 × 7 cross product is checked against them.

#include "proxy/exchange/exchange_state.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

namespace sluice {
namespace {

using S = ExchangeState;

constexpr S kAllStates[] = {S::Queued, S::Running,    S::BackingOff, S::Completed,
                            S::Failed, S::Cancelling, S::Cancelled};

// The lifecycle of docs/design.md §1, edge by edge. `queued` may end without an attempt
// (local reply, unreadable request, cancel while queued); `running` and
// `backing_off` alternate and either can end or be cancelled; `cancelling`
// only ever becomes `cancelled`.
const std::set<std::pair<S, S>>& expectedEdges() {
  static const std::set<std::pair<S, S>> edges{
      {S::Queued, S::Running},       {S::Queued, S::Completed},   {S::Queued, S::Failed},
      {S::Queued, S::Cancelling},    {S::Running, S::BackingOff}, {S::Running, S::Completed},
      {S::Running, S::Failed},       {S::Running, S::Cancelling}, {S::BackingOff, S::Running},
      {S::BackingOff, S::Completed}, {S::BackingOff, S::Failed},  {S::BackingOff, S::Cancelling},
      {S::Cancelling, S::Cancelled},
  };
  return edges;
}

std::string edgeName(S from, S to) {
  return std::string(toString(from)) + " -> " + std::string(toString(to));
}

TEST(ExchangeStateTest, CrossProductMatchesTheLifecycle) {
  int legal = 0;
  int checked = 0;
  for (S from : kAllStates) {
    for (S to : kAllStates) {
      const bool expected = expectedEdges().count({from, to}) > 0;
      EXPECT_EQ(isLegalTransition(from, to), expected) << edgeName(from, to);
      legal += isLegalTransition(from, to) ? 1 : 0;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 49);
  EXPECT_EQ(legal, 13);  // exactly the edges above, nothing extra
}

TEST(ExchangeStateTest, NoSelfLoops) {
  for (S s : kAllStates) EXPECT_FALSE(isLegalTransition(s, s)) << toString(s);
}

TEST(ExchangeStateTest, TerminalStatesHaveNoOutgoingEdges) {
  for (S from : {S::Completed, S::Failed, S::Cancelled}) {
    EXPECT_TRUE(isTerminal(from)) << toString(from);
    for (S to : kAllStates) EXPECT_FALSE(isLegalTransition(from, to)) << edgeName(from, to);
  }
}

TEST(ExchangeStateTest, NonTerminalStatesHaveAnOutgoingEdge) {
  for (S from : {S::Queued, S::Running, S::BackingOff, S::Cancelling}) {
    EXPECT_FALSE(isTerminal(from)) << toString(from);
    bool any = false;
    for (S to : kAllStates) any = any || isLegalTransition(from, to);
    EXPECT_TRUE(any) << toString(from) << " is a dead end";
  }
}

TEST(ExchangeStateTest, NothingReturnsToQueued) {
  for (S from : kAllStates) EXPECT_FALSE(isLegalTransition(from, S::Queued)) << toString(from);
}

TEST(ExchangeStateTest, CancelledOnlyThroughCancelling) {
  for (S from : kAllStates) {
    EXPECT_EQ(isLegalTransition(from, S::Cancelled), from == S::Cancelling) << toString(from);
  }
  // And cancelling cannot turn back into a normal ending.
  EXPECT_FALSE(isLegalTransition(S::Cancelling, S::Completed));
  EXPECT_FALSE(isLegalTransition(S::Cancelling, S::Failed));
  EXPECT_FALSE(isLegalTransition(S::Cancelling, S::Running));
}

TEST(ExchangeStateTest, EveryNonTerminalStateCanBeCancelled) {
  for (S from : {S::Queued, S::Running, S::BackingOff}) {
    EXPECT_TRUE(isLegalTransition(from, S::Cancelling)) << toString(from);
  }
}

TEST(ExchangeStateTest, EveryStateIsReachableFromQueued) {
  std::set<S> reached{S::Queued};
  bool grew = true;
  while (grew) {
    grew = false;
    for (S from : kAllStates) {
      if (!reached.count(from)) continue;
      for (S to : kAllStates) {
        if (isLegalTransition(from, to) && reached.insert(to).second) grew = true;
      }
    }
  }
  EXPECT_EQ(reached.size(), std::size(kAllStates));
}

TEST(ExchangeStateTest, ToStringNames) {
  const std::pair<S, std::string_view> kNames[] = {
      {S::Queued, "queued"},       {S::Running, "running"}, {S::BackingOff, "backing_off"},
      {S::Completed, "completed"}, {S::Failed, "failed"},   {S::Cancelling, "cancelling"},
      {S::Cancelled, "cancelled"},
  };
  std::set<std::string_view> distinct;
  for (const auto& [state, name] : kNames) {
    EXPECT_EQ(toString(state), name);
    distinct.insert(toString(state));
  }
  EXPECT_EQ(distinct.size(), std::size(kAllStates));
}

TEST(ExchangeStateTest, TransitionMovesAStateOnlyAlongTheTable) {
  S state = S::Queued;
  EXPECT_TRUE(transition(state, S::Running));
  EXPECT_EQ(state, S::Running);
  // An illegal edge is a bug: it asserts in debug builds and is refused in release.
  EXPECT_DEBUG_DEATH({ EXPECT_FALSE(transition(state, S::Queued)); },
                     "illegal Exchange transition");
  EXPECT_EQ(state, S::Running);
}

}  // namespace
}  // namespace sluice
