// toOriginForm: the absolute-form request target (RFC 9112 §3.2.2) becomes
// origin-form plus Host, with the URL rules http-parser's parser applied
// before llhttp (which has none).

#include "proxy/http/request_target.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sluice {
namespace {

struct Converted {
  bool ok;
  std::string path;
  std::string host;
};

Converted convert(const std::string& target) {
  RequestHead head;
  head.path = target;
  head.headers.add("host", "received");
  const bool ok = toOriginForm(head);
  return {ok, head.path, std::string(head.headers.get("host").value_or(""))};
}

TEST(RequestTargetTest, OriginFormAndAsteriskAreLeftAlone) {
  for (const std::string target : {"/", "/v1/x?y=1", "*", ""}) {
    const Converted c = convert(target);
    EXPECT_TRUE(c.ok) << target;
    EXPECT_EQ(c.path, target);
    EXPECT_EQ(c.host, "received");
  }
}

TEST(RequestTargetTest, AbsoluteFormBecomesPathAndHost) {
  struct Case {
    const char* target;
    const char* path;
    const char* host;
  };
  for (const Case& c : {
           Case{"http://api.example:8080/echo/abs?q=1", "/echo/abs?q=1", "api.example:8080"},
           Case{"HTTPS://api.example?q=2", "/?q=2", "api.example"},
           Case{"http://h", "/", "h"},
           Case{"http://h/", "/", "h"},
           Case{"http://h/a#frag", "/a", "h"},
           Case{"http://h#frag", "/", "h"},
           Case{"http://h?", "/", "h"},
           Case{"http://h/p?a?b", "/p?a?b", "h"},
           Case{"http://my_host-1.example/p", "/p", "my_host-1.example"},
           Case{"http://[::1]:8080/p", "/p", "[::1]:8080"},
           Case{"http://[fe80::1%25eth0]/p", "/p", "[fe80::1%25eth0]"},
           Case{"http://h:65535/p", "/p", "h:65535"},
       }) {
    const Converted got = convert(c.target);
    EXPECT_TRUE(got.ok) << c.target;
    EXPECT_EQ(got.path, c.path) << c.target;
    EXPECT_EQ(got.host, c.host) << c.target;
  }
}

TEST(RequestTargetTest, WhatSluiceCannotUseIsRefusedUnchanged) {
  for (const std::string target : {
           "ftp://t/echo/x",      // not http(s)
           "http://user@t/x",     // userinfo
           "http://user:pw@t/x",  // userinfo
           "http:///x",           // no host
           "http://:80/x",        // no host
           "http://h:/x",         // an empty port
           "http://h:65536/x",    // a port out of range
           "http://h:8o/x",       // not a port
           "http://h!/x",         // not a host character
           "http://[]/x",         // an empty IPv6 literal
           "http://[::1/x",       // an unclosed IPv6 literal
           "http://[::g]/x",      // not an IPv6 literal
           "http://[::1]x/x",     // something after the literal that is no port
           "http:/h/x",           // no "//"
           "h?x://h/x",           // not a scheme
           "example.com:443",     // authority-form (CONNECT's)
       }) {
    const Converted c = convert(target);
    EXPECT_FALSE(c.ok) << target;
    EXPECT_EQ(c.path, target);
    EXPECT_EQ(c.host, "received");
  }
}

std::pair<PathNormalization, std::string> normalized(std::string target) {
  const PathNormalization what = normalizePath(target);
  return {what, target};
}

TEST(NormalizePathTest, DotSegmentsAreResolvedAndTheQueryIsLeftAlone) {
  using N = PathNormalization;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/chat/completions/../../files", "/v1/files"},
      {"/v1/chat/completions/%2e%2e/%2E%2e/files", "/v1/files"},
      {"/v1/chat/completions/.%2e/%2E./files", "/v1/files"},
      {"/v1/./chat/./completions", "/v1/chat/completions"},
      {"/v1/%2e/chat", "/v1/chat"},
      {"/a/b/..", "/a/"},
      {"/a/b/.", "/a/b/"},
      {"/a/..", "/"},
      {"/a/../", "/"},
      {"/.", "/"},
      {"/./", "/"},
      {"/a/../b/../c?x=/../../y&z=%2e%2e", "/c?x=/../../y&z=%2e%2e"},
      {"/a//../b", "/a/b"},  // ".." drops the empty segment before it
  };
  for (const auto& [in, out] : cases) {
    EXPECT_EQ(normalized(in), std::make_pair(N::Normalized, out)) << in;
  }
}

TEST(NormalizePathTest, PathsWithoutDotSegmentsAreUnchanged) {
  for (const std::string target : {
           "/v1/chat/completions",
           "/",
           "*",
           "/v1/models/gpt-4.1",
           "/a/.../b",
           "/a/..b/c",
           "/a/b..",
           "/a/.hidden",
           "/a%2eb/c",
           "/a/%2e%2e%2e/b",
           "/a/%2f../b",
           "/a/%252e%252e/b",
           "/a/%2/b",
           "/a/.%2",
           "/a?q=/../..",
           "/a/b/?/../..",
           "",
       }) {
    EXPECT_EQ(normalized(target), std::make_pair(PathNormalization::Unchanged, target)) << target;
  }
}

TEST(NormalizePathTest, ClimbingAboveTheRootIsRefused) {
  for (const std::string target : {"/..", "/../", "/../v1/files", "/%2e%2e/x", "/%2E%2E",
                                   "/a/../..", "/a/b/../../../c", "/./../x?q=1"}) {
    std::string copy = target;
    EXPECT_EQ(normalizePath(copy), PathNormalization::AboveRoot) << target;
  }
}

}  // namespace
}  // namespace sluice
