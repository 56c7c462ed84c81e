// The YAML toolkit's text -> value parsers: durations and sizes (and their
// formatting back), and the helpers of common/yaml/value_parsers.h
// (integers, `${VAR}` expansion, redaction of expanded values in messages).

#include "common/yaml/value_parsers.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

namespace sluice::config {
namespace detail {

namespace {

// RFC 9110 §5.6.2 tchar: what header names and methods are made of.
bool isTchar(char c) {
  return isDigit(c) || isAlpha(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

}  // namespace

bool isToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c != 0 && isTchar(c); });
}

std::string inQuotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string toUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return out;
}

std::optional<int64_t> parseInt64(std::string_view s) {
  bool negative = false;
  if (!s.empty() && s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : s) {
    if (!isDigit(c)) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return negative ? -value : value;
}

std::string formatNumber(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool expandEnv(std::string_view in, const EnvLookup& env, std::string& out, std::string& why,
               std::vector<Expansion>* used) {
  out.clear();
  for (size_t i = 0; i < in.size();) {
    if (in[i] != '$' || i + 1 == in.size()) {
      out += in[i++];
      continue;
    }
    if (in[i + 1] == '$') {
      out += '$';
      i += 2;
      continue;
    }
    if (in[i + 1] != '{') {
      out += in[i++];
      continue;
    }
    const size_t close = in.find('}', i + 2);
    if (close == std::string_view::npos) {
      why = "unterminated \"${\" (write \"$$\" for a literal \"$\")";
      return false;
    }
    const std::string name(in.substr(i + 2, close - i - 2));
    const bool valid_name =
        !name.empty() && !isDigit(name[0]) && std::all_of(name.begin(), name.end(), [](char c) {
          return isDigit(c) || isAlpha(c) || c == '_';
        });
    if (!valid_name) {
      why = "invalid environment variable name " + inQuotes(name);
      return false;
    }
    const std::optional<std::string> value = env ? env(name) : std::nullopt;
    if (!value) {
      why = "environment variable " + name + " is not set";
      return false;
    }
    out += *value;
    if (used != nullptr) used->emplace_back(name, *value);
    i = close + 1;
  }
  return true;
}

std::nullopt_t parseError(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

namespace {

// The length of the longest run of characters `a` and `b` have in common.
size_t longestCommonRun(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1, 0);
  size_t best = 0;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = 0;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = a[i - 1] == b[j - 1] ? diagonal + 1 : 0;
      best = std::max(best, row[j]);
      diagonal = above;
    }
  }
  return best;
}

void replaceAll(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

// "scheme://user:secret@host" -> "scheme://<redacted>@host", wherever a URL
// with credentials appears in `text`.
std::string redactUserinfo(std::string text) {
  constexpr std::string_view kRedacted = "<redacted>";
  for (size_t scheme = text.find("://"); scheme != std::string::npos;
       scheme = text.find("://", scheme + 3)) {
    const size_t start = scheme + 3;
    const size_t end = std::min(text.find_first_of("/\"?# \t\r\n", start), text.size());
    const size_t at = end > start ? text.rfind('@', end - 1) : std::string::npos;
    if (at == std::string::npos || at < start) continue;
    text.replace(start, at - start, kRedacted);
  }
  return text;
}

}  // namespace

std::string redactExpansions(std::string message, const std::string* raw,
                             const std::string* expanded,
                             const std::vector<Expansion>& expansions) {
  // The whole value, quoted as the messages do, is shown as written.
  if (raw != nullptr && expanded != nullptr && *raw != *expanded && !expanded->empty()) {
    replaceAll(message, inQuotes(*expanded), inQuotes(*raw));
  }
  // A quoted piece (part of a value, e.g. the host of a URL) that shares a
  // run of characters with an expanded value came from it: redacted. Values
  // under 3 characters are no secret; 6 shared characters are enough to tell.
  for (size_t open = message.find('"'); open != std::string::npos;) {
    const size_t close = message.find('"', open + 1);
    if (close == std::string::npos) break;
    const std::string_view quoted(message.data() + open + 1, close - open - 1);
    const bool as_written = raw != nullptr && quoted == *raw;
    const bool tainted =
        !as_written && std::any_of(expansions.begin(), expansions.end(), [&](const Expansion& e) {
          const std::string& value = e.second;
          return value.size() >= 3 &&
                 longestCommonRun(quoted, value) >= std::min<size_t>(6, value.size());
        });
    if (tainted) {
      message.replace(open + 1, close - open - 1, "<redacted>");
      open = message.find('"', open + std::string_view("\"<redacted>\"").size());
    } else {
      open = message.find('"', close + 1);
    }
  }
  // Anywhere else (unquoted), a whole value is named by its variable.
  for (const auto& [name, value] : expansions) {
    if (value.size() >= 4) replaceAll(message, value, "${" + name + "}");
  }
  return redactUserinfo(std::move(message));
}

}  // namespace detail

namespace {

using detail::inQuotes;
using detail::isDigit;
using detail::parseError;

constexpr int64_t kMaxDurationMs = 10LL * 365 * 24 * 3600 * 1000;  // 10 years

// An unsigned decimal "12" or "1.5" split into exact integer parts.
struct Decimal {
  uint64_t whole = 0;
  uint64_t fraction = 0;  // the digits after the point, as an integer
  int fraction_digits = 0;
};

// Reads digits[.digits] starting at `pos`; false if there is no number or it is too long.
bool readDecimal(std::string_view text, size_t& pos, Decimal& out) {
  const size_t start = pos;
  while (pos < text.size() && isDigit(text[pos])) {
    if (out.whole > 1'000'000'000'000'000ULL) return false;
    out.whole = out.whole * 10 + static_cast<uint64_t>(text[pos] - '0');
    ++pos;
  }
  const bool had_whole = pos > start;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const size_t frac_start = pos;
    while (pos < text.size() && isDigit(text[pos])) {
      if (out.fraction_digits == 9) return false;
      out.fraction = out.fraction * 10 + static_cast<uint64_t>(text[pos] - '0');
      ++out.fraction_digits;
      ++pos;
    }
    if (pos == frac_start) return false;  // "1." is not a number
  }
  return had_whole;
}

// value × unit, exactly; nullopt when it is not a whole number of units or overflows.
std::optional<uint64_t> scale(const Decimal& d, uint64_t unit, bool* inexact) {
  uint64_t whole = 0;
  if (__builtin_mul_overflow(d.whole, unit, &whole)) return std::nullopt;
  uint64_t pow10 = 1;
  for (int i = 0; i < d.fraction_digits; ++i) pow10 *= 10;
  // fraction < 10^9 and unit <= 2^40, so this cannot overflow.
  const unsigned __int128 frac = static_cast<unsigned __int128>(d.fraction) * unit;
  if (frac % pow10 != 0) {
    *inexact = true;
    return std::nullopt;
  }
  uint64_t total = 0;
  if (__builtin_add_overflow(whole, static_cast<uint64_t>(frac / pow10), &total)) {
    return std::nullopt;
  }
  return total;
}

}  // namespace

std::optional<Duration> parseDuration(std::string_view text, std::string* error) {
  const std::string prefix = "invalid duration " + inQuotes(text) + ": ";
  if (text.empty()) return parseError(error, prefix + "empty");
  if (text[0] == '-') return parseError(error, prefix + "must not be negative");
  struct Unit {
    std::string_view name;
    uint64_t ms;
  };
  static constexpr Unit kUnits[] = {{"h", 3'600'000}, {"m", 60'000}, {"s", 1'000}, {"ms", 1}};
  constexpr std::string_view kHint = " (use ms, s, m or h, e.g. \"30s\" or \"250ms\")";
  uint64_t total = 0;
  int previous_unit = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    Decimal number;
    if (!readDecimal(text, pos, number)) {
      return parseError(error, prefix + "expected a number and a unit" + std::string(kHint));
    }
    if (pos == text.size()) {
      return parseError(error,
                        prefix + "missing unit; a bare number is ambiguous" + std::string(kHint));
    }
    int unit = -1;
    if (text.substr(pos, 2) == "ms") {
      unit = 3;
    } else if (text[pos] == 'h' || text[pos] == 'm' || text[pos] == 's') {
      unit = text[pos] == 'h' ? 0 : text[pos] == 'm' ? 1 : 2;
    }
    if (unit < 0) return parseError(error, prefix + "unknown unit" + std::string(kHint));
    if (unit <= previous_unit) {
      return parseError(error,
                        prefix + "units must appear once each, largest first (e.g. \"1m30s\")");
    }
    pos += kUnits[unit].name.size();
    previous_unit = unit;
    bool inexact = false;
    const std::optional<uint64_t> ms = scale(number, kUnits[unit].ms, &inexact);
    if (!ms) {
      return parseError(error, prefix + (inexact ? "finer than a millisecond" : "too large"));
    }
    if (__builtin_add_overflow(total, *ms, &total) ||
        total > static_cast<uint64_t>(kMaxDurationMs)) {
      return parseError(error, prefix + "too large (at most 87600h)");
    }
  }
  return Duration(static_cast<int64_t>(total));
}

std::optional<uint64_t> parseSize(std::string_view text, std::string* error) {
  const std::string prefix = "invalid size " + inQuotes(text) + ": ";
  if (text.empty()) return parseError(error, prefix + "empty");
  if (text[0] == '-') return parseError(error, prefix + "must not be negative");
  static const std::map<std::string_view, uint64_t> kUnits = {
      {"", 1},
      {"B", 1},
      {"KB", 1000ULL},
      {"MB", 1000ULL * 1000},
      {"GB", 1000ULL * 1000 * 1000},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
      {"KiB", 1ULL << 10},
      {"MiB", 1ULL << 20},
      {"GiB", 1ULL << 30},
      {"TiB", 1ULL << 40},
  };
  size_t pos = 0;
  Decimal number;
  if (!readDecimal(text, pos, number)) {
    return parseError(error,
                      prefix + "expected a number of bytes or a number and a unit, e.g. \"8MiB\"");
  }
  const auto unit = kUnits.find(text.substr(pos));
  if (unit == kUnits.end()) {
    return parseError(error, prefix + "unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  }
  bool inexact = false;
  const std::optional<uint64_t> bytes = scale(number, unit->second, &inexact);
  if (!bytes)
    return parseError(error, prefix + (inexact ? "not a whole number of bytes" : "too large"));
  return bytes;
}

std::string formatDuration(Duration d) {
  const int64_t ms = d.count();
  if (ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

std::string formatSize(uint64_t bytes) {
  static constexpr std::pair<uint64_t, const char*> kUnits[] = {
      {1ULL << 40, "TiB"}, {1ULL << 30, "GiB"}, {1ULL << 20, "MiB"}, {1ULL << 10, "KiB"}};
  if (bytes != 0) {
    for (const auto& [unit, name] : kUnits) {
      if (bytes % unit == 0) return std::to_string(bytes / unit) + name;
    }
  }
  return std::to_string(bytes) + "B";
}

}  // namespace sluice::config
