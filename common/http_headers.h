#pragma once

// An ordered HTTP header list with case-insensitive lookup. Names are stored
// lower-case (HTTP/2 requires it and HTTP/1.1 is case-insensitive), values
// verbatim. Order and duplicates are preserved, as a proxy must.
//
// Storage: one heap block per map holds the field slots (three numbers
// each) and, after them, every name and value back to back. A request head
// of 15 fields is one allocation instead of one or two per field
// (PROFILE.md, fifth round: the per-field strings were a fifth of a
// request's `malloc`/`free`; sixth round: slots and bytes in one block).
// Views handed out (`get`, `getAll`, iteration) point into that block, so
// they stay valid until the map is next changed (`add`, `set`, `clear`,
// assignment); `remove` and `removeIf` keep them valid. Passing a view of
// the map back into `add` or `set` is fine: it is copied before the block
// may grow.

#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
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
  HeaderMap(HeaderMap&& other) noexcept { take(other); }
  HeaderMap& operator=(HeaderMap&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }

  /** Appends a header; `name` is lower-cased. */
  void add(std::string_view name, std::string_view value);
  /**
   * add() for a name the caller knows has no upper-case ASCII letter (one
   * nghttp2 validated: HTTP/2 refuses upper-case names): the name is
   * copied as it is, not lower-cased again. Same result as add() then.
   */
  void addLowerCase(std::string_view name, std::string_view value);
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
    Slot* slots = this->slots();
    size_t kept = 0;
    for (size_t i = 0; i < count_; ++i) {
      const Field f = fieldAt(i);
      if (!drop(f.name, f.value)) slots[kept++] = slots[i];
    }
    const size_t removed = count_ - kept;
    count_ = static_cast<uint32_t>(kept);
    return removed;
  }
  /**
   * Calls `fn(field)` for each field, in order, whose name is n bytes long
   * with bit n of `lengths` set (a name of 64 bytes or more: always): a
   * pass that skips most fields by their name's length alone.
   */
  template <typename Fn>
  void forEachOfLengths(uint64_t lengths, Fn&& fn) const {
    const Slot* slots = this->slots();
    for (size_t i = 0; i < count_; ++i) {
      const uint32_t n = slots[i].name_size;
      if (n < 64 && (lengths >> n & 1) == 0) continue;
      fn(fieldAt(i));
    }
  }
  /** Room for `fields` fields of `bytes` name and value bytes in all, before they come. */
  void reserve(size_t fields, size_t bytes);

  /** The first value of `name`, if present. */
  std::optional<std::string_view> get(std::string_view name) const;
  /** All values of `name`, in order. */
  std::vector<std::string_view> getAll(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != kNone; }
  /** How many fields are named `name` (getAll(name).size(), without the vector). */
  size_t count(std::string_view name) const {
    size_t n = 0;
    for (size_t i = 0; i < count_; ++i) n += nameAt(i, name) ? 1 : 0;
    return n;
  }

  /** The fields copied out, in order (tests and diagnostics). */
  std::vector<Entry> entries() const;
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  /** Drops every field; keeps the block for the next ones. */
  void clear() {
    count_ = 0;
    bytes_size_ = 0;
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
  const_iterator end() const { return {this, count_}; }

 private:
  // One field: its lower-case name at bytes()[offset], its value right after.
  // A head is bounded far below 4 GiB by the codecs' limits.
  struct Slot {
    uint32_t offset;
    uint32_t name_size;
    uint32_t value_size;
  };
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // The block: field_capacity_ slots, then bytes_capacity_ bytes.
  Slot* slots() { return reinterpret_cast<Slot*>(block_.get()); }
  const Slot* slots() const { return reinterpret_cast<const Slot*>(block_.get()); }
  char* bytes() { return block_.get() + field_capacity_ * sizeof(Slot); }
  const char* bytes() const { return block_.get() + field_capacity_ * sizeof(Slot); }

  Field fieldAt(size_t i) const {
    const Slot& s = slots()[i];
    const char* base = bytes() + s.offset;
    return {std::string_view(base, s.name_size),
            std::string_view(base + s.name_size, s.value_size)};
  }
  /** Whether field `i` is named `name` (any case). */
  bool nameAt(size_t i, std::string_view name) const {
    // Stored names are lower case (append() lowers them): lengths first
    // (most fields differ there), then the bytes as they are (callers pass
    // lower-case names), and only then `name` folded.
    const Slot& s = slots()[i];
    if (s.name_size != name.size()) return false;
    const char* stored = bytes() + s.offset;
    return std::memcmp(stored, name.data(), name.size()) == 0 || foldedEquals(stored, name);
  }
  /** `lower` (lower case) equals `name` folded; both name.size() bytes. */
  static bool foldedEquals(const char* lower, std::string_view name);
  /** The index of the first field named `name` (any case), or kNone. */
  size_t find(std::string_view name) const;
  /**
   * Appends a field; `name` and `value` must not point into the block.
   * `name` is lower-cased unless `lower_case` (the caller vouches for it).
   */
  void append(std::string_view name, std::string_view value, bool lower_case = false);
  /** add(), the argument check and all, for append(…, lower_case). */
  void addField(std::string_view name, std::string_view value, bool lower_case);
  /** A block with room for `fields` fields and `bytes` bytes; keeps the fields. */
  void grow(size_t fields, size_t bytes);
  /** Copies only the live fields (a removed field's bytes stay behind in the source). */
  void copyFrom(const HeaderMap& other);
  /** Moves `other`'s block here; `other` is left empty. */
  void take(HeaderMap& other) noexcept {
    block_ = std::move(other.block_);
    count_ = std::exchange(other.count_, 0);
    field_capacity_ = std::exchange(other.field_capacity_, 0);
    bytes_size_ = std::exchange(other.bytes_size_, 0);
    bytes_capacity_ = std::exchange(other.bytes_capacity_, 0);
  }

  std::unique_ptr<char[]> block_;
  uint32_t count_ = 0;
  uint32_t field_capacity_ = 0;
  uint32_t bytes_size_ = 0;
  uint32_t bytes_capacity_ = 0;
};

}  // namespace sluice
