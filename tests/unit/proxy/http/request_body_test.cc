// Tests for RequestBody and BodyMemory (proxy/http/request_body.h): a buffered
// body stays whole and readable from offset 0; a streamed one frees blocks
// as they are sent; every byte held is counted against the process cap, and
// given back when freed or when the body goes.

#include "proxy/http/request_body.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace sluice {
namespace {

/** Reads `body` from `offset` to its end, block by block, as an upstream stream does. */
std::string readFrom(const RequestBody& body, uint64_t offset) {
  std::string out;
  while (offset < body.size()) {
    const std::string_view piece = body.peek(offset);
    if (piece.empty()) break;
    out.append(piece);
    offset += piece.size();
  }
  return out;
}

TEST(BodyMemoryTest, ReservesUpToTheCapAndNoFurther) {
  BodyMemory memory;
  EXPECT_TRUE(memory.tryReserve(60, 100));
  EXPECT_TRUE(memory.tryReserve(40, 100));
  EXPECT_FALSE(memory.tryReserve(1, 100));
  EXPECT_EQ(memory.used(), 100u);
  memory.release(50);
  EXPECT_TRUE(memory.tryReserve(50, 100));
  EXPECT_FALSE(memory.tryReserve(uint64_t{1} << 63, 100));  // no wrap-around
}

TEST(RequestBodyTest, ABufferedBodyIsOneViewAndReplayable) {
  BodyMemory memory;
  RequestBody body(&memory, 1 << 20);
  ASSERT_TRUE(body.append("hello ", 6));
  ASSERT_TRUE(body.append("world", 5));
  body.markComplete();
  EXPECT_EQ(body.prefix(), "hello world");
  EXPECT_EQ(readFrom(body, 0), "hello world");
  EXPECT_EQ(readFrom(body, 6), "world");
  body.discardBefore(11);  // a buffered body ignores it: a retry may need it all
  EXPECT_TRUE(body.replayable());
  EXPECT_EQ(readFrom(body, 0), "hello world");
  EXPECT_EQ(memory.used(), 11u);
}

TEST(RequestBodyTest, ReservingTheDeclaredLengthRefusesWhatDoesNotFit) {
  BodyMemory memory;
  RequestBody first(&memory, 100);
  RequestBody second(&memory, 100);
  EXPECT_TRUE(first.reserveWhole(70));
  EXPECT_FALSE(second.reserveWhole(40));
  EXPECT_EQ(memory.used(), 70u);
  // Bytes within the reservation need no more room.
  ASSERT_TRUE(first.append(std::string(70, 'x').data(), 70));
  EXPECT_EQ(memory.used(), 70u);
  // Beyond it, each byte is reserved as it comes.
  ASSERT_TRUE(first.append("y", 1));
  EXPECT_EQ(memory.used(), 71u);
}

TEST(RequestBodyTest, AStreamedBodyFreesWhatWasSentAndCountsOnlyWhatItHolds) {
  BodyMemory memory;
  RequestBody body(&memory, 1 << 30);
  body.startStreaming();
  const size_t block = RequestBody::kBlockBytes;
  const std::string data(3 * block + 100, 'a');
  ASSERT_TRUE(body.append(data.data(), data.size()));
  EXPECT_EQ(body.held(), data.size());
  EXPECT_EQ(memory.used(), data.size());
  EXPECT_EQ(body.peek(0).size(), block);  // blocks, not one big allocation
  EXPECT_EQ(readFrom(body, 0), data);

  body.discardBefore(block + 10);  // only whole blocks go
  EXPECT_FALSE(body.replayable());
  EXPECT_EQ(body.held(), data.size() - block);
  EXPECT_EQ(memory.used(), data.size() - block);
  EXPECT_TRUE(body.peek(0).empty());
  EXPECT_EQ(readFrom(body, block + 10), data.substr(block + 10));

  body.discardBefore(data.size());
  EXPECT_EQ(body.held(), 0u);
  EXPECT_EQ(memory.used(), 0u);
  ASSERT_TRUE(body.append("tail", 4));  // keeps going after everything was sent
  EXPECT_EQ(readFrom(body, data.size()), "tail");
  EXPECT_EQ(body.size(), data.size() + 4);
}

TEST(RequestBodyTest, ABufferedPrefixStaysWholeWhenTheBodyTurnsToStreaming) {
  BodyMemory memory;
  RequestBody body(&memory, 1 << 20);
  ASSERT_TRUE(body.append("prefix", 6));
  body.startStreaming();
  ASSERT_TRUE(body.append("-rest", 5));
  EXPECT_EQ(body.prefix(), "prefix");  // what the filters saw
  EXPECT_EQ(readFrom(body, 0), "prefix-rest");
  body.discardBefore(6);
  EXPECT_EQ(body.held(), 5u);
  EXPECT_EQ(readFrom(body, 6), "-rest");
}

TEST(RequestBodyTest, TheCapRefusesAnAppendWhole) {
  BodyMemory memory;
  RequestBody body(&memory, 10);
  body.startStreaming();
  ASSERT_TRUE(body.append("12345678", 8));
  EXPECT_FALSE(body.append("abc", 3));
  EXPECT_EQ(body.size(), 8u);  // nothing of the refused bytes was kept
  body.discardBefore(8);
  EXPECT_TRUE(body.append("abc", 3));
}

TEST(RequestBodyTest, EverythingIsGivenBackWhenTheBodyGoes) {
  BodyMemory memory;
  {
    RequestBody body(&memory, 1000);
    ASSERT_TRUE(body.reserveWhole(500));
    ASSERT_TRUE(body.append("x", 1));
    EXPECT_EQ(memory.used(), 500u);
  }
  EXPECT_EQ(memory.used(), 0u);
}

TEST(RequestBodyTest, ReleasingAllFreesTheBytesAndKeepsTheFraming) {
  BodyMemory memory;
  RequestBody body(&memory, 1000);
  body.declareLength(5);
  ASSERT_TRUE(body.reserveWhole(5));
  ASSERT_TRUE(body.append("hello", 5));
  body.markComplete();
  EXPECT_EQ(memory.used(), 5u);
  body.releaseAll();
  EXPECT_EQ(memory.used(), 0u);
  EXPECT_EQ(body.held(), 0u);
  EXPECT_FALSE(body.replayable());
  EXPECT_EQ(body.prefix(), "");
  EXPECT_EQ(body.peek(5), "");  // a transport that sent it all reads nothing more
  EXPECT_EQ(body.size(), 5u);
  EXPECT_TRUE(body.complete());
  EXPECT_EQ(upstreamContentLength("POST", body), 5u);
}

TEST(RequestBodyTest, ReleasingAStreamedBodyGivesBackItsBlocks) {
  BodyMemory memory;
  RequestBody body(&memory, 1 << 20);
  body.startStreaming();
  const std::string block(RequestBody::kBlockBytes, 'x');
  ASSERT_TRUE(body.append(block.data(), block.size()));
  ASSERT_TRUE(body.append("tail", 4));
  body.markComplete();
  body.discardBefore(RequestBody::kBlockBytes);  // the first block was sent
  EXPECT_EQ(memory.used(), 4u);
  body.releaseAll();
  EXPECT_EQ(memory.used(), 0u);
  EXPECT_EQ(body.size(), RequestBody::kBlockBytes + 4);
}

// The promise, whatever the malloc: a big block is a mapping of its
// own and is gone from the address space once freed. mincore() fails with
// ENOMEM on an address range that is not mapped.
TEST(BodyBlockAllocatorTest, BigBlocksAreUnmappedTheMomentTheyAreFreed) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 4 * kMappedBodyBlockBytes;
  void* p = allocateBodyBlock(bytes);
  ASSERT_NE(p, nullptr);
  std::vector<unsigned char> vec((bytes + page - 1) / page);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % page, 0u) << "a mapping starts on a page";
  static_cast<char*>(p)[bytes - 1] = 'x';  // writable to its last byte
  ASSERT_EQ(mincore(p, bytes, vec.data()), 0);
  freeBodyBlock(p, bytes);
  errno = 0;
  EXPECT_EQ(mincore(p, bytes, vec.data()), -1);
  EXPECT_EQ(errno, ENOMEM) << "the block is still mapped after it was freed";

  // Small blocks come from malloc; a body's storage uses the allocator.
  void* small = allocateBodyBlock(kMappedBodyBlockBytes - 1);
  ASSERT_NE(small, nullptr);
  freeBodyBlock(small, kMappedBodyBlockBytes - 1);
  BodyBlock block;
  block.reserve(bytes);
  block.append(bytes / 2, 'b');
  EXPECT_EQ(std::string_view(block), std::string(bytes / 2, 'b'));
}

TEST(RequestBodyTest, UpstreamContentLengthFollowsWhatIsKnown) {
  RequestBody empty;
  empty.markComplete();
  EXPECT_EQ(upstreamContentLength("GET", empty), std::nullopt);
  EXPECT_EQ(upstreamContentLength("POST", empty), 0u);
  RequestBody declared;
  declared.declareLength(42);
  EXPECT_EQ(upstreamContentLength("POST", declared), 42u);  // still streaming
  RequestBody chunked;
  ASSERT_TRUE(chunked.append("abc", 3));
  EXPECT_EQ(upstreamContentLength("POST", chunked), std::nullopt);
  chunked.markComplete();
  EXPECT_EQ(upstreamContentLength("POST", chunked), 3u);
}

}  // namespace
}  // namespace sluice
