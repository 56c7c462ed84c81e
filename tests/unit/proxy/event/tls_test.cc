// The TLS policy of sluice's contexts (proxy/event/tls.h, proxy/event/tls_server.h):
// upstream (client) contexts offer only ECDHE key exchange with AEAD ciphers
// on TLS 1.2 by default, never TLS 1.1; upstreams[].tls.min_version and
// .ciphers change that. (Listeners: tests/integration/tls_upstream_test.cc,
// with real handshakes.)

#include "proxy/event/tls.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <vector>

namespace sluice {
namespace {

/** The TLS 1.2 (and older) ciphers an SSL from `ctx` would offer. */
std::vector<const SSL_CIPHER*> tls12Ciphers(SSL_CTX* ctx) {
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx), &SSL_free);
  std::vector<const SSL_CIPHER*> out;
  STACK_OF(SSL_CIPHER)* list = SSL_get1_supported_ciphers(ssl.get());
  for (int i = 0; i < sk_SSL_CIPHER_num(list); ++i) {
    const SSL_CIPHER* c = sk_SSL_CIPHER_value(list, i);
    if (SSL_CIPHER_get_kx_nid(c) != NID_kx_any) out.push_back(c);  // TLS 1.3 suites: kx "any"
  }
  sk_SSL_CIPHER_free(list);
  return out;
}

TEST(TlsPolicyTest, UpstreamDefaultsAreEcdheWithAeadOnly) {
  config::UpstreamTlsConfig tls;
  tls.verify = false;  // no CA store needed to look at the ciphers
  TlsError error;
  SslCtxPtr ctx = makeUpstreamSslCtx(tls, config::Http2Mode::Auto, &error);
  ASSERT_TRUE(ctx) << error.message;
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx.get()), TLS1_2_VERSION);
  const auto ciphers = tls12Ciphers(ctx.get());
  EXPECT_FALSE(ciphers.empty());
  for (const SSL_CIPHER* c : ciphers) {
    EXPECT_EQ(SSL_CIPHER_get_kx_nid(c), NID_kx_ecdhe) << SSL_CIPHER_get_name(c);
    EXPECT_TRUE(SSL_CIPHER_is_aead(c)) << SSL_CIPHER_get_name(c);
  }
}

TEST(TlsPolicyTest, UpstreamMinVersionAndCiphersApply) {
  config::UpstreamTlsConfig tls;
  tls.verify = false;
  tls.min_version = config::TlsVersion::V1_3;
  tls.ciphers = "ECDHE-RSA-AES256-GCM-SHA384";
  TlsError error;
  SslCtxPtr ctx = makeClientSslCtx(tls, &error);
  ASSERT_TRUE(ctx) << error.message;
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx.get()), TLS1_3_VERSION);
  tls.min_version = config::TlsVersion::V1_2;
  ctx = makeClientSslCtx(tls, &error);
  ASSERT_TRUE(ctx) << error.message;
  const auto ciphers = tls12Ciphers(ctx.get());
  ASSERT_EQ(ciphers.size(), 1u);
  EXPECT_STREQ(SSL_CIPHER_get_name(ciphers[0]), "ECDHE-RSA-AES256-GCM-SHA384");
}

TEST(TlsPolicyTest, CipherListCheckRefusesUnknownNames) {
  std::string why;
  EXPECT_TRUE(config::checkTlsCipherList(config::kDefaultTlsCiphers, &why)) << why;
  EXPECT_TRUE(config::checkTlsCipherList("ECDHE+AESGCM:!aNULL:@STRENGTH", &why)) << why;
  EXPECT_FALSE(config::checkTlsCipherList("ECDHE-RSA-AES128-GCM-SHA256:NOPE-CIPHER", &why));
  EXPECT_EQ(why,
            "unknown cipher \"NOPE-CIPHER\" in the OpenSSL cipher list (e.g. "
            "ECDHE-RSA-AES128-GCM-SHA256)");
  EXPECT_FALSE(config::checkTlsCipherList("!ALL", &why));
}

}  // namespace
}  // namespace sluice
