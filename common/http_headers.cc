#include "common/http_headers.h"

#include <algorithm>

namespace sluice {

namespace {
char lowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
}  // namespace

std::string toLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lowerAscii(c);
  return out;
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lowerAscii(a[i]) != lowerAscii(b[i])) return false;
  }
  return true;
}

namespace {

// Whether a stored name (lower case: add() lowers it) is `name` in any case.
// Lengths first (most entries differ there), then only `name` is folded:
// PROFILE.md, folding both sides per call was ~5% of a request.
inline bool sameName(const std::string& stored, std::string_view name) {
  if (stored.size() != name.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (stored[i] != lowerAscii(name[i])) return false;
  }
  return true;
}

}  // namespace

std::string_view trimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void HeaderMap::add(std::string_view name, std::string_view value) {
  entries_.emplace_back(toLower(name), std::string(value));
}

void HeaderMap::set(std::string_view name, std::string_view value) {
  remove(name);
  add(name, value);
}

size_t HeaderMap::remove(std::string_view name) {
  const size_t before = entries_.size();
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) { return sameName(e.first, name); }),
                 entries_.end());
  return before - entries_.size();
}

std::optional<std::string_view> HeaderMap::get(std::string_view name) const {
  for (const auto& e : entries_) {
    if (sameName(e.first, name)) return std::string_view(e.second);
  }
  return std::nullopt;
}

std::vector<std::string_view> HeaderMap::getAll(std::string_view name) const {
  std::vector<std::string_view> out;
  for (const auto& e : entries_) {
    if (sameName(e.first, name)) out.emplace_back(e.second);
  }
  return out;
}

}  // namespace sluice
