#pragma once

// One JSON object on one line, appended to a caller's std::string: the
// renderer both of sluice's logs share (the access log, access_log.h, and the
// operational log, log.h).
//
// Why not nlohmann::json here: the access log renders one object per request
// and must cost a few percent of a request at most (README "Performance");
// building a DOM of ~25 members (a std::map node and a key string each) costs
// more than the rest of the log put together. This writer appends in place —
// numbers through {fmt} (shortest round-trip for doubles), strings through
// one escaping pass — and never allocates beyond growing the output string.
//
// Strings are escaped per RFC 8259; bytes that are not valid UTF-8 become
// U+FFFD (what nlohmann's error_handler_t::replace does), so any request path
// or model name yields a line every JSON parser accepts.

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace sluice {

/** Appends `s` as a JSON string literal (quotes included) to `out`. */
void appendJsonString(std::string& out, std::string_view s);

/**
 * Appends `t` as RFC 3339 UTC with milliseconds, "2026-01-01T00:00:00.123Z",
 * without quotes. Pure arithmetic (no gmtime, no locale, no time zone).
 */
void appendUtcTimestamp(std::string& out, std::chrono::system_clock::time_point t);

/**
 * Builds `{"k":v,...}\n` into an existing string. Usage:
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

  JsonLine& str(std::string_view key, std::string_view value);
  /** A string, or null when `value` is empty. */
  JsonLine& strOrNull(std::string_view key, std::string_view value);
  JsonLine& num(std::string_view key, int64_t value);
  JsonLine& num(std::string_view key, uint64_t value);
  JsonLine& num(std::string_view key, int value) { return num(key, static_cast<int64_t>(value)); }
  JsonLine& num(std::string_view key, uint32_t value) {
    return num(key, static_cast<uint64_t>(value));
  }
  /** Shortest round-trip form; null for NaN and infinities (JSON has none). */
  JsonLine& num(std::string_view key, double value);
  /** A fixed number of decimals (durations in ms: 3); null for NaN and infinities. */
  JsonLine& fixed(std::string_view key, double value, int decimals);
  JsonLine& boolean(std::string_view key, bool value);
  JsonLine& null(std::string_view key);
  /** `ts` as RFC 3339 UTC with milliseconds. */
  JsonLine& time(std::string_view key, std::chrono::system_clock::time_point value);
  /** An array of strings. */
  JsonLine& strArray(std::string_view key, std::span<const std::string> values);

  /** Closes the object and appends '\n'. Call once. */
  void end();

 private:
  void key(std::string_view k);

  std::string& out_;
  bool first_ = true;
};

}  // namespace sluice
