#include "proxy/http2_pending_bytes.h"

#include <event2/buffer.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "proxy/event_util.h"

namespace sluice {
namespace {

// The evbuffer the stream used before is the reference: random appends
// (empty, small, frame-sized, large), takes of random sizes and clears give
// the same bytes in the same order, and the same sizes throughout.
TEST(Http2PendingBytesTest, MatchesAnEvbufferOnRandomAppendsAndTakes) {
  std::mt19937 rng(4242);
  for (int round = 0; round < 200; ++round) {
    Http2PendingBytes queue;
    EvBufferPtr reference(evbuffer_new());
    uint8_t next = 0;
    for (int step = 0; step < 300; ++step) {
      const unsigned what = rng() % 10;
      if (what < 5) {
        static const size_t kSizes[] = {0, 1, 7, 15, 16, 100, 1000, 16384, 70000};
        std::string data(kSizes[rng() % 9] + rng() % 3, '\0');
        for (char& c : data) c = static_cast<char>(next++);
        queue.append(data.data(), data.size());
        evbuffer_add(reference.get(), data.data(), data.size());
      } else if (what < 9) {
        const size_t max = std::vector<size_t>{0, 1, 9, 100, 16384, 100000}[rng() % 6];
        std::string got(max, '\0');
        std::string want(max, '\0');
        const size_t n = queue.take(got.data(), max);
        const int m = evbuffer_remove(reference.get(), want.data(), max);
        ASSERT_EQ(n, static_cast<size_t>(std::max(m, 0))) << round << " " << step;
        got.resize(n);
        want.resize(n);
        ASSERT_EQ(got, want) << round << " " << step;
      } else {
        queue.clear();
        evbuffer_drain(reference.get(), evbuffer_get_length(reference.get()));
      }
      ASSERT_EQ(queue.size(), evbuffer_get_length(reference.get())) << round << " " << step;
      ASSERT_EQ(queue.empty(), queue.size() == 0);
    }
  }
}

TEST(Http2PendingBytesTest, TakingEverythingGivesTheStorageBack) {
  Http2PendingBytes queue;
  const std::string event(300, 'e');  // an SSE event, above the string's inline size
  queue.append(event.data(), event.size());
  char out[512];
  EXPECT_EQ(queue.take(out, 100), 100u);
  EXPECT_EQ(queue.take(out, sizeof(out)), 200u);
  EXPECT_EQ(queue.size(), 0u);
  EXPECT_EQ(queue.capacity(), std::string().capacity());  // no heap buffer left
  queue.append(event.data(), event.size());
  queue.clear();
  EXPECT_EQ(queue.capacity(), std::string().capacity());
  // Nothing is held between events: appending again starts a new buffer.
  queue.append(event.data(), 10);
  EXPECT_EQ(queue.take(out, sizeof(out)), 10u);
  EXPECT_EQ(std::string(out, 10), std::string(10, 'e'));
}

}  // namespace
}  // namespace sluice
