#include "filters/spend/spend_split.h"

#include <algorithm>

namespace sluice {

SpendSplit splitSpend(const AttemptTokens& tokens, AttemptDisposition disposition,
                      const ModelPrice& price) {
  const uint64_t received = std::min(tokens.delivered_output_tokens, tokens.output_tokens);
  const bool client_got_output = tokens.output_delivered || received > 0;

  SpendSplit split;
  if (client_got_output) {
    split.delivered_input_tokens = tokens.input_tokens;
  } else {
    split.leaked_input_tokens = tokens.input_tokens;
  }
  const uint64_t delivered_output = disposition == AttemptDisposition::Finished ? 0 : received;
  split.delivered_output_tokens = delivered_output;
  split.leaked_output_tokens = tokens.output_tokens - delivered_output;

  split.delivered_usd =
      price.inputUsd(split.delivered_input_tokens) + price.outputUsd(split.delivered_output_tokens);
  split.leaked_usd =
      price.inputUsd(split.leaked_input_tokens) + price.outputUsd(split.leaked_output_tokens);
  return split;
}

}  // namespace sluice
