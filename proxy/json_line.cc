#include "proxy/json_line.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>

namespace sluice {

namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

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

void appendDigits(std::string& out, unsigned value, int width) {
  char buf[8];
  for (int i = width - 1; i >= 0; --i) {
    buf[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  out.append(buf, static_cast<size_t>(width));
}

}  // namespace

void appendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  size_t run = 0;  // start of the pending run of bytes that need no escaping
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (const size_t n = utf8SequenceLength(s, i)) {
        i += n;
        continue;
      }
    }
    out.append(s.data() + run, i - run);
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default:
        if (c >= 0x80) {
          out.append(kReplacement);
        } else {
          const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
          out.append(esc, sizeof(esc));
        }
    }
    run = ++i;
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

void appendUtcTimestamp(std::string& out, std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const int64_t ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
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

  appendDigits(out, static_cast<unsigned>(year < 0 ? 0 : year > 9999 ? 9999 : year), 4);
  out.push_back('-');
  appendDigits(out, month, 2);
  out.push_back('-');
  appendDigits(out, day, 2);
  out.push_back('T');
  appendDigits(out, sod / 3600, 2);
  out.push_back(':');
  appendDigits(out, sod / 60 % 60, 2);
  out.push_back(':');
  appendDigits(out, sod % 60, 2);
  out.push_back('.');
  appendDigits(out, millis, 3);
  out.push_back('Z');
}

JsonLine::JsonLine(std::string& out) : out_(out) { out_.push_back('{'); }

void JsonLine::key(std::string_view k) {
  if (!first_) out_.push_back(',');
  first_ = false;
  out_.push_back('"');
  out_.append(k);
  out_.append("\":");
}

JsonLine& JsonLine::str(std::string_view k, std::string_view value) {
  key(k);
  appendJsonString(out_, value);
  return *this;
}

JsonLine& JsonLine::strOrNull(std::string_view k, std::string_view value) {
  return value.empty() ? null(k) : str(k, value);
}

JsonLine& JsonLine::num(std::string_view k, int64_t value) {
  key(k);
  const fmt::format_int digits(value);
  out_.append(digits.data(), digits.size());
  return *this;
}

JsonLine& JsonLine::num(std::string_view k, uint64_t value) {
  key(k);
  const fmt::format_int digits(value);
  out_.append(digits.data(), digits.size());
  return *this;
}

JsonLine& JsonLine::num(std::string_view k, double value) {
  if (!std::isfinite(value)) return null(k);
  key(k);
  fmt::format_to(std::back_inserter(out_), "{}", value);
  return *this;
}

JsonLine& JsonLine::fixed(std::string_view k, double value, int decimals) {
  if (!std::isfinite(value)) return null(k);
  key(k);
  fmt::format_to(std::back_inserter(out_), "{:.{}f}", value, decimals);
  return *this;
}

JsonLine& JsonLine::boolean(std::string_view k, bool value) {
  key(k);
  out_.append(value ? "true" : "false");
  return *this;
}

JsonLine& JsonLine::null(std::string_view k) {
  key(k);
  out_.append("null");
  return *this;
}

JsonLine& JsonLine::time(std::string_view k, std::chrono::system_clock::time_point value) {
  key(k);
  out_.push_back('"');
  appendUtcTimestamp(out_, value);
  out_.push_back('"');
  return *this;
}

JsonLine& JsonLine::strArray(std::string_view k, std::span<const std::string> values) {
  key(k);
  out_.push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out_.push_back(',');
    appendJsonString(out_, values[i]);
  }
  out_.push_back(']');
  return *this;
}

void JsonLine::end() { out_.append("}\n"); }

}  // namespace sluice
