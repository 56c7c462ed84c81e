#include "proxy/http/request_body.h"

#include <prometheus/gauge.h>
#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace sluice {

void* allocateBodyBlock(size_t bytes) {
  if (bytes < kMappedBodyBlockBytes) return ::operator new(bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void freeBodyBlock(void* p, size_t bytes) {
  if (bytes < kMappedBodyBlockBytes) {
    ::operator delete(p);
    return;
  }
  munmap(p, bytes);
}

bool BodyMemory::tryReserve(uint64_t bytes, uint64_t cap) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > cap || used > cap - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  if (gauge_ != nullptr) gauge_->Increment(static_cast<double>(bytes));
  return true;
}

void BodyMemory::release(uint64_t bytes) {
  used_.fetch_sub(bytes, std::memory_order_relaxed);
  if (gauge_ != nullptr) gauge_->Decrement(static_cast<double>(bytes));
}

RequestBody::~RequestBody() {
  if (memory_ != nullptr && reserved_ > 0) memory_->release(reserved_);
}

bool RequestBody::reserveHeld(uint64_t held) {
  if (held <= reserved_) return true;
  if (memory_ != nullptr && !memory_->tryReserve(held - reserved_, cap_)) return false;
  reserved_ = held;
  return true;
}

void RequestBody::releaseUnheld() {
  if (reserved_ <= held()) return;
  if (memory_ != nullptr) memory_->release(reserved_ - held());
  reserved_ = held();
}

bool RequestBody::reserveWhole(uint64_t bytes) {
  if (!reserveHeld(bytes)) return false;
  if (!streaming_) {
    if (blocks_.empty()) blocks_.emplace_back();
    blocks_.back().reserve(bytes);  // one allocation, no growth copies
  }
  return true;
}

bool RequestBody::append(const char* data, size_t len) {
  if (len == 0) return true;
  if (!reserveHeld(held() + len)) return false;
  size_ += len;
  if (!streaming_) {
    if (blocks_.empty()) blocks_.emplace_back();
    blocks_.back().append(data, len);
    return true;
  }
  while (len > 0) {
    if (!tail_open_ || front_ == blocks_.size() || blocks_.back().size() >= kBlockBytes) {
      blocks_.emplace_back();
      blocks_.back().reserve(kBlockBytes);
      tail_open_ = true;
    }
    BodyBlock& tail = blocks_.back();
    const size_t n = std::min(len, kBlockBytes - tail.size());
    tail.append(data, n);
    data += n;
    len -= n;
  }
  return true;
}

std::string_view RequestBody::prefix() const {
  if (base_ != 0 || front_ >= blocks_.size()) return {};
  return blocks_[front_];
}

std::string_view RequestBody::peek(uint64_t offset) const {
  if (offset < base_ || offset >= size_) return {};
  uint64_t start = base_;
  for (size_t i = front_; i < blocks_.size(); ++i) {
    const BodyBlock& block = blocks_[i];
    if (offset < start + block.size()) {
      return std::string_view(block).substr(static_cast<size_t>(offset - start));
    }
    start += block.size();
  }
  return {};
}

void RequestBody::discardBefore(uint64_t offset) {
  if (!streaming_) return;  // a buffered body stays whole for replays
  while (front_ < blocks_.size() && base_ + blocks_[front_].size() <= offset) {
    base_ += blocks_[front_].size();
    BodyBlock().swap(blocks_[front_]);  // the memory goes now, not at compaction
    ++front_;
  }
  if (front_ == blocks_.size()) {
    blocks_.clear();
    front_ = 0;
    tail_open_ = false;
  } else if (front_ >= 16 && front_ * 2 >= blocks_.size()) {
    blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(front_));
    front_ = 0;
  }
  releaseUnheld();
}

void RequestBody::releaseAll() {
  base_ = size_;
  std::vector<BodyBlock>().swap(blocks_);
  front_ = 0;
  tail_open_ = false;
  releaseUnheld();
}

std::optional<uint64_t> upstreamContentLength(std::string_view method, const RequestBody& body) {
  if (!body.complete()) return body.declaredLength();
  if (body.size() == 0 &&
      (method == "GET" || method == "HEAD" || method == "DELETE" || method == "OPTIONS")) {
    return std::nullopt;
  }
  return body.size();
}

}  // namespace sluice
