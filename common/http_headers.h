#pragma once

// An ordered HTTP header list with case-insensitive lookup. Names are stored
// lower-case (HTTP/2 requires it and HTTP/1.1 is case-insensitive), values
// verbatim. Order and duplicates are preserved, as a proxy must.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

/** ASCII lower-casing, for header names and tokens. */
std::string toLower(std::string_view s);
/** Case-insensitive ASCII comparison. */
bool equalsIgnoreCase(std::string_view a, std::string_view b);
/** `s` without leading and trailing optional whitespace (SP / HTAB, RFC 9110 §5.6.3). */
std::string_view trimOws(std::string_view s);

class HeaderMap {
 public:
  using Entry = std::pair<std::string, std::string>;

  /** Appends a header; `name` is lower-cased. */
  void add(std::string_view name, std::string_view value);
  /** Replaces every header named `name` with one entry (appended if absent). */
  void set(std::string_view name, std::string_view value);
  /** Removes every header named `name`; returns how many were removed. */
  size_t remove(std::string_view name);

  /** The first value of `name`, if present. */
  std::optional<std::string_view> get(std::string_view name) const;
  /** All values of `name`, in order. */
  std::vector<std::string_view> getAll(std::string_view name) const;
  bool has(std::string_view name) const { return get(name).has_value(); }

  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void clear() { entries_.clear(); }

  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
};

}  // namespace sluice
