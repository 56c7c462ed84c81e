#pragma once

// JSON lines for sluice's two logs: the access log (access_log.h, one line
// per request, on the request path) and the operational log (log.h).
//
// Two layers:
//   - json:: writers put one value at a raw `char*` into space the caller
//     reserved (bounds below). The access log renders its ~25 members with
//     them between one reserve and one trim of its buffer: no DOM, no
//     per-character std::string call, no allocation.
//   - JsonLine builds `{"k":v,...}\n` member by member on a std::string, on
//     top of the same writers, for lines that are not hot (operational logs).
//
// Why not nlohmann::json: building a DOM of ~25 members (a std::map node and a
// key string each) costs more than a proxied request's share allows
// (README "Performance": the access log's cost per request is measured).
// Numbers go through {fmt} (shortest round-trip doubles, fast integers).
//
// Strings are escaped per RFC 8259; bytes that are not valid UTF-8 become
// U+FFFD (what nlohmann's error_handler_t::replace does), so any request path
// or model name yields a line every JSON parser accepts.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace sluice {

namespace json {

/** Bytes to reserve for any number, `null`, `true` or `false`. */
inline constexpr size_t kNumberBytes = 32;
/** Bytes of a quoted timestamp: "2026-01-01T00:00:00.000Z". */
inline constexpr size_t kTimestampBytes = 26;

/** The most bytes `s` can take as a JSON string literal (every byte a `\u00XX`). */
inline size_t stringBound(std::string_view s) { return 2 + 6 * s.size(); }

/** Writes `s` as a JSON string literal (quotes included); stringBound(s) bytes free. */
char* writeString(char* p, std::string_view s);
/** Writes `s` as a JSON string literal, or null when `s` is empty. */
inline char* writeStringOrNull(char* p, std::string_view s) {
  if (!s.empty()) return writeString(p, s);
  std::memcpy(p, "null", 4);
  return p + 4;
}
char* writeInteger(char* p, int64_t value);
char* writeInteger(char* p, uint64_t value);
/** Shortest round-trip form; null for NaN and infinities (JSON has none). */
char* writeDouble(char* p, double value);
/**
 * Rounded to `decimals` (0..6) places, trailing zeros kept (durations in ms:
 * 3); null for NaN, infinities and magnitudes beyond 9e12.
 */
char* writeFixed(char* p, double value, int decimals);
/** RFC 3339 UTC with milliseconds, quoted. Pure arithmetic (no gmtime, no locale). */
char* writeTimestamp(char* p, std::chrono::system_clock::time_point t);
/** Copies a literal (its length is a constant: a few moves). */
template <size_t N>
char* writeLiteral(char* p, const char (&text)[N]) {
  std::memcpy(p, text, N - 1);
  return p + N - 1;
}

}  // namespace json

/** Appends `s` as a JSON string literal (quotes included) to `out`. */
void appendJsonString(std::string& out, std::string_view s);

/**
 * Builds `{"k":v,...}\n` at the end of an existing string. Usage:
 *
 *   JsonLine line(buffer);
 *   line.str("route", name).num("status", 200).null("model");
 *   line.end();   // closes the object and adds the newline
 *
 * Keys are written verbatim (callers pass literals); values are escaped.
 */
class JsonLine {
 public:
  /** Starts an object at the end of `out`. */
  explicit JsonLine(std::string& out);
  /** Trims `out` to what was written if end() was not called (the line stays unterminated). */
  ~JsonLine();
  JsonLine(const JsonLine&) = delete;
  JsonLine& operator=(const JsonLine&) = delete;

  JsonLine& str(std::string_view key, std::string_view value);
  /** A string, or null when `value` is empty. */
  JsonLine& strOrNull(std::string_view key, std::string_view value);
  JsonLine& num(std::string_view key, int64_t value);
  JsonLine& num(std::string_view key, uint64_t value);
  JsonLine& num(std::string_view key, int value) { return num(key, static_cast<int64_t>(value)); }
  JsonLine& num(std::string_view key, uint32_t value) {
    return num(key, static_cast<uint64_t>(value));
  }
  /** Shortest round-trip form; null for NaN and infinities. */
  JsonLine& num(std::string_view key, double value);
  /** See json::writeFixed. */
  JsonLine& fixed(std::string_view key, double value, int decimals);
  JsonLine& boolean(std::string_view key, bool value);
  JsonLine& null(std::string_view key);
  /** RFC 3339 UTC with milliseconds. */
  JsonLine& time(std::string_view key, std::chrono::system_clock::time_point value);
  /** An array of strings. */
  JsonLine& strArray(std::string_view key, std::span<const std::string> values);

  /** Closes the object and appends '\n'. Call once. */
  void end();

 private:
  /** Writes `,"key":` (no comma before the first member); `value_bytes` free after it. */
  void key(std::string_view k, size_t value_bytes);
  /** Makes room for `n` more bytes at p_. */
  void reserve(size_t n);

  std::string& out_;
  char* p_;
  char* end_;
  bool first_ = true;
  bool ended_ = false;
};

}  // namespace sluice
