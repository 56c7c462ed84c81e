#include "filters/spend/pricing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice {
namespace {

std::vector<config::PriceConfig> contractPricing() {
  return {
      {"gpt-4o-mini*", 0.15, 0.60},  // before gpt-4o*: first match wins
      {"gpt-4o*", 2.50, 10.00},     {"claude-*", 3.00, 15.00}, {"o[134]-*", 1.10, 4.40},
      {"gpt-4.?", 2.00, 8.00},      {"*gpt-oss*", 1.00, 1.00},
  };
}

struct MatchCase {
  std::string model;
  std::string label;
  double input;
  double output;
};

class PriceTableMatchTest : public ::testing::TestWithParam<MatchCase> {};

TEST_P(PriceTableMatchTest, FirstGlobWinsElseOther) {
  const PriceTable table(contractPricing());
  const MatchCase& c = GetParam();
  const ModelPrice& price = table.match(c.model);
  EXPECT_EQ(price.label, c.label) << c.model;
  EXPECT_DOUBLE_EQ(price.input_usd_per_mtok, c.input);
  EXPECT_DOUBLE_EQ(price.output_usd_per_mtok, c.output);
}

INSTANTIATE_TEST_SUITE_P(
    Models, PriceTableMatchTest,
    ::testing::Values(MatchCase{"gpt-4o", "gpt-4o*", 2.50, 10.00},
                      MatchCase{"gpt-4o-2024-08-06", "gpt-4o*", 2.50, 10.00},
                      MatchCase{"gpt-4o-mini-2024-07-18", "gpt-4o-mini*", 0.15, 0.60},
                      MatchCase{"claude-sonnet-4-20250514", "claude-*", 3.00, 15.00},
                      MatchCase{"claude", "other", 0, 0},  // "claude-*" needs the dash
                      MatchCase{"o3-mini", "o[134]-*", 1.10, 4.40},
                      MatchCase{"o1-preview", "o[134]-*", 1.10, 4.40},
                      MatchCase{"o2-mini", "other", 0, 0},
                      MatchCase{"gpt-4.1", "gpt-4.?", 2.00, 8.00},
                      MatchCase{"gpt-4.10", "other", 0, 0},  // `?` is exactly one character
                      MatchCase{"openai/gpt-oss-120b", "*gpt-oss*", 1.00, 1.00},  // `*` spans '/'
                      MatchCase{"GPT-4o", "other", 0, 0},  // case-sensitive, like the provider ids
                      MatchCase{"llama-3.1-70b", "other", 0, 0}, MatchCase{"", "other", 0, 0}));

TEST(PriceTableTest, EmptyTableAndCatchAll) {
  const PriceTable empty;
  EXPECT_EQ(empty.match("gpt-4o").label, "other");
  EXPECT_EQ(empty.labels(), std::vector<std::string_view>{"other"});

  const PriceTable catch_all({{"claude-*", 3, 15}, {"*", 1, 2}});
  EXPECT_EQ(catch_all.match("anything").label, "*");
  EXPECT_EQ(catch_all.match("").label, "*");  // an unknown model is caught by "*"
  EXPECT_EQ(catch_all.match("claude-3-opus").label, "claude-*");
}

TEST(PriceTableTest, LabelsAreThePatternsPlusOtherDeduplicated) {
  const PriceTable table({{"gpt-4o*", 2.5, 10}, {"claude-*", 3, 15}, {"gpt-4o*", 9, 9}});
  EXPECT_EQ(table.labels(), (std::vector<std::string_view>{"gpt-4o*", "claude-*", "other"}));
  EXPECT_DOUBLE_EQ(table.match("gpt-4o").input_usd_per_mtok, 2.5);  // the first duplicate wins
}

TEST(PriceTableTest, CostsAreUsdPerMillionTokens) {
  const PriceTable table(contractPricing());
  const ModelPrice& price = table.match("claude-3-5-haiku");
  EXPECT_DOUBLE_EQ(price.inputUsd(1'000'000), 3.0);
  EXPECT_DOUBLE_EQ(price.outputUsd(2'000), 0.03);
  EXPECT_DOUBLE_EQ(table.match("unknown").outputUsd(123456), 0.0);
}

}  // namespace
}  // namespace sluice
