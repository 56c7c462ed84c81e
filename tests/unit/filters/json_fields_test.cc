// scanTopLevelMembers(): locates top-level members only, skips strings with
// escapes and nested values, and refuses what it cannot vouch for.

#include "filters/json_fields.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sluice {
namespace {

using Members = std::vector<std::pair<std::string, std::string>>;

bool scan(std::string_view text, Members* out) {
  return scanTopLevelMembers(text, [&](std::string_view k, std::string_view v) {
    out->emplace_back(std::string(k), std::string(v));
    return true;
  });
}

TEST(JsonFieldsTest, ListsTopLevelMembersWithRawValues) {
  Members m;
  ASSERT_TRUE(scan(R"( { "model" : "gpt-4o", "n":2,"stream":true, "x":null,
                        "usage":{"prompt_tokens":5,"d":{"a":[1,{"b":"}"}]}}, "f":-1.5e3 } )",
                   &m));
  const Members want = {{"model", R"("gpt-4o")"},
                        {"n", "2"},
                        {"stream", "true"},
                        {"x", "null"},
                        {"usage", R"({"prompt_tokens":5,"d":{"a":[1,{"b":"}"}]}})"},
                        {"f", "-1.5e3"}};
  EXPECT_EQ(m, want);
}

TEST(JsonFieldsTest, SkipsStringsWithEscapedQuotesAndBracesAndNestedKeys) {
  Members m;
  ASSERT_TRUE(scan(R"({"messages":[{"content":"say \"model\": {\\\"x\" ] }","model":"inner"}],)"
                   R"("model":"outer\\"})",
                   &m));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].first, "messages");
  EXPECT_EQ(m[1].first, "model");
  EXPECT_EQ(m[1].second, R"("outer\\")");
}

TEST(JsonFieldsTest, EscapedQuoteDoesNotEndATopLevelString) {
  Members m;
  ASSERT_TRUE(scan(R"({"a":"x\",\"model\":\"fake","model":"real"})", &m));
  const Members want = {{"a", R"("x\",\"model\":\"fake")"}, {"model", R"("real")"}};
  EXPECT_EQ(m, want);
}

TEST(JsonFieldsTest, EscapedBackslashBeforeAQuoteEndsTheString) {
  Members m;
  ASSERT_TRUE(scan(R"({"a":"x\\","model":"m"})", &m));
  const Members want = {{"a", R"("x\\")"}, {"model", R"("m")"}};
  EXPECT_EQ(m, want);
}

TEST(JsonFieldsTest, StopsWhenTheCallbackSaysSo) {
  int calls = 0;
  EXPECT_TRUE(
      scanTopLevelMembers(R"({"a":1,"b":2, broken)", [&](std::string_view, std::string_view) {
        ++calls;
        return false;
      }));
  EXPECT_EQ(calls, 1);
}

TEST(JsonFieldsTest, EmptyObject) {
  Members m;
  EXPECT_TRUE(scan(" {} ", &m));
  EXPECT_TRUE(m.empty());
}

TEST(JsonFieldsTest, RefusesWhatItCannotVouchFor) {
  for (const char* bad : {"", "[]", "\"x\"", "{", R"({"a":1)", R"({"a" 1})", R"({"a":})",
                          R"({"a":1,})", R"({"a":"unterminated})", R"({"a":[1,2})", R"({"a":1}} )",
                          R"({a:1})", R"({"max\u005ftokens":1})"}) {
    Members m;
    EXPECT_FALSE(scan(bad, &m)) << bad;
  }
}

TEST(JsonFieldsTest, PlainStringsNeedNoDecoding) {
  EXPECT_EQ(plainString(R"("gpt-4o")"), "gpt-4o");
  EXPECT_EQ(plainString(R"("")"), "");
  for (const char* not_plain : {R"("a\"b")", R"("a\u0041")", "\"caf\xc3\xa9\"", "\"tab\there\"",
                                R"("open)", R"(x")", R"(")", "12", "null"}) {
    EXPECT_FALSE(plainString(not_plain)) << not_plain;
  }
}

TEST(JsonFieldsTest, PlainUnsignedIsDigitsOnly) {
  EXPECT_EQ(plainUnsigned("0"), 0u);
  EXPECT_EQ(plainUnsigned("19"), 19u);
  EXPECT_EQ(plainUnsigned("18446744073709551615"), UINT64_MAX);
  for (const char* not_plain :
       {"", "012", "-1", "+1", "1.0", "1e3", "18446744073709551616", "1 ", "\"1\"", "null"}) {
    EXPECT_FALSE(plainUnsigned(not_plain)) << not_plain;
  }
}

TEST(JsonFieldsTest, PlainObjectsAreValidJsonOfPlainLeaves) {
  EXPECT_TRUE(isPlainObject("{}", 1));
  EXPECT_TRUE(
      isPlainObject(R"({"prompt_tokens":19,"completion_tokens":10,"tier":"default","x":null})", 1));
  const char* nested = R"({"prompt_tokens":19,"prompt_tokens_details":{"cached_tokens":0}})";
  EXPECT_TRUE(isPlainObject(nested, 2));
  EXPECT_FALSE(isPlainObject(nested, 1));  // deeper than allowed
  for (const char* not_plain :
       {R"({"a":1.5})", R"({"a":-1})", R"({"a":[1]})", R"({"a":012})", R"({"a":"\n"})",
        R"({"a":tru})", R"({"a":{"b":1]})", R"({"a\u0041":1})", R"({"a":1} x)", R"([1])"}) {
    EXPECT_FALSE(isPlainObject(not_plain, 3)) << not_plain;
  }
}

}  // namespace
}  // namespace sluice
