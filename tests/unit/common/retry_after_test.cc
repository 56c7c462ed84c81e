#include "common/retry_after.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace sluice {
namespace {

using namespace std::chrono;
using std::chrono::milliseconds;

constexpr int64_t kNone = -1;  // "expect nullopt" in the tables below

// ManualClock's wall time: 2026-01-01T00:00:00Z, a Thursday.
SystemTime fixedNow() { return ManualClock().systemNow(); }

int64_t msOr(std::optional<milliseconds> v) { return v ? v->count() : kNone; }

SystemTime utc(int y, unsigned m, unsigned d, int hh, int mm, int ss) {
  return time_point_cast<SystemTime::duration>(sys_days(year(y) / month(m) / day(d)) + hours(hh) +
                                               minutes(mm) + seconds(ss));
}

struct ValueCase {
  std::string value;
  int64_t expected_ms;
};

TEST(RetryAfterTest, RetryAfterValues) {
  const ValueCase cases[] = {
      // delay-seconds
      {"120", 120'000},
      {"0", 0},
      {"1", 1'000},
      {"1.5", 1'500},
      {"0.25", 250},
      {"0.0001", 1},  // rounds up: "at least"
      {"  3  ", 3'000},
      {"\t7", 7'000},
      {"86400", 86'400'000},
      {"86401", 86'400'000},      // capped at 24 h
      {"999999999", 86'400'000},  // large but a number: capped
      // garbage
      {"-1", kNone},
      {"+1", kNone},
      {"1e9", kNone},
      {"1E3", kNone},
      {"", kNone},
      {"   ", kNone},
      {"abc", kNone},
      {"NaN", kNone},
      {"nan", kNone},
      {"inf", kNone},
      {"Infinity", kNone},
      {"1.", kNone},
      {".5", kNone},
      {"1.5.2", kNone},
      {"3 s", kNone},
      {"0x10", kNone},
      // Any number of digits is a wait: above 24 h it saturates at the cap,
      // however long (no overflow, no wrap); leading zeros are just zeros.
      {"999999999999999", 86'400'000},
      {"1000000000000000", 86'400'000},
      {"9999999999999999", 86'400'000},
      {"18446744073709551616", 86'400'000},  // 2^64
      {"12345678901234567890123456789012345678901234567890", 86'400'000},
      {"0000000000000001", 1'000},
      {"1000000000000000.5", 86'400'000},
      {"99999999999999999999x", kNone},  // still not a number
      // HTTP-dates in the past: 0
      {"Sun, 06 Nov 1994 08:49:37 GMT", 0},
      {"Sunday, 06-Nov-94 08:49:37 GMT", 0},
      {"Sun Nov  6 08:49:37 1994", 0},
      // HTTP-dates 30 s after 2026-01-01T00:00:00Z, in all three forms
      {"Thu, 01 Jan 2026 00:00:30 GMT", 30'000},
      {"Thursday, 01-Jan-26 00:00:30 GMT", 30'000},
      {"Thu Jan  1 00:00:30 2026", 30'000},
      {"Thu, 01 Jan 2026 00:00:00 GMT", 0},  // exactly now
      // far future: capped
      {"Fri, 01 Jan 2027 00:00:00 GMT", 86'400'000},
      {"Fri, 31 Dec 9999 23:59:59 GMT", 86'400'000},
      // malformed dates
      {"Thu, 01 Jan 2026 00:00:30 PST", kNone},
      {"Thu, 01 Jan 2026 00:00:30", kNone},
      {"Thu, 32 Jan 2026 00:00:30 GMT", kNone},
      {"Thu, 01 Foo 2026 00:00:30 GMT", kNone},
      {"Thu, 01 Jan 2026 25:00:30 GMT", kNone},
      {"Thu, 01 Jan 2026 00:60:30 GMT", kNone},
      {"01 Jan 2026 00:00:30 GMT", kNone},
      {"Thu, 01 Jan 2026 00:00:30 GMT trailing", kNone},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(msOr(parseRetryAfterValue(c.value, fixedNow())), c.expected_ms)
        << "Retry-After: '" << c.value << "'";
  }
}

TEST(RetryAfterTest, MillisecondValues) {
  const ValueCase cases[] = {
      {"1500", 1'500},
      {"0", 0},
      {"12.5", 13},  // rounded up
      {"12.000", 12},
      {" 20 ", 20},
      {"86400000", 86'400'000},
      {"90000000", 86'400'000},  // capped
      {"999999999999999", 86'400'000},
      {"1000000000000000", 86'400'000},  // 16 digits: capped
      {"00000000000000000000001500", 1'500},
      {"-5", kNone},
      {"1e3", kNone},
      {"", kNone},
      {"abc", kNone},
      {"NaN", kNone},
      {"5ms", kNone},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(msOr(parseRetryAfterMsValue(c.value)), c.expected_ms) << "'" << c.value << "'";
  }
}

TEST(RetryAfterTest, ImfFixdateIsExact) {
  EXPECT_EQ(parseImfFixdate("Sun, 06 Nov 1994 08:49:37 GMT"), utc(1994, 11, 6, 8, 49, 37));
  // Names are matched case-insensitively; the day name is not cross-checked.
  EXPECT_EQ(parseImfFixdate("sun, 06 nov 1994 08:49:37 gmt"), utc(1994, 11, 6, 8, 49, 37));
  EXPECT_EQ(parseImfFixdate("Wed, 29 Feb 2024 12:00:00 GMT"), utc(2024, 2, 29, 12, 0, 0));
  EXPECT_FALSE(parseImfFixdate("Thu, 29 Feb 2023 12:00:00 GMT"));  // not a leap year
  EXPECT_FALSE(parseImfFixdate("Sunday, 06-Nov-94 08:49:37 GMT"));
  EXPECT_FALSE(parseImfFixdate("Sun Nov  6 08:49:37 1994"));
}

TEST(RetryAfterTest, AsctimeIsExact) {
  EXPECT_EQ(parseAsctimeDate("Sun Nov  6 08:49:37 1994"), utc(1994, 11, 6, 8, 49, 37));
  EXPECT_EQ(parseAsctimeDate("Sun Nov 6 08:49:37 1994"), utc(1994, 11, 6, 8, 49, 37));
  EXPECT_EQ(parseAsctimeDate("Sat Nov 26 08:49:37 1994"), utc(1994, 11, 26, 8, 49, 37));
  EXPECT_FALSE(parseAsctimeDate("Sun Nov  6 08:49:37 94"));
  EXPECT_FALSE(parseAsctimeDate("Sun Nov  6 08:49:37 1994 GMT"));
}

// RFC 9110 §5.6.7: a two-digit year more than 50 years in the future is the
// most recent past year with those digits. So the year always lands in the
// sliding window (now - 50, now + 50]: in 2099, "48" is 2148, not 2048.
TEST(RetryAfterTest, Rfc850TwoDigitYear) {
  struct Case {
    int now_year;
    std::string yy;
    int expected_year;
  };
  const Case cases[] = {
      {2026, "94", 1994}, {2026, "26", 2026}, {2026, "30", 2030},
      {2026, "76", 2076}, {2026, "77", 1977}, {2026, "00", 2000},
      {2099, "01", 2101}, {2099, "48", 2148}, {2001, "99", 1999},
  };
  for (const auto& c : cases) {
    const SystemTime now = utc(c.now_year, 6, 1, 0, 0, 0);
    const auto t = parseRfc850Date("Sunday, 06-Nov-" + c.yy + " 08:49:37 GMT", now);
    ASSERT_TRUE(t) << c.yy;
    EXPECT_EQ(*t, utc(c.expected_year, 11, 6, 8, 49, 37)) << c.now_year << " / " << c.yy;
  }
  EXPECT_FALSE(parseRfc850Date("Sunday, 06-Nov-1994 08:49:37 GMT", fixedNow()));
  EXPECT_FALSE(parseRfc850Date("Sunday, 06 Nov 94 08:49:37 GMT", fixedNow()));
  EXPECT_FALSE(parseRfc850Date("Funday, 06-Nov-94 08:49:37 GMT", fixedNow()));
}

TEST(RetryAfterTest, HeaderPriorityAndFallThrough) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> headers;
    int64_t expected_ms;
  };
  const Case cases[] = {
      {{}, kNone},
      {{{"Retry-After", "2"}}, 2'000},
      {{{"retry-after-ms", "1500"}, {"Retry-After", "2"}}, 1'500},
      {{{"x-ms-retry-after-ms", "700"}, {"Retry-After", "2"}}, 700},
      {{{"x-ms-retry-after-ms", "700"}, {"retry-after-ms", "1500"}}, 1'500},
      // a malformed header is as good as absent: the next one is used
      {{{"retry-after-ms", "soon"}, {"Retry-After", "2"}}, 2'000},
      {{{"retry-after-ms", "-1"}, {"x-ms-retry-after-ms", "abc"}, {"Retry-After", "1e9"}}, kNone},
      {{{"Retry-After", "Thu, 01 Jan 2026 00:00:05 GMT"}}, 5'000},
      {{{"Retry-After", ""}}, kNone},
      {{{"Retry-After", "NaN"}, {"Retry-After", "4"}}, 4'000},  // second value of a repeated header
      // 16 digits are a wait at the 24 h cap (the first header wins as ever)
      {{{"retry-after-ms", "1000000000000000"}, {"Retry-After", "3"}}, 86'400'000},
      {{{"Retry-After", "1000000000000000"}}, 86'400'000},
  };
  for (const auto& c : cases) {
    HeaderMap h;
    for (const auto& [k, v] : c.headers) h.add(k, v);
    std::string desc;
    for (const auto& [k, v] : c.headers) desc += k + ": " + v + "; ";
    EXPECT_EQ(msOr(parseRetryAfter(h, fixedNow())), c.expected_ms) << desc;
  }
}

TEST(RetryAfterTest, NeverCrashesOnHostileInput) {
  const std::string inputs[] = {
      std::string(10000, '9'),
      std::string(1, '\0'),
      "1\0"
      "2",
      "Sun, ",
      ",,,,",
      "Sun, 06 Nov",
      "Sunday, 06-Nov-",
      "Sun Nov",
      "99999999999999.99999999999999999",
      "0.",
      "\xff\xfe",
      "Sun, 99 Nov 99999 99:99:99 GMT",
      std::to_string(std::numeric_limits<uint64_t>::max()),
  };
  for (const auto& in : inputs) {
    const auto v = parseRetryAfterValue(in, fixedNow());
    if (v) {
      EXPECT_GE(v->count(), 0);
      EXPECT_LE(*v, kMaxRetryAfter);
    }
    const auto ms = parseRetryAfterMsValue(in);
    if (ms) {
      EXPECT_LE(*ms, kMaxRetryAfter);
    }
  }
}

}  // namespace
}  // namespace sluice
