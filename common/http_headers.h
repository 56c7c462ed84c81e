#pragma once

// An ordered HTTP header list with case-insensitive lookup. Names are stored
// lower-case (HTTP/2 requires it and HTTP/1.1 is case-insensitive), values
// verbatim. Order and duplicates are preserved, as a proxy must.
//
// Storage: every name and value sits back to back in one byte string, and a
// field is three numbers into it. A request head of 15 fields is two
// allocations instead of one or two per field (PROFILE.md, fifth round:
// the per-field strings were a fifth of a request's `malloc`/`free`).
// Views handed out (`get`, `getAll`, iteration) point into that string, so
// they stay valid until the map is next changed (`add`, `set`, `clear`,
// assignment); `remove` keeps them valid. Passing a view of the map back
// into `add` or `set` is fine: it is copied before the string may grow.

#include <cstdint>
#include <iterator>
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
  /** A copied-out field (`entries()`): for tests and diagnostics, not the request path. */
  using Entry = std::pair<std::string, std::string>;
  /** A field as iteration yields it: views into the map. */
  struct Field {
    std::string_view name;
    std::string_view value;
  };

  HeaderMap() = default;
  HeaderMap(const HeaderMap& other) { copyFrom(other); }
  HeaderMap& operator=(const HeaderMap& other);
  HeaderMap(HeaderMap&&) noexcept = default;
  HeaderMap& operator=(HeaderMap&&) noexcept = default;

  /** Appends a header; `name` is lower-cased. */
  void add(std::string_view name, std::string_view value);
  /** Replaces every header named `name` with one entry (appended if absent). */
  void set(std::string_view name, std::string_view value);
  /** Removes every header named `name`; returns how many were removed. */
  size_t remove(std::string_view name);
  /**
   * Removes every field for which `drop(name, value)` is true, in one pass
   * (`name` lower case); returns how many were removed. Views stay valid.
   */
  template <typename Pred>
  size_t removeIf(Pred&& drop) {
    size_t kept = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Field f = fieldAt(i);
      if (!drop(f.name, f.value)) slots_[kept++] = slots_[i];
    }
    const size_t removed = slots_.size() - kept;
    slots_.resize(kept);
    return removed;
  }
  /** Room for `fields` fields of `bytes` name and value bytes in all, before they come. */
  void reserve(size_t fields, size_t bytes);

  /** The first value of `name`, if present. */
  std::optional<std::string_view> get(std::string_view name) const;
  /** All values of `name`, in order. */
  std::vector<std::string_view> getAll(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != kNone; }

  /** The fields copied out, in order (tests and diagnostics). */
  std::vector<Entry> entries() const;
  size_t size() const { return slots_.size(); }
  bool empty() const { return slots_.empty(); }
  void clear() {
    slots_.clear();
    bytes_.clear();
  }

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Field;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Field;

    const_iterator() = default;
    Field operator*() const { return map_->fieldAt(index_); }
    const_iterator& operator++() {
      ++index_;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++index_;
      return before;
    }
    bool operator==(const const_iterator& other) const { return index_ == other.index_; }

   private:
    friend class HeaderMap;
    const_iterator(const HeaderMap* map, size_t index) : map_(map), index_(index) {}
    const HeaderMap* map_ = nullptr;
    size_t index_ = 0;
  };

  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, slots_.size()}; }

 private:
  // One field: its lower-case name at bytes_[offset], its value right after.
  // A head is bounded far below 4 GiB by the codecs' limits.
  struct Slot {
    uint32_t offset;
    uint32_t name_size;
    uint32_t value_size;
  };
  static constexpr size_t kNone = static_cast<size_t>(-1);

  Field fieldAt(size_t i) const {
    const Slot& s = slots_[i];
    const char* base = bytes_.data() + s.offset;
    return {std::string_view(base, s.name_size),
            std::string_view(base + s.name_size, s.value_size)};
  }
  /** The index of the first field named `name` (any case), or kNone. */
  size_t find(std::string_view name) const;
  bool nameAt(size_t i, std::string_view name) const;
  /** Appends to bytes_ and slots_; `name` and `value` must not point into bytes_. */
  void append(std::string_view name, std::string_view value);
  /** Copies only the live fields (a removed field's bytes stay behind in the source). */
  void copyFrom(const HeaderMap& other);

  std::string bytes_;
  std::vector<Slot> slots_;
};

}  // namespace sluice
