// estimateTokenNeed(): input estimate (bytes / 4) plus the request's output
// cap. The fast path that skips parsing must give the same answer as parsing.

#include <gtest/gtest.h>

#include <string>

#include "filters/throttle/throttle_filter.h"

namespace sluice {
namespace {

uint64_t inputOnly(const std::string& body) { return (body.size() + 3) / 4; }

TEST(TokenNeedTest, NoCapIsTheInputEstimate) {
  const std::string body = R"({"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]})";
  EXPECT_EQ(estimateTokenNeed(body), inputOnly(body));
}

TEST(TokenNeedTest, EachCapFieldAddsItsValue) {
  for (const char* field : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    const std::string body =
        std::string(R"({"messages":[{"role":"user","content":"hi"}],")") + field + R"(":500})";
    EXPECT_EQ(estimateTokenNeed(body), inputOnly(body) + 500) << field;
  }
}

TEST(TokenNeedTest, CapSpelledWithAnEscapeIsStillFound) {
  // "max\u005ftokens" is the key max_tokens: the fast path must not skip it.
  const std::string body = R"({"messages":[],"max\u005ftokens":70})";
  EXPECT_EQ(estimateTokenNeed(body), inputOnly(body) + 70);
}

TEST(TokenNeedTest, FieldNameInsideAStringIsNotACap) {
  const std::string body = R"({"messages":[{"role":"user","content":"set max_tokens: 9"}]})";
  EXPECT_EQ(estimateTokenNeed(body), inputOnly(body));
}

TEST(TokenNeedTest, NestedOrNonNumericCapIsIgnored) {
  const std::string nested = R"({"opts":{"max_tokens":9}})";
  EXPECT_EQ(estimateTokenNeed(nested), inputOnly(nested));
  const std::string text = R"({"max_tokens":"9"})";
  EXPECT_EQ(estimateTokenNeed(text), inputOnly(text));
}

// The fast path looks for "max_" (every cap's prefix): a body
// with that prefix but no cap is scanned, and gives the input estimate; caps
// after such a prefix are still read.
TEST(TokenNeedTest, ACapPrefixWithoutACapIsTheInputEstimate) {
  const std::string prefix_only = R"({"max_temperature":1,"messages":["max_"]})";
  EXPECT_EQ(estimateTokenNeed(prefix_only), inputOnly(prefix_only));
  const std::string both = R"({"max_temperature":1,"max_output_tokens":12})";
  EXPECT_EQ(estimateTokenNeed(both), inputOnly(both) + 12);
}

TEST(TokenNeedTest, NotJsonIsTheInputEstimate) {
  EXPECT_EQ(estimateTokenNeed("max_tokens=5"), inputOnly("max_tokens=5"));
  EXPECT_EQ(estimateTokenNeed(""), 0u);
}

}  // namespace
}  // namespace sluice
