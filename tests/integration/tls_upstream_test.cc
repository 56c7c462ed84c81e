// HTTPS upstreams: sluice verifies the upstream's certificate (system CAs by
// default, `ca_file` when given), sends SNI, and refuses a certificate it
// cannot verify. Certificates are made at test time with the openssl CLI.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/test_pki.h"

namespace sluice::test {
namespace {

std::string tlsConfig(uint16_t port, const std::string& tls_block,
                      const std::string& http2 = "auto") {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: secure
    url: https://localhost:${PORT}
    http2: ${HTTP2}
    tls: ${TLS}
routes:
  - name: all
    match: {path_prefix: /}
    upstream: secure
)",
                    {{"PORT", std::to_string(port)}, {"TLS", tls_block}, {"HTTP2", http2}});
}

TEST(TlsUpstreamTest, VerifiesAgainstCaFileAndStreams) {
  TestPki pki;
  MockLlm mock(pki.path("server.pem"), pki.path("server.key"));
  ASSERT_NE(mock.port(), 0);
  SluiceUnderTest sluice(tlsConfig(mock.port(), "{ca_file: " + pki.path("ca.pem") + "}"));
  auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-mock-tokens", "5"}},
                       R"({"model":"gpt-4o","stream":true,"messages":[]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("tok4 "), std::string::npos);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  // Keep-alive works over TLS too.
  auto echo = httpRequest(sluice.port(), "GET", "/echo/tls");
  ASSERT_EQ(echo.status, 200);
  EXPECT_EQ(nlohmann::json::parse(echo.body)["headers"]["host"],
            "localhost:" + std::to_string(mock.port()));
}

TEST(TlsUpstreamTest, UnknownIssuerIsRejectedByDefault) {
  TestPki pki;
  MockLlm mock(pki.path("server.pem"), pki.path("server.key"));
  // No ca_file: the system store does not know the test CA.
  SluiceUnderTest sluice(tlsConfig(mock.port(), "{verify: true}"));
  auto r = httpRequest(sluice.port(), "GET", "/echo/x");
  EXPECT_EQ(r.status, 502);
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["type"], "urn:sluice:problem:upstream-connect-error");
  EXPECT_NE(j["detail"].get<std::string>().find("certificate"), std::string::npos) << j.dump();
  EXPECT_EQ(mock.ledger().size(), 0u);
}

TEST(TlsUpstreamTest, WrongHostnameIsRejected) {
  TestPki pki;
  MockLlm mock(pki.path("server.pem"), pki.path("server.key"));
  // The certificate is for localhost, not for this SNI / verification name.
  SluiceUnderTest sluice(
      tlsConfig(mock.port(), "{ca_file: " + pki.path("ca.pem") + ", sni: api.example.com}"));
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/echo/x").status, 502);
}

TEST(TlsUpstreamTest, VerifyOffAcceptsAnyCertificate) {
  TestPki pki;
  MockLlm mock(pki.path("server.pem"), pki.path("server.key"));
  SluiceUnderTest sluice(tlsConfig(mock.port(), "{verify: false}"));
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/echo/x").status, 200);
}

// `http2: auto` asks by ALPN; mock-llm chooses h2, so every request after the
// first negotiation rides one multiplexed session — concurrent ones included.
TEST(TlsUpstreamTest, AutoNegotiatesHttp2ByAlpn) {
  TestPki pki;
  MockLlm mock(pki.path("server.pem"), pki.path("server.key"));
  SluiceUnderTest sluice(tlsConfig(mock.port(), "{ca_file: " + pki.path("ca.pem") + "}"));
  // Three clients at once: they wait for the one negotiation, then share its session.
  std::vector<std::unique_ptr<TestConnection>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<TestConnection>(sluice.port()));
    clients.back()->sendRequest(
        "POST", "/v1/chat/completions",
        {{"x-mock-request-id", "alpn-" + std::to_string(i)}, {"x-mock-tokens", "5"}},
        R"({"model":"gpt-4o","stream":true,"messages":[]})");
  }
  for (auto& c : clients) {
    const TestResponse r = c->readResponse();
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  }
  std::set<uint64_t> connections;
  for (int i = 0; i < 3; ++i) {
    const auto e = mock.entry("alpn-" + std::to_string(i));
    EXPECT_EQ(e["protocol"], "h2");
    connections.insert(e["connection_id"].get<uint64_t>());
  }
  EXPECT_EQ(connections.size(), 1u);
}

// The upstream's ALPN says http/1.1: `auto` learns it and stays on HTTP/1.1.
TEST(TlsUpstreamTest, AutoFallsBackToHttp11WhenAlpnSaysSo) {
  TestPki pki;
  MockLlm mock(pki.path("server.pem"), pki.path("server.key"), {"--http2", "off"});
  SluiceUnderTest sluice(tlsConfig(mock.port(), "{ca_file: " + pki.path("ca.pem") + "}"));
  for (int i = 0; i < 2; ++i) {
    const std::string id = "fallback-" + std::to_string(i);
    EXPECT_EQ(httpRequest(sluice.port(), "GET", "/echo/x", {{"x-mock-request-id", id}}).status,
              200);
    EXPECT_EQ(mock.entry(id)["protocol"], "http/1.1");
  }
}

TEST(TlsUpstreamTest, Http2OffOffersOnlyHttp11) {
  TestPki pki;
  MockLlm mock(pki.path("server.pem"), pki.path("server.key"));
  SluiceUnderTest sluice(tlsConfig(mock.port(), "{ca_file: " + pki.path("ca.pem") + "}", "off"));
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/echo/x", {{"x-mock-request-id", "h1"}}).status,
            200);
  EXPECT_EQ(mock.entry("h1")["protocol"], "http/1.1");
}

// --- TLS policy (tls.min_version, tls.ciphers) --------------------------------------------

// A TLS listener with an RSA certificate: with OpenSSL's own defaults it
// offered static-RSA key exchange (no forward secrecy) and CBC suites on TLS
// 1.2. sluice's default is ECDHE with AEAD only.
std::string rsaListenerConfig(const TestPki& pki, const std::string& extra_tls = "") {
  return "listen:\n  - address: 127.0.0.1:0\n    tls: {cert: " + pki.path("server.pem") +
         ", key: " + pki.path("server.key") + extra_tls +
         "}\nadmin: 127.0.0.1:0\nworkers: 1\nupstreams:\n"
         "  - {name: a, url: \"http://127.0.0.1:1\"}\n";
}

/** `openssl s_client` against 127.0.0.1:port with `options`: the cipher agreed, or "". */
std::string handshake(uint16_t port, const std::string& options) {
  auto [code, out] =
      runCommand("echo | timeout 10 openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
                 " " + options + " 2>&1");
  const std::string marker = ", Cipher is ";
  const size_t at = out.find(marker);
  if (code != 0 || at == std::string::npos) return "";
  const std::string cipher =
      out.substr(at + marker.size(), out.find('\n', at) - at - marker.size());
  return cipher == "(NONE)" ? "" : cipher;
}

TEST(TlsPolicyTest, ListenerRefusesStaticRsaCbcAndTls11ByDefault) {
  TestPki pki(TestPki::Key::Rsa);
  SluiceProcess sluice(rsaListenerConfig(pki));
  ASSERT_TRUE(sluice.running());
  const uint16_t port = sluice.port();
  // ECDHE with AEAD: the defaults' own suites.
  EXPECT_EQ(handshake(port, "-tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256"),
            "ECDHE-RSA-AES128-GCM-SHA256");
  EXPECT_EQ(handshake(port, "-tls1_2 -cipher ECDHE-RSA-CHACHA20-POLY1305"),
            "ECDHE-RSA-CHACHA20-POLY1305");
  EXPECT_NE(handshake(port, "-tls1_3"), "");
  // Static RSA key exchange (no forward secrecy), CBC, TLS 1.1: refused.
  EXPECT_EQ(handshake(port, "-tls1_2 -cipher AES128-GCM-SHA256"), "");
  EXPECT_EQ(handshake(port, "-tls1_2 -cipher AES256-SHA256"), "");
  EXPECT_EQ(handshake(port, "-tls1_2 -cipher ECDHE-RSA-AES128-SHA"), "");
  EXPECT_EQ(handshake(port, "-tls1_1 -cipher DEFAULT@SECLEVEL=0"), "");
  EXPECT_EQ(sluice.stop(), 0);
}

TEST(TlsPolicyTest, ListenerMinVersionAndCiphersAreConfigurable) {
  TestPki pki(TestPki::Key::Rsa);
  SluiceProcess tls13(rsaListenerConfig(pki, ", min_version: \"1.3\""));
  ASSERT_TRUE(tls13.running());
  EXPECT_EQ(handshake(tls13.port(), "-tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256"), "");
  EXPECT_NE(handshake(tls13.port(), "-tls1_3"), "");
  EXPECT_EQ(tls13.stop(), 0);

  SluiceProcess narrow(rsaListenerConfig(pki, ", ciphers: ECDHE-RSA-AES256-GCM-SHA384"));
  ASSERT_TRUE(narrow.running());
  EXPECT_EQ(handshake(narrow.port(), "-tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256"), "");
  EXPECT_EQ(handshake(narrow.port(), "-tls1_2"), "ECDHE-RSA-AES256-GCM-SHA384");
  EXPECT_EQ(narrow.stop(), 0);
}

}  // namespace
}  // namespace sluice::test
