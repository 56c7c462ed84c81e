#include "filters/json_fields.h"

#include <charconv>
#include <cstring>

namespace sluice {
namespace {

constexpr size_t npos = std::string_view::npos;

size_t skipWhitespace(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  return i;
}

// s[i] is the opening quote; returns the index after the closing one.
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

// The index after the value that starts at s[i].
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
  while (j < s.size() && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' && s[j] != '\n' &&
         s[j] != '\r' && s[j] != '\t') {
    ++j;
  }
  return j == i ? npos : j;
}

}  // namespace

bool scanTopLevelMembers(std::string_view s,
                         const std::function<bool(std::string_view, std::string_view)>& on_member) {
  size_t i = skipWhitespace(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skipWhitespace(s, i + 1);
  if (i < s.size() && s[i] == '}') return skipWhitespace(s, i + 1) == s.size();
  while (i < s.size()) {
    if (s[i] != '"') return false;
    const size_t key_end = endOfString(s, i);
    if (key_end == npos) return false;
    const std::string_view key = s.substr(i + 1, key_end - i - 2);
    if (key.find('\\') != npos) return false;
    i = skipWhitespace(s, key_end);
    if (i >= s.size() || s[i] != ':') return false;
    i = skipWhitespace(s, i + 1);
    const size_t value_end = endOfValue(s, i);
    if (value_end == npos) return false;
    if (!on_member(key, s.substr(i, value_end - i))) return true;
    i = skipWhitespace(s, value_end);
    if (i >= s.size()) return false;
    if (s[i] == '}') return skipWhitespace(s, i + 1) == s.size();
    if (s[i] != ',') return false;
    i = skipWhitespace(s, i + 1);
  }
  return false;
}

std::optional<std::string_view> plainString(std::string_view v) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') return std::nullopt;
  const std::string_view chars = v.substr(1, v.size() - 2);
  for (const char c : chars) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return std::nullopt;
  }
  return chars;
}

std::optional<uint64_t> plainUnsigned(std::string_view v) {
  if (v.empty() || (v.size() > 1 && v.front() == '0')) return std::nullopt;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc() || end != v.data() + v.size() || v.front() == '-' || v.front() == '+') {
    return std::nullopt;
  }
  return value;
}

bool isPlainObject(std::string_view v, int depth) {
  if (depth <= 0 || v.empty() || v.front() != '{') return false;
  bool plain = true;
  const bool scanned = scanTopLevelMembers(v, [&](std::string_view key, std::string_view value) {
    // The scan hands the key without its quotes; it is plain when the quoted form is.
    plain = plainString(std::string_view(key.data() - 1, key.size() + 2)).has_value() &&
            (plainString(value) || plainUnsigned(value) || value == "true" || value == "false" ||
             value == "null" || isPlainObject(value, depth - 1));
    return plain;
  });
  return scanned && plain;
}

}  // namespace sluice
