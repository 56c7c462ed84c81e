#pragma once

// A FIFO of small trivially-copyable records that allocates nothing until its
// first push. libstdc++'s std::deque allocates a 512-byte node and its map
// when it is constructed, empty or not: two of them in every stream (the
// HTTP/1.1 output pieces, the spend meter's pending deltas) were ~1 KiB of
// the ~10 KiB heap per held SSE stream (bench/results/PROFILE.md, massif).
// Popped records stay in the vector until the dead prefix is at least half
// of it, then it is compacted, so pushes and pops are amortised O(1).

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice {

template <typename T>
class Fifo {
  static_assert(std::is_trivially_copyable_v<T>, "popped records are dropped, not destroyed");

 public:
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }

  T& front() { return items_[head_]; }
  const T& front() const { return items_[head_]; }
  T& back() { return items_.back(); }
  const T& back() const { return items_.back(); }
  /** The i-th record from the front. */
  const T& operator[](size_t i) const { return items_[head_ + i]; }

  auto begin() const { return items_.begin() + static_cast<std::ptrdiff_t>(head_); }
  auto end() const { return items_.end(); }
  auto rbegin() const { return items_.rbegin(); }
  auto rend() const { return std::make_reverse_iterator(begin()); }

  void push_back(const T& item) { items_.push_back(item); }

  void pop_front() {
    ++head_;
    if (head_ == items_.size()) {
      clear();  // keeps the capacity: the common pattern refills it
    } else if (head_ >= kCompactAfter && head_ * 2 >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

  void clear() {
    items_.clear();
    head_ = 0;
  }

  void swap(Fifo& other) noexcept {
    items_.swap(other.items_);
    std::swap(head_, other.head_);
  }

 private:
  static constexpr size_t kCompactAfter = 16;

  std::vector<T> items_;
  size_t head_ = 0;  // items_[0, head_) are popped
};

}  // namespace sluice
