// Security defaults, on the real binary so stderr is
// checked too: API keys — the client's Authorization and the configured
// upstream headers — never appear in logs, metric labels, /exchanges or
// /config; turning upstream TLS verification off is logged at start and on
// every reload. (Admin on 127.0.0.1 by default: config/loader_test; client
// x-sluice-* stripped: proxy_test and header_rewrite_test.)

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

constexpr char kClientKey[] = "sk-secret-123";
constexpr char kConfigKey[] = "sk-config-secret-456";

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

TEST(SecurityTest, ApiKeysNeverReachLogsLabelsExchangesOrConfig) {
  MockLlm mock;
  SluiceProcess sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
    headers: {x-api-key: "${KEY}"}
    rate_limit: {key: header:authorization}
routes:
  - name: chat
    match: {path_prefix: /}
    upstream: mock
)",
                                  {{"MOCK_URL", mock.url()}, {"KEY", kConfigKey}}));
  ASSERT_TRUE(sluice.running());
  const std::vector<std::pair<std::string, std::string>> auth = {
      {"authorization", std::string("Bearer ") + kClientKey},
      {"content-type", "application/json"},
      {"x-mock-quota", "100/60000"},
      {"x-mock-quota-key", kClientKey}};

  // A stream held in flight (stalled after one token) while the admin port is read.
  TestConnection stream(sluice.port());
  auto headers = auth;
  headers.insert(
      headers.end(),
      {{"x-mock-tokens", "5"}, {"x-mock-stall-after-tokens", "1"}, {"x-mock-stall-ms", "-1"}});
  stream.sendRequest("POST", "/v1/chat/completions?key=" + std::string(kClientKey), headers,
                     R"({"model":"gpt-4o-mini","stream":true,"messages":[]})");
  stream.readUntil([](const TestResponse& r) { return r.body.find("tok0") != std::string::npos; });
  ASSERT_NE(stream.current().body.find("tok0"), std::string::npos);

  const std::string exchanges = sluice.adminGet("/exchanges");
  ASSERT_NE(exchanges.find("\"state\""), std::string::npos) << exchanges;
  EXPECT_EQ(exchanges.find(kClientKey), std::string::npos) << exchanges;
  const std::string config = sluice.adminGet("/config");
  ASSERT_NE(config.find("x-api-key"), std::string::npos) << config;
  EXPECT_NE(config.find("<redacted>"), std::string::npos) << config;
  EXPECT_EQ(config.find(kConfigKey), std::string::npos) << config;

  // The upstream did get both keys (so the absence above means something).
  const auto entries = mock.ledger();
  ASSERT_FALSE(entries.empty());
  EXPECT_NE(entries.dump().find(kClientKey), std::string::npos);
  EXPECT_NE(entries.dump().find(kConfigKey), std::string::npos);

  // More traffic with the key: a completed request, a throttled-quota path,
  // a rejected budget, an unrouted method.
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", auth,
                        R"({"model":"gpt-4o-mini","messages":[]})")
                .status,
            200);
  auto bad_budget = auth;
  bad_budget.emplace_back("x-budget-ms", kClientKey);
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", bad_budget, "{}").status,
            400);
  stream.reset();
  ASSERT_TRUE(waitUntil([&] { return sluice.metric("sluice_active_requests") == 0; }));

  const std::string metrics = sluice.adminGet("/metrics");
  ASSERT_NE(metrics.find("sluice_requests_total"), std::string::npos);
  EXPECT_EQ(metrics.find(kClientKey), std::string::npos);
  EXPECT_EQ(metrics.find("Bearer"), std::string::npos);
  EXPECT_EQ(metrics.find(kConfigKey), std::string::npos);

  sluice.signal(SIGHUP);  // a reload logs too
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1;
  }));
  EXPECT_EQ(sluice.stop(), 0);
  const std::string err = sluice.stderrText();
  EXPECT_NE(err.find("sluice: draining"), std::string::npos) << "stderr was captured: " << err;
  EXPECT_EQ(err.find(kClientKey), std::string::npos) << err;
  EXPECT_EQ(err.find(kConfigKey), std::string::npos) << err;
}

// A route by path prefix must not be a door to the rest of the upstream's
// API with the operator's key: dot segments (also written %2e) are resolved
// before routes match, and the resolved path is what goes upstream.
std::string dotSegmentConfig(const std::string& mock_url) {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
    headers: {authorization: "Bearer ${KEY}"}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
  - name: echo
    match: {path_prefix: /echo/}
    upstream: mock
)",
                    {{"MOCK_URL", mock_url}, {"KEY", kConfigKey}});
}

TEST(SecurityTest, DotSegmentsCannotLeaveARouteWithTheOperatorsKey) {
  MockLlm mock;
  SluiceUnderTest sluice(dotSegmentConfig(mock.url()));
  for (const std::string path : {
           "/v1/chat/completions/../../files",
           "/v1/chat/completions/%2e%2e/%2e%2e/files",
           "/v1/chat/completions/%2E%2e/%2e%2E/files",
           "/v1/chat/completions/.%2e/%2E./files",
           "/v1/chat/completions/./../.././files",
           "/echo/../v1/files",
       }) {
    TestConnection conn(sluice.port());
    conn.send("GET " + path + " HTTP/1.1\r\nhost: t\r\n\r\n");
    const TestResponse r = conn.readResponse();
    EXPECT_EQ(r.status, 404) << path << ": " << r.body;
    EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json") << path;
    EXPECT_NE(r.body.find("/v1/files"), std::string::npos) << "routed on the resolved path";

    H2Connection h2(sluice.port());
    const int32_t id = h2.submit("GET", path);
    ASSERT_TRUE(h2.waitForStream(id)) << path;
    EXPECT_EQ(h2.response(id).status, 404) << path << ": " << h2.response(id).body;
  }
  EXPECT_EQ(mock.ledger().size(), 0u) << mock.ledger().dump();
}

TEST(SecurityTest, TheResolvedPathGoesUpstreamWithItsQueryUntouched) {
  MockLlm mock;
  SluiceUnderTest sluice(dotSegmentConfig(mock.url()));
  TestConnection conn(sluice.port());
  conn.send("GET /echo/a/./b/%2e%2E/c/.?q=/../x%2e%2e HTTP/1.1\r\nhost: t\r\n\r\n");
  const TestResponse r = conn.readResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["path"], "/echo/a/c/?q=/../x%2e%2e");
  // Escapes that are not dots are the upstream's to decode: left as they came.
  conn.send("GET /echo/a%2fb/%2e%2e%2f/c HTTP/1.1\r\nhost: t\r\n\r\n");
  const TestResponse kept = conn.readResponse();
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(nlohmann::json::parse(kept.body)["path"], "/echo/a%2fb/%2e%2e%2f/c");

  H2Connection h2(sluice.port());
  const int32_t id = h2.submit("GET", "/echo/x/../y?z=..");
  ASSERT_TRUE(h2.waitForStream(id));
  ASSERT_EQ(h2.response(id).status, 200) << h2.response(id).body;
  EXPECT_EQ(nlohmann::json::parse(h2.response(id).body)["path"], "/echo/y?z=..");
}

TEST(SecurityTest, APathClimbingAboveTheRootIs400) {
  MockLlm mock;
  SluiceUnderTest sluice(dotSegmentConfig(mock.url()));
  for (const std::string path : {"/..", "/echo/../../v1/files", "/%2e%2e/echo/x"}) {
    TestConnection conn(sluice.port());
    conn.send("GET " + path + " HTTP/1.1\r\nhost: t\r\n\r\n");
    const TestResponse r = conn.readResponse();
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    EXPECT_TRUE(conn.waitForClose(std::chrono::milliseconds(5000))) << path;

    H2Connection h2(sluice.port());
    const int32_t id = h2.submit("GET", path);
    ASSERT_TRUE(h2.waitForStream(id)) << path;
    EXPECT_EQ(h2.response(id).status, 400) << path;
  }
  EXPECT_EQ(mock.ledger().size(), 0u) << mock.ledger().dump();
}

// `match.model` reads the body as the upstream will: a key written with
// escapes is still `model`.
TEST(SecurityTest, AModelKeyWrittenWithEscapesIsTheModel) {
  MockLlm mock;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: mini
    match: {path_prefix: /v1/chat/completions, model: "gpt-4o-mini"}
    upstream: mock
)",
                                    {{"MOCK_URL", mock.url()}}));
  const TestResponse r = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions", {{"content-type", "application/json"}},
      R"({"mod\u0065l":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.status, 200) << r.body;
  const auto ledger = mock.ledger();
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger[0]["model"], "gpt-4o-mini");
  // Another model, however written, does not match the route.
  EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                        {{"content-type", "application/json"}},
                        R"({"model":"gpt-4o-mini","mod\u0065l":"gpt-4o","messages":[]})")
                .status,
            404);
  EXPECT_EQ(mock.ledger().size(), 1u);
}

TEST(SecurityTest, TlsVerifyOffIsLoggedAtStartAndOnReload) {
  SluiceProcess sluice(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: insecure
    url: https://127.0.0.1:1
    tls: {verify: false}
  - name: checked
    url: https://127.0.0.1:2
routes:
  - name: all
    match: {path_prefix: /}
    upstream: insecure
)");
  ASSERT_TRUE(sluice.running());
  const std::string warning = "sluice: warning: upstream insecure: tls.verify is false";
  // The operational log is written by its own thread: wait for the line.
  EXPECT_TRUE(waitUntil([&] { return occurrences(sluice.stderrText(), warning) == 1; }))
      << sluice.stderrText();
  EXPECT_EQ(sluice.stderrText().find("upstream checked"), std::string::npos);

  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1;
  }));
  EXPECT_TRUE(waitUntil([&] { return occurrences(sluice.stderrText(), warning) == 2; }))
      << sluice.stderrText();
  EXPECT_EQ(sluice.stop(), 0);
}

// A sluice with one unreachable upstream and no routes: only its admin port matters.
std::string adminOnlyConfig(const std::string& admin) {
  return "listen: 127.0.0.1:0\nadmin: " + admin +
         "\nworkers: 1\nupstreams:\n  - {name: mock, url: \"http://127.0.0.1:1\"}\n";
}

// A web page must not be able to drive the admin port.
// A "simple" cross-site POST (text/plain, foreign Origin) used to get 202 and
// stop the process; a DNS-rebinding page (Host: its own name) could read /config.
TEST(SecurityTest, AdminPortRefusesCrossSiteRequestsAndDnsRebinding) {
  SluiceProcess sluice(adminOnlyConfig("127.0.0.1:0"));
  ASSERT_TRUE(sluice.running());
  const uint16_t admin = sluice.adminPort();
  const std::string self = "127.0.0.1:" + std::to_string(admin);
  using Headers = std::vector<std::pair<std::string, std::string>>;

  // What <form method=post enctype=text/plain action=http://127.0.0.1:9901/drain> sends.
  const TestResponse form =
      httpRequest(admin, "POST", "/drain",
                  {{"origin", "http://attacker.example"}, {"content-type", "text/plain"}}, "x=1");
  EXPECT_EQ(form.status, 403) << form.body;
  // The same without Origin (fetch from an opaque origin, an old browser): still a simple request.
  EXPECT_EQ(httpRequest(admin, "POST", "/drain", {{"content-type", "text/plain"}}, "x").status,
            403);
  // The marker header does not excuse a foreign Origin.
  EXPECT_EQ(httpRequest(admin, "POST", "/drain",
                        {{"x-sluice-admin", "1"}, {"origin", "http://attacker.example"}})
                .status,
            403);
  // DNS rebinding: the page's own name in Host.
  const TestResponse rebound =
      httpRequest(admin, "GET", "/config", {{"host", "attacker.example:" + std::to_string(admin)}});
  EXPECT_EQ(rebound.status, 403);
  EXPECT_EQ(rebound.body.find("upstreams"), std::string::npos) << rebound.body;
  EXPECT_NE(rebound.body.find("attacker.example"), std::string::npos) << rebound.body;
  EXPECT_EQ(httpRequest(admin, "GET", "/metrics", {{"host", "localhost.attacker.example"}}).status,
            403);
  ASSERT_EQ(sluice.adminStatus("/ready"), 200) << "nothing above may start a drain";

  // Tools: localhost, IP literals, with or without a port.
  for (const std::string& host : std::vector<std::string>{
           self, "localhost", "localhost:" + std::to_string(admin), "[::1]:9901", "127.0.0.1"}) {
    EXPECT_EQ(httpRequest(admin, "GET", "/healthz", Headers{{"host", host}}).status, 200) << host;
  }
  // Methods: GET /drain is 405 with Allow: POST; POST to a GET endpoint likewise.
  const TestResponse get_drain = httpRequest(admin, "GET", "/drain");
  EXPECT_EQ(get_drain.status, 405);
  EXPECT_EQ(get_drain.headers.get("allow").value_or(""), "POST");
  const TestResponse post_metrics =
      httpRequest(admin, "POST", "/metrics", {{"x-sluice-admin", "1"}});
  EXPECT_EQ(post_metrics.status, 405);
  EXPECT_EQ(post_metrics.headers.get("allow").value_or(""), "GET, HEAD");
  EXPECT_EQ(httpRequest(admin, "GET", "/nope").status, 404);
  ASSERT_EQ(sluice.adminStatus("/ready"), 200);

  // A tool's POST: the marker header (or a JSON body) drains.
  EXPECT_EQ(httpRequest(admin, "POST", "/drain", {{"x-sluice-admin", "1"}}).status, 202);
  EXPECT_EQ(sluice.waitForExit(), 0);
}

// The admin port reads no more than an admin call needs: the request head is
// bounded (431), a body is refused from its Content-Length before a byte of
// it is read (413), Host and Origin are decided as soon as the head is
// complete, and a head or body that never completes ends in 408. Each
// refusal closes the connection. (These used to be read without bound: a
// 600 MB POST /drain body was buffered whole, an endless header line grew
// the process, and a foreign Origin was only refused after the body.)
std::string adminLimitsConfig() {
  return adminOnlyConfig("127.0.0.1:0") +
         "limits: {header_read_timeout: 300ms, body_read_timeout: 300ms}\n";
}

TEST(SecurityTest, AdminPortBoundsTheRequestHead) {
  SluiceProcess sluice(adminLimitsConfig());
  ASSERT_TRUE(sluice.running());
  TestConnection endless(sluice.adminPort());
  endless.send("GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nx-endless: ");
  endless.send(std::string(16 * 1024, 'a'));  // no end of line, ever
  const TestResponse r = endless.readResponse(std::chrono::seconds(5));
  EXPECT_EQ(r.status, 431) << endless.raw().substr(0, 200);
  EXPECT_EQ(r.headers.get("connection").value_or(""), "close");
  EXPECT_TRUE(endless.waitForClose(std::chrono::seconds(10)));
  // A head within the bound is served.
  EXPECT_EQ(httpRequest(sluice.adminPort(), "GET", "/healthz", {{"x-pad", std::string(6000, 'b')}})
                .status,
            200);
  EXPECT_EQ(sluice.stop(), 0);
}

TEST(SecurityTest, AdminPortRefusesALargeBodyFromContentLengthAlone) {
  SluiceProcess sluice(adminLimitsConfig());
  ASSERT_TRUE(sluice.running());
  // Only the head is sent: the answer must come without the 600 MB.
  TestConnection big(sluice.adminPort());
  big.send(
      "POST /drain HTTP/1.1\r\nhost: 127.0.0.1\r\nx-sluice-admin: 1\r\n"
      "content-length: 600000000\r\n\r\n");
  const TestResponse r = big.readResponse(std::chrono::seconds(5));
  EXPECT_EQ(r.status, 413) << big.raw();
  EXPECT_TRUE(big.waitForClose(std::chrono::seconds(10)));
  // Chunked bodies have no length to check first: refused too.
  TestConnection chunked(sluice.adminPort());
  chunked.send(
      "POST /drain HTTP/1.1\r\nhost: 127.0.0.1\r\nx-sluice-admin: 1\r\n"
      "transfer-encoding: chunked\r\n\r\n");
  EXPECT_EQ(chunked.readResponse(std::chrono::seconds(5)).status, 411) << chunked.raw();
  // A foreign Origin is refused on the head: the announced body is never awaited.
  TestConnection cross(sluice.adminPort());
  cross.send(
      "POST /drain HTTP/1.1\r\nhost: 127.0.0.1\r\norigin: http://attacker.example\r\n"
      "content-type: text/plain\r\ncontent-length: 100\r\n\r\n");
  EXPECT_EQ(cross.readResponse(std::chrono::seconds(5)).status, 403) << cross.raw();
  EXPECT_TRUE(cross.waitForClose(std::chrono::seconds(10)));
  ASSERT_EQ(sluice.adminStatus("/ready"), 200) << "nothing above may start a drain";
  // A small JSON body is read and the call served.
  EXPECT_EQ(httpRequest(sluice.adminPort(), "POST", "/drain",
                        {{"content-type", "application/json"}}, "{}")
                .status,
            202);
  EXPECT_EQ(sluice.waitForExit(), 0);
}

TEST(SecurityTest, AdminPortSlowHeadOrBodyGets408) {
  SluiceProcess sluice(adminLimitsConfig());
  ASSERT_TRUE(sluice.running());
  TestConnection loris(sluice.adminPort());
  loris.send("GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ");
  // One byte per 50 ms: bytes keep arriving, the head never completes.
  size_t sent = 0;
  while (sent < 400 && !loris.peerClosed() && loris.current().status == 0 &&
         loris.completed().empty()) {
    loris.send("a");
    ++sent;
    loris.readUntil([](const TestResponse& r) { return r.status != 0; },
                    std::chrono::milliseconds(50));
  }
  EXPECT_EQ(loris.readResponse(std::chrono::seconds(5)).status, 408) << loris.raw();
  EXPECT_GT(sent, 1u);
  EXPECT_TRUE(loris.waitForClose(std::chrono::seconds(10)));

  TestConnection stalled(sluice.adminPort());
  stalled.send(
      "POST /drain HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
      "content-length: 10\r\n\r\n{}");
  EXPECT_EQ(stalled.readResponse(std::chrono::seconds(5)).status, 408) << stalled.raw();
  EXPECT_TRUE(stalled.waitForClose(std::chrono::seconds(10)));
  ASSERT_EQ(sluice.adminStatus("/ready"), 200) << "an unfinished POST /drain must not drain";
  EXPECT_EQ(sluice.stop(), 0);
}

// On 0.0.0.0 (a container) the same rules hold: IP literals (a pod IP, a
// published port via localhost) and the names in admin.allowed_hosts (a
// compose service name) are accepted, any other name is not.
TEST(SecurityTest, AdminOnAllInterfacesAcceptsIpLiteralsAndAllowedHostsOnly) {
  SluiceProcess sluice(adminOnlyConfig(R"({address: "0.0.0.0:0", allowed_hosts: [sluice]})"));
  ASSERT_TRUE(sluice.running());
  const uint16_t admin = sluice.adminPort();
  const std::string port = ":" + std::to_string(admin);
  for (const std::string& host :
       std::vector<std::string>{"sluice" + port, "SLUICE", "172.18.0.5" + port, "[fd00::5]" + port,
                                "localhost" + port}) {
    EXPECT_EQ(httpRequest(admin, "GET", "/metrics", {{"host", host}}).status, 200) << host;
  }
  for (const std::string& host : std::vector<std::string>{
           "attacker.example" + port, "sluice.attacker.example", "grafana" + port}) {
    EXPECT_EQ(httpRequest(admin, "GET", "/metrics", {{"host", host}}).status, 403) << host;
  }
  EXPECT_EQ(sluice.stop(), 0);
}

// A rejected reload logs the file's error, never the
// ${VAR}-expanded value (here a URL with an API key as its password).
TEST(SecurityTest, RejectedReloadDoesNotLogExpandedSecrets) {
  constexpr char kSecret[] = "sk-reload-secret-789xyz";
  ASSERT_EQ(setenv("SLUICE_TEST_RELOAD_SECRET", kSecret, 1), 0);
  const std::string good = adminOnlyConfig("127.0.0.1:0");
  SluiceProcess sluice(good);
  ASSERT_TRUE(sluice.running());
  std::string bad = good;
  bad.replace(bad.find("http://127.0.0.1:1"), 18, "http://user:${SLUICE_TEST_RELOAD_SECRET}@h");
  sluice.writeConfig(bad);
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 1;
  }));
  ASSERT_TRUE(
      waitUntil([&] { return sluice.stderrText().find("reload rejected") != std::string::npos; }));
  const std::string err = sluice.stderrText();
  EXPECT_NE(err.find("must not contain credentials"), std::string::npos) << err;
  EXPECT_NE(err.find("http://<redacted>@h"), std::string::npos) << err;
  EXPECT_EQ(err.find(kSecret), std::string::npos) << err;
  EXPECT_EQ(sluice.stop(), 0);
  unsetenv("SLUICE_TEST_RELOAD_SECRET");
}

}  // namespace
}  // namespace sluice::test
