// scanTopLevelMembers(): locates top-level members only, skips strings with
// escapes and nested values, and refuses what it cannot vouch for.

#include "common/json_fields.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace sluice {
namespace {

// One random change to `text` (non-empty): a byte replaced by one of
// `bytes`, a byte dropped, or a byte doubled.
void damage(std::string& text, const std::string& bytes, std::mt19937& rng) {
  const size_t at = rng() % text.size();
  switch (rng() % 3) {
    case 0:
      text[at] = bytes[rng() % bytes.size()];
      break;
    case 1:
      text.erase(at, 1);
      break;
    default:
      text.insert(at, 1, text[at]);
  }
}

// A random object of up to four members from `keys` and `values`, sometimes
// with blanks around its punctuation; a member's value is itself such an
// object, up to `depth` levels down.
std::string randomObject(std::mt19937& rng, const std::vector<std::string>& keys,
                         const std::vector<std::string>& values, int depth) {
  std::string text = "{";
  if (rng() % 6 == 0) text += " ";
  const size_t members = rng() % 5;
  for (size_t m = 0; m < members; ++m) {
    if (m > 0) text += rng() % 8 == 0 ? " , " : ",";
    text += "\"" + keys[rng() % keys.size()] + "\"" + (rng() % 8 == 0 ? " : " : ":");
    if (depth > 0 && rng() % 4 == 0) {
      text += randomObject(rng, keys, values, depth - 1);
    } else {
      text += values[rng() % values.size()];
    }
  }
  text += "}";
  return text;
}

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

TEST(JsonFieldsTest, KeysWrittenWithEscapesAreDecodedAsAParserReadsThem) {
  const std::string text =
      R"({"mod\u0065l":"a","\"q\\\/\b\f\n\r\t":1,"\u00e9\ud83d\ude00":2,"p\u0000":3})";
  Members m;
  ASSERT_TRUE(scan(text, &m));
  const auto parsed = nlohmann::json::parse(text);
  ASSERT_EQ(m.size(), parsed.size());
  for (const auto& [key, value] : m) {
    ASSERT_TRUE(parsed.contains(key)) << key;
    EXPECT_EQ(parsed[key], nlohmann::json::parse(value)) << key;
  }
  EXPECT_EQ(m[0].first, "model");
  // What a parser refuses, the scan declines too (the caller parses fully).
  for (const std::string_view bad :
       {R"({"mod\x":1})", R"({"\ud800":1})", R"({"\udc00x":1})", R"({"\ud800\u0041":1})",
        R"({"\u12g4":1})", R"({"a\)", "{\"a\\\x01\":1}"}) {
    Members ignored;
    EXPECT_FALSE(scan(bad, &ignored)) << bad;
    EXPECT_TRUE(nlohmann::json::parse(bad, nullptr, false).is_discarded()) << bad;
  }
}

TEST(JsonFieldsTest, EmptyObject) {
  Members m;
  EXPECT_TRUE(scan(" {} ", &m));
  EXPECT_TRUE(m.empty());
}

TEST(JsonFieldsTest, RefusesWhatItCannotVouchFor) {
  for (const char* bad : {"", "[]", "\"x\"", "{", R"({"a":1)", R"({"a" 1})", R"({"a":})",
                          R"({"a":1,})", R"({"a":"unterminated})", R"({"a":[1,2})", R"({"a":1}} )",
                          R"({a:1})", R"({"max\u005x":1})"}) {
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
  // Every byte, alone and between others: plain exactly when printable ASCII
  // other than '"' and '\\' (a table look-up).
  for (int c = 0; c < 256; ++c) {
    const bool plain = c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
    const std::string text = "\"ab" + std::string(1, static_cast<char>(c)) + "cd\"";
    EXPECT_EQ(plainString(text).has_value(), plain) << c;
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

// The scan decodes a key written with escapes into its own buffer: that key
// is not a view of the object, and isPlainObject() must not peek at the
// bytes around it as if it were (a heap-buffer-overflow the JSON fuzzer found
// with this input; ASan sees it).
TEST(JsonFieldsTest, AKeyWrittenWithEscapesIsNeverPlain) {
  for (const char* text :
       {R"({"model":"gpt-\"4o\\","max_tokens":16,"n":[1,{"a":"}"}],"k\u0041":null})",
        R"({"k\u0041":null})", R"({"a":1,"\u0062":2})", R"({"a":{"\u0062":1}})"}) {
    EXPECT_FALSE(isPlainObject(text, 3)) << text;
    std::optional<uint64_t> count;
    const std::string_view key = "a";
    EXPECT_FALSE(readPlainObject(text, 3, &key, 1, &count)) << text;
  }
}

// ---- the member scan against the earlier one ------------------------------------

// scanTopLevelMembers() as it was before the table-driven scan (a memchr per string, a
// byte-by-byte container walk): the reference for the faster walk.
namespace reference {

constexpr size_t npos = std::string_view::npos;

bool isWs(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skipWs(std::string_view s, size_t i) {
  while (i < s.size() && isWs(s[i])) ++i;
  return i;
}

size_t endOfString(std::string_view s, size_t i) {
  size_t j = i + 1;
  while (j < s.size()) {
    const void* q = std::memchr(s.data() + j, '"', s.size() - j);
    if (q == nullptr) return npos;
    const size_t p = static_cast<size_t>(static_cast<const char*>(q) - s.data());
    size_t backslashes = 0;
    while (p - backslashes > i + 1 && s[p - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return p + 1;
    j = p + 1;
  }
  return npos;
}

size_t endOfValue(std::string_view s, size_t i) {
  if (i >= s.size()) return npos;
  const char c = s[i];
  if (c == '"') return endOfString(s, i);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    for (size_t j = i; j < s.size();) {
      const char d = s[j];
      if (d == '"') {
        j = endOfString(s, j);
        if (j == npos) return npos;
        continue;
      }
      if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) return j + 1;
      }
      ++j;
    }
    return npos;
  }
  size_t j = i;
  while (j < s.size() && !isWs(s[j]) && s[j] != ',' && s[j] != '}' && s[j] != ']') ++j;
  return j == i ? npos : j;
}

bool memberKey(std::string_view s, size_t& i, std::string_view& key) {
  if (i >= s.size() || s[i] != '"') return false;
  size_t key_end = i + 1;
  while (key_end < s.size() && s[key_end] != '"' && s[key_end] != '\\') ++key_end;
  if (key_end >= s.size() || s[key_end] == '\\') return false;
  key = s.substr(i + 1, key_end - i - 1);
  i = skipWs(s, key_end + 1);
  if (i >= s.size() || s[i] != ':') return false;
  i = skipWs(s, i + 1);
  return true;
}

bool scan(std::string_view s, Members* out) {
  size_t i = skipWs(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skipWs(s, i + 1);
  if (i < s.size() && s[i] == '}') return skipWs(s, i + 1) == s.size();
  std::string_view key;
  if (!memberKey(s, i, key)) return false;
  for (;;) {
    const size_t end = endOfValue(s, i);
    if (end == npos) return false;
    out->emplace_back(std::string(key), std::string(s.substr(i, end - i)));
    i = skipWs(s, end);
    if (i >= s.size()) return false;
    if (s[i] == '}') return skipWs(s, i + 1) == s.size();
    if (s[i] != ',') return false;
    i = skipWs(s, i + 1);
    if (!memberKey(s, i, key)) return false;
  }
}

}  // namespace reference

// Random objects whose strings are short and long, with escaped quotes and
// backslash runs anywhere (around the short-string bound especially), nested
// in arrays and objects, then damaged: the same members, or the same refusal.
TEST(JsonFieldsTest, MemberScanMatchesSessionEightsOnRandomObjects) {
  static const std::string kPieces[] = {"a", "x", " ", "\\\"", "\\\\", "\\",       "\"",     "{",
                                        "}", "[", "]", ",",    ":",    "\xc3\xa9", "\\u0041"};
  static const std::string kDamage = "{}[],:\"\\ x0";
  std::mt19937 rng(909);
  const auto stringValue = [&] {
    std::string out = "\"";
    const size_t n = rng() % 40;
    for (size_t i = 0; i < n; ++i) {
      const std::string& piece = kPieces[rng() % std::size(kPieces)];
      // Mostly valid string content: an unescaped quote or lone backslash now and then.
      if ((piece == "\"" || piece == "\\") && rng() % 4 != 0) continue;
      out += piece;
    }
    return out + "\"";
  };
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    switch (depth > 0 ? rng() % 5 : rng() % 3) {
      case 0:
        return stringValue();
      case 1:
        return std::to_string(rng() % 1000);
      case 2:
        return rng() % 2 ? "true" : "null";
      case 3: {
        std::string out = "[";
        for (size_t i = 0, n = rng() % 4; i < n; ++i) out += (i ? "," : "") + value(depth - 1);
        return out + "]";
      }
      default: {
        std::string out = "{";
        for (size_t i = 0, n = rng() % 4; i < n; ++i) {
          out += (i ? "," : "") + stringValue() + ":" + value(depth - 1);
        }
        return out + "}";
      }
    }
  };
  for (int round = 0; round < 20000; ++round) {
    std::string text = "{";
    for (size_t m = 0, n = rng() % 5; m < n; ++m) {
      text += (m ? (rng() % 8 == 0 ? " , " : ",") : "") + stringValue() + ":" + value(3);
    }
    text += "}";
    if (rng() % 3 == 0) damage(text, kDamage, rng);
    Members expected, got;
    const bool expected_ok = reference::scan(text, &expected);
    const bool ok = scan(text, &got);
    if (ok && !expected_ok) {
      // The reference declines a key written with escapes; the scan decodes
      // it. What it reports must then be what a parser reads.
      ASSERT_NE(text.find('\\'), std::string::npos) << text;
      const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) continue;  // e.g. invalid UTF-8: no parser's reading to compare
      for (const auto& [key, raw] : got) {
        ASSERT_TRUE(parsed.contains(key)) << key << " in " << text;
        size_t times = 0;
        for (const auto& [k, unused] : got) times += k == key;
        if (times == 1) {
          ASSERT_EQ(parsed[key], nlohmann::json::parse(raw)) << text;
        }
      }
      continue;
    }
    ASSERT_EQ(ok, expected_ok) << text;
    if (expected_ok) {
      ASSERT_EQ(got, expected) << text;
    }
  }
}

// ---- readPlainObject ----------------------------------------------------------

// What readPlainObject() replaces: isPlainObject()'s member scan, with the
// counts read as the scan passes the top-level members (the last one wins).
bool twoPassPlainCounts(std::string_view text, int depth, const std::vector<std::string_view>& keys,
                        std::vector<std::optional<uint64_t>>& counts) {
  if (!isPlainObject(text, depth)) return false;
  return scanTopLevelMembers(text, [&](std::string_view key, std::string_view value) {
    for (size_t k = 0; k < keys.size(); ++k) {
      if (key == keys[k]) counts[k] = plainUnsigned(value);
    }
    return true;
  });
}

void expectSamePlainRead(std::string_view text, int depth) {
  static const std::vector<std::string_view> kKeys = {"prompt_tokens", "completion_tokens", "a",
                                                      ""};
  std::vector<std::optional<uint64_t>> expected(kKeys.size(), 77u);
  std::vector<std::optional<uint64_t>> got(kKeys.size(), 77u);
  const bool plain = twoPassPlainCounts(text, depth, kKeys, expected);
  EXPECT_EQ(readPlainObject(text, depth, kKeys.data(), kKeys.size(), got.data()), plain)
      << text << " depth " << depth;
  EXPECT_EQ(isPlainObject(text, depth), plain) << text;
  if (plain) {
    EXPECT_EQ(got, expected) << text;
  }
}

TEST(ReadPlainObjectTest, ReadsTheCountsAPlainUsageHolds) {
  static const std::string_view kKeys[] = {"prompt_tokens", "completion_tokens", "x"};
  std::optional<uint64_t> counts[3];
  ASSERT_TRUE(
      readPlainObject(R"({"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,)"
                      R"("prompt_tokens_details":{"cached_tokens":0,"prompt_tokens":5},"x":"s"})",
                      3, kKeys, 3, counts));
  EXPECT_EQ(counts[0], 19u);  // the nested prompt_tokens is not a top-level member
  EXPECT_EQ(counts[1], 10u);
  EXPECT_EQ(counts[2], std::nullopt);  // a string, not a count
  for (const char* edge : {"{}",
                           "{ }",
                           "{} ",
                           "{}x",
                           " {}",
                           R"({"a":0})",
                           R"({"a":00})",
                           R"({"a":0 })",
                           R"({"a":18446744073709551615})",
                           R"({"a":18446744073709551616})",
                           R"({"a":99999999999999999999999})",
                           R"({"a":1,"a":"x"})",
                           R"({"a":"x","a":2})",
                           R"({"a":true})",
                           R"({"a":truex})",
                           R"({"a":true]})",
                           R"({"a":nul})",
                           R"({"a":null,})",
                           R"({"a":1]})",
                           R"({"a":1)",
                           R"({"a":"\u0041"})",
                           "{\"a\":\"\x7f\"}",
                           "{\"\x7f\":1}",
                           "{\"a\":\"\x1f\"}",
                           "{\"\xc3\xa9\":1}",
                           R"({"":3})",
                           R"({"a":{"b":{"c":{}}}})",
                           R"({"a":{"b":[]}})",
                           R"({"a":"}"})",
                           R"({"a":1}})",
                           R"({"a" : 1 , "b" : { } })",
                           "{\n\"a\"\t:\r1}",
                           R"({"a":-1})",
                           R"({"a":+1})",
                           R"({"a":1.0})",
                           R"({"a":1e2})",
                           R"({"a":1"})",
                           R"({"a",1})",
                           R"({a:1})",
                           R"({"a":})",
                           "{\"a\":1,}",
                           "{\"a"}) {
    for (int depth = 0; depth <= 4; ++depth) expectSamePlainRead(edge, depth);
  }
}

// The reader compares a member's key with the wanted ones only when some
// wanted key is as long (a bit per length, one for 63 and more): every
// length still finds its key, and a same-length other key is no match.
TEST(ReadPlainObjectTest, KeysOfEveryLengthAreFound) {
  for (size_t length = 0; length <= 80; ++length) {
    const std::string wanted(length, 'k');
    std::string other = wanted;
    if (length > 0) other.back() = 'j';
    const std::string longer = wanted + "k";
    const std::string_view keys[] = {wanted, "x"};
    std::optional<uint64_t> counts[2];
    const std::string text = "{\"" + other + "\":1,\"" + wanted + "\":2,\"" + longer + "\":3}";
    ASSERT_TRUE(readPlainObject(text, 1, keys, 2, counts)) << length;
    EXPECT_EQ(counts[0], 2u) << length;  // (length 0: `other` is "" too; the last wins)
    EXPECT_EQ(counts[1], std::nullopt) << length;
    if (length > 0) {  // only `other`, `longer` and the unwanted "x"
      const std::string_view only[] = {wanted};
      std::optional<uint64_t> count;
      const std::string without = "{\"" + other + "\":1,\"" + longer + "\":3}";
      ASSERT_TRUE(readPlainObject(without, 1, only, 1, &count));
      EXPECT_EQ(count, std::nullopt) << length;
    }
  }
}

// Random objects of plain and not-quite-plain pieces, nested, then damaged:
// the one pass says what isPlainObject() says and reads what the scan reads.
TEST(ReadPlainObjectTest, MatchesTheMemberScanOnRandomObjects) {
  static const std::vector<std::string> kKeys = {"prompt_tokens", "completion_tokens",  "a", "",
                                                 "b c",           "pr\\u006fmpt_tokens"};
  static const std::vector<std::string> kValues = {"0",
                                                   "7",
                                                   "19",
                                                   "18446744073709551615",
                                                   "18446744073709551616",
                                                   "007",
                                                   "-3",
                                                   "1.5",
                                                   "2e3",
                                                   "true",
                                                   "false",
                                                   "null",
                                                   "nul",
                                                   "\"x\"",
                                                   "\"\"",
                                                   "\"a\\\"b\"",
                                                   "\"\xc3\xa9\"",
                                                   "[]",
                                                   "[1,2]",
                                                   "\"{\"",
                                                   "\"}\"",
                                                   "\"\x7f\""};
  static const std::string kDamage = "{}[],:\"\\ x0\t\x7f";
  std::mt19937 rng(1801);
  const auto object = [&](int depth) { return randomObject(rng, kKeys, kValues, depth); };
  for (int round = 0; round < 30000; ++round) {
    std::string text = object(static_cast<int>(rng() % 4));
    if (rng() % 3 == 0) damage(text, kDamage, rng);
    if (text.empty()) continue;
    expectSamePlainRead(text, static_cast<int>(rng() % 4) + 1);
    if (HasFailure()) return;
  }
}

// ---- scanAnswerMembers ----------------------------------------------------------

// What scanAnswerMembers() replaces: the member scan collecting the last
// `model` and `usage`, then readPlainObject() on that `usage`'s text.
struct TwoPassAnswer {
  bool scanned = false;
  std::string model;
  std::string usage;
  bool usage_plain = false;
  std::vector<std::optional<uint64_t>> counts;
};

const std::vector<std::string_view> kAnswerKeys = {"prompt_tokens", "completion_tokens", "a", ""};

TwoPassAnswer twoPassAnswer(std::string_view text, int depth) {
  TwoPassAnswer out;
  std::string_view model, usage;
  out.scanned = scanTopLevelMembers(text, [&](std::string_view key, std::string_view value) {
    if (key == "model") model = value;
    if (key == "usage") usage = value;
    return true;
  });
  out.model = std::string(model);
  out.usage = std::string(usage);
  out.counts.assign(kAnswerKeys.size(), std::nullopt);
  out.usage_plain =
      readPlainObject(usage, depth, kAnswerKeys.data(), kAnswerKeys.size(), out.counts.data());
  return out;
}

void expectSameAnswerRead(std::string_view text, int depth) {
  const TwoPassAnswer expected = twoPassAnswer(text, depth);
  AnswerMembers got;
  std::vector<std::optional<uint64_t>> counts(kAnswerKeys.size(), 77u);
  ASSERT_EQ(
      scanAnswerMembers(text, depth, kAnswerKeys.data(), kAnswerKeys.size(), counts.data(), got),
      expected.scanned)
      << text;
  if (!expected.scanned) return;
  ASSERT_EQ(got.model, expected.model) << text;
  ASSERT_EQ(got.usage, expected.usage) << text;
  // The views are the text's own bytes, as the scan's are.
  if (!got.usage.empty()) {
    ASSERT_TRUE(got.usage.data() >= text.data() &&
                got.usage.data() + got.usage.size() <= text.data() + text.size());
  }
  ASSERT_EQ(got.usage_plain, expected.usage_plain) << text << " depth " << depth;
  if (expected.usage_plain) {
    ASSERT_EQ(counts, expected.counts) << text;
  }
}

TEST(ScanAnswerMembersTest, ReadsTheUsageAsTheScanPassesIt) {
  const std::string answer =
      R"({"id":"c","model":"gpt-4o","choices":[{"message":{"content":"hi \"x\" {"}}],)"
      R"("usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,)"
      R"("prompt_tokens_details":{"cached_tokens":0}},"system_fingerprint":"fp"})";
  AnswerMembers members;
  std::vector<std::optional<uint64_t>> counts(kAnswerKeys.size());
  ASSERT_TRUE(
      scanAnswerMembers(answer, 3, kAnswerKeys.data(), kAnswerKeys.size(), counts.data(), members));
  EXPECT_EQ(members.model, "\"gpt-4o\"");
  EXPECT_TRUE(members.usage_plain);
  EXPECT_EQ(counts[0], 19u);
  EXPECT_EQ(counts[1], 10u);
  for (const char* edge : {
           "{}",
           R"({"usage":{}})",
           R"({"usage":{} })",
           R"({"usage":{}x})",
           R"({"usage":{"a":1}})",
           R"({"usage":{"a":1}  ,  "model":"m"})",
           R"({"usage":{"a":1})",
           R"({"usage":{"a":1},)",
           R"({"usage":{"a":1})",
           R"({"usage":{"a":1)",
           R"({"usage":{"a":)",
           R"({"usage":)",
           R"({"usage":})",
           R"({"usage")",
           R"({"usage":{"a":1}}})",
           R"({"usage":{"a":1}]})",
           R"({"usage":{"a":1,"a":2},"usage":{"prompt_tokens":3}})",
           R"({"usage":{"prompt_tokens":3},"usage":{"a":"\u0041"}})",
           R"({"usage":{"prompt_tokens":3},"usage":null})",
           R"({"usage":{"prompt_tokens":3},"usage":"x"})",
           R"({"usage":{"a":"}"},"model":"m"})",
           R"({"usage":{"a":"\"}"},"model":"m"})",
           R"({"usage":{"a":{"b":{"c":{"d":1}}}}})",
           R"({"usage":{"a":1.5},"model":"m"})",
           R"({"usage":{"a":[1]},"model":"m"})",
           R"({"usage":{"a":007}})",
           R"({"usage":{"a":1x}})",
           R"({"usage":{"a":true}})",
           R"({"usage":{"a":truex}})",
           R"({"usage":{"a":tru}})",
           "{\"usage\":{\"a\":\"\x7f\"}}",
           "{\"usage\" : \n{ \"a\" : 1 } \t}",
           R"({"model":"a","model":"b"})",
           R"({"model":"a","usage":{"prompt_tokens":18446744073709551616}})",
       }) {
    for (int depth = 0; depth <= 4; ++depth) {
      expectSameAnswerRead(edge, depth);
      if (HasFailure()) return;
    }
  }
}

// Random answers with zero, one or more `usage` members (plain or not, nested,
// other values around them), then damaged: the fused read gives what the scan
// plus readPlainObject() on the last `usage` give.
TEST(ScanAnswerMembersTest, MatchesTheScanThenTheReadOnRandomAnswers) {
  static const std::vector<std::string> kKeys = {"prompt_tokens", "completion_tokens", "a", "",
                                                 "b"};
  static const std::vector<std::string> kValues = {"0",
                                                   "7",
                                                   "19",
                                                   "18446744073709551615",
                                                   "18446744073709551616",
                                                   "007",
                                                   "-3",
                                                   "1.5",
                                                   "true",
                                                   "false",
                                                   "null",
                                                   "nul",
                                                   "\"x\"",
                                                   "\"\"",
                                                   "\"a\\\"b\"",
                                                   "\"\xc3\xa9\"",
                                                   "[]",
                                                   "[1,{\"a\":2}]",
                                                   "\"{\"",
                                                   "\"}\"",
                                                   "\"\x7f\""};
  static const std::string kDamage = "{}[],:\"\\ x0\t\x7f";
  std::mt19937 rng(2610);
  const auto object = [&](int depth) { return randomObject(rng, kKeys, kValues, depth); };
  static const std::vector<std::string> kTopKeys = {"id", "model", "choices", "usage", "x"};
  for (int round = 0; round < 30000; ++round) {
    std::string text = rng() % 8 == 0 ? " {" : "{";
    const size_t members = rng() % 6;
    for (size_t m = 0; m < members; ++m) {
      if (m > 0) text += rng() % 8 == 0 ? " , " : ",";
      const std::string& key = kTopKeys[rng() % kTopKeys.size()];
      text += "\"" + key + "\"" + (rng() % 8 == 0 ? " : " : ":");
      if (key == "usage" || key == "choices" || rng() % 3 == 0) {
        text += key == "choices" ? "[" + object(2) + "]" : object(static_cast<int>(rng() % 4));
      } else {
        text += kValues[rng() % kValues.size()];
      }
    }
    text += rng() % 8 == 0 ? "} " : "}";
    if (rng() % 3 == 0) damage(text, kDamage, rng);
    if (rng() % 10 == 0) text.resize(rng() % (text.size() + 1));  // cut short
    expectSameAnswerRead(text, static_cast<int>(rng() % 5));
    if (HasFailure()) return;
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

// ---- scanChatChunk --------------------------------------------------------------

// What scanChatChunk() must return: the member scan, then the verifying read
// of the last `choices` on its own (the two walks it fuses).
std::optional<ChatChunkMembers> twoPassChatChunk(std::string_view text) {
  ChatChunkMembers m;
  const bool scanned = scanTopLevelMembers(text, [&](std::string_view key, std::string_view value) {
    if (key == "model") m.model = value;
    if (key == "usage") m.usage = value;
    if (key == "choices") m.choices = value;
    return true;
  });
  if (!scanned) return std::nullopt;
  if (!m.choices.empty()) m.choices_with_output = chatChoicesWithOutput(m.choices);
  return m;
}

// Same views (the same bytes of `text`, not just equal text) and count.
void expectSameChatChunk(std::string_view text) {
  const std::optional<ChatChunkMembers> got = scanChatChunk(text);
  const std::optional<ChatChunkMembers> want = twoPassChatChunk(text);
  ASSERT_EQ(got.has_value(), want.has_value()) << text;
  if (!got) return;
  for (const auto& [g, w] : {std::pair{got->model, want->model}, std::pair{got->usage, want->usage},
                             std::pair{got->choices, want->choices}}) {
    EXPECT_EQ(g.data(), w.data()) << text;
    EXPECT_EQ(g.size(), w.size()) << text;
  }
  EXPECT_EQ(got->choices_with_output, want->choices_with_output) << text;
}

TEST(ScanChatChunkTest, ReadsAStreamedChunkInOnePass) {
  const std::string_view chunk =
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",)"
      R"("system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"Hi"},)"
      R"("logprobs":null,"finish_reason":null}],"usage":null})";
  const std::optional<ChatChunkMembers> m = scanChatChunk(chunk);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->model, R"("gpt-4o")");
  EXPECT_EQ(m->usage, "null");
  EXPECT_EQ(m->choices,
            R"([{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}])");
  EXPECT_EQ(m->choices_with_output, 1u);
  expectSameChatChunk(chunk);
}

TEST(ScanChatChunkTest, MatchesTheTwoPassReadOnEdgeCases) {
  for (const std::string_view text : {
           R"({})", R"({"choices":[]})",
           R"( { "choices" : [ {"delta":{"content":"a"}} , {"delta":{}} ] , "usage":{"a":1} } )",
           R"({"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{}}]})",  // last wins
           R"({"choices":[{"delta":{}}],"choices":[{"delta":{"content":"b"}}]})",
           R"({"choices":[{"delta":{"content":"x"}}],"choices":"not an array"})",
           R"({"choices":[{"delta":{"content":1.5}}],"model":"m"})",  // declined: a float
           R"({"choices":[{"d\u0065lta":{"content":"x"}}]})",         // declined: escaped key
           R"({"choices":[{"delta":{"content":"\ud800"}}]})",         // declined: invalid
           R"({"choices":[{"delta":{"content":"x"}}] "model":"m"})",  // broken framing
           R"({"choices":[{"delta":{"content":"x"}}],"model":"m")",   // cut
           R"({"choices":[{"delta":{"content":"x"}}]]})",             // stray bracket
           R"({"choices":[{"delta":{"content":"x\"]}"}}],"usage":{"b":2}})",
           R"({"choices":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})",
           R"({"choices":[{"delta":{"content":"x"}},{"delta":{"tool_calls":[{}]}}],"x":tru})",
           R"({"model":"a","model":"b","usage":{},"usage":null,"choices":{}})",
           R"({"cho\u0069ces":[{"delta":{"content":"x"}}]})",  // an escaped key: declined
       }) {
    expectSameChatChunk(text);
  }
  expectSameChatChunk(std::string_view("{\"choices\":[{\"delta\":{}}],\"a\":\"\0\"}", 34));
}

// Random chunks: members of every kind in any order, valid and broken
// `choices`, then random damage (a byte changed, dropped or doubled).
TEST(ScanChatChunkTest, MatchesTheTwoPassReadOnRandomChunks) {
  static const std::vector<std::string> kKeys = {"id",      "model",  "usage",        "choices",
                                                 "choices", "object", "cho\\u0069ces"};
  static const std::vector<std::string> kValues = {
      R"("chatcmpl-1")",        R"("gpt-4o")", "null",       "7",    "1.5",
      R"({"prompt_tokens":3})", "[]",          R"("a\"]}")", "true", "{}"};
  static const std::vector<std::string> kDeltaMembers = {R"("content":"x")",
                                                         R"("content":"")",
                                                         R"("role":"assistant")",
                                                         R"("refusal":null)",
                                                         R"("tool_calls":[{"index":0}])",
                                                         R"("content":"\u00e9")",
                                                         "\"content\":\"\xc3\xa9\"",
                                                         "\"content\":\"\xc3\"",
                                                         R"("content":1e3)",
                                                         R"("c\u006fntent":"x")"};
  static const std::string kDamage = "{}[],:\"\\ x0";
  std::mt19937 rng(7);
  for (int round = 0; round < 20000; ++round) {
    std::string text = "{";
    const size_t members = rng() % 5;
    for (size_t m = 0; m < members; ++m) {
      if (m > 0) text += rng() % 8 == 0 ? " , " : ",";
      const std::string& key = kKeys[rng() % kKeys.size()];
      text += "\"" + key + "\":";
      if (key.rfind("cho", 0) == 0 && rng() % 4 != 0) {
        text += "[";
        const size_t choices = rng() % 3;
        for (size_t c = 0; c < choices; ++c) {
          if (c > 0) text += ",";
          text += R"({"index":)" + std::to_string(c) + R"(,"delta":{)";
          const size_t n = rng() % 3;
          for (size_t d = 0; d < n; ++d) {
            if (d > 0) text += ",";
            text += kDeltaMembers[rng() % kDeltaMembers.size()];
          }
          text += R"(},"finish_reason":null})";
        }
        text += "]";
      } else {
        text += kValues[rng() % kValues.size()];
      }
    }
    text += "}";
    if (rng() % 3 == 0) damage(text, kDamage, rng);
    expectSameChatChunk(text);
    if (HasFailure()) return;
  }
}

// ChatChunkScanner over a stream: each chunk read exactly as scanChatChunk()
// reads it (the same bytes of that chunk, not of an earlier one), whether it
// repeats the last prefix, changes it (a member before `choices`, the
// whitespace before its value, its first byte) or is damaged anywhere.
TEST(ScanChatChunkTest, ScannerResumesOnlyWhereTheScanWouldPassTheSame) {
  static const std::vector<std::string> kPrefixes = {
      R"({"id":"c1","object":"chat.completion.chunk","created":17,"model":"gpt-4o","choices":)",
      R"({"id":"c1","object":"chat.completion.chunk","created":17,"model":"gpt-4o","choices": )",
      R"({"id":"c2","object":"chat.completion.chunk","created":17,"model":"gpt-4o","choices":)",
      R"({"id":"c1","usage":{"prompt_tokens":1},"model":"o1","choices":)",
      R"({"model":"a","model":"b","created":1,"choices":)",
      R"({"choices":)",
      R"( { "id" : "c1" , "choices" :)",
  };
  static const std::vector<std::string> kChoices = {
      R"([{"index":0,"delta":{"content":"Hi"},"finish_reason":null}])",
      R"([{"index":0,"delta":{"role":"assistant","content":""}}])",
      R"([{"index":0,"delta":{},"finish_reason":"stop"}])",
      R"([{"index":0,"delta":{"content":1.5}}])",
      R"([])",
      R"("x")",
      R"(null)",
      "",
  };
  static const std::vector<std::string> kTails = {
      "}",
      R"(,"usage":null})",
      R"(,"usage":{"prompt_tokens":5,"completion_tokens":2}})",
      R"(,"choices":[{"delta":{"content":"again"}}]})",
      R"(,"model":"late"})",
      "",
      "} x"};
  static const std::string kDamage = "{}[],:\"\\ x0";
  std::mt19937 rng(5);
  for (int stream = 0; stream < 1000; ++stream) {
    ChatChunkScanner scanner;
    std::string last;
    for (int chunk = 0; chunk < 30; ++chunk) {
      // Mostly the stream's first prefix, as a provider sends it.
      const std::string& prefix = kPrefixes[rng() % 4 == 0 ? rng() % kPrefixes.size() : stream % 3];
      std::string text = prefix + kChoices[rng() % kChoices.size()] + kTails[rng() % kTails.size()];
      if (rng() % 5 == 0) {
        const size_t at = rng() % text.size();
        text[at] = kDamage[rng() % kDamage.size()];
      }
      const std::optional<ChatChunkMembers> got = scanner.scan(text);
      const std::optional<ChatChunkMembers> want = scanChatChunk(text);
      ASSERT_EQ(got.has_value(), want.has_value()) << text << "\nafter " << last;
      last = text;
      if (!got) continue;
      for (const auto& [g, w] :
           {std::pair{got->model, want->model}, std::pair{got->usage, want->usage},
            std::pair{got->choices, want->choices}}) {
        ASSERT_EQ(g.data(), w.data()) << text;  // views of this chunk's text
        ASSERT_EQ(g.size(), w.size()) << text;
      }
      ASSERT_EQ(got->choices_with_output, want->choices_with_output) << text;
    }
  }
}

// ChatChunkScanner's shape (the bytes around one delta's `content` string):
// streams whose chunks differ mostly in that string's text, with tokens
// plain and not (empty, escapes, UTF-8, a quote or a control character,
// text that looks like JSON), shapes that change from chunk to chunk, and
// random damage anywhere: each chunk read exactly as scanChatChunk() reads
// it, its views in this chunk's text.
TEST(ScanChatChunkTest, ScannerShapeReadsEachChunkAsTheFullScan) {
  static const std::vector<std::string> kHeads = {
      R"({"id":"c1","object":"chat.completion.chunk","created":17,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":)",
      R"({"id":"c1","object":"chat.completion.chunk","created":17,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":)",
      R"({"id":"c1","usage":{"prompt_tokens":1},"model":"o1","choices":[{"delta":{"content":"a","content":)",
      R"({"model":"a","choices":[{"delta":{"content":"x"}},{"index":1,"delta":{"content":)",
      R"({"choices":[{"index":0,"delta":{"refusal":null,"content":)",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[],"content":)",
      R"({"choices":[{"index":0,"delta" : { "content" : )",
  };
  static const std::vector<std::string> kTokens = {"Hi",
                                                   "x",
                                                   " the",
                                                   "",
                                                   "a\\\"b",
                                                   "\\n",
                                                   "\\u00e9",
                                                   "\xc3\xa9",
                                                   "\xc3",
                                                   "a\"b",
                                                   std::string("a\x01", 2),
                                                   "\"},\"x\":\"",
                                                   "]}",
                                                   "\\",
                                                   "ok}",
                                                   "tok en"};
  static const std::vector<std::string> kTails = {
      R"(},"finish_reason":null}]})",
      R"(},"finish_reason":null}],"usage":null})",
      R"(}}],"usage":{"prompt_tokens":5,"completion_tokens":2}})",
      R"(}}],"choices":[{"delta":{"content":"again"}}]})",
      R"(}}],"model":"late"})",
      R"(,"content":""}}]})",
      R"(}}]} x)",
      R"(}}])",
      R"(})",
  };
  static const std::string kDamage = "{}[],:\"\\ x0";
  std::mt19937 rng(11);
  for (int stream = 0; stream < 1000; ++stream) {
    ChatChunkScanner scanner;
    const size_t head = stream % kHeads.size();
    const size_t tail = stream % 3;
    std::string last;
    for (int chunk = 0; chunk < 40; ++chunk) {
      // Mostly the stream's own head and tail around a plain token.
      std::string token;
      if (rng() % 4 == 0) {
        token = kTokens[rng() % kTokens.size()];
      } else {
        const size_t n = 1 + rng() % 6;
        for (size_t k = 0; k < n; ++k) token += static_cast<char>(0x20 + rng() % 95);
        if (token.find_first_of("\"\\") != std::string::npos) token = "w";
      }
      std::string text = kHeads[rng() % 8 == 0 ? rng() % kHeads.size() : head];
      text += rng() % 10 == 0 ? R"(1)" : "\"" + token + "\"";
      text += kTails[rng() % 8 == 0 ? rng() % kTails.size() : tail];
      if (rng() % 8 == 0) damage(text, kDamage, rng);
      const std::optional<ChatChunkMembers> got = scanner.scan(text);
      const std::optional<ChatChunkMembers> want = scanChatChunk(text);
      ASSERT_EQ(got.has_value(), want.has_value()) << text << "\nafter " << last;
      if (!got) {
        last = text;
        continue;
      }
      for (const auto& [g, w] :
           {std::pair{got->model, want->model}, std::pair{got->usage, want->usage},
            std::pair{got->choices, want->choices}}) {
        ASSERT_EQ(g.data(), w.data()) << text << "\nafter " << last;
        ASSERT_EQ(g.size(), w.size()) << text << "\nafter " << last;
      }
      ASSERT_EQ(got->choices_with_output, want->choices_with_output) << text << "\nafter " << last;
      last = text;
    }
  }
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

TEST(WithTopLevelStringTest, ReplacesAModelWhoseKeyIsWrittenWithEscapes) {
  // The upstream's parser reads every one of these keys as "model".
  for (const std::string key :
       {R"(mod\u0065l)", R"(\u006d\u006F\u0064\u0065\u006c)", R"(mode\u006C)"}) {
    const std::string body = R"({"stream":true,")" + key + R"(":"gpt-4o","n":1})";
    const auto out = withTopLevelString(body, "model", "gpt-4o-mini");
    ASSERT_TRUE(out.has_value()) << body;
    EXPECT_EQ(*out, R"({"stream":true,")" + key + R"(":"gpt-4o-mini","n":1})");
    EXPECT_EQ(nlohmann::json::parse(*out)["model"], "gpt-4o-mini") << *out;
  }
  // Plain and escaped together: both are the member (the parser keeps the last).
  EXPECT_EQ(withTopLevelString(R"({"model":"a","mod\u0065l":"b"})", "model", "m"),
            R"({"model":"m","mod\u0065l":"m"})");
}

TEST(WithTopLevelStringTest, LeavesABodyWithoutTheMemberOrNotAnObjectAlone) {
  EXPECT_EQ(withTopLevelString(R"({"input": "x"})", "model", "m"), std::nullopt);
  EXPECT_EQ(withTopLevelString("[1,2]", "model", "m"), std::nullopt);
  EXPECT_EQ(withTopLevelString("", "model", "m"), std::nullopt);
  EXPECT_EQ(withTopLevelString(R"({"model": "a")", "model", "m"), std::nullopt);
}

}  // namespace
}  // namespace sluice
