// Http2ServerConnection::ReadTrack: where one stream's DATA payloads lie on
// the connection's wire, and how a read point (the connection bytes the
// client's application took) maps to the body bytes it read
// (docs/reference/metrics.md, "Delivered means read").

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "proxy/downstream/http2_server_connection.h"

namespace sluice {
namespace {

using ReadTrack = Http2ServerConnection::ReadTrack;

// Three frames of 100 body bytes each, 9-byte headers and another stream's
// frame between them: [9 hd][100 a] [9 hd][50 other] [9 hd][100 a] [9 hd][100 a].
ReadTrack interleaved() {
  ReadTrack t;
  t.body_in = 300;
  t.addFrame(9, 100);                     // [9, 109)
  t.addFrame(9 + 100 + 9 + 50 + 9, 100);  // [177, 277)
  t.addFrame(277 + 9, 100);               // [286, 386)
  t.done = true;
  return t;
}

TEST(Http2ReadTrackTest, AReadPointMapsToTheBodyBytesBeforeIt) {
  const ReadTrack t = interleaved();
  EXPECT_EQ(t.end(), 386u);
  EXPECT_EQ(t.readBody(0), 0u) << "nothing read";
  EXPECT_EQ(t.readBody(9), 0u) << "only the first frame's header";
  EXPECT_EQ(t.readBody(59), 50u) << "half the first payload";
  EXPECT_EQ(t.readBody(109), 100u);
  EXPECT_EQ(t.readBody(170), 100u) << "the other stream's frame is not this stream's body";
  EXPECT_EQ(t.readBody(200), 123u);
  EXPECT_EQ(t.readBody(286), 200u) << "the last frame's header";
  EXPECT_EQ(t.readBody(386), 300u);
  EXPECT_EQ(t.readBody(100000), 300u) << "what came after the stream";
}

TEST(Http2ReadTrackTest, TheUnreadTailLessWhatACutDroppedIsSettled) {
  ReadTrack t = interleaved();
  EXPECT_EQ(t.unreadBody(386), 0u);
  EXPECT_EQ(t.unreadBody(59), 250u);
  EXPECT_EQ(t.unreadBody(0), 300u);
  // 40 more bytes were handed over and dropped unsent by a cut: the Exchange
  // never counted them delivered, so they are not unread either.
  t.body_in = 340;
  t.dropped = 40;
  EXPECT_EQ(t.unreadBody(386), 0u);
  EXPECT_EQ(t.unreadBody(59), 250u);
  // Handed over, never sent and not dropped (the connection ended first): unread.
  t.dropped = 0;
  EXPECT_EQ(t.unreadBody(386), 40u);
}

TEST(Http2ReadTrackTest, ManyFramesAreMergedAndStillMapNearly) {
  // A long stream: a 20-byte payload every 40 bytes of wire (its header and
  // another stream's bytes between).
  ReadTrack t;
  constexpr uint64_t kFrames = 5000;
  for (uint64_t i = 0; i < kFrames; ++i) {
    t.addFrame(40 * i + 20, 20);
    t.body_in += 20;
    ASSERT_LE(t.frames.size(), ReadTrack::kMaxFrames);
  }
  EXPECT_EQ(t.end(), 40 * (kFrames - 1) + 40);
  EXPECT_EQ(t.readBody(t.end()), 20 * kFrames) << "read through: all of it, exactly";
  EXPECT_EQ(t.readBody(0), 0u);
  // Inside: within one merged span's body of the exact figure.
  const uint64_t span_body = 20 * kFrames / t.frames.size() + 20 * 16;
  for (const uint64_t point : {uint64_t{1000}, uint64_t{77777}, uint64_t{150000}}) {
    const uint64_t exact =
        (point / 40) * 20 + std::min<uint64_t>(20, point % 40 > 20 ? point % 40 - 20 : 0);
    const uint64_t got = t.readBody(point);
    EXPECT_LE(got > exact ? got - exact : exact - got, span_body) << "at " << point;
  }
}

}  // namespace
}  // namespace sluice
