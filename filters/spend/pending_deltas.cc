#include "filters/spend/pending_deltas.h"

#include <algorithm>
#include <cstring>

namespace sluice {

// A record: the gap and a flag "count is not 1" as one base-128 number of 65
// bits (the flag is the first byte's low bit, then the gap's bits: 6 in the
// first byte, 7 in each next one), then the count as a base-128 number when
// flagged. A byte's top bit says another follows. A record is at most 20 bytes.

void PendingDeltaList::reserve(uint32_t more) {
  if (used_ + more <= capacity_) return;
  const uint32_t live = used_ - head_;
  if (head_ > 0 && live + more <= capacity_ && head_ >= live) {
    std::memmove(bytes_.get(), bytes_.get() + head_, live);  // the popped prefix is most of it
  } else {
    const uint32_t capacity = std::max({uint32_t{32}, capacity_ * 2, live + more});
    std::unique_ptr<uint8_t[]> bytes(new uint8_t[capacity]);
    if (live > 0) std::memcpy(bytes.get(), bytes_.get() + head_, live);
    bytes_ = std::move(bytes);
    capacity_ = capacity;
  }
  back_at_ -= head_;
  used_ = live;
  head_ = 0;
}

void PendingDeltaList::append(uint64_t gap, uint64_t count) {
  reserve(20);
  uint8_t* out = bytes_.get() + used_;
  uint8_t* p = out;
  const bool counted = count != 1;
  uint8_t first = static_cast<uint8_t>(((gap & 0x3f) << 1) | (counted ? 1 : 0));
  gap >>= 6;
  if (gap != 0) first |= 0x80;
  *p++ = first;
  while (gap != 0) {
    uint8_t b = static_cast<uint8_t>(gap & 0x7f);
    gap >>= 7;
    if (gap != 0) b |= 0x80;
    *p++ = b;
  }
  if (counted) {
    do {
      uint8_t b = static_cast<uint8_t>(count & 0x7f);
      count >>= 7;
      if (count != 0) b |= 0x80;
      *p++ = b;
    } while (count != 0);
  }
  used_ += static_cast<uint32_t>(p - out);
}

PendingDeltaList::Decoded PendingDeltaList::decodeAt(uint32_t at) const {
  const uint8_t* p = bytes_.get() + at;
  if ((p[0] & 0x81) == 0) return Decoded{static_cast<uint64_t>(p[0] >> 1), 1, 1};
  if ((p[0] & 1) == 0 && (p[1] & 0x80) == 0) {  // a streamed delta's two bytes
    return Decoded{static_cast<uint64_t>((p[0] >> 1) & 0x3f) | static_cast<uint64_t>(p[1]) << 6, 1,
                   2};
  }
  const uint8_t* const start = p;
  uint8_t b = *p++;
  const bool counted = (b & 1) != 0;
  uint64_t gap = (b >> 1) & 0x3f;
  for (int shift = 6; (b & 0x80) != 0; shift += 7) {
    b = *p++;
    gap |= static_cast<uint64_t>(b & 0x7f) << shift;
  }
  uint64_t count = 1;
  if (counted) {
    count = 0;
    int shift = 0;
    do {
      b = *p++;
      count |= static_cast<uint64_t>(b & 0x7f) << shift;
      shift += 7;
    } while ((b & 0x80) != 0);
  }
  return Decoded{gap, count, static_cast<uint32_t>(p - start)};
}

PendingDeltas PendingDeltaList::front() const {
  const Decoded d = decodeAt(head_);
  return PendingDeltas{base_ + d.gap, d.count};
}

uint64_t PendingDeltaList::popThrough(uint64_t end_offset) {
  uint64_t count = 0;
  while (size_ != 0) {
    const Decoded d = decodeAt(head_);
    if (base_ + d.gap > end_offset) break;
    base_ += d.gap;
    head_ += d.bytes;
    --size_;
    count += d.count;
  }
  if (size_ == 0) {  // the allocation stays: the common pattern refills it
    used_ = 0;
    head_ = 0;
    back_at_ = 0;
  }
  return count;
}

void PendingDeltaList::push(uint64_t end_offset, uint64_t count) {
  const uint64_t prev = size_ == 0 ? base_ : back_end_;
  reserve(20);
  back_at_ = used_;
  append(end_offset - prev, count);
  back_end_ = end_offset;
  ++size_;
}

void PendingDeltaList::addSlow(uint64_t end_offset, uint64_t count) {
  if (size_ != 0 && back_end_ == end_offset) {
    const Decoded d = decodeAt(back_at_);
    used_ = back_at_;
    append(d.gap, d.count + count);
    return;
  }
  push(end_offset, count);
}

std::vector<PendingDeltas> PendingDeltaList::records() const {
  std::vector<PendingDeltas> out;
  out.reserve(size_);
  uint64_t end = base_;
  for (uint32_t at = head_; at < used_;) {
    const Decoded d = decodeAt(at);
    end += d.gap;
    out.push_back(PendingDeltas{end, d.count});
    at += d.bytes;
  }
  return out;
}

void PendingDeltaList::assign(const std::vector<PendingDeltas>& records) {
  used_ = 0;
  head_ = 0;
  back_at_ = 0;
  size_ = 0;
  for (const PendingDeltas& r : records) push(r.end_offset, r.count);
}

}  // namespace sluice
