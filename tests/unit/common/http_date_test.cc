// The Date field's text: IMF-fixdate, formatted once per second per thread.

#include "common/http_date.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "common/retry_after.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

SystemTime at(int64_t epoch_seconds) { return SystemTime(seconds(epoch_seconds)); }

TEST(HttpDateTest, FormatsImfFixdate) {
  EXPECT_EQ(formatImfFixdate(at(784111777)), "Sun, 06 Nov 1994 08:49:37 GMT");  // RFC 9110's
  EXPECT_EQ(formatImfFixdate(at(0)), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(formatImfFixdate(at(951782400)), "Tue, 29 Feb 2000 00:00:00 GMT");
  EXPECT_EQ(formatImfFixdate(at(4102444799)), "Thu, 31 Dec 2099 23:59:59 GMT");
  EXPECT_EQ(formatImfFixdate(at(784111777) + milliseconds(999)), "Sun, 06 Nov 1994 08:49:37 GMT");
}

TEST(HttpDateTest, ParsesBackToTheSameSecond) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const SystemTime t = at(rng() % 4102444800u);
    EXPECT_EQ(parseImfFixdate(formatImfFixdate(t)), t) << formatImfFixdate(t);
  }
}

TEST(HttpDateCacheTest, FormatsOncePerSecond) {
  HttpDateCache cache;
  const SystemTime t = at(784111777);
  EXPECT_EQ(cache.at(t), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(cache.at(t + milliseconds(400)), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(cache.at(t + milliseconds(999)), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(cache.formatted(), 1u);
  EXPECT_EQ(cache.at(t + seconds(1)), "Sun, 06 Nov 1994 08:49:38 GMT");
  EXPECT_EQ(cache.formatted(), 2u);
  EXPECT_EQ(cache.at(t), "Sun, 06 Nov 1994 08:49:37 GMT");  // a clock set back: formatted again
  EXPECT_EQ(cache.formatted(), 3u);
}

}  // namespace
}  // namespace sluice
