#include "proxy/observability/json_line.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace sluice {

namespace {

constexpr char kHex[] = "0123456789abcdef";

bool isContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

/**
 * Length of the valid UTF-8 sequence starting at s[i] (i < s.size(), s[i] >=
 * 0x80), or 0 when it is not one: overlongs, surrogates and code points
 * above U+10FFFF are invalid (RFC 3629).
 */
size_t utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  const size_t left = s.size() - i;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && isContinuation(b(1)) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !isContinuation(b(1)) || !isContinuation(b(2))) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) > 0x9F) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !isContinuation(b(1)) || !isContinuation(b(2)) || !isContinuation(b(3))) {
      return 0;
    }
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

/** Bytes copied verbatim inside a JSON string: printable ASCII but '"' and '\\'. */
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c) t[static_cast<size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

char* writeDigits(char* p, unsigned value, int width) {
  for (int i = width - 1; i >= 0; --i) {
    p[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  return p + width;
}

template <class Int>
char* writeIntegerDigits(char* p, Int value) {
  const fmt::format_int digits(value);
  std::memcpy(p, digits.data(), digits.size());
  return p + digits.size();
}

}  // namespace

namespace json {

char* writeString(char* p, std::string_view s) {
  *p++ = '"';
  const char* const data = s.data();
  const size_t size = s.size();
  size_t i = 0;
  while (i < size) {
    // A run of plain bytes: one table look-up each, then one copy.
    size_t run = i;
    while (run < size && kPlain[static_cast<unsigned char>(data[run])]) ++run;
    std::memcpy(p, data + i, run - i);
    p += run - i;
    i = run;
    if (i == size) break;
    const unsigned char c = static_cast<unsigned char>(data[i]);
    if (c >= 0x80) {
      const size_t n = utf8SequenceLength(s, i);
      if (n > 0) {
        std::memcpy(p, data + i, n);
        p += n;
        i += n;
      } else {
        p = writeLiteral(p, "\xEF\xBF\xBD");  // U+FFFD
        ++i;
      }
      continue;
    }
    *p++ = '\\';
    switch (c) {
      case '"':
        *p++ = '"';
        break;
      case '\\':
        *p++ = '\\';
        break;
      case '\n':
        *p++ = 'n';
        break;
      case '\r':
        *p++ = 'r';
        break;
      case '\t':
        *p++ = 't';
        break;
      default:
        p = writeLiteral(p, "u00");
        *p++ = kHex[c >> 4];
        *p++ = kHex[c & 0xF];
    }
    ++i;
  }
  *p++ = '"';
  return p;
}

char* writeInteger(char* p, int64_t value) { return writeIntegerDigits(p, value); }
char* writeInteger(char* p, uint64_t value) { return writeIntegerDigits(p, value); }

char* writeDouble(char* p, double value) {
  if (!std::isfinite(value)) return writeLiteral(p, "null");
  if (value == 0) return writeLiteral(p, "0");  // the common case: nothing leaked, nothing billed
  return fmt::format_to(p, FMT_COMPILE("{}"), value);
}

char* writeFixed(char* p, double value, int decimals) {
  static constexpr uint64_t kPow10[] = {1, 10, 100, 1000, 10000, 100000, 1000000};
  decimals = std::clamp(decimals, 0, 6);
  if (!std::isfinite(value) || std::fabs(value) > 9e12) return writeLiteral(p, "null");
  // Integer arithmetic: exact, and far cheaper than a precision float format.
  const int64_t scaled = std::llround(value * static_cast<double>(kPow10[decimals]));
  const uint64_t magnitude = static_cast<uint64_t>(scaled < 0 ? -scaled : scaled);
  if (scaled < 0) *p++ = '-';
  p = writeIntegerDigits(p, magnitude / kPow10[decimals]);
  if (decimals == 0) return p;
  *p++ = '.';
  return writeDigits(p, static_cast<unsigned>(magnitude % kPow10[decimals]), decimals);
}

char* writeTimestamp(char* p, std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const int64_t ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  const int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  const unsigned millis = static_cast<unsigned>(ms - secs * 1000);
  int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
  const unsigned sod = static_cast<unsigned>(secs - days * 86400);
  // Howard Hinnant's civil_from_days.
  days += 719468;
  const int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(days - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned day = doy - (153 * mp + 2) / 5 + 1;
  const unsigned month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = static_cast<int64_t>(yoe) + era * 400 + (month <= 2 ? 1 : 0);

  *p++ = '"';
  p = writeDigits(p, static_cast<unsigned>(std::clamp<int64_t>(year, 0, 9999)), 4);
  *p++ = '-';
  p = writeDigits(p, month, 2);
  *p++ = '-';
  p = writeDigits(p, day, 2);
  *p++ = 'T';
  p = writeDigits(p, sod / 3600, 2);
  *p++ = ':';
  p = writeDigits(p, sod / 60 % 60, 2);
  *p++ = ':';
  p = writeDigits(p, sod % 60, 2);
  *p++ = '.';
  p = writeDigits(p, millis, 3);
  *p++ = 'Z';
  *p++ = '"';
  return p;
}

}  // namespace json

void appendJsonString(std::string& out, std::string_view s) {
  const size_t used = out.size();
  out.resize(used + json::stringBound(s));
  char* end = json::writeString(out.data() + used, s);
  out.resize(static_cast<size_t>(end - out.data()));
}

// --- JsonLine ------------------------------------------------------------------------

JsonLine::JsonLine(std::string& out) : out_(out) {
  const size_t used = out_.size();
  out_.resize(used + 256);
  p_ = out_.data() + used;
  end_ = out_.data() + out_.size();
  *p_++ = '{';
}

JsonLine::~JsonLine() {
  if (!ended_) out_.resize(static_cast<size_t>(p_ - out_.data()));
}

void JsonLine::reserve(size_t n) {
  if (static_cast<size_t>(end_ - p_) >= n) return;
  const size_t used = static_cast<size_t>(p_ - out_.data());
  out_.resize(std::max(out_.size() * 2, used + n + 256));
  p_ = out_.data() + used;
  end_ = out_.data() + out_.size();
}

void JsonLine::key(std::string_view k, size_t value_bytes) {
  reserve(k.size() + 4 + value_bytes);
  if (!first_) *p_++ = ',';
  first_ = false;
  *p_++ = '"';
  std::memcpy(p_, k.data(), k.size());
  p_ += k.size();
  *p_++ = '"';
  *p_++ = ':';
}

JsonLine& JsonLine::str(std::string_view k, std::string_view value) {
  key(k, json::stringBound(value));
  p_ = json::writeString(p_, value);
  return *this;
}

JsonLine& JsonLine::strOrNull(std::string_view k, std::string_view value) {
  key(k, json::stringBound(value) + 4);
  p_ = json::writeStringOrNull(p_, value);
  return *this;
}

JsonLine& JsonLine::num(std::string_view k, int64_t value) {
  key(k, json::kNumberBytes);
  p_ = json::writeInteger(p_, value);
  return *this;
}

JsonLine& JsonLine::num(std::string_view k, uint64_t value) {
  key(k, json::kNumberBytes);
  p_ = json::writeInteger(p_, value);
  return *this;
}

JsonLine& JsonLine::num(std::string_view k, double value) {
  key(k, json::kNumberBytes);
  p_ = json::writeDouble(p_, value);
  return *this;
}

JsonLine& JsonLine::fixed(std::string_view k, double value, int decimals) {
  key(k, json::kNumberBytes);
  p_ = json::writeFixed(p_, value, decimals);
  return *this;
}

JsonLine& JsonLine::boolean(std::string_view k, bool value) {
  key(k, json::kNumberBytes);
  p_ = value ? json::writeLiteral(p_, "true") : json::writeLiteral(p_, "false");
  return *this;
}

JsonLine& JsonLine::null(std::string_view k) {
  key(k, json::kNumberBytes);
  p_ = json::writeLiteral(p_, "null");
  return *this;
}

JsonLine& JsonLine::time(std::string_view k, std::chrono::system_clock::time_point value) {
  key(k, json::kTimestampBytes);
  p_ = json::writeTimestamp(p_, value);
  return *this;
}

JsonLine& JsonLine::strArray(std::string_view k, std::span<const std::string> values) {
  key(k, 2);
  *p_++ = '[';
  for (size_t i = 0; i < values.size(); ++i) {
    reserve(1 + json::stringBound(values[i]) + 1);
    if (i > 0) *p_++ = ',';
    p_ = json::writeString(p_, values[i]);
  }
  *p_++ = ']';
  return *this;
}

void JsonLine::end() {
  reserve(2);
  *p_++ = '}';
  *p_++ = '\n';
  out_.resize(static_cast<size_t>(p_ - out_.data()));
  ended_ = true;
}

}  // namespace sluice
