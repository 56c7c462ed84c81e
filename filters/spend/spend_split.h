#pragma once

// docs/design.md §4 leaked-spend accounting for one upstream attempt, as a pure
// function: tokens and a disposition in, delivered/leaked tokens and USD out.
//
// "Leaked spend is what the provider bills for work that no listening client
// received." Per attempt:
//   - output the client did not receive is leaked: produced after the client
//     left (Cancelled), or by an attempt sluice dropped (Abandoned: a retry,
//     the budget, a stall). A retried attempt delivered nothing (the contract
//     never retries once bytes went downstream), so all its output leaks; an
//     attempt cut mid-stream by the budget keeps the part the still-listening
//     client did receive as delivered;
//   - all of a `finish` attempt's output is leaked (Finished), even what
//     reached the client before it left (§3: "count all of it as leaked");
//   - the attempt's input is leaked when none of its output was delivered,
//     else delivered. "Delivered" here is what actually reached the client,
//     for every disposition.
//
// Token counts come from UsageMeter::tokenCounts() (provider usage where
// reported, else estimates); prices from PriceTable::match().

#include <cstdint>

#include "filters/spend/pricing.h"

namespace sluice {

/** How an attempt ended, as far as spend is concerned. */
enum class AttemptDisposition {
  /** Ran to its end while the client listened (leaks only what it did not get). */
  Completed,
  /** Torn down because the client left (`on_client_disconnect: cancel`) or draining. */
  Cancelled,
  /** Dropped by sluice: a retry follows, the budget ran out, or the stream stalled. */
  Abandoned,
  /** The client left and the attempt was drained to completion (`finish`). */
  Finished,
};

/** What one attempt consumed and how much of it reached the client. */
struct AttemptTokens {
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  /** Output tokens in the part of the response the client received (<= output_tokens). */
  uint64_t delivered_output_tokens = 0;
  /**
   * The client received some of the response's output. Distinct from
   * `delivered_output_tokens > 0` so that a fully delivered response with no
   * output tokens (an embeddings call) still counts its input as delivered.
   */
  bool output_delivered = false;
};

/** The attempt's tokens and USD, split by disposition. */
struct SpendSplit {
  uint64_t delivered_input_tokens = 0;
  uint64_t delivered_output_tokens = 0;
  uint64_t leaked_input_tokens = 0;
  uint64_t leaked_output_tokens = 0;
  double delivered_usd = 0;
  double leaked_usd = 0;
};

/**
 * Splits one attempt's spend per the rules above. `delivered_output_tokens`
 * is clamped to `output_tokens`; `price` gives USD (an `other` price yields
 * token counts with zero USD).
 */
SpendSplit splitSpend(const AttemptTokens& tokens, AttemptDisposition disposition,
                      const ModelPrice& price);

}  // namespace sluice
