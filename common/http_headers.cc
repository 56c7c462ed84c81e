#include "common/http_headers.h"

#include <algorithm>
#include <cstring>

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

std::string_view trimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

namespace {

// The first field of a head: room for a typical request head's fields and
// bytes, so most heads never grow (PROFILE.md, fifth round).
constexpr size_t kFirstFields = 16;
constexpr size_t kFirstBytes = 512;

// Lower-cases the ASCII letters of 8 bytes at once: a byte's high bit in
// `upper` is set iff the byte is 'A'..'Z' (no carry crosses a byte: every
// byte is at most 0x7f when the constants are added), and 0x80 >> 2 is the
// 0x20 that lower-cases it. Other bytes, UTF-8 ones included, are kept.
uint64_t lowerAscii8(uint64_t x) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  const uint64_t heptets = x & ~kHigh;
  const uint64_t above_z = heptets + (0x7f - 'Z') * kOnes;
  const uint64_t from_a = heptets + (0x80 - 'A') * kOnes;
  const uint64_t upper = from_a & ~above_z & ~x & kHigh;
  return x | (upper >> 2);
}

// Copies `n` bytes from `src` to `dst`, lower-casing ASCII letters.
void copyLower(char* dst, const char* src, size_t n) {
  if (n < 8) {
    for (size_t i = 0; i < n; ++i) dst[i] = lowerAscii(src[i]);
    return;
  }
  // Whole words, then the last 8 bytes (overlapping: lower-casing twice is
  // lower-casing once).
  uint64_t w;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    std::memcpy(&w, src + i, 8);
    w = lowerAscii8(w);
    std::memcpy(dst + i, &w, 8);
  }
  std::memcpy(&w, src + n - 8, 8);
  w = lowerAscii8(w);
  std::memcpy(dst + n - 8, &w, 8);
}

}  // namespace

HeaderMap& HeaderMap::operator=(const HeaderMap& other) {
  if (this != &other) {
    clear();
    copyFrom(other);
  }
  return *this;
}

void HeaderMap::copyFrom(const HeaderMap& other) {
  size_t live = 0;
  for (size_t i = 0; i < other.count_; ++i) {
    live += other.slots()[i].name_size + other.slots()[i].value_size;
  }
  if (count_ + other.count_ > field_capacity_ || bytes_size_ + live > bytes_capacity_) {
    grow(count_ + other.count_, bytes_size_ + live);
  }
  Slot* slots = this->slots();
  char* bytes = this->bytes();
  for (size_t i = 0; i < other.count_; ++i) {
    const Slot& from = other.slots()[i];
    const size_t n = from.name_size + from.value_size;
    std::memcpy(bytes + bytes_size_, other.bytes() + from.offset, n);
    slots[count_++] = Slot{bytes_size_, from.name_size, from.value_size};
    bytes_size_ += static_cast<uint32_t>(n);
  }
}

void HeaderMap::grow(size_t fields, size_t bytes) {
  const size_t field_capacity = std::max<size_t>(fields, field_capacity_);
  const size_t bytes_capacity = std::max<size_t>(bytes, bytes_capacity_);
  std::unique_ptr<char[]> block(new char[field_capacity * sizeof(Slot) + bytes_capacity]);
  if (count_ > 0) std::memcpy(block.get(), block_.get(), count_ * sizeof(Slot));
  if (bytes_size_ > 0) {
    std::memcpy(block.get() + field_capacity * sizeof(Slot), this->bytes(), bytes_size_);
  }
  block_ = std::move(block);
  field_capacity_ = static_cast<uint32_t>(field_capacity);
  bytes_capacity_ = static_cast<uint32_t>(bytes_capacity);
}

void HeaderMap::reserve(size_t fields, size_t bytes) {
  if (fields > field_capacity_ || bytes > bytes_capacity_) grow(fields, bytes);
}

void HeaderMap::append(std::string_view name, std::string_view value, bool lower_case) {
  const size_t need = bytes_size_ + name.size() + value.size();
  if (count_ == field_capacity_ || need > bytes_capacity_) {
    grow(count_ == field_capacity_ ? std::max<size_t>(kFirstFields, 2 * field_capacity_)
                                   : field_capacity_,
         need > bytes_capacity_ ? std::max(need, std::max(kFirstBytes, 2 * size_t{bytes_capacity_}))
                                : bytes_capacity_);
  }
  const uint32_t offset = bytes_size_;
  char* stored = bytes() + offset;
  // The name lower-cased as it is copied, eight bytes at a time.
  if (lower_case) {
    if (!name.empty()) std::memcpy(stored, name.data(), name.size());
  } else {
    copyLower(stored, name.data(), name.size());
  }
  if (!value.empty()) std::memcpy(stored + name.size(), value.data(), value.size());
  slots()[count_++] =
      Slot{offset, static_cast<uint32_t>(name.size()), static_cast<uint32_t>(value.size())};
  bytes_size_ = static_cast<uint32_t>(need);
}

void HeaderMap::add(std::string_view name, std::string_view value) {
  addField(name, value, /*lower_case=*/false);
}

void HeaderMap::addLowerCase(std::string_view name, std::string_view value) {
  addField(name, value, /*lower_case=*/true);
}

void HeaderMap::addField(std::string_view name, std::string_view value, bool lower_case) {
  // A view of this map (a value read from it, say) would dangle once the
  // block grows: copy such an argument first. Rare; the common case copies nothing.
  const char* begin = block_.get();
  const char* end = bytes() + bytes_size_;
  const auto inside = [begin, end](std::string_view v) {
    return !v.empty() && v.data() >= begin && v.data() < end;
  };
  if (inside(name) || inside(value)) {
    const std::string n(name), v(value);
    append(n, v, lower_case);
    return;
  }
  append(name, value, lower_case);
}

void HeaderMap::set(std::string_view name, std::string_view value) {
  remove(name);  // keeps the block (and so the arguments, if they are views of it) in place
  add(name, value);
}

bool HeaderMap::foldedEquals(const char* lower, std::string_view name) {
  for (size_t k = 0; k < name.size(); ++k) {
    if (lower[k] != lowerAscii(name[k])) return false;
  }
  return true;
}

size_t HeaderMap::find(std::string_view name) const {
  for (size_t i = 0; i < count_; ++i) {
    if (nameAt(i, name)) return i;
  }
  return kNone;
}

size_t HeaderMap::remove(std::string_view name) {
  // The removed fields' bytes stay in the block until clear() (or a copy,
  // which takes only live fields): views handed out so far stay valid.
  size_t i = find(name);
  if (i == kNone) return 0;
  Slot* slots = this->slots();
  size_t kept = i;
  for (++i; i < count_; ++i) {
    if (!nameAt(i, name)) slots[kept++] = slots[i];
  }
  const size_t removed = count_ - kept;
  count_ = static_cast<uint32_t>(kept);
  return removed;
}

std::optional<std::string_view> HeaderMap::get(std::string_view name) const {
  const size_t i = find(name);
  if (i == kNone) return std::nullopt;
  return fieldAt(i).value;
}

std::vector<std::string_view> HeaderMap::getAll(std::string_view name) const {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < count_; ++i) {
    if (nameAt(i, name)) out.push_back(fieldAt(i).value);
  }
  return out;
}

std::vector<HeaderMap::Entry> HeaderMap::entries() const {
  std::vector<Entry> out;
  out.reserve(count_);
  for (const Field f : *this) out.emplace_back(std::string(f.name), std::string(f.value));
  return out;
}

}  // namespace sluice
