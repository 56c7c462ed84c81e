// Who may use the admin port (proxy/server/admin_access.h), as a table: the Host
// must name this admin port (DNS rebinding), a foreign Origin or a
// cross-site Sec-Fetch-Site is refused, and a POST must be one a web page
// cannot send without a CORS preflight. The binary is tested in
// tests/integration/security_test.cc.

#include "proxy/server/admin_access.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(AdminAccessTest, AcceptsLocalhostIpLiteralsTheAdminHostAndAllowedNames) {
  const AdminAccessPolicy loopback{"127.0.0.1", {}};
  const AdminAccessPolicy wildcard{"0.0.0.0", {"sluice", "sluice-admin.monitoring.svc"}};
  const AdminAccessPolicy named{"admin.internal", {}};
  struct Case {
    const AdminAccessPolicy& policy;
    const char* host;
    bool allowed;
  };
  const Case cases[] = {
      {loopback, "127.0.0.1:9901", true},
      {loopback, "127.0.0.1", true},
      {loopback, "localhost:9901", true},
      {loopback, "LOCALHOST", true},
      {loopback, "[::1]:9901", true},
      {loopback, "[::1]", true},
      {loopback, "10.1.2.3:9901", true},  // an IP literal is never a rebinding name
      {wildcard, "172.18.0.4:9901", true},
      {wildcard, "[fd00::4]:9901", true},
      {wildcard, "sluice:9901", true},
      {wildcard, "Sluice", true},
      {wildcard, "sluice-admin.monitoring.svc:80", true},
      {named, "admin.internal:9901", true},
      // DNS rebinding: the browser sends the attacker's name.
      {loopback, "attacker.example:9901", false},
      {loopback, "attacker.example", false},
      {wildcard, "sluice.attacker.example", false},
      {loopback, "localhost.attacker.example", false},
      {loopback, "evil.localhost", false},
      {loopback, "127.0.0.1.nip.io", false},
      // Malformed.
      {loopback, "", false},
      {loopback, ":9901", false},
      {loopback, "127.0.0.1:", false},
      {loopback, "127.0.0.1:99x", false},
      {loopback, "::1", false},  // IPv6 needs brackets
      {loopback, "[::1", false},
      {loopback, "[::1]x", false},
      {loopback, "[attacker.example]", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(isAllowedAdminHost(c.policy, c.host), c.allowed) << c.host;
  }
}

TEST(AdminAccessTest, RefusesWhatAWebPageCouldSend) {
  const AdminAccessPolicy policy{"127.0.0.1", {}};
  const auto refused = [&](AdminRequestHeaders h) { return refuseAdminRequest(policy, h); };
  AdminRequestHeaders get;
  get.hosts = {"127.0.0.1:9901"};
  EXPECT_EQ(refused(get), std::nullopt);

  AdminRequestHeaders no_host = get;
  no_host.hosts.clear();
  EXPECT_NE(refused(no_host), std::nullopt);
  AdminRequestHeaders two_hosts = get;
  two_hosts.hosts = {"127.0.0.1:9901", "attacker.example"};
  EXPECT_NE(refused(two_hosts), std::nullopt);

  AdminRequestHeaders rebinding = get;
  rebinding.hosts = {"attacker.example:9901"};
  const auto why = refused(rebinding);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("Host \"attacker.example:9901\""), std::string::npos) << *why;

  for (const char* origin : {"http://attacker.example", "null", "https://127.0.0.1:9901",
                             "http://127.0.0.1:9902", "http://127.0.0.1"}) {
    AdminRequestHeaders h = get;
    h.origin = origin;
    EXPECT_NE(refused(h), std::nullopt) << origin;
  }
  AdminRequestHeaders same_origin = get;
  same_origin.origin = "http://127.0.0.1:9901";
  EXPECT_EQ(refused(same_origin), std::nullopt);

  for (const char* site : {"cross-site", "same-site"}) {
    AdminRequestHeaders h = get;
    h.sec_fetch_site = site;
    EXPECT_NE(refused(h), std::nullopt) << site;
  }
  for (const char* site : {"none", "same-origin"}) {
    AdminRequestHeaders h = get;
    h.sec_fetch_site = site;
    EXPECT_EQ(refused(h), std::nullopt) << site;
  }
}

TEST(AdminAccessTest, PostMustBeANonSimpleRequest) {
  const AdminAccessPolicy policy{"127.0.0.1", {}};
  AdminRequestHeaders post;
  post.post = true;
  post.hosts = {"localhost:9901"};
  // What a form or fetch(no-cors) can send: no body type, or a "simple" one.
  for (const char* type : {"", "text/plain", "application/x-www-form-urlencoded",
                           "multipart/form-data; boundary=x", "text/plain; a=application/json"}) {
    AdminRequestHeaders h = post;
    if (*type != '\0') h.content_type = type;
    const auto why = refuseAdminRequest(policy, h);
    ASSERT_TRUE(why.has_value()) << type;
    EXPECT_NE(why->find("x-sluice-admin: 1"), std::string::npos) << *why;
  }
  AdminRequestHeaders marked = post;
  marked.has_admin_header = true;
  EXPECT_EQ(refuseAdminRequest(policy, marked), std::nullopt);
  for (const char* type : {"application/json", "Application/JSON; charset=utf-8"}) {
    AdminRequestHeaders h = post;
    h.content_type = type;
    EXPECT_EQ(refuseAdminRequest(policy, h), std::nullopt) << type;
  }
  // The marker does not excuse a foreign Origin.
  AdminRequestHeaders cross = marked;
  cross.origin = "http://attacker.example";
  EXPECT_NE(refuseAdminRequest(policy, cross), std::nullopt);
}

}  // namespace
}  // namespace sluice
