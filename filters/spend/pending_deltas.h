#pragma once

// The spend meter's undelivered deltas, oldest first: how many content deltas
// ended at which body offset, kept until the attempt's delivery report says
// whether they reached the client (usage_meter.h, "Mapping delivered bytes to
// delivered tokens").
//
// sluice reports delivery once, when an attempt ends, so a held stream keeps
// one record per delta it has streamed. As two 64-bit numbers that was 16
// bytes a delta: a 100-token stream's list grew to a 2 KiB block, the largest
// single allocation of a held SSE stream (PROFILE.md, eighth round). Here a
// record is the distance from the previous record's offset (a streamed chunk
// is a few hundred bytes: two bytes) and, only when it is not 1, its count,
// each as a little-endian base-128 number: ~2 bytes a delta. What the list
// answers is exactly what a FIFO of {end_offset, count} records answered.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice {

/** Deltas that ended at `end_offset` and have not reached the client yet. */
struct PendingDeltas {
  uint64_t end_offset;
  uint64_t count;

  bool operator==(const PendingDeltas&) const = default;
};

/**
 * A FIFO of PendingDeltas records, encoded compactly. Records may come in any
 * offset order (the meter's are ascending); one that ends where the newest
 * ends is merged into it. Holds at most ~2^32 / 20 records (the meter keeps
 * at most UsageMeter::kMaxPendingDeltaEntries).
 */
class PendingDeltaList {
 public:
  PendingDeltaList() = default;
  PendingDeltaList(const PendingDeltaList&) = delete;
  PendingDeltaList& operator=(const PendingDeltaList&) = delete;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  /** The oldest record; the list is not empty. */
  PendingDeltas front() const;
  /** The newest record ends at `end_offset` (add() would merge into it). */
  bool endsAt(uint64_t end_offset) const { return size_ != 0 && back_end_ == end_offset; }
  /**
   * Drops every record, oldest first, while the oldest ends at or before
   * `end_offset`; returns their deltas. (A FIFO's `while (front().end_offset <=
   * end_offset) pop_front()`, in one pass.)
   */
  uint64_t popThrough(uint64_t end_offset);
  /**
   * `count` deltas that ended at `end_offset`: added to the newest record if it
   * ends there too, else a new newest record.
   */
  void add(uint64_t end_offset, uint64_t count) {
    const uint64_t gap = end_offset - (size_ == 0 ? base_ : back_end_);
    // A streamed delta: one delta a little further on, room for two bytes.
    if (count == 1 && gap - 1 < kTwoByteGaps - 1 && used_ + 2 <= capacity_) {
      back_at_ = used_;
      if (gap < 64) {
        bytes_[used_++] = static_cast<uint8_t>(gap << 1);
      } else {
        bytes_[used_++] = static_cast<uint8_t>(((gap & 0x3f) << 1) | 0x80);
        bytes_[used_++] = static_cast<uint8_t>(gap >> 6);
      }
      back_end_ = end_offset;
      ++size_;
      return;
    }
    addSlow(end_offset, count);
  }

  /** Every record, oldest first (for coalescing). */
  std::vector<PendingDeltas> records() const;
  /** Replaces every record with `records`, oldest first, none merged. */
  void assign(const std::vector<PendingDeltas>& records);

  /** Bytes the records take encoded. */
  size_t encodedBytes() const { return used_ - head_; }
  /** Bytes allocated for them. */
  size_t capacityBytes() const { return capacity_; }

 private:
  static constexpr uint64_t kTwoByteGaps = uint64_t{1} << 13;  // gaps a two-byte record holds

  struct Decoded {
    uint64_t gap;    // from the previous record's end offset (mod 2^64)
    uint64_t count;  // deltas
    uint32_t bytes;  // the record's encoded length
  };
  Decoded decodeAt(uint32_t at) const;
  void addSlow(uint64_t end_offset, uint64_t count);
  /** Appends a record, making room for it. */
  void append(uint64_t gap, uint64_t count);
  void push(uint64_t end_offset, uint64_t count);
  /** Room for `more` bytes after used_ (the popped prefix goes first). */
  void reserve(uint32_t more);

  std::unique_ptr<uint8_t[]> bytes_;  // records in [head_, used_); [0, head_) are popped
  uint32_t capacity_ = 0;
  uint32_t used_ = 0;
  uint32_t head_ = 0;      // where the oldest record starts
  uint32_t back_at_ = 0;   // where the newest record starts
  uint32_t size_ = 0;      // records
  uint64_t base_ = 0;      // the end offset before the oldest record's (its gap's origin)
  uint64_t back_end_ = 0;  // the newest record's end offset
};

}  // namespace sluice
