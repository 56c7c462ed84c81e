// common/http_message.h: the rules both codecs share.

#include "common/http_message.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(MayHaveBodyTest, NoResponseToHeadAnd1xx204304EverHasContent) {
  EXPECT_TRUE(mayHaveBody(false, 200));
  EXPECT_TRUE(mayHaveBody(false, 404));
  EXPECT_TRUE(mayHaveBody(false, 205));  // 205 is not on the list (it may say Content-Length: 0)
  EXPECT_FALSE(mayHaveBody(true, 200));
  EXPECT_FALSE(mayHaveBody(false, 100));
  EXPECT_FALSE(mayHaveBody(false, 199));
  EXPECT_FALSE(mayHaveBody(false, 204));
  EXPECT_FALSE(mayHaveBody(false, 304));
}

}  // namespace
}  // namespace sluice
