#pragma once

// The response bytes of one HTTP/2 stream that the client's flow-control
// window has not admitted yet: appended by the Exchange (encodeData), taken
// from the front by nghttp2's data source callback, a frame at a time.
//
// An evbuffer did this before: one more heap object per stream (the evbuffer
// itself, created and freed with the stream) and its chain bookkeeping per
// call, for what is nearly always one piece (a JSON answer, an SSE event)
// written and taken whole. Here the bytes sit in one string; its storage is
// given back once everything was taken, as the evbuffer freed its drained
// chains, so a held stream between events keeps no buffer.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace sluice {

class Http2PendingBytes {
 public:
  size_t size() const { return bytes_.size() - taken_; }
  bool empty() const { return size() == 0; }

  void append(const char* data, size_t len) {
    if (len == 0) return;
    // Bytes already taken go before the string grows (it would copy them too).
    if (taken_ > 0 && bytes_.size() + len > bytes_.capacity()) compact();
    bytes_.append(data, len);
  }

  /** Copies up to `max` bytes from the front to `out` and drops them; returns how many. */
  size_t take(void* out, size_t max) {
    const size_t n = std::min(max, size());
    if (n > 0) std::memcpy(out, bytes_.data() + taken_, n);
    taken_ += n;
    if (n > 0 && taken_ == bytes_.size()) clear();
    return n;
  }

  /** Bytes of storage held (tests: none once everything was taken). */
  size_t capacity() const { return bytes_.capacity(); }

  /** Drops every byte and gives the storage back. */
  void clear() {
    std::string().swap(bytes_);
    taken_ = 0;
  }

 private:
  void compact() {
    bytes_.erase(0, taken_);
    taken_ = 0;
  }

  std::string bytes_;
  size_t taken_ = 0;  // bytes at the front already handed to nghttp2
};

}  // namespace sluice
