// scanTopLevelMembers(): locates top-level members only, skips strings with
// escapes and nested values, and refuses what it cannot vouch for.

#include "filters/json_fields.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
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

// ---- isVerifiedJson ------------------------------------------------------------

bool libraryAccepts(std::string_view text) {
  return !nlohmann::json::parse(text.begin(), text.end(), nullptr, false).is_discarded();
}

TEST(JsonFieldsVerifiedTest, AcceptsWhatTheLibraryAcceptsInLlmChunks) {
  for (const std::string_view text : {
           R"([{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}])",
           R"( [ ] )",
           R"({})",
           R"({"a":[true,false,null,-0,12,"x"],"b":{"c":{"d":[]}}})",
           R"("esc \" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00")",
           "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \x7f\"",
           R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"loc\":\"Paris\"}"}}]})",
       }) {
    EXPECT_TRUE(isVerifiedJson(text)) << text;
    EXPECT_TRUE(libraryAccepts(text)) << text;
  }
}

TEST(JsonFieldsVerifiedTest, RejectsWhatTheLibraryRejects) {
  for (const std::string_view text : {
           R"([1,])",
           R"({"a":1,})",
           R"({"a" 1})",
           R"([1 2])",
           R"({"a":1}})",
           R"(tru)",
           R"(nul)",
           R"("\x")",
           R"("\u12G4")",
           R"("\uDC00")",
           R"("\uD800")",
           R"("\uD800\u0041")",
           R"(01)",
           R"(-)",
           R"("open)",
           R"([)",
           "\"tab\there\"",
           "\"\xc0\xaf\"",          // overlong
           "\"\xed\xa0\x80\"",      // surrogate
           "\"\xf4\x90\x80\x80\"",  // > U+10FFFF
           "\"\xe2\x82\"",          // truncated
           "\"\x80\"",              // stray
           "{} x",
       }) {
    EXPECT_FALSE(isVerifiedJson(text)) << text;
    EXPECT_FALSE(libraryAccepts(text)) << text;
  }
}

TEST(JsonFieldsVerifiedTest, DeclinesFloatsLongNumbersAndDeepNesting) {
  // Valid, but left to the library: out-of-range floats are errors there.
  for (const std::string_view text : {"1.5", "-2E3", "1234567890123456789", "[[[[1]]]]"}) {
    EXPECT_TRUE(libraryAccepts(text)) << text;
  }
  EXPECT_FALSE(libraryAccepts("1e400"));  // why floats are left to the library
  EXPECT_FALSE(isVerifiedJson("1.5"));
  EXPECT_FALSE(isVerifiedJson("1e400"));
  EXPECT_FALSE(isVerifiedJson("-2E3"));
  EXPECT_FALSE(isVerifiedJson("1234567890123456789"));
  EXPECT_TRUE(isVerifiedJson("123456789012345678"));
  EXPECT_TRUE(isVerifiedJson("[[[[1]]]]", 4));
  EXPECT_FALSE(isVerifiedJson("[[[[1]]]]", 3));
  EXPECT_FALSE(isVerifiedJson(std::string_view("[1]\0", 4)));  // NUL: the library's end of input
}

// Random texts built from JSON's pieces and stray bytes: whatever the
// verifier accepts, the library accepts (the reverse need not hold).
TEST(JsonFieldsVerifiedTest, NeverAcceptsWhatTheLibraryRejectsOnRandomInput) {
  static const std::vector<std::string> kPieces = {"{",        "}",        "[",
                                                   "]",        ",",        ":",
                                                   "\"",       "\"k\"",    "\"v\"",
                                                   "\\",       "\\n",      "\\u",
                                                   "\\uD83D",  "\\uDE00",  "00e9",
                                                   "true",     "false",    "null",
                                                   "0",        "-",        "7",
                                                   "12",       " ",        "\n",
                                                   "\xc3",     "\xa9",     "\xe2\x82\xac",
                                                   "\xf0\x9f", "\x98\x80", "\xed\xa0\x80",
                                                   "\x7f",     "\x01",     "a",
                                                   "."};
  std::mt19937 rng(18);
  size_t accepted = 0;
  for (int round = 0; round < 200000; ++round) {
    std::string text;
    const size_t n = 1 + rng() % 12;
    for (size_t i = 0; i < n; ++i) text += kPieces[rng() % kPieces.size()];
    if (isVerifiedJson(text)) {
      ++accepted;
      ASSERT_TRUE(libraryAccepts(text)) << text;
    }
  }
  EXPECT_GT(accepted, 100u);  // the generator does reach valid texts
}

TEST(WithTopLevelStringTest, ReplacesTheMemberAndKeepsEverythingElseByteForByte) {
  const std::string body =
      R"({"model": "gpt-4o", "stream": true, "messages": [{"model": "nested"}]})";
  EXPECT_EQ(withTopLevelString(body, "model", "gpt-4o-prod"),
            R"({"model": "gpt-4o-prod", "stream": true, "messages": [{"model": "nested"}]})");
}

TEST(WithTopLevelStringTest, ReplacesEveryOccurrenceOfARepeatedKey) {
  EXPECT_EQ(withTopLevelString(R"({"model":1,"x":2,"model":"b"})", "model", "m"),
            R"({"model":"m","x":2,"model":"m"})");
}

TEST(WithTopLevelStringTest, LeavesABodyWithoutTheMemberOrNotAnObjectAlone) {
  EXPECT_EQ(withTopLevelString(R"({"input": "x"})", "model", "m"), std::nullopt);
  EXPECT_EQ(withTopLevelString("[1,2]", "model", "m"), std::nullopt);
  EXPECT_EQ(withTopLevelString("", "model", "m"), std::nullopt);
  EXPECT_EQ(withTopLevelString(R"({"model": "a")", "model", "m"), std::nullopt);
}

}  // namespace
}  // namespace sluice
