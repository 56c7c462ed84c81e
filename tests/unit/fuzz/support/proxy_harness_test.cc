// The fuzz harness itself (fuzz/support/proxy_harness.h) must reach the code
// it claims to fuzz: a request through HTTP/1.1 and one through HTTP/2 get
// the loopback upstream's answer, a request no route matches gets sluice's
// 404, and every run leaves nothing behind (the next one starts clean).

#include "fuzz/support/proxy_harness.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "fuzz/support/fuzz_input.h"

namespace sluice::fuzz {
namespace {

std::string seed(const std::string& target, const std::string& name) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/fuzz/corpus/" + target + "/" + name,
                   std::ios::binary);
  EXPECT_TRUE(in.good()) << target << "/" << name;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(ProxyHarness, Http1RequestReachesTheUpstreamAndBack) {
  ProxyHarness harness(kFuzzRoutes);
  harness.setUpstreamResponse(std::string(kSseAnswer));
  harness.runClient(seed("http1_request", "post-chat"), 0);
  const std::string& got = harness.clientReceived();
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos) << got;
  EXPECT_NE(got.find("x-sluice-attempts: 1"), std::string::npos) << got;
}

TEST(ProxyHarness, SlicedInputGivesTheSameAnswer) {
  ProxyHarness harness(kFuzzRoutes);
  harness.setUpstreamResponse(std::string(kSseAnswer));
  const std::string input = seed("http1_request", "post-chunked") + "\x82";  // slices of 3
  const SplitInput split = splitControl(input);
  ASSERT_EQ(split.slice, 3u);
  harness.runClient(split.stream, split.slice);
  EXPECT_NE(harness.clientReceived().find("data: [DONE]"), std::string::npos)
      << harness.clientReceived();
}

TEST(ProxyHarness, NoRouteIsAnswered404AndRunsAreIndependent) {
  ProxyHarness harness(kFuzzRoutes);
  harness.setUpstreamResponse(std::string(kSseAnswer));
  harness.runClient("GET /elsewhere HTTP/1.1\r\nhost: s\r\n\r\n", 0);
  EXPECT_EQ(harness.clientReceived().rfind("HTTP/1.1 404 ", 0), 0u) << harness.clientReceived();
  harness.runClient("GET /v1/models HTTP/1.1\r\nhost: s\r\n\r\n", 0);
  EXPECT_EQ(harness.clientReceived().rfind("HTTP/1.1 200 OK\r\n", 0), 0u)
      << harness.clientReceived();
}

TEST(ProxyHarness, Http2RequestReachesTheUpstreamAndBack) {
  ProxyHarness harness(kFuzzRoutes);
  harness.setUpstreamResponse(std::string(kJsonAnswer));
  harness.runClient(seed("http2_frames", "post-chat"), 0);
  // The JSON body comes back in DATA frames, byte for byte.
  EXPECT_NE(harness.clientReceived().find("\"total_tokens\":12}}"), std::string::npos)
      << harness.clientReceived().size();
}

}  // namespace
}  // namespace sluice::fuzz
