#pragma once

// Serialises an HTTP/1.1 head (a start line, fields, the empty line) for
// one evbuffer_add. Both HTTP/1.1 codecs wrote their heads with
// `std::string::operator+=`, four calls a field plus the string's
// allocation; a head here goes into a buffer on the stack, and only one
// larger than it moves to the heap (PROFILE.md, sixth round).

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice {

class Http1HeadWriter {
 public:
  /** Heads up to this size are written on the stack. */
  static constexpr size_t kStackBytes = 2048;

  Http1HeadWriter() = default;
  Http1HeadWriter(const Http1HeadWriter&) = delete;
  Http1HeadWriter& operator=(const Http1HeadWriter&) = delete;

  /** Appends `s`. */
  void add(std::string_view s) {
    if (heap_.empty() && size_ + s.size() <= kStackBytes) {
      std::memcpy(stack_ + size_, s.data(), s.size());
      size_ += s.size();
      return;
    }
    spill(s);
  }
  /** Appends one field: `name: value` CRLF. */
  void addField(std::string_view name, std::string_view value) {
    const size_t n = name.size() + value.size() + 4;
    if (heap_.empty() && size_ + n <= kStackBytes) {
      char* p = stack_ + size_;
      std::memcpy(p, name.data(), name.size());
      p += name.size();
      std::memcpy(p, ": ", 2);
      std::memcpy(p + 2, value.data(), value.size());
      std::memcpy(p + 2 + value.size(), "\r\n", 2);
      size_ += n;
      return;
    }
    spill(name);
    spill(": ");
    spill(value);
    spill("\r\n");
  }

  const char* data() const { return heap_.empty() ? stack_ : heap_.data(); }
  size_t size() const { return heap_.empty() ? size_ : heap_.size(); }
  std::string_view view() const { return {data(), size()}; }

 private:
  // Past the stack buffer: everything so far and `s` on the heap.
  void spill(std::string_view s) {
    if (heap_.empty()) {
      heap_.reserve(2 * kStackBytes + s.size());
      heap_.append(stack_, size_);
    }
    heap_.append(s);
  }

  char stack_[kStackBytes];
  size_t size_ = 0;
  std::string heap_;  // used once the head outgrows stack_
};

}  // namespace sluice
