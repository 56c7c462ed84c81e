#pragma once

// The problem sluice answers with when it cancels a request for a reason
// (docs/design.md §3, §8): one catalogue entry per cancel reason, with a
// detail naming what the client can act on. A pure function of the reason
// and what the Exchange knows at that moment, so every reason's answer is
// table-tested without an Exchange.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/cancel_reason.h"
#include "common/problem.h"

namespace sluice {

/** What the answer to a cancel may name. */
struct CancelContext {
  std::string_view upstream = "none";  // the current attempt's upstream, else the route's
  std::optional<std::chrono::milliseconds> budget;  // the request's whole budget, if bounded
  uint32_t attempts = 0;                            // attempts sent so far
};

/** The problem for a request cancelled with `reason`; `retry_after` where a wait is known. */
Problem problemForCancel(CancelReason reason, const CancelContext& context,
                         std::optional<std::chrono::milliseconds> retry_after);

}  // namespace sluice
