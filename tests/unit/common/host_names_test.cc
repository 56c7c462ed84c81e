// Host names out of Host and Origin values (the DNS rebinding checks).

#include "common/host_names.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(HostNamesTest, HostOfAuthority) {
  EXPECT_EQ(hostOfAuthority("Example.COM:8080")->name, "example.com");
  EXPECT_EQ(hostOfAuthority("[::1]:80")->name, "::1");
  EXPECT_TRUE(hostOfAuthority("[::1]")->bracketed);
  EXPECT_EQ(hostOfAuthority("127.0.0.1")->name, "127.0.0.1");
  EXPECT_FALSE(hostOfAuthority(""));
  EXPECT_FALSE(hostOfAuthority("a:"));
  EXPECT_FALSE(hostOfAuthority("a:b:c"));
  EXPECT_FALSE(hostOfAuthority("[::1"));
  EXPECT_FALSE(hostOfAuthority("[::1]x"));
  EXPECT_FALSE(hostOfAuthority("host:123456"));
}

TEST(HostNamesTest, HostOfOrigin) {
  EXPECT_EQ(hostOfOrigin("http://localhost:6274")->name, "localhost");
  EXPECT_EQ(hostOfOrigin("https://Tools.Example")->name, "tools.example");
  EXPECT_EQ(hostOfOrigin("http://[::1]:3000")->name, "::1");
  EXPECT_FALSE(hostOfOrigin("null"));
  EXPECT_FALSE(hostOfOrigin("localhost"));
  EXPECT_FALSE(hostOfOrigin("://localhost"));
  EXPECT_FALSE(hostOfOrigin("http://user@evil.example"));
}

TEST(HostNamesTest, WhatIsAllowed) {
  const std::vector<std::string> allowed = {"sluice"};
  const auto allowedHost = [&](std::string_view authority) {
    const auto host = hostOfAuthority(authority);
    return host && isAllowedHost(*host, allowed);
  };
  EXPECT_TRUE(allowedHost("localhost:8080"));
  EXPECT_TRUE(allowedHost("127.0.0.1:8080"));
  EXPECT_TRUE(allowedHost("[::1]:8080"));
  EXPECT_TRUE(allowedHost("[fe80::1%eth0]"));
  EXPECT_TRUE(allowedHost("192.168.1.20"));
  EXPECT_TRUE(allowedHost("SLUICE:8080"));
  EXPECT_FALSE(allowedHost("evil.example.com"));
  EXPECT_FALSE(allowedHost("localhost.evil.example.com"));
  EXPECT_FALSE(allowedHost("127.0.0.1.nip.io"));
  EXPECT_FALSE(allowedHost("::1"));  // an IPv6 literal in Host is bracketed
}

}  // namespace
}  // namespace sluice
