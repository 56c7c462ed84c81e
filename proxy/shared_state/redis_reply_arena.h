#pragma once

// Reply objects for hiredis's reader, built in memory that is reused from one
// reply to the next (docs/design.md §6, PROFILE.md "Sixth round").
//
// hiredis's default reader allocates a `redisReply` per value and another
// block for each array's element vector, and freeReplyObject frees them all:
// a reserve's reply {1, 0, avail, reset_in} was six callocs and six frees per
// request. RedisClient hands each reply to its callback and drops it before
// it reads the next, so one arena per reader holds at most one reply tree
// (plus the part of the next one read so far): the reader builds through
// hiredis's own hook for that (`redisReplyObjectFunctions`), the values are
// the same `redisReply` structs callers already read, and reset() recycles
// them. hiredis still does all the parsing.
//
// Not thread-safe: one arena per reader, on the reader's thread.

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <vector>

namespace sluice {

class RedisReplyArena {
 public:
  struct ReaderDeleter {
    void operator()(redisReader* r) const { redisReaderFree(r); }
  };
  using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

  /**
   * What one reply may hold; past any of these the reader fails (as on a
   * failed allocation) and RedisClient drops the connection. No reply of
   * sluice's scripts has more than six values or one level of arrays.
   */
  static constexpr size_t kMaxBulkBytes = 64 * 1024;  // one string, status or error
  static constexpr int kMaxArrayElements = 4096;
  static constexpr int kMaxNesting = 4;  // arrays within arrays (the outermost is 1)
  static constexpr size_t kMaxReplyValues = 16384;
  // Every string, status and error of one reply together: without it the
  // limits above would let one reply hold 16384 x 64 KiB.
  static constexpr size_t kMaxReplyBytes = 256 * 1024;

  RedisReplyArena() = default;
  RedisReplyArena(const RedisReplyArena&) = delete;
  RedisReplyArena& operator=(const RedisReplyArena&) = delete;

  /**
   * A reader whose replies are built in this arena. The arena must outlive
   * it, and serves one reader at a time (reset() recycles everything).
   */
  ReaderPtr makeReader();

  /** The reply that redisReaderGetReply returned as `obj` (non-null). */
  static const redisReply* reply(void* obj);

  /**
   * Every reply built so far is gone (views into them dangle); their memory
   * serves the next. Call it between two complete replies only: a reply read
   * in part would lose what it built. Memory beyond a small reply's needs
   * (a hostile or huge reply) is given back here.
   */
  void reset();

  /** Values built since the last reset, and values kept for reuse (tests). */
  size_t used() const { return used_; }
  size_t kept() const { return nodes_.size(); }

 private:
  // One value. `reply.element` points into `elements`, `reply.str` into `text`.
  struct Node {
    redisReply reply{};
    std::vector<redisReply*> elements;
    std::string text;
  };

  // Past these sizes, memory goes back to the allocator on reset(): a usual
  // reply is a handful of values of a few bytes each.
  static constexpr size_t kKeepNodes = 32;
  static constexpr size_t kKeepBytes = 1024;
  static constexpr size_t kKeepElements = 64;

  static RedisReplyArena& rootArena(const redisReadTask* task);
  /** A fresh value of `type` for `task`, linked into its parent array. */
  static Node* take(const redisReadTask* task, int type);

  static redisReplyObjectFunctions functions_;
  static void* createString(const redisReadTask* task, char* str, size_t len);
  static void* createArray(const redisReadTask* task, int elements);
  static void* createInteger(const redisReadTask* task, long long value);
  static void* createNil(const redisReadTask* task);
  static void freeObject(void* obj);

  std::vector<std::unique_ptr<Node>> nodes_;  // [0, used_) in use
  size_t used_ = 0;
  size_t bytes_ = 0;        // string bytes built since the last reset
  bool oversized_ = false;  // something to give back on reset()
};

}  // namespace sluice
