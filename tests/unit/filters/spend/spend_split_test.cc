#include "filters/spend/spend_split.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

// $2 per Mtok input, $10 per Mtok output: 1000 input = $0.002, 1000 output = $0.01.
const ModelPrice kPrice{"gpt-4o*", 2.0, 10.0};

struct SplitCase {
  const char* name;
  AttemptTokens tokens;
  AttemptDisposition disposition;
  uint64_t delivered_input;
  uint64_t delivered_output;
  uint64_t leaked_input;
  uint64_t leaked_output;
};

class SpendSplitTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SpendSplitTest, SplitsPerDesignSection4) {
  const SplitCase& c = GetParam();
  const SpendSplit s = splitSpend(c.tokens, c.disposition, kPrice);
  EXPECT_EQ(s.delivered_input_tokens, c.delivered_input);
  EXPECT_EQ(s.delivered_output_tokens, c.delivered_output);
  EXPECT_EQ(s.leaked_input_tokens, c.leaked_input);
  EXPECT_EQ(s.leaked_output_tokens, c.leaked_output);
  // Nothing is lost or invented, and USD follows the tokens.
  EXPECT_EQ(s.delivered_input_tokens + s.leaked_input_tokens, c.tokens.input_tokens);
  EXPECT_EQ(s.delivered_output_tokens + s.leaked_output_tokens, c.tokens.output_tokens);
  EXPECT_DOUBLE_EQ(s.delivered_usd,
                   c.delivered_input * 2.0 / 1e6 + c.delivered_output * 10.0 / 1e6);
  EXPECT_DOUBLE_EQ(s.leaked_usd, c.leaked_input * 2.0 / 1e6 + c.leaked_output * 10.0 / 1e6);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, SpendSplitTest,
    ::testing::Values(
        // Completed and fully delivered: nothing leaks.
        SplitCase{"completed_delivered",
                  {1000, 500, 500, true},
                  AttemptDisposition::Completed,
                  1000,
                  500,
                  0,
                  0},
        // Client left mid-stream: output after it left leaks, input stays delivered.
        SplitCase{"cancelled_mid_stream",
                  {1000, 500, 200, true},
                  AttemptDisposition::Cancelled,
                  1000,
                  200,
                  0,
                  300},
        // Client left before the first token: everything leaks.
        SplitCase{"cancelled_before_output",
                  {1000, 40, 0, false},
                  AttemptDisposition::Cancelled,
                  0,
                  0,
                  1000,
                  40},
        // Abandoned for a retry (nothing can have been sent): all of it leaks.
        SplitCase{"abandoned_retry",
                  {1000, 120, 0, false},
                  AttemptDisposition::Abandoned,
                  0,
                  0,
                  1000,
                  120},
        // Abandoned before any response (stall / budget while waiting): the input leaks.
        SplitCase{"abandoned_before_headers",
                  {1000, 0, 0, false},
                  AttemptDisposition::Abandoned,
                  0,
                  0,
                  1000,
                  0},
        // Budget cut a stream the client was reading: what it got stays delivered.
        SplitCase{"abandoned_budget_mid_stream",
                  {1000, 500, 300, true},
                  AttemptDisposition::Abandoned,
                  1000,
                  300,
                  0,
                  200},
        // finish: all output leaks, even the part sent before the client left;
        // the input is delivered because the client did get some output.
        SplitCase{"finished_after_partial_delivery",
                  {1000, 500, 100, true},
                  AttemptDisposition::Finished,
                  1000,
                  0,
                  0,
                  500},
        SplitCase{"finished_nothing_delivered",
                  {1000, 500, 0, false},
                  AttemptDisposition::Finished,
                  0,
                  0,
                  1000,
                  500},
        // A whole response with no output tokens (embeddings) keeps its input delivered.
        SplitCase{
            "zero_output_delivered", {8, 0, 0, true}, AttemptDisposition::Completed, 8, 0, 0, 0},
        // Delivered tokens alone imply delivery; over-reported delivery is clamped.
        SplitCase{"delivered_tokens_imply_delivery",
                  {100, 50, 80, false},
                  AttemptDisposition::Cancelled,
                  100,
                  50,
                  0,
                  0}),
    [](const ::testing::TestParamInfo<SplitCase>& info) { return std::string(info.param.name); });

TEST(SpendSplitPriceTest, OtherPriceCountsTokensWithZeroUsd) {
  const SpendSplit s =
      splitSpend({1000, 500, 100, true}, AttemptDisposition::Cancelled, ModelPrice{"other", 0, 0});
  EXPECT_EQ(s.leaked_output_tokens, 400u);
  EXPECT_DOUBLE_EQ(s.leaked_usd, 0.0);
  EXPECT_DOUBLE_EQ(s.delivered_usd, 0.0);
}

}  // namespace
}  // namespace sluice
