#include "proxy/http2_headers.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

std::string nvName(const nghttp2_nv& nv) {
  return std::string(reinterpret_cast<const char*>(nv.name), nv.namelen);
}
std::string nvValue(const nghttp2_nv& nv) {
  return std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen);
}

TEST(Http2HeadersTest, RequestPseudoHeadersBecomeTheRequestHead) {
  Http2RequestHeadBuilder b;
  b.add(":method", "POST");
  b.add(":scheme", "https");
  b.add(":authority", "api.example.com:8443");
  b.add(":path", "/v1/chat/completions?x=1");
  b.add("host", "ignored.example.com");
  b.add("content-type", "application/json");
  EXPECT_EQ(b.method(), "POST");
  EXPECT_EQ(b.scheme(), "https");
  const RequestHead head = b.finish();
  EXPECT_EQ(head.method, "POST");
  EXPECT_EQ(head.path, "/v1/chat/completions?x=1");
  EXPECT_EQ(head.pathOnly(), "/v1/chat/completions");
  EXPECT_EQ(head.version_major, 2);
  // :authority wins over a host field (RFC 9113 §8.3.1) and becomes the one host.
  EXPECT_EQ(head.headers.getAll("host").size(), 1u);
  EXPECT_EQ(head.headers.get("host").value_or(""), "api.example.com:8443");
  EXPECT_EQ(head.headers.get("content-type").value_or(""), "application/json");
  for (const auto& [name, value] : head.headers) EXPECT_NE(name.front(), ':') << name;
}

TEST(Http2HeadersTest, CookieCrumbsAreJoined) {
  Http2RequestHeadBuilder b;
  b.add(":method", "GET");
  b.add(":path", "/");
  b.add("cookie", "a=1");
  b.add("x", "y");
  b.add("cookie", "b=2");
  const RequestHead head = b.finish();
  EXPECT_EQ(head.headers.getAll("cookie").size(), 1u);
  EXPECT_EQ(head.headers.get("cookie").value_or(""), "a=1; b=2");
}

TEST(Http2HeadersTest, ResponseHasStatusFirstAndNoConnectionSpecificFields) {
  ResponseHead head;
  head.status = 503;
  head.reason = "Service Unavailable";  // HTTP/2 has no reason phrase
  head.headers.add("Content-Type", "application/problem+json");
  head.headers.add("connection", "keep-alive");
  head.headers.add("keep-alive", "timeout=5");
  head.headers.add("proxy-connection", "keep-alive");
  head.headers.add("transfer-encoding", "chunked");
  head.headers.add("upgrade", "h2c");
  head.headers.add("te", "trailers");
  head.headers.add("x-sluice-attempts", "2");
  std::string status;
  const auto nv = toHttp2ResponseNv(head, status);
  ASSERT_EQ(nv.size(), 3u);
  EXPECT_EQ(nvName(nv[0]), ":status");
  EXPECT_EQ(nvValue(nv[0]), "503");
  EXPECT_EQ(nvName(nv[1]), "content-type");  // lower-case
  EXPECT_EQ(nvValue(nv[1]), "application/problem+json");
  EXPECT_EQ(nvName(nv[2]), "x-sluice-attempts");
}

TEST(Http2HeadersTest, ConnectionSpecificFieldList) {
  for (const char* name :
       {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}) {
    EXPECT_TRUE(isHttp2ConnectionSpecificHeader(name)) << name;
  }
  for (const char* name : {"content-length", "content-type", "x-request-id", "trailer"}) {
    EXPECT_FALSE(isHttp2ConnectionSpecificHeader(name)) << name;
  }
}

}  // namespace
}  // namespace sluice
