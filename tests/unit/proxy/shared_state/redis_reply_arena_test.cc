// RedisReplyArena (proxy/shared_state/redis_reply_arena.h): hiredis's reader building its
// replies in reused memory must read every byte stream exactly as the
// default reader does — the same values, the same errors, at the same point.

#include "proxy/shared_state/redis_reply_arena.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

// A reply as text: every field a caller may read.
std::string render(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR: {
      std::string out = std::to_string(r->type) + "(" + std::to_string(r->len) + ":";
      out.append(r->str, r->len);
      // Callers may read str as a C string too.
      if (r->str[r->len] != '\0') out += "<unterminated>";
      return out + ")";
    }
    case REDIS_REPLY_INTEGER:
      return "i(" + std::to_string(r->integer) + ")";
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_ARRAY: {
      std::string out = "[" + std::to_string(r->elements);
      if (r->elements == 0 && r->element != nullptr) out += "<element set>";
      for (size_t i = 0; i < r->elements; ++i) out += " " + render(r->element[i]);
      return out + "]";
    }
    default:
      return "?" + std::to_string(r->type);
  }
}

// What a reader makes of `bytes` fed in slices of `step` bytes: each reply
// as soon as it is complete, then "ERR <errstr>" if the reader failed.
template <class Take, class Drop>
std::vector<std::string> readWith(redisReader* reader, const std::string& bytes, size_t step,
                                  Take take, Drop drop) {
  std::vector<std::string> out;
  for (size_t at = 0; at < bytes.size() || at == 0; at += step) {
    const size_t n = std::min(step, bytes.size() - at);
    if (n > 0) redisReaderFeed(reader, bytes.data() + at, n);
    while (true) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader, &raw) != REDIS_OK) {
        out.push_back(std::string("ERR ") + reader->errstr);
        return out;
      }
      if (raw == nullptr) break;
      out.push_back(render(take(raw)));
      drop(raw);
    }
    if (bytes.empty()) break;
  }
  return out;
}

std::vector<std::string> readDefault(const std::string& bytes, size_t step) {
  redisReader* reader = redisReaderCreate();
  auto out = readWith(
      reader, bytes, step, [](void* raw) { return static_cast<const redisReply*>(raw); },
      [](void* raw) { freeReplyObject(raw); });
  redisReaderFree(reader);
  return out;
}

std::vector<std::string> readArena(RedisReplyArena& arena, const std::string& bytes, size_t step) {
  auto reader = arena.makeReader();
  return readWith(
      reader.get(), bytes, step, [](void* raw) { return RedisReplyArena::reply(raw); },
      [&](void*) { arena.reset(); });
}

void expectSameReading(RedisReplyArena& arena, const std::string& bytes,
                       std::initializer_list<size_t> steps = {1, 3, 7}) {
  std::vector<size_t> all{bytes.size() + 1};
  all.insert(all.end(), steps);
  for (const size_t step : all) {
    EXPECT_EQ(readArena(arena, bytes, step), readDefault(bytes, step))
        << "bytes: " << bytes << " step " << step;
  }
}

TEST(RedisReplyArenaTest, EveryShapeReadsAsTheDefaultReaderReadsIt) {
  RedisReplyArena arena;
  const std::vector<std::string> streams = {
      "+OK\r\n",
      "-ERR unknown command 'X'\r\n",
      "-NOSCRIPT No matching script. Please use EVAL.\r\n",
      ":0\r\n:-1\r\n:9223372036854775807\r\n:-9223372036854775808\r\n",
      "$0\r\n\r\n",
      "$-1\r\n",
      "*-1\r\n",
      "*0\r\n",
      std::string("$9\r\nbin\0ary\r\n\r\n", 15),
      // The reserve's replies: unknown, admitted (requests only / both), wait, probe.
      "*2\r\n:0\r\n:0\r\n",
      "*4\r\n:1\r\n:0\r\n:41\r\n:-1\r\n",
      "*6\r\n:1\r\n:0\r\n:-1\r\n:-1\r\n:1000\r\n:59000\r\n",
      "*2\r\n:2\r\n:-1\r\n*2\r\n:3\r\n:0\r\n",
      // The open-state script, a pub/sub message, and a subscribe confirmation.
      "*2\r\n$21\r\n0123456789abcdef 1234\r\n:4999\r\n",
      "*2\r\n$0\r\n\r\n:-2\r\n",
      "*3\r\n$7\r\nmessage\r\n$14\r\nsluice:circuit\r\n$27\r\nabcd 0123456789abcdef open\r\n",
      "*3\r\n$9\r\nsubscribe\r\n$14\r\nsluice:circuit\r\n:1\r\n",
      // Nesting, nils and errors inside arrays, several replies in one read.
      "*3\r\n*2\r\n:1\r\n*1\r\n$-1\r\n-ERR inner\r\n*0\r\n+PONG\r\n:7\r\n",
      "*1\r\n*2\r\n*1\r\n*1\r\n:1\r\n:2\r\n",  // as deep as allowed (kMaxNesting)
      // Garbage from something that is not Redis.
      "HTTP/1.1 400 Bad Request\r\n",
      "$abc\r\n",
      "*x\r\n",
      "$3\r\nabcde\r\n",
      ":12\r\n?\r\n",
      "+OK\r\n\r\n",
      std::string("\0\0\0\r\n", 5),
  };
  for (const auto& bytes : streams) expectSameReading(arena, bytes);
}

// Whether every count and length in `bytes`, wherever a reader might take
// one (a damaged stream can turn any byte into a type), is within the arena's
// limits: an array count of at most kMaxArrayElements (and no negative one
// but the nil array's -1), a bulk length of at most kMaxBulkBytes.
bool countsWithinLimits(const std::string& bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '*' && bytes[i] != '$') continue;
    size_t j = i + 1;
    const bool negative = j < bytes.size() && bytes[j] == '-';
    if (negative) ++j;
    long long n = 0;
    int digits = 0;
    for (; j < bytes.size() && bytes[j] >= '0' && bytes[j] <= '9' && digits < 12; ++j, ++digits) {
      n = n * 10 + (bytes[j] - '0');
    }
    if (digits == 0) continue;
    if (bytes[i] == '*' && (negative ? n != 1 : n > RedisReplyArena::kMaxArrayElements)) {
      return false;
    }
    if (bytes[i] == '$' && !negative &&
        n > static_cast<long long>(RedisReplyArena::kMaxBulkBytes)) {
      return false;
    }
  }
  return true;
}

TEST(RedisReplyArenaTest, RandomStreamsReadAsTheDefaultReaderReadsThem) {
  // Valid replies, then damaged copies of them (a byte changed, dropped or
  // repeated), read whole and in slices. Every stream stays within the
  // arena's limits (refusals past them are the tests below): arrays nest at
  // most kMaxNesting deep (one damaged byte can add one level, so damaged
  // copies start one shallower), a few dozen values of at most 40 bytes per
  // reply, and a damaged copy whose counts could pass a limit is not used.
  std::mt19937 rng(20261126);
  const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    switch (pick(depth > 0 ? 7 : 6)) {
      case 0:
        return "+OK\r\n";
      case 1:
        return "-ERR e" + std::to_string(pick(100)) + "\r\n";
      case 2:
        return ":" + std::to_string(static_cast<int64_t>(rng()) - (1LL << 31)) + "\r\n";
      case 3: {
        std::string s(pick(40), 'x');
        for (char& c : s) c = static_cast<char>(pick(256));
        return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
      }
      case 4:
        return "$-1\r\n";
      case 5:
        return pick(2) == 0 ? "*-1\r\n" : "*0\r\n";
      default: {
        const size_t n = 1 + pick(6);
        std::string out = "*" + std::to_string(n) + "\r\n";
        for (size_t i = 0; i < n; ++i) out += value(depth - 1);
        return out;
      }
    }
  };
  RedisReplyArena arena;
  int skipped = 0;
  for (int round = 0; round < 2000; ++round) {
    const bool damaged = round % 2 == 1;
    const size_t max_arrays = RedisReplyArena::kMaxNesting - (damaged ? 1 : 0);
    std::string bytes;
    for (size_t i = 0, n = 1 + pick(4); i < n; ++i) {
      // value(d) nests arrays d + 1 deep (an empty array is one more level).
      bytes += value(static_cast<int>(pick(max_arrays)));
    }
    if (damaged && !bytes.empty()) {
      const size_t at = pick(bytes.size());
      switch (pick(3)) {
        case 0:
          bytes[at] = static_cast<char>(pick(256));
          break;
        case 1:
          bytes.erase(at, 1);
          break;
        default:
          bytes.insert(at, 1, bytes[at]);
      }
    }
    if (!countsWithinLimits(bytes)) {
      ++skipped;
      continue;
    }
    const size_t step = round % 3 == 0 ? bytes.size() + 1 : 1 + pick(9);
    ASSERT_EQ(readArena(arena, bytes, step), readDefault(bytes, step))
        << "round " << round << " bytes: " << bytes;
  }
  EXPECT_LT(skipped, 20) << "the damaged streams should mostly be read";
}

TEST(RedisReplyArenaTest, ValuesAreReusedAfterReset) {
  RedisReplyArena arena;
  auto reader = arena.makeReader();
  const std::string reply = "*4\r\n:1\r\n:0\r\n:41\r\n:-1\r\n";
  const redisReply* first = nullptr;
  for (int i = 0; i < 3; ++i) {
    redisReaderFeed(reader.get(), reply.data(), reply.size());
    void* raw = nullptr;
    ASSERT_EQ(redisReaderGetReply(reader.get(), &raw), REDIS_OK);
    ASSERT_NE(raw, nullptr);
    const redisReply* r = RedisReplyArena::reply(raw);
    EXPECT_EQ(arena.used(), 5u);
    ASSERT_EQ(r->elements, 4u);
    EXPECT_EQ(r->element[2]->integer, 41);
    if (first == nullptr) first = r;
    EXPECT_EQ(r, first);  // the same memory, reply after reply
    arena.reset();
    EXPECT_EQ(arena.used(), 0u);
  }
}

TEST(RedisReplyArenaTest, APartReadReplyKeepsItsValuesAcrossFeeds) {
  RedisReplyArena arena;
  auto reader = arena.makeReader();
  const std::string reply = "*3\r\n$5\r\nhello\r\n*1\r\n:2\r\n$-1\r\n";
  void* raw = nullptr;
  redisReaderFeed(reader.get(), reply.data(), 20);
  ASSERT_EQ(redisReaderGetReply(reader.get(), &raw), REDIS_OK);
  EXPECT_EQ(raw, nullptr);
  redisReaderFeed(reader.get(), reply.data() + 20, reply.size() - 20);
  ASSERT_EQ(redisReaderGetReply(reader.get(), &raw), REDIS_OK);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(render(RedisReplyArena::reply(raw)), "[3 1(5:hello) [1 i(2)] nil]");
}

TEST(RedisReplyArenaTest, AHugeArrayCountFailsTheReader) {
  // The default reader would reserve 16 GiB of element pointers for it; the
  // arena refuses (RedisClient then drops the connection, as on any error).
  RedisReplyArena arena;
  EXPECT_EQ(readArena(arena, "*2000000000\r\n", 100),
            std::vector<std::string>{"ERR Out of memory"});
  // Big but allowed: read, then given back on reset.
  std::string big = "*" + std::to_string(RedisReplyArena::kMaxArrayElements) + "\r\n";
  for (int i = 0; i < RedisReplyArena::kMaxArrayElements; ++i) big += ":1\r\n";
  big += "$5000\r\n" + std::string(5000, 'x') + "\r\n";
  EXPECT_EQ(readArena(arena, big, big.size()), readDefault(big, big.size()));
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_LE(arena.kept(), 32u);  // the 4098 values are not kept for the next reply
}

// --- the limits: each one at its value is read, one past it is refused -------

// `within` reads as the default reader reads it, whole and in slices, and
// `past` (which the default reader reads as one reply) fails the arena's
// reader as an allocation failure does; a reply after it reads again. (Slices
// of a few hundred bytes: hiredis rescans a bulk string at every feed.)
void expectLimit(const std::string& within, const std::string& past) {
  RedisReplyArena arena;
  expectSameReading(arena, within, {777, 4096});
  ASSERT_EQ(readDefault(past, past.size() + 1).size(), 1u) << "not one valid reply";
  for (const size_t step : {past.size() + 1, size_t{777}, size_t{4096}}) {
    EXPECT_EQ(readArena(arena, past, step), std::vector<std::string>{"ERR Out of memory"})
        << "step " << step;
  }
  EXPECT_EQ(readArena(arena, "+OK\r\n", 10), std::vector<std::string>{"5(2:OK)"});
}

std::string bulk(size_t n, char type = '$') {
  if (type != '$') return std::string(1, type) + std::string(n, 'v') + "\r\n";
  return "$" + std::to_string(n) + "\r\n" + std::string(n, 'v') + "\r\n";
}

std::string integers(size_t n) {
  std::string out = "*" + std::to_string(n) + "\r\n";
  for (size_t i = 0; i < n; ++i) out += ":" + std::to_string(i) + "\r\n";
  return out;
}

TEST(RedisReplyArenaTest, ABulkStringStatusOrErrorPastItsLimitIsRefused) {
  const size_t max = RedisReplyArena::kMaxBulkBytes;
  expectLimit(bulk(max), bulk(max + 1));
  expectLimit(bulk(max, '+'), bulk(max + 1, '+'));
  expectLimit(bulk(max, '-'), bulk(max + 1, '-'));
  // Inside an array as well.
  expectLimit("*2\r\n:1\r\n" + bulk(max), "*2\r\n:1\r\n" + bulk(max + 1));
}

TEST(RedisReplyArenaTest, AnArrayPastItsLimitIsRefused) {
  const size_t max = RedisReplyArena::kMaxArrayElements;
  expectLimit(integers(max), integers(max + 1));
  expectLimit("*1\r\n" + integers(max), "*1\r\n" + integers(max + 1));  // nested
}

TEST(RedisReplyArenaTest, ArraysNestedPastTheLimitAreRefused) {
  std::string within = ":1\r\n";
  for (int i = 0; i < RedisReplyArena::kMaxNesting; ++i) within = "*1\r\n" + within;
  expectLimit(within, "*1\r\n" + within);
  // Deep in the reply, after siblings.
  expectLimit("*2\r\n:0\r\n" + within.substr(4), "*2\r\n:0\r\n" + within);
}

TEST(RedisReplyArenaTest, TooManyValuesInOneReplyAreRefused) {
  // Each array within its own limit; the reply as a whole at, then past, the values limit:
  // the root, four arrays and their elements.
  const size_t max = RedisReplyArena::kMaxReplyValues;
  const size_t per = RedisReplyArena::kMaxArrayElements - 1;
  const size_t last = max - 5 - 3 * per;
  ASSERT_LT(last, per) << "the last array and the one past it must be within the array limit";
  const std::string head = "*4\r\n" + integers(per) + integers(per) + integers(per);
  const std::string within = head + integers(last);
  const std::string past = head + integers(last + 1);
  expectLimit(within, past);
  // Values are counted per reply: two replies of the limit in one read are both read.
  RedisReplyArena arena;
  EXPECT_EQ(readArena(arena, within + within, 1 << 20).size(), 2u);
}

TEST(RedisReplyArenaTest, TooManyStringBytesInOneReplyAreRefused) {
  // Every string within kMaxBulkBytes, their sum at, then past, kMaxReplyBytes.
  const size_t max = RedisReplyArena::kMaxReplyBytes;
  const size_t n = max / RedisReplyArena::kMaxBulkBytes;
  std::string head = "*" + std::to_string(n + 1) + "\r\n";
  for (size_t i = 0; i < n; ++i) head += bulk(RedisReplyArena::kMaxBulkBytes);
  expectLimit(head + bulk(0), head + bulk(1));
  expectLimit(head + "+\r\n", head + "-E\r\n");
  // Bytes are counted per reply: two replies of the limit in one read are both read.
  RedisReplyArena arena;
  const std::string within = head + bulk(0);
  EXPECT_EQ(readArena(arena, within + within, 1 << 20).size(), 2u);
}

TEST(RedisReplyArenaTest, AFreedReaderInTheMiddleOfAReplyLeavesTheArenaUsable) {
  RedisReplyArena arena;
  {
    auto reader = arena.makeReader();
    redisReaderFeed(reader.get(), "*2\r\n:1\r\n", 8);
    void* raw = nullptr;
    ASSERT_EQ(redisReaderGetReply(reader.get(), &raw), REDIS_OK);
    EXPECT_EQ(raw, nullptr);
  }
  EXPECT_EQ(readArena(arena, "*2\r\n:1\r\n:2\r\n", 100), readDefault("*2\r\n:1\r\n:2\r\n", 100));
}

}  // namespace
}  // namespace sluice
