#include "common/fifo.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace sluice {
namespace {

struct Record {
  uint64_t a;
  uint64_t b;
};

std::vector<uint64_t> contents(const Fifo<Record>& f) {
  std::vector<uint64_t> out;
  for (const Record& r : f) out.push_back(r.a);
  return out;
}

TEST(FifoTest, FirstInFirstOut) {
  Fifo<Record> f;
  EXPECT_TRUE(f.empty());
  for (uint64_t i = 0; i < 5; ++i) f.push_back({i, i * 10});
  EXPECT_EQ(f.size(), 5u);
  EXPECT_EQ(f.front().a, 0u);
  EXPECT_EQ(f.back().b, 40u);
  EXPECT_EQ(f[2].a, 2u);
  f.pop_front();
  f.pop_front();
  EXPECT_EQ(contents(f), (std::vector<uint64_t>{2, 3, 4}));
  std::vector<uint64_t> reversed;
  for (auto it = f.rbegin(); it != f.rend(); ++it) reversed.push_back(it->a);
  EXPECT_EQ(reversed, (std::vector<uint64_t>{4, 3, 2}));
  f.back().b = 7;
  EXPECT_EQ(f[2].b, 7u);
}

TEST(FifoTest, EmptiedByPopsAndRefilled) {
  Fifo<Record> f;
  f.push_back({1, 0});
  f.pop_front();
  EXPECT_TRUE(f.empty());
  EXPECT_EQ(f.begin(), f.end());
  f.push_back({2, 0});
  EXPECT_EQ(contents(f), (std::vector<uint64_t>{2}));
}

TEST(FifoTest, SwapExchangesContentsAndPoppedPrefix) {
  Fifo<Record> a;
  Fifo<Record> b;
  for (uint64_t i = 0; i < 4; ++i) a.push_back({i, 0});
  a.pop_front();
  b.push_back({9, 0});
  a.swap(b);
  EXPECT_EQ(contents(a), (std::vector<uint64_t>{9}));
  EXPECT_EQ(contents(b), (std::vector<uint64_t>{1, 2, 3}));
}

// Interleaved pushes and pops across many compactions agree with std::deque.
TEST(FifoTest, MatchesADequeThroughCompactions) {
  std::mt19937 rng(42);
  Fifo<Record> f;
  std::deque<uint64_t> ref;
  uint64_t next = 0;
  for (int step = 0; step < 20000; ++step) {
    if (ref.empty() || rng() % 100 < 55) {
      f.push_back({next, 0});
      ref.push_back(next++);
    } else {
      ASSERT_EQ(f.front().a, ref.front());
      f.pop_front();
      ref.pop_front();
    }
    ASSERT_EQ(f.size(), ref.size());
    if (!ref.empty()) {
      ASSERT_EQ(f.back().a, ref.back());
      ASSERT_EQ(f[ref.size() / 2].a, ref[ref.size() / 2]);
    }
  }
  EXPECT_EQ(contents(f), std::vector<uint64_t>(ref.begin(), ref.end()));
}

}  // namespace
}  // namespace sluice
