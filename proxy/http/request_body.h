#pragma once

// A request's body as sluice holds it, and the process-wide cap on all of them.
//
// A body that a retry may have to replay is buffered whole before the first
// attempt: one contiguous allocation, which the filters read as one string
// (spend meter, throttle estimate). A body no retry can replay (README
// "Decisions": above the route's `retry.max_body`, or a request that is not
// retry-safe and above kAlwaysBufferedBytes) is streamed instead: the attempt
// starts, new bytes go into small blocks, and each block is freed once the
// upstream transport has taken all of it. The owner (the Exchange) decides
// which; this class only stores and counts.
//
// Every byte held counts against `limits.max_buffered_body_bytes` through one
// BodyMemory shared by every worker (an atomic counter, carried over by a
// reload like the circuit breakers), so a burst of big uploads is refused
// with 503 `overloaded` instead of growing the process without bound.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace prometheus {
class Gauge;
}

namespace sluice {

/**
 * Request body bytes held by the whole process, against a cap. Thread-safe
 * and lock-free; one per process (ConfigSnapshot shares it across reloads).
 */
class BodyMemory {
 public:
  /** `gauge` (may be null) mirrors used(): sluice_request_body_buffered_bytes. */
  explicit BodyMemory(prometheus::Gauge* gauge = nullptr) : gauge_(gauge) {}
  BodyMemory(const BodyMemory&) = delete;
  BodyMemory& operator=(const BodyMemory&) = delete;

  /** Adds `bytes` unless the total would pass `cap`; false (nothing added) then. */
  bool tryReserve(uint64_t bytes, uint64_t cap);
  /** Gives back bytes added by tryReserve. */
  void release(uint64_t bytes);
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> used_{0};
  prometheus::Gauge* gauge_;
};

/** Body blocks of this size or more are mapped on their own (BodyBlockAllocator). */
constexpr size_t kMappedBodyBlockBytes = 256 * 1024;
/** BodyBlockAllocator's storage: mapped at or above kMappedBodyBlockBytes, else operator new. */
void* allocateBodyBlock(size_t bytes);
void freeBodyBlock(void* p, size_t bytes);

/**
 * The allocator of request body blocks: a block of kMappedBodyBlockBytes or more gets
 * its own anonymous mapping, unmapped the moment it is freed, so a burst of
 * big uploads leaves nothing resident once the bodies are gone
 * whatever the process's malloc keeps for reuse (mimalloc holds freed spans
 * until the thread allocates again; glibc needs its mmap threshold pinned,
 * Server does that). Smaller blocks come from malloc as before.
 */
template <class T>
struct BodyBlockAllocator {
  using value_type = T;

  BodyBlockAllocator() = default;
  template <class U>
  BodyBlockAllocator(const BodyBlockAllocator<U>&) {}

  T* allocate(size_t n) { return static_cast<T*>(allocateBodyBlock(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { freeBodyBlock(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const BodyBlockAllocator<U>&) const {
    return true;
  }
};

using BodyBlock = std::basic_string<char, std::char_traits<char>, BodyBlockAllocator<char>>;

class RequestBody {
 public:
  /** Blocks of a streamed body: small enough to be freed one by one as they are sent. */
  static constexpr size_t kBlockBytes = 64 * 1024;

  /** Unaccounted (tests); otherwise every byte held is reserved from `memory` up to `cap`. */
  RequestBody() = default;
  RequestBody(BodyMemory* memory, uint64_t cap) : memory_(memory), cap_(cap) {}
  ~RequestBody();
  RequestBody(const RequestBody&) = delete;
  RequestBody& operator=(const RequestBody&) = delete;

  /** The request's Content-Length, when it declared one (the upstream gets the same framing). */
  void declareLength(uint64_t bytes) { declared_ = bytes; }
  std::optional<uint64_t> declaredLength() const { return declared_; }

  /**
   * Reserves room for a whole buffered body up front (its declared length),
   * so a body that would pass the cap is refused before any of it is read;
   * also sizes its storage once. False when the cap refuses.
   */
  bool reserveWhole(uint64_t bytes);
  /** Appends; false (nothing appended) when the cap refuses the bytes. */
  bool append(const char* data, size_t len);
  /** The last byte is in. */
  void markComplete() { complete_ = true; }
  bool complete() const { return complete_; }

  /** From now on the body is streamed: new bytes go to blocks, sent blocks may be freed. */
  void startStreaming() {
    streaming_ = true;
    tail_open_ = false;  // the buffered part stays one block, freed once all of it was sent
  }
  bool streaming() const { return streaming_; }

  /** Bytes received so far (the offset just past the last one). */
  uint64_t size() const { return size_; }
  /** Bytes held in memory now. */
  uint64_t held() const { return size_ - base_; }
  /** True while nothing was freed: an attempt may read it again from offset 0. */
  bool replayable() const { return base_ == 0; }

  /**
   * The bytes held from the start, as one view: the whole body while it is
   * buffered, the first block of a streamed one (what the filters see).
   */
  std::string_view prefix() const;
  /** Contiguous bytes from `offset` to the end of its block; empty if none (yet). */
  std::string_view peek(uint64_t offset) const;
  /** Streaming: frees every block that lies wholly below `offset` (sent). */
  void discardBefore(uint64_t offset);
  /**
   * A complete body nothing will read again (the transport took all of it
   * and no retry can replay it): frees every byte held. size(), complete()
   * and the declared length stay, for the transport's framing.
   */
  void releaseAll();

 private:
  bool reserveHeld(uint64_t held);
  void releaseUnheld();

  BodyMemory* memory_ = nullptr;
  uint64_t cap_ = 0;
  uint64_t reserved_ = 0;  // bytes reserved from memory_
  std::optional<uint64_t> declared_;
  bool complete_ = false;
  bool streaming_ = false;
  bool tail_open_ = true;  // new bytes may go into the last block
  // blocks_[front_..] hold bytes [base_, size_). Buffered: one block.
  std::vector<BodyBlock> blocks_;
  size_t front_ = 0;
  uint64_t base_ = 0;
  uint64_t size_ = 0;
};

/**
 * The Content-Length an upstream request carries for `body`: its size once
 * complete (none for an empty body of GET, HEAD, DELETE or OPTIONS, which
 * have none), its declared length while it streams, nullopt when that is
 * unknown too (HTTP/1.1 then chunks it; HTTP/2 ends it with END_STREAM).
 */
std::optional<uint64_t> upstreamContentLength(std::string_view method, const RequestBody& body);

}  // namespace sluice
