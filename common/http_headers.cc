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
  for (const Slot& s : other.slots_) live += s.name_size + s.value_size;
  bytes_.reserve(bytes_.size() + live);
  slots_.reserve(slots_.size() + other.slots_.size());
  for (size_t i = 0; i < other.slots_.size(); ++i) {
    const Field f = other.fieldAt(i);
    slots_.push_back(Slot{static_cast<uint32_t>(bytes_.size()), other.slots_[i].name_size,
                          other.slots_[i].value_size});
    bytes_.append(f.name);
    bytes_.append(f.value);
  }
}

void HeaderMap::reserve(size_t fields, size_t bytes) {
  slots_.reserve(fields);
  bytes_.reserve(bytes);
}

void HeaderMap::append(std::string_view name, std::string_view value) {
  if (slots_.capacity() == 0) slots_.reserve(kFirstFields);
  const size_t need = bytes_.size() + name.size() + value.size();
  if (need > bytes_.capacity()) {
    bytes_.reserve(std::max(need, std::max(kFirstBytes, 2 * bytes_.capacity())));
  }
  const size_t offset = bytes_.size();
  bytes_.append(name);
  bytes_.append(value);
  // Lower-case the name in place: most names arrive lower case already
  // (HTTP/2, SDKs), so look for the first upper-case letter first.
  char* stored = bytes_.data() + offset;
  for (size_t i = 0; i < name.size(); ++i) {
    if (stored[i] >= 'A' && stored[i] <= 'Z') stored[i] = static_cast<char>(stored[i] + 32);
  }
  slots_.push_back(Slot{static_cast<uint32_t>(offset), static_cast<uint32_t>(name.size()),
                        static_cast<uint32_t>(value.size())});
}

void HeaderMap::add(std::string_view name, std::string_view value) {
  // A view of this map (a value read from it, say) would dangle once bytes_
  // grows: copy such an argument first. Rare; the common case copies nothing.
  const auto inside = [this](std::string_view v) {
    return !v.empty() && v.data() >= bytes_.data() && v.data() < bytes_.data() + bytes_.size();
  };
  if (inside(name) || inside(value)) {
    const std::string n(name), v(value);
    append(n, v);
    return;
  }
  append(name, value);
}

void HeaderMap::set(std::string_view name, std::string_view value) {
  remove(name);  // keeps bytes_ (and so the arguments, if they are views of it) in place
  add(name, value);
}

bool HeaderMap::nameAt(size_t i, std::string_view name) const {
  // Stored names are lower case (append() lowers them): lengths first (most
  // fields differ there), then only `name` is folded (PROFILE.md, round 3).
  const Slot& s = slots_[i];
  if (s.name_size != name.size()) return false;
  const char* stored = bytes_.data() + s.offset;
  for (size_t k = 0; k < name.size(); ++k) {
    if (stored[k] != lowerAscii(name[k])) return false;
  }
  return true;
}

size_t HeaderMap::find(std::string_view name) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (nameAt(i, name)) return i;
  }
  return kNone;
}

size_t HeaderMap::remove(std::string_view name) {
  // The removed fields' bytes stay in bytes_ until clear() (or a copy, which
  // takes only live fields): views handed out so far stay valid.
  size_t kept = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!nameAt(i, name)) slots_[kept++] = slots_[i];
  }
  const size_t removed = slots_.size() - kept;
  slots_.resize(kept);
  return removed;
}

std::optional<std::string_view> HeaderMap::get(std::string_view name) const {
  const size_t i = find(name);
  if (i == kNone) return std::nullopt;
  return fieldAt(i).value;
}

std::vector<std::string_view> HeaderMap::getAll(std::string_view name) const {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (nameAt(i, name)) out.push_back(fieldAt(i).value);
  }
  return out;
}

std::vector<HeaderMap::Entry> HeaderMap::entries() const {
  std::vector<Entry> out;
  out.reserve(slots_.size());
  for (const Field f : *this) out.emplace_back(std::string(f.name), std::string(f.value));
  return out;
}

}  // namespace sluice
