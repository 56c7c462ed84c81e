// releaseStorage (common/release_storage.h): the value ends empty AND without
// the heap buffer it had, where assigning an empty value keeps the buffer.

#include "common/release_storage.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/http_message.h"

namespace sluice {
namespace {

TEST(ReleaseStorage, AStringGivesItsBufferBack) {
  std::string s(1000, 'x');
  std::string assigned = s;
  assigned = std::string{};
  // The pitfall releaseStorage exists for (libstdc++: an inline source keeps the target's buffer).
  EXPECT_TRUE(assigned.empty());
  EXPECT_GE(assigned.capacity(), 1000u);
  releaseStorage(s);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.capacity(), std::string().capacity());
}

TEST(ReleaseStorage, AVectorGivesItsBufferBack) {
  std::vector<int> v(100, 7);
  releaseStorage(v);
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(v.capacity(), 0u);
}

TEST(ReleaseStorage, ARequestHeadEndsEmptyAndUsable) {
  RequestHead head;
  head.method = "POST";
  head.path = "/v1/chat/completions?with=a-long-enough-query";
  head.headers.add("content-type", "application/json");
  head.headers.add("x-long", std::string(500, 'v'));
  releaseStorage(head);
  EXPECT_TRUE(head.method.empty());
  EXPECT_EQ(head.path.capacity(), std::string().capacity());
  EXPECT_EQ(head.headers.size(), 0u);
  EXPECT_FALSE(head.headers.has("content-type"));
  head.headers.add("host", "sluice");  // still a working map
  EXPECT_EQ(head.headers.get("host").value_or(""), "sluice");
}

}  // namespace
}  // namespace sluice
