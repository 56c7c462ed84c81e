#include "filters/spend/pricing.h"

#include <fnmatch.h>
#include <gtest/gtest.h>

#include <iterator>
#include <random>
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

// A glob that is a name, or a name and one trailing '*', is
// compared instead of fnmatch()ed: on random globs and models (meta
// characters, '/', '.', NUL, non-ASCII bytes) the table picks what the first
// fnmatch() match picks.
TEST(PriceTableTest, ComparedGlobsMatchWhatFnmatchMatches) {
  static const std::string kPieces[] = {"gpt",      "-4o",  "mini", "*", "?", "[ab]",
                                        "\\*",      ".",    "/",    "a", "b", std::string(1, '\0'),
                                        "\xc3\xa9", "\xff", "]",    "-"};
  std::mt19937 rng(2026);
  const auto text = [&](size_t max_pieces) {
    std::string out;
    const size_t n = rng() % (max_pieces + 1);
    for (size_t i = 0; i < n; ++i) out += kPieces[rng() % std::size(kPieces)];
    return out;
  };
  for (int round = 0; round < 3000; ++round) {
    std::vector<config::PriceConfig> pricing;
    const size_t globs = 1 + rng() % 4;
    for (size_t g = 0; g < globs; ++g) {
      std::string glob = text(3);
      if (rng() % 2 == 0) glob += "*";  // the prefix form, often
      pricing.push_back({glob, static_cast<double>(g + 1), 0});
    }
    const PriceTable table(pricing);
    for (int m = 0; m < 10; ++m) {
      std::string model = text(4);
      // Often a model that starts with (or is) a glob's text.
      if (rng() % 2 == 0) {
        const std::string& glob = pricing[rng() % pricing.size()].model_glob;
        model = glob.substr(0, glob.size() - (glob.ends_with("*") ? 1 : 0)) +
                (rng() % 2 == 0 ? text(2) : "");
      }
      std::string expected(PriceTable::kOtherLabel);
      for (const auto& p : pricing) {
        if (fnmatch(p.model_glob.c_str(), model.c_str(), 0) == 0) {
          expected = p.model_glob;
          break;
        }
      }
      ASSERT_EQ(table.match(model).label, expected) << "model " << model;
    }
  }
}

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
