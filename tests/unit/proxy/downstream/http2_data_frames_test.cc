// The response body on its way out of Http2ServerConnection: DATA frames
// are written without a copy (NGHTTP2_DATA_FLAG_NO_COPY: the frame header,
// then the payload moved from the stream's pending buffer to the socket's
// output). Whatever the body's size and however the upstream slices it, the
// client must get exactly the upstream's bytes, in frames no larger than
// SETTINGS_MAX_FRAME_SIZE, the last one with END_STREAM, and the frames of
// two streams on one connection each carrying only their own bytes. The
// whole worker path runs in one thread (fuzz/support/proxy_harness.h) with
// a loopback upstream.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fuzz/support/proxy_harness.h"

namespace sluice::fuzz {
namespace {

struct Frame {
  uint8_t type = 0;
  uint8_t flags = 0;
  int32_t stream = 0;
  std::string payload;
};

std::vector<Frame> parseFrames(const std::string& bytes) {
  std::vector<Frame> frames;
  size_t pos = 0;
  while (pos + 9 <= bytes.size()) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[pos + i]); };
    const size_t len = (size_t{byte(0)} << 16) | (size_t{byte(1)} << 8) | byte(2);
    if (pos + 9 + len > bytes.size()) break;
    Frame f;
    f.type = byte(3);
    f.flags = byte(4);
    f.stream = static_cast<int32_t>(((uint32_t{byte(5)} & 0x7f) << 24) | (uint32_t{byte(6)} << 16) |
                                    (uint32_t{byte(7)} << 8) | byte(8));
    f.payload = bytes.substr(pos + 9, len);
    frames.push_back(std::move(f));
    pos += 9 + len;
  }
  EXPECT_EQ(pos, bytes.size()) << "a partial frame at the end";
  return frames;
}

std::string frame(uint8_t type, uint8_t flags, int32_t stream, const std::string& payload) {
  std::string out;
  out += static_cast<char>((payload.size() >> 16) & 0xff);
  out += static_cast<char>((payload.size() >> 8) & 0xff);
  out += static_cast<char>(payload.size() & 0xff);
  out += static_cast<char>(type);
  out += static_cast<char>(flags);
  out += static_cast<char>((stream >> 24) & 0x7f);
  out += static_cast<char>((stream >> 16) & 0xff);
  out += static_cast<char>((stream >> 8) & 0xff);
  out += static_cast<char>(stream & 0xff);
  return out + payload;
}

constexpr uint8_t kData = 0x0, kHeaders = 0x1, kSettings = 0x4;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4, kPadded = 0x8;

/** GET /v1/models on each of `streams` (static-table HPACK, no dynamic table use). */
std::string getModels(const std::vector<int32_t>& streams) {
  // :method GET, :scheme http, :path (literal without indexing, name index 4),
  // :authority s (name index 1).
  const std::string block = std::string("\x82\x86\x04\x0a", 4) + "/v1/models" + "\x01\x01s";
  std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(kSettings, 0, 0, "");
  for (const int32_t id : streams) out += frame(kHeaders, kEndStream | kEndHeaders, id, block);
  return out;
}

/** The upstream's answer carrying `body`: content-length, or chunked in random slices. */
std::string upstreamAnswer(const std::string& body, bool chunked, std::mt19937& rng) {
  std::string out = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n";
  if (!chunked) return out + "content-length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  out += "transfer-encoding: chunked\r\n\r\n";
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t n = std::min(body.size() - pos, size_t{1} + rng() % 3000);
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", n);
    out += size + body.substr(pos, n) + "\r\n";
    pos += n;
  }
  return out + "0\r\n\r\n";
}

/** The DATA payloads each stream received, checked frame by frame. */
std::map<int32_t, std::string> bodiesReceived(const std::string& received) {
  std::map<int32_t, std::string> bodies;
  std::map<int32_t, bool> ended;
  for (const Frame& f : parseFrames(received)) {
    if (f.type != kData) continue;
    EXPECT_LE(f.payload.size(), 16384u) << "above the default SETTINGS_MAX_FRAME_SIZE";
    EXPECT_EQ(f.flags & kPadded, 0) << "sluice does not pad";
    EXPECT_FALSE(ended[f.stream]) << "DATA after END_STREAM on stream " << f.stream;
    bodies[f.stream] += f.payload;
    if (f.flags & kEndStream) ended[f.stream] = true;
  }
  for (const auto& [stream, body] : bodies) {
    EXPECT_TRUE(ended[stream]) << "stream " << stream << " never ended";
  }
  return bodies;
}

TEST(Http2DataFramesTest, ClientGetsTheUpstreamBodyByteForByteWhateverItsSizeAndSlicing) {
  ProxyHarness harness(kFuzzRoutes);
  std::mt19937 rng(18);
  // Both sides of one and several frames, of the 16 KiB output watermark the
  // tests' limits use, and up to the client's initial 64 KiB window.
  const std::vector<size_t> sizes = {0,    1,     8,     9,     10,    150,   1023,  1024,
                                     4096, 16383, 16384, 16385, 32768, 32769, 40000, 65535};
  for (const size_t size : sizes) {
    for (const bool chunked : {false, true}) {
      std::string body(size, '\0');
      for (char& c : body) c = static_cast<char>(rng());  // every byte value, NUL included
      harness.setUpstreamResponse(upstreamAnswer(body, chunked, rng));
      harness.runClient(getModels({1}), 0);
      const auto bodies = bodiesReceived(harness.clientReceived());
      if (size == 0) {
        // No DATA byte; END_STREAM on an empty DATA frame or on HEADERS.
        EXPECT_TRUE(bodies.empty() || bodies.at(1).empty()) << "size 0, chunked " << chunked;
        continue;
      }
      ASSERT_EQ(bodies.count(1), 1u) << "size " << size << ", chunked " << chunked;
      EXPECT_TRUE(bodies.at(1) == body) << "size " << size << ", chunked " << chunked << ": got "
                                        << bodies.at(1).size() << " bytes";
    }
  }
}

TEST(Http2DataFramesTest, TwoStreamsOnOneConnectionEachGetTheirOwnBytes) {
  ProxyHarness harness(kFuzzRoutes);
  std::mt19937 rng(19);
  for (int round = 0; round < 20; ++round) {
    // Together within the connection's initial 64 KiB window.
    const size_t size = 1 + rng() % 30000;
    std::string body(size, '\0');
    for (char& c : body) c = static_cast<char>(rng());
    harness.setUpstreamResponse(upstreamAnswer(body, round % 2 == 1, rng));
    harness.runClient(getModels({1, 3}), 0);
    const auto bodies = bodiesReceived(harness.clientReceived());
    ASSERT_EQ(bodies.size(), 2u) << "round " << round;
    EXPECT_TRUE(bodies.at(1) == body) << "round " << round;
    EXPECT_TRUE(bodies.at(3) == body) << "round " << round;
  }
}

}  // namespace
}  // namespace sluice::fuzz
