// Tests for the JSON line renderer both logs share (proxy/observability/json_line.h):
// every string becomes valid JSON whatever its bytes (escapes, invalid
// UTF-8 replaced), numbers are JSON numbers (no NaN), timestamps are RFC 3339
// UTC with milliseconds. Lines are checked by parsing them with nlohmann.

#include "proxy/observability/json_line.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::system_clock;

std::string jsonQuoted(std::string_view s) {
  std::string out;
  appendJsonString(out, s);
  return out;
}

TEST(JsonStringTest, PlainAsciiIsCopied) {
  EXPECT_EQ(jsonQuoted(""), R"("")");
  EXPECT_EQ(jsonQuoted("/v1/chat/completions"), R"("/v1/chat/completions")");
}

TEST(JsonStringTest, QuotesBackslashesAndControlBytesAreEscaped) {
  EXPECT_EQ(jsonQuoted("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(jsonQuoted("line\nbreak\r\ttab"), R"("line\nbreak\r\ttab")");
  EXPECT_EQ(jsonQuoted(std::string("nul\0bell\x07", 9)), R"("nul\u0000bell\u0007")");
  EXPECT_EQ(jsonQuoted("\x1f\x7f"), "\"\\u001f\x7f\"");  // DEL is legal in JSON strings
}

TEST(JsonStringTest, ValidUtf8IsKept) {
  const std::string s = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";  // café € 😀
  EXPECT_EQ(jsonQuoted(s), "\"" + s + "\"");
}

TEST(JsonStringTest, InvalidUtf8BecomesReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(jsonQuoted("a\xFF"
                       "b"),
            "\"a" + r + "b\"");                                            // never valid
  EXPECT_EQ(jsonQuoted("\xC3"), "\"" + r + "\"");                          // truncated at the end
  EXPECT_EQ(jsonQuoted("\xC0\xAF"), "\"" + r + r + "\"");                  // overlong '/'
  EXPECT_EQ(jsonQuoted("\xE0\x80\xAF"), "\"" + r + r + r + "\"");          // overlong, 3 bytes
  EXPECT_EQ(jsonQuoted("\xED\xA0\x80"), "\"" + r + r + r + "\"");          // UTF-16 surrogate
  EXPECT_EQ(jsonQuoted("\xF4\x90\x80\x80"), "\"" + r + r + r + r + "\"");  // above U+10FFFF
  EXPECT_EQ(jsonQuoted("\x80"
                       "ok"),
            "\"" + r + "ok\"");  // stray continuation
}

TEST(JsonStringTest, EveryByteStringParsesBack) {
  // Every single byte and every two-byte combination with a lead byte: the
  // output always parses, and ASCII-only input round-trips exactly.
  for (int a = 0; a < 256; ++a) {
    for (int b : {0x00, 0x22, 0x41, 0x5C, 0x80, 0xBF, 0xC0, 0xFF}) {
      const std::string s{static_cast<char>(a), static_cast<char>(b)};
      const std::string line = jsonQuoted(s);
      nlohmann::json parsed;
      ASSERT_NO_THROW(parsed = nlohmann::json::parse(line)) << a << " " << b;
      if (a < 0x80 && b < 0x80) {
        EXPECT_EQ(parsed.get<std::string>(), s);
      }
    }
  }
}

TEST(JsonTimestampTest, Rfc3339UtcWithMilliseconds) {
  const auto at = [](int64_t ms) {
    char buf[json::kTimestampBytes];
    char* end = json::writeTimestamp(buf, system_clock::time_point(milliseconds(ms)));
    return std::string(buf + 1, end - 1);  // without the quotes
  };
  EXPECT_EQ(at(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(at(1'767'225'600'000), "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(at(1'767'225'599'999), "2025-12-31T23:59:59.999Z");
  EXPECT_EQ(at(951'782'400'123), "2000-02-29T00:00:00.123Z");    // a leap day
  EXPECT_EQ(at(4'107'542'399'000), "2100-02-28T23:59:59.000Z");  // 2100 is not a leap year
  EXPECT_EQ(at(-1), "1969-12-31T23:59:59.999Z");
}

TEST(JsonNumberTest, FixedDecimalsRoundAndKeepTrailingZeros) {
  const auto fixed = [](double v, int decimals) {
    char buf[json::kNumberBytes];
    return std::string(buf, json::writeFixed(buf, v, decimals));
  };
  EXPECT_EQ(fixed(0, 3), "0.000");
  EXPECT_EQ(fixed(12.34567, 3), "12.346");
  EXPECT_EQ(fixed(999.9996, 3), "1000.000");
  EXPECT_EQ(fixed(0.0004, 3), "0.000");
  EXPECT_EQ(fixed(-1.25, 1), "-1.3");  // llround: half away from zero
  EXPECT_EQ(fixed(7.6, 0), "8");
  EXPECT_EQ(fixed(1.5, 9), "1.500000");  // decimals clamped to 6
  EXPECT_EQ(fixed(1e13, 3), "null");
  EXPECT_EQ(fixed(std::numeric_limits<double>::quiet_NaN(), 3), "null");
  const auto dbl = [](double v) {
    char buf[json::kNumberBytes];
    return std::string(buf, json::writeDouble(buf, v));
  };
  EXPECT_EQ(dbl(0), "0");
  EXPECT_EQ(dbl(0.00042), "0.00042");
  EXPECT_EQ(dbl(1e-7), "1e-07");
  EXPECT_EQ(dbl(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(dbl(1e-7)).get<double>(), 1e-7);
}

TEST(JsonLineTest, BuildsOneObjectPerLine) {
  std::string out = "previous\n";
  JsonLine line(out);
  line.str("s", "x\"y")
      .strOrNull("empty", "")
      .strOrNull("full", "z")
      .num("i", int64_t{-3})
      .num("u", std::numeric_limits<uint64_t>::max())
      .num("d", 0.1)
      .num("nan", std::numeric_limits<double>::quiet_NaN())
      .num("inf", std::numeric_limits<double>::infinity())
      .fixed("ms", 12.34567, 3)
      .boolean("b", true)
      .null("n")
      .time("ts", system_clock::time_point(seconds(1'767'225'600)))
      .strArray("causes", std::vector<std::string>{"http_5xx", "reset"})
      .strArray("none", std::vector<std::string>{});
  line.end();

  ASSERT_EQ(out.rfind("previous\n", 0), 0u);
  const std::string text = out.substr(9);
  ASSERT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line";
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["s"], "x\"y");
  EXPECT_TRUE(j["empty"].is_null());
  EXPECT_EQ(j["full"], "z");
  EXPECT_EQ(j["i"], -3);
  EXPECT_EQ(j["u"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(j["d"], 0.1);
  EXPECT_TRUE(j["nan"].is_null());
  EXPECT_TRUE(j["inf"].is_null());
  EXPECT_NE(text.find("\"ms\":12.346,"), std::string::npos) << text;
  EXPECT_EQ(j["b"], true);
  EXPECT_TRUE(j["n"].is_null());
  EXPECT_EQ(j["ts"], "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(j["causes"], nlohmann::json::parse(R"(["http_5xx","reset"])"));
  EXPECT_EQ(j["none"], nlohmann::json::array());
  // Members keep the order they were written in.
  EXPECT_LT(text.find("\"s\""), text.find("\"none\""));
}

}  // namespace
}  // namespace sluice
