#pragma once

// Builds a route's filter chain from one explicit, ordered table
// (filter_chain.cc). No self-registering factories: reading the table tells
// you every filter sluice runs and in which order (docs/design.md §1).

#include <array>
#include <cstddef>
#include <memory>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

#include "filters/filter.h"
#include "proxy/exchange/config_snapshot.h"

namespace sluice {

/**
 * One Exchange's filters, in table order, in one allocation: the chain is
 * built once per request, and six allocations (five filters and the vector
 * that held them) were a fifth of a request's (PROFILE.md, eighth round).
 * Iterates as `StreamFilter*`. Not copyable; moving keeps the filters where
 * they are.
 */
class FilterChain {
 public:
  /** How many filters the table has; a chain holds at most this many. */
  static constexpr size_t kMaxFilters = 7;

  FilterChain() = default;
  FilterChain(const FilterChain&) = delete;
  FilterChain& operator=(const FilterChain&) = delete;
  FilterChain(FilterChain&& other) noexcept { take(other); }
  FilterChain& operator=(FilterChain&& other) noexcept {
    if (this != &other) {
      clear();
      take(other);
    }
    return *this;
  }
  ~FilterChain() { clear(); }

  StreamFilter* const* begin() const { return filters_.data(); }
  StreamFilter* const* end() const { return filters_.data() + size_; }
  StreamFilter* operator[](size_t i) const { return filters_[i]; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /** Destroys the filters (in order, as a vector of owners did) and frees the block. */
  void clear();

  /**
   * A chain of `n` (at most kMaxFilters) filters of type `F`, the i-th
   * made by `make(i)`: not from the table (tests drive the chain runner
   * with fake filters this way).
   */
  template <typename F, typename Make>
  static FilterChain of(size_t n, Make make) {
    constexpr size_t kAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
    static_assert(alignof(F) <= kAlign, "a filter's alignment must fit the chain's block");
    constexpr size_t slot = (sizeof(F) + kAlign - 1) / kAlign * kAlign;
    FilterChain chain;
    if (n > kMaxFilters) n = kMaxFilters;
    chain.block_.reset(new std::byte[slot * n]);
    for (size_t i = 0; i < n; ++i) {
      chain.filters_[i] = new (chain.block_.get() + i * slot) F(make(i));
      ++chain.size_;
    }
    return chain;
  }

 private:
  friend FilterChain buildFilterChain(const RouteRuntime& route);

  void take(FilterChain& other) noexcept {
    block_ = std::move(other.block_);
    filters_ = other.filters_;
    size_ = std::exchange(other.size_, 0);
  }

  std::unique_ptr<std::byte[]> block_;  // the filters, constructed in place
  std::array<StreamFilter*, kMaxFilters> filters_{};
  size_t size_ = 0;
};

/** A fresh chain for one Exchange on `route`, in table order. */
FilterChain buildFilterChain(const RouteRuntime& route);

/** The filter names of the table, in order (for /config and tests). */
std::vector<std::string_view> filterChainNames();

}  // namespace sluice
