#include "common/retry_after.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace sluice {

namespace {

using std::chrono::milliseconds;

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// A non-negative decimal `1*DIGIT [ "." 1*DIGIT ]` in units of `unit_ms`
// milliseconds, rounded up to a whole millisecond and clamped to 24 h: any
// number of digits saturates at the cap (a long value is a long wait, as
// RFC 9110's delay-seconds overflow rule says), never wraps.
std::optional<milliseconds> parseDecimalWait(std::string_view value, int64_t unit_ms) {
  std::string_view s = trimOws(value);
  const auto max_ms = static_cast<uint64_t>(kMaxRetryAfter.count());
  const auto unit = static_cast<uint64_t>(unit_ms);
  size_t i = 0;
  uint64_t whole = 0;
  bool saturated = false;  // above the cap: no more arithmetic (it could overflow)
  while (i < s.size() && isDigit(s[i])) {
    if (!saturated) {
      whole = whole * 10 + static_cast<uint64_t>(s[i] - '0');
      saturated = whole > max_ms / unit;
    }
    ++i;
  }
  if (i == 0) return std::nullopt;  // no leading digit: "", "-1", ".5", "abc", "NaN"

  // The fraction, as thousandths of the unit plus "anything left over" for rounding up.
  uint64_t thousandths = 0;
  bool remainder = false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t start = i;
    while (i < s.size() && isDigit(s[i])) {
      const size_t pos = i - start;
      if (pos < 3) {
        thousandths = thousandths * 10 + static_cast<uint64_t>(s[i] - '0');
      } else if (s[i] != '0') {
        remainder = true;
      }
      ++i;
    }
    const size_t digits = i - start;
    if (digits == 0) return std::nullopt;  // "1."
    for (size_t pad = digits; pad < 3; ++pad) thousandths *= 10;
  }
  if (i != s.size()) return std::nullopt;  // "1e9", "3 s", "1.5.2"

  if (saturated) return kMaxRetryAfter;
  // thousandths of the unit, in ms: thousandths * unit / 1000, rounded up.
  uint64_t frac_ms = (thousandths * unit + 999) / 1000;
  if (remainder && (thousandths * unit) % 1000 == 0) frac_ms += 1;
  const uint64_t total = whole * unit + frac_ms;
  return milliseconds(static_cast<int64_t>(std::min(total, max_ms)));
}

// --- HTTP-date scanning -------------------------------------------------------

char lowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lowerAscii(a[i]) != lowerAscii(b[i])) return false;
  }
  return true;
}

constexpr std::array<std::string_view, 7> kShortDays = {"Mon", "Tue", "Wed", "Thu",
                                                        "Fri", "Sat", "Sun"};
constexpr std::array<std::string_view, 7> kLongDays = {
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// A forward-only cursor over a date string. Every method fails softly.
class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(trimOws(s)) {}

  bool atEnd() const { return pos_ == s_.size(); }

  bool literal(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // One or more spaces.
  bool spaces() {
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
    return pos_ > start;
  }
  // Between min and max digits, as an integer.
  std::optional<int> digits(size_t min, size_t max) {
    size_t n = 0;
    int v = 0;
    while (pos_ < s_.size() && n < max && isDigit(s_[pos_])) {
      v = v * 10 + (s_[pos_] - '0');
      ++pos_;
      ++n;
    }
    if (n < min) return std::nullopt;
    if (pos_ < s_.size() && isDigit(s_[pos_])) return std::nullopt;  // too many digits
    return v;
  }
  // A run of ASCII letters.
  std::string_view word() {
    const size_t start = pos_;
    while (pos_ < s_.size() &&
           ((s_[pos_] >= 'a' && s_[pos_] <= 'z') || (s_[pos_] >= 'A' && s_[pos_] <= 'Z'))) {
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

template <size_t N>
bool oneOf(std::string_view w, const std::array<std::string_view, N>& names) {
  for (auto n : names) {
    if (iequals(w, n)) return true;
  }
  return false;
}

std::optional<unsigned> monthNumber(std::string_view w) {
  for (size_t i = 0; i < kMonths.size(); ++i) {
    if (iequals(w, kMonths[i])) return static_cast<unsigned>(i + 1);
  }
  return std::nullopt;
}

struct TimeOfDay {
  int hour, minute, second;
};

// `2DIGIT ":" 2DIGIT ":" 2DIGIT`, with a leap second (60) tolerated.
std::optional<TimeOfDay> scanTimeOfDay(Scanner& sc) {
  auto h = sc.digits(2, 2);
  if (!h || !sc.literal(':')) return std::nullopt;
  auto m = sc.digits(2, 2);
  if (!m || !sc.literal(':')) return std::nullopt;
  auto s = sc.digits(2, 2);
  if (!s) return std::nullopt;
  if (*h > 23 || *m > 59 || *s > 60) return std::nullopt;
  return TimeOfDay{*h, *m, *s};
}

std::optional<SystemTime> makeTime(int year, unsigned month, int day, const TimeOfDay& t) {
  using namespace std::chrono;
  if (day < 1 || day > 31) return std::nullopt;
  const year_month_day ymd{std::chrono::year(year), std::chrono::month(month),
                           std::chrono::day(static_cast<unsigned>(day))};
  if (!ymd.ok()) return std::nullopt;  // 31 Feb and friends
  // Computed in seconds (no overflow for any 4-digit year), then clamped to
  // [1900, 2200] so that nanosecond SystemTime arithmetic cannot overflow.
  // Outside that range a date is "long past" or "far future" either way.
  const sys_seconds tp = sys_days(ymd) + hours(t.hour) + minutes(t.minute) + seconds(t.second);
  const sys_seconds lo = sys_days(std::chrono::year(1900) / January / 1);
  const sys_seconds hi = sys_days(std::chrono::year(2200) / January / 1);
  return time_point_cast<SystemTime::duration>(std::clamp(tp, lo, hi));
}

bool gmt(Scanner& sc) { return sc.spaces() && iequals(sc.word(), "GMT") && sc.atEnd(); }

}  // namespace

std::optional<milliseconds> parseRetryAfterMsValue(std::string_view value) {
  return parseDecimalWait(value, 1);
}

std::optional<milliseconds> parseDelaySeconds(std::string_view value) {
  return parseDecimalWait(value, 1000);
}

std::optional<SystemTime> parseImfFixdate(std::string_view value) {
  // Sun, 06 Nov 1994 08:49:37 GMT
  Scanner sc(value);
  if (!oneOf(sc.word(), kShortDays) || !sc.literal(',') || !sc.spaces()) return std::nullopt;
  auto day = sc.digits(1, 2);
  if (!day || !sc.spaces()) return std::nullopt;
  auto month = monthNumber(sc.word());
  if (!month || !sc.spaces()) return std::nullopt;
  auto year = sc.digits(4, 4);
  if (!year || !sc.spaces()) return std::nullopt;
  auto tod = scanTimeOfDay(sc);
  if (!tod || !gmt(sc)) return std::nullopt;
  return makeTime(*year, *month, *day, *tod);
}

std::optional<SystemTime> parseRfc850Date(std::string_view value, SystemTime now) {
  // Sunday, 06-Nov-94 08:49:37 GMT
  Scanner sc(value);
  const auto day_name = sc.word();
  if (!oneOf(day_name, kLongDays) && !oneOf(day_name, kShortDays)) return std::nullopt;
  if (!sc.literal(',') || !sc.spaces()) return std::nullopt;
  auto day = sc.digits(1, 2);
  if (!day || !sc.literal('-')) return std::nullopt;
  auto month = monthNumber(sc.word());
  if (!month || !sc.literal('-')) return std::nullopt;
  auto yy = sc.digits(2, 2);
  if (!yy || !sc.spaces()) return std::nullopt;
  auto tod = scanTimeOfDay(sc);
  if (!tod || !gmt(sc)) return std::nullopt;

  // RFC 9110 §5.6.7: a year more than 50 years in the future is the most
  // recent past year with the same last two digits.
  using namespace std::chrono;
  const int now_year = static_cast<int>(year_month_day(floor<days>(now)).year());
  // Pick the century that puts the year in (now - 50, now + 50].
  int year = (now_year / 100) * 100 + *yy;
  if (year < now_year - 49) year += 100;
  if (year - now_year > 50) year -= 100;
  return makeTime(year, *month, *day, *tod);
}

std::optional<SystemTime> parseAsctimeDate(std::string_view value) {
  // Sun Nov  6 08:49:37 1994
  Scanner sc(value);
  if (!oneOf(sc.word(), kShortDays) || !sc.spaces()) return std::nullopt;
  auto month = monthNumber(sc.word());
  if (!month || !sc.spaces()) return std::nullopt;
  auto day = sc.digits(1, 2);
  if (!day || !sc.spaces()) return std::nullopt;
  auto tod = scanTimeOfDay(sc);
  if (!tod || !sc.spaces()) return std::nullopt;
  auto year = sc.digits(4, 4);
  if (!year || !sc.atEnd()) return std::nullopt;
  return makeTime(*year, *month, *day, *tod);
}

std::optional<SystemTime> parseHttpDate(std::string_view value, SystemTime now) {
  if (auto t = parseImfFixdate(value)) return t;
  if (auto t = parseRfc850Date(value, now)) return t;
  return parseAsctimeDate(value);
}

std::optional<milliseconds> parseRetryAfterValue(std::string_view value, SystemTime now) {
  const std::string_view v = trimOws(value);
  if (v.empty()) return std::nullopt;
  if (isDigit(v.front())) return parseDelaySeconds(v);
  const auto date = parseHttpDate(v, now);
  if (!date) return std::nullopt;
  if (*date <= now) return milliseconds(0);
  const auto wait = std::chrono::ceil<milliseconds>(*date - now);
  return std::min(wait, kMaxRetryAfter);
}

std::optional<milliseconds> parseRetryAfter(const HeaderMap& headers, SystemTime now) {
  for (std::string_view name : {"retry-after-ms", "x-ms-retry-after-ms"}) {
    for (std::string_view value : headers.getAll(name)) {
      if (auto ms = parseRetryAfterMsValue(value)) return ms;
    }
  }
  for (std::string_view value : headers.getAll("retry-after")) {
    if (auto ms = parseRetryAfterValue(value, now)) return ms;
  }
  return std::nullopt;
}

}  // namespace sluice
