#pragma once

// Builds a route's filter chain from one explicit, ordered table
// (filter_chain.cc). No self-registering factories: reading the table tells
// you every filter sluice runs and in which order (DESIGN.md §1).

#include <vector>

#include "filters/filter.h"
#include "proxy/runtime.h"

namespace sluice {

/** A fresh chain for one Exchange on `route`, in table order. */
std::vector<StreamFilterPtr> buildFilterChain(const RouteRuntime& route);

/** The filter names of the table, in order (for /config and tests). */
std::vector<std::string_view> filterChainNames();

}  // namespace sluice
