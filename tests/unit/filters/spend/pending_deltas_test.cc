// PendingDeltaList against the FIFO of {end_offset, count} records it
// replaced (common/fifo.h, as UsageMeter used it): the same answers after
// every step of random streams, and ~2 bytes a streamed delta.

#include "filters/spend/pending_deltas.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/fifo.h"

namespace sluice {
namespace {

/** The old list: what UsageMeter's recordDeltas / onBytesDelivered did with a Fifo. */
struct ReferenceList {
  Fifo<PendingDeltas> fifo;

  void add(uint64_t end_offset, uint64_t count) {
    if (!fifo.empty() && fifo.back().end_offset == end_offset) {
      fifo.back().count += count;
      return;
    }
    fifo.push_back(PendingDeltas{end_offset, count});
  }
  uint64_t popThrough(uint64_t end_offset) {
    uint64_t count = 0;
    while (!fifo.empty() && fifo.front().end_offset <= end_offset) {
      count += fifo.front().count;
      fifo.pop_front();
    }
    return count;
  }
  std::vector<PendingDeltas> records() const { return {fifo.begin(), fifo.end()}; }
  void assign(const std::vector<PendingDeltas>& records) {
    fifo.clear();
    for (const PendingDeltas& r : records) fifo.push_back(r);
  }
};

void expectSame(const PendingDeltaList& list, const ReferenceList& ref, int step) {
  ASSERT_EQ(list.size(), ref.fifo.size()) << "step " << step;
  ASSERT_EQ(list.empty(), ref.fifo.empty()) << "step " << step;
  if (!ref.fifo.empty()) {
    ASSERT_EQ(list.front(), ref.fifo.front()) << "step " << step;
    ASSERT_TRUE(list.endsAt(ref.fifo.back().end_offset)) << "step " << step;
  }
}

TEST(PendingDeltaListTest, AnswersAsTheFifoOfRecordsDidOnRandomStreams) {
  std::mt19937_64 rng(18);
  for (int stream = 0; stream < 400; ++stream) {
    PendingDeltaList list;
    ReferenceList ref;
    uint64_t offset = rng() % 3 == 0 ? rng() : rng() % 1000;  // some start near 2^64
    uint64_t delivered = 0;
    const int steps = 1 + static_cast<int>(rng() % 600);
    for (int step = 0; step < steps; ++step) {
      const uint64_t pick = rng() % 100;
      if (pick < 70) {
        // A delta's end: mostly a streamed chunk further on, sometimes the same
        // offset (merged), a long stretch without deltas, a gap near 2^64
        // (offsets wrap in the encoding), or an earlier offset.
        uint64_t gap = 1 + rng() % 400;
        if (pick < 5) gap = 0;
        if (pick == 5) gap = rng() % (uint64_t{1} << 40);
        if (pick == 6) gap = std::numeric_limits<uint64_t>::max() - rng() % 5;
        if (pick == 7) gap = rng();
        offset += gap;
        uint64_t count = 1;
        const uint64_t c = rng() % 20;
        if (c == 0) count = 0;
        if (c == 1) count = 2 + rng() % 6;
        if (c == 2) count = rng() >> (rng() % 64);
        list.add(offset, count);
        ref.add(offset, count);
      } else if (pick < 85) {
        // A delivery report: records leave, oldest first, while they end by `delivered`.
        delivered += rng() % 3000;
        if (rng() % 10 == 0) delivered = rng();
        ASSERT_EQ(list.popThrough(delivered), ref.popThrough(delivered)) << "step " << step;
      } else if (pick < 90 && !ref.fifo.empty()) {
        const uint64_t oldest = ref.fifo.front().end_offset;
        ASSERT_EQ(list.popThrough(oldest), ref.popThrough(oldest)) << "step " << step;
      } else if (pick < 93) {
        // Coalescing: the records read back, merged pairwise, written again.
        const std::vector<PendingDeltas> all = list.records();
        ASSERT_EQ(all, ref.records()) << "step " << step;
        std::vector<PendingDeltas> merged;
        for (size_t i = 0; i < all.size(); ++i) {
          if (i % 2 == 1 && rng() % 2 == 0) {
            merged.back().count += all[i].count;
            merged.back().end_offset = all[i].end_offset;
          } else {
            merged.push_back(all[i]);
          }
        }
        list.assign(merged);
        ref.assign(merged);
      } else {
        ASSERT_EQ(list.records(), ref.records()) << "step " << step;
      }
      expectSame(list, ref, step);
    }
    ASSERT_EQ(list.records(), ref.records());
    const uint64_t all = std::numeric_limits<uint64_t>::max();
    ASSERT_EQ(list.popThrough(all), ref.popThrough(all));
    EXPECT_TRUE(list.empty());
  }
}

TEST(PendingDeltaListTest, AssignKeepsRecordsThatEndAtTheSameOffsetApart) {
  PendingDeltaList list;
  list.assign({{10, 1}, {10, 2}, {5, 3}});
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(list.records(), (std::vector<PendingDeltas>{{10, 1}, {10, 2}, {5, 3}}));
  list.add(5, 4);  // merges into the newest
  EXPECT_EQ(list.records(), (std::vector<PendingDeltas>{{10, 1}, {10, 2}, {5, 7}}));
  EXPECT_EQ(list.popThrough(9), 0u);    // the oldest ends at 10
  EXPECT_EQ(list.popThrough(10), 10u);  // all three, oldest first (the last ends at 5)
  EXPECT_TRUE(list.empty());
}

TEST(PendingDeltaListTest, AStreamedDeltaTakesAboutTwoBytes) {
  // A held chat stream: one delta per ~250-byte chunk, none delivered until
  // the attempt ends. The Fifo held 16 bytes a delta (a 2 KiB block at 100).
  PendingDeltaList list;
  uint64_t offset = 0;
  for (int i = 0; i < 100; ++i) {
    offset += 246 + static_cast<uint64_t>(i % 7);
    list.add(offset, 1);
  }
  EXPECT_EQ(list.size(), 100u);
  EXPECT_EQ(list.encodedBytes(), 200u);
  EXPECT_EQ(list.capacityBytes(), 256u);  // one allocation of mimalloc's 256 class
  list.add(offset, 1);  // a second delta in the same event: the count is written out
  EXPECT_EQ(list.encodedBytes(), 201u);
  EXPECT_EQ(list.records().back(), (PendingDeltas{offset, 2}));
}

}  // namespace
}  // namespace sluice
