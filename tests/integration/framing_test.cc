// Request smuggling and broken framing, table-driven (RFC 9112 §6, §11.2).
//
// Downstream: every ambiguous or malformed request head is answered 400
// (problem+json) and the connection is closed, nothing reaches the upstream,
// and a well-formed request on a new connection still goes through.
// Upstream: a response with broken framing is a 502 when nothing was sent to
// the client yet — also when the break comes in the same read as a valid
// head — (a truncated response otherwise), and that upstream connection is
// never reused; nor is one that answered before it had the whole request.
// A 204/304 loses its Content-Length, an unsolicited 101 is a 502. The
// "upstream" here is a scripted raw TCP server, since no real server would
// send these bytes on purpose.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/loopback.h"
#include "tests/support/processes.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

std::string config(const std::string& url, const std::string& retry = "{attempts: 1}",
                   const std::string& route_extra = "") {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: up
    url: ${URL}
    http2: off
routes:
  - name: all
    match: {path_prefix: /}
    upstream: up
    retry: ${RETRY}
${ROUTE_EXTRA}
)",
                    {{"URL", url}, {"RETRY", retry}, {"ROUTE_EXTRA", route_extra}});
}

struct RequestCase {
  const char* name;
  std::string bytes;
};

class DownstreamFramingTest : public ::testing::TestWithParam<RequestCase> {};

TEST_P(DownstreamFramingTest, IsRejectedWith400AndTheConnectionCloses) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  TestConnection conn(sluice.port());
  conn.send(GetParam().bytes);
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
  EXPECT_TRUE(conn.waitForClose(milliseconds(5000)));
  EXPECT_EQ(mock.ledger().size(), 0u) << "nothing may reach the upstream";
  // A well-formed request is never lost.
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/echo/ok").status, 200);
}

const std::string kHead = "POST /echo/x HTTP/1.1\r\nhost: t\r\n";

INSTANTIATE_TEST_SUITE_P(
    Smuggling, DownstreamFramingTest,
    ::testing::Values(
        RequestCase{"ContentLengthAndChunked",
                    kHead + "content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\n0\r\n\r\n"},
        RequestCase{"ChunkedAndContentLength",
                    kHead + "transfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n"
                            "5\r\nhello\r\n0\r\n\r\n"},
        RequestCase{"ConflictingContentLengths",
                    kHead + "content-length: 5\r\ncontent-length: 6\r\n\r\nhello!"},
        RequestCase{"ContentLengthList", kHead + "content-length: 5, 6\r\n\r\nhello!"},
        RequestCase{"NegativeContentLength", kHead + "content-length: -1\r\n\r\n"},
        RequestCase{"BadChunkSize",
                    kHead + "transfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
        RequestCase{"ChunkSizeOverflow",
                    kHead + "transfer-encoding: chunked\r\n\r\nfffffffffffffffffff\r\nx\r\n"},
        RequestCase{"ChunkedNotLast", kHead + "transfer-encoding: chunked, gzip\r\n\r\n"},
        RequestCase{"ObsoleteLineFolding",
                    kHead + "x-folded: a\r\n  b\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"NulInHeaderValue",
                    kHead + "x-nul: a" + std::string(1, '\0') + "b\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"BareCrInHeaderValue", kHead + "x-cr: a\rb\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"SpaceBeforeColon", kHead + "content-length : 0\r\n\r\n"},
        // http-parser reads on to the CR; other parsers end the line at the LF.
        RequestCase{"BareLfInChunkExtension",
                    kHead + "transfer-encoding: chunked\r\n\r\n5;ext\nxx\r\nhello\r\n0\r\n\r\n"},
        RequestCase{"BareLfInChunkExtensionOfTheLastChunk",
                    kHead + "transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0;a=b\nx\r\n\r\n"},
        RequestCase{"ChunkDataNotFollowedByCrlf",
                    kHead + "transfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"},
        // Refused since llhttp (http-parser accepted them): a bare LF ending
        // a header line (RFC 9112 §2.2 allows refusing it) or a trailer line,
        // and a header field with no name.
        RequestCase{"BareLfEndsAHeaderLine", kHead + "x-a: b\ncontent-length: 0\r\n\r\n"},
        RequestCase{"BareLfEndsATrailerLine",
                    kHead + "transfer-encoding: chunked\r\n\r\n0\r\nx-t: y\n\r\n"},
        RequestCase{"EmptyHeaderName", kHead + ": v\r\ncontent-length: 0\r\n\r\n"},
        // llhttp knows PRI as HTTP/2's preface only.
        RequestCase{"PriMethod", "PRI /echo/x HTTP/1.1\r\nhost: t\r\n\r\n"},
        // RFC 9112 §3.2: exactly one Host on HTTP/1.1.
        RequestCase{"MissingHost", "GET /echo/x HTTP/1.1\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"DuplicateHost", kHead + "host: u\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"DuplicateHostOnHttp10", "GET /echo/x HTTP/1.0\r\nhost: t\r\nhost: u\r\n\r\n"},
        // Tunnels and protocols sluice cannot carry.
        RequestCase{"Connect", "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n"},
        RequestCase{"UpgradeWebsocket",
                    "GET /echo/ws HTTP/1.1\r\nhost: t\r\nconnection: upgrade\r\n"
                    "upgrade: websocket\r\n\r\n"},
        RequestCase{"UpgradeH2cAndWebsocket",
                    "GET /echo/ws HTTP/1.1\r\nhost: t\r\nconnection: upgrade\r\n"
                    "upgrade: h2c, websocket\r\n\r\n"},
        RequestCase{"UnknownMethod", "FROB /echo/x HTTP/1.1\r\nhost: t\r\n\r\n"},
        RequestCase{"AbsoluteFormWithUserinfo",
                    "GET http://user@t/echo/x HTTP/1.1\r\nhost: t\r\n\r\n"},
        RequestCase{"AbsoluteFormNotHttp", "GET ftp://t/echo/x HTTP/1.1\r\nhost: t\r\n\r\n"},
        // RFC 9112 §6.1: HTTP/1.0 has no Transfer-Encoding; treated as faulty.
        RequestCase{"Http10WithTransferEncoding",
                    "POST /echo/x HTTP/1.0\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
                    "5\r\nhello\r\n0\r\n\r\n"},
        RequestCase{"ChunkedTwice", kHead + "transfer-encoding: chunked, chunked\r\n\r\n"
                                            "5\r\nhello\r\n0\r\n\r\n"}),
    [](const ::testing::TestParamInfo<RequestCase>& info) { return std::string(info.param.name); });

class UnsupportedVersionTest : public ::testing::TestWithParam<RequestCase> {};

TEST_P(UnsupportedVersionTest, Is505AndTheConnectionCloses) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url()));
  TestConnection conn(sluice.port());
  conn.send(GetParam().bytes);
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 505) << r.body;
  EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
  EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "urn:sluice:problem:http-version-not-supported");
  EXPECT_TRUE(conn.waitForClose(milliseconds(5000)));
  EXPECT_EQ(mock.ledger().size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Versions, UnsupportedVersionTest,
    ::testing::Values(RequestCase{"Http12", "GET /echo/x HTTP/1.2\r\nhost: t\r\n\r\n"},
                      RequestCase{"Http99", "GET /echo/x HTTP/9.9\r\nhost: t\r\n\r\n"},
                      RequestCase{"Http20", "GET /echo/x HTTP/2.0\r\nhost: t\r\n\r\n"},
                      RequestCase{"Http09", "GET /echo/x HTTP/0.9\r\nhost: t\r\n\r\n"}),
    [](const ::testing::TestParamInfo<RequestCase>& info) { return std::string(info.param.name); });

/** sluice with mock-llm behind it, for requests that must go through. */
class DownstreamRequestTest : public ::testing::Test {
 protected:
  void start(const std::string& extra = "") {
    mock_ = std::make_unique<MockLlm>();
    sluice_ = std::make_unique<SluiceUnderTest>(config(mock_->url()) + extra);
  }
  std::unique_ptr<MockLlm> mock_;
  std::unique_ptr<SluiceUnderTest> sluice_;
};

TEST_F(DownstreamRequestTest, AbsoluteFormRoutesOnItsPathWithItsAuthorityAsHost) {
  start();
  TestConnection conn(sluice_->port());
  conn.send("GET http://api.example:8080/echo/abs?q=1 HTTP/1.1\r\nhost: other\r\n\r\n");
  const TestResponse r = conn.readResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["path"], "/echo/abs?q=1");
  // Any scheme's case, no path: "/" (the catch-all route; the mock has nothing there).
  conn.send("GET HTTPS://api.example?q=2 HTTP/1.1\r\nhost: api.example\r\n\r\n");
  const TestResponse root = conn.readResponse();
  EXPECT_EQ(root.status, 404) << root.body;
  EXPECT_NE(root.headers.get("content-type").value_or(""), "application/problem+json")
      << "routed and answered by the upstream, not sluice's no-route";
  const auto ledger = mock_->ledger();
  ASSERT_EQ(ledger.size(), 2u);
  EXPECT_EQ(ledger[0]["path"], "/echo/abs?q=1");
  EXPECT_EQ(ledger[1]["path"], "/?q=2");
}

TEST_F(DownstreamRequestTest, ChunkExtensionsAreIgnored) {
  start();
  TestConnection conn(sluice_->port());
  // RFC 9112 §7.1.1 extensions, BWS included; llhttp 8.1 alone refuses some
  // of these ("5;a=b;c", BWS around ';' and '='), http-parser took them all.
  conn.send(
      "POST /echo/ext HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
      "5;a=b;c\r\nhello\r\n3 ; x = \"y z\"\r\nabc\r\n");
  conn.send("2 \r\nde\r\n0;last=1\r\n\r\n");
  const TestResponse r = conn.readResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["body"], "helloabcde");
  EXPECT_FALSE(conn.peerClosed());
}

// A chunked request's trailer section is dropped: it reaches neither its own
// request's head upstream nor the next pipelined request's, whether it comes
// in the same read as the rest or a byte at a time.
TEST_F(DownstreamRequestTest, RequestTrailersReachNoHead) {
  start();
  const std::string pipelined =
      "POST /echo/a HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\nx-leak: a\r\ncontent-length: 999\r\n\r\n"
      "GET /echo/b HTTP/1.1\r\nhost: t\r\n\r\n";
  for (const bool per_byte : {false, true}) {
    TestConnection conn(sluice_->port());
    if (per_byte) {
      for (const char c : pipelined) conn.send(std::string(1, c));
    } else {
      conn.send(pipelined);
    }
    for (const char* path : {"/echo/a", "/echo/b"}) {
      const TestResponse r = conn.readResponse();
      ASSERT_EQ(r.status, 200) << path << ": " << conn.raw();
      const auto echo = nlohmann::json::parse(r.body);
      EXPECT_FALSE(echo["headers"].contains("x-leak")) << path << ": " << r.body;
      EXPECT_NE(echo["headers"].value("content-length", ""), "999") << path << ": " << r.body;
    }
  }
}

TEST_F(DownstreamRequestTest, AHeadAbove80KiBOfWhitespaceIs431) {
  // Leading whitespace of a value is not part of it (max_header_bytes does
  // not count it), but the raw head stays bounded as it was with http-parser.
  start();
  TestConnection conn(sluice_->port());
  conn.send("GET /echo/ws HTTP/1.1\r\nhost: t\r\nx-a:" + std::string(81 * 1024, ' ') + "b\r\n\r\n");
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 431) << r.body;
  EXPECT_TRUE(conn.waitForClose(milliseconds(5000)));
  EXPECT_EQ(mock_->ledger().size(), 0u);
}

TEST_F(DownstreamRequestTest, UpgradeH2cIsIgnoredAndAnsweredInHttp11) {
  start();
  TestConnection conn(sluice_->port());
  // What curl --http2 sends on http://.
  conn.send(
      "GET /echo/h2c HTTP/1.1\r\nhost: t\r\nconnection: Upgrade, HTTP2-Settings\r\n"
      "upgrade: h2c\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n");
  const TestResponse r = conn.readResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  const auto h = nlohmann::json::parse(r.body)["headers"];
  EXPECT_FALSE(h.contains("upgrade"));
  EXPECT_FALSE(h.contains("http2-settings"));
  // The connection stays HTTP/1.1 and keeps serving.
  conn.sendRequest("POST", "/echo/after", {{"upgrade", "h2c"}, {"connection", "upgrade"}}, "body");
  const TestResponse after = conn.readResponse();
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(nlohmann::json::parse(after.body)["body"], "body");
  EXPECT_FALSE(conn.peerClosed());
}

TEST_F(DownstreamRequestTest, ExpectContinueIsMatchedCaseInsensitively) {
  start();
  TestConnection conn(sluice_->port());
  conn.send(
      "POST /echo/expect HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\n"
      "expect: 100-Continue\r\n\r\n");
  // The interim answer comes before the body is sent.
  conn.readUntil(
      [&](const TestResponse&) {
        return conn.raw().find("HTTP/1.1 100 Continue\r\n\r\n") != std::string::npos;
      },
      milliseconds(5000));
  ASSERT_NE(conn.raw().find("HTTP/1.1 100 Continue\r\n\r\n"), std::string::npos) << conn.raw();
  conn.send("hello");
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["body"], "hello");
}

TEST_F(DownstreamRequestTest, ExpectContinueAboveMaxBodyIs413WithoutContinue) {
  start("limits: {max_body: 1KiB}\n");
  TestConnection conn(sluice_->port());
  conn.send(
      "POST /echo/big HTTP/1.1\r\nhost: t\r\ncontent-length: 5000\r\n"
      "expect: 100-continue\r\n\r\n");
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(conn.raw().find("100 Continue"), std::string::npos) << conn.raw();
  EXPECT_EQ(conn.raw().rfind("HTTP/1.1 413", 0), 0u) << "the 413 is the first thing sent";
  EXPECT_TRUE(conn.waitForClose(milliseconds(5000)));
  EXPECT_EQ(sluice_->metric("sluice_downstream_rejections_total", {{"reason", "body_too_large"}}),
            1);
  EXPECT_EQ(mock_->ledger().size(), 0u);
}

// RFC 9110 §6.6.1: every response carries a Date, the upstream's when it sent one.
bool isImfFixdate(std::string_view v) {
  // "Sun, 06 Nov 1994 08:49:37 GMT"
  return v.size() == 29 && v[3] == ',' && v[4] == ' ' && v[7] == ' ' && v[11] == ' ' &&
         v[16] == ' ' && v[19] == ':' && v[22] == ':' && v.substr(25) == " GMT";
}

TEST_F(DownstreamRequestTest, EveryResponseHasOneDate) {
  start();
  TestConnection conn(sluice_->port());
  conn.sendRequest("GET", "/echo/date");  // forwarded: mock-llm sends no Date
  const TestResponse forwarded = conn.readResponse();
  ASSERT_EQ(forwarded.status, 200) << forwarded.body;
  EXPECT_EQ(forwarded.headers.getAll("date").size(), 1u) << conn.raw();
  EXPECT_TRUE(isImfFixdate(forwarded.headers.get("date").value_or(""))) << conn.raw();
  // sluice's own answer.
  TestConnection refused(sluice_->port());
  refused.send("GET /.. HTTP/1.1\r\nhost: t\r\n\r\n");
  const TestResponse own = refused.readResponse();
  ASSERT_EQ(own.status, 400) << own.body;
  EXPECT_TRUE(isImfFixdate(own.headers.get("date").value_or(""))) << refused.raw();

  H2Connection h2(sluice_->port());
  const int32_t ok = h2.submit("GET", "/echo/date");
  const int32_t bad = h2.submit("FROB", "/echo/date");
  ASSERT_TRUE(h2.waitForStream(ok));
  ASSERT_TRUE(h2.waitForStream(bad));
  EXPECT_EQ(h2.response(ok).status, 200);
  EXPECT_TRUE(isImfFixdate(h2.response(ok).headers.get("date").value_or("")));
  EXPECT_EQ(h2.response(bad).status, 400);
  EXPECT_TRUE(isImfFixdate(h2.response(bad).headers.get("date").value_or("")));
}

// RFC 9112 §6.1: sluice decodes no transfer coding but chunked, so it cannot
// forward a gzip-coded body honestly (it used to drop the coding and send
// the still-compressed bytes as if plain).
TEST_F(DownstreamRequestTest, ATransferCodingOtherThanChunkedIs501) {
  start();
  TestConnection conn(sluice_->port());
  conn.send(
      "POST /echo/te HTTP/1.1\r\nhost: t\r\ntransfer-encoding: gzip, chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n");
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, 501) << r.body;
  EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
  EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "urn:sluice:problem:not-implemented");
  EXPECT_TRUE(conn.waitForClose(milliseconds(5000)));
  EXPECT_EQ(mock_->ledger().size(), 0u);
  // Two fields make one list (RFC 9110 §5.3): the same.
  TestConnection split(sluice_->port());
  split.send(
      "POST /echo/te HTTP/1.1\r\nhost: t\r\ntransfer-encoding: gzip\r\n"
      "transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  EXPECT_EQ(split.readResponse().status, 501);
  // chunked alone, any case, still goes through.
  TestConnection plain(sluice_->port());
  plain.send(
      "POST /echo/te HTTP/1.1\r\nhost: t\r\ntransfer-encoding: Chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n");
  const TestResponse ok = plain.readResponse();
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(nlohmann::json::parse(ok.body)["body"], "hello");
}

// RFC 9112 §3: a request-target longer than sluice takes is 414, not 431.
TEST_F(DownstreamRequestTest, AnOverlongRequestTargetIs414) {
  start("limits: {max_header_bytes: 4KiB}\n");
  for (const size_t length : {size_t{5 * 1024}, size_t{90 * 1024}}) {
    TestConnection conn(sluice_->port());
    conn.send("GET /echo/" + std::string(length, 'a') + " HTTP/1.1\r\nhost: t\r\n\r\n");
    const TestResponse r = conn.readResponse();
    EXPECT_EQ(r.status, 414) << length << ": " << r.body;
    EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "urn:sluice:problem:uri-too-long");
    EXPECT_TRUE(conn.waitForClose(milliseconds(5000)));
  }
  // A short target with large headers is still 431.
  TestConnection conn(sluice_->port());
  conn.send("GET /echo/x HTTP/1.1\r\nhost: t\r\nx-big: " + std::string(5 * 1024, 'b') + "\r\n\r\n");
  EXPECT_EQ(conn.readResponse().status, 431);
  EXPECT_EQ(mock_->ledger().size(), 0u);
}

// The listener says whether the client used TLS; a client's own
// X-Forwarded-Proto is not passed on (it could claim https on plain HTTP).
TEST_F(DownstreamRequestTest, XForwardedProtoIsTheListenersScheme) {
  start();
  const TestResponse r =
      httpRequest(sluice_->port(), "GET", "/echo/xfp", {{"x-forwarded-proto", "https"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["headers"]["x-forwarded-proto"], "http");
}

/**
 * A scripted HTTP/1.1 "upstream": answers every request on every connection
 * with `response` and counts the connections it accepted.
 */
class RawUpstream {
 public:
  explicit RawUpstream(std::string response) : response_(std::move(response)) {
    const LoopbackListener listener = listenOnLoopback(16);
    fd_ = listener.fd;
    port_ = listener.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~RawUpstream() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (int c : clients_) ::close(c);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++accepted_;
      clients_.push_back(c);
      // One request head in, the scripted answer out; keep the socket open
      // (sluice, not the upstream, must decide not to reuse it).
      std::string in;
      char buf[4096];
      while (in.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      (void)!::send(c, response_.data(), response_.size(), MSG_NOSIGNAL);
    }
  }

  std::string response_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> clients_;
};

enum class Expect {
  BadGateway,  // the head is broken: 502 problem+json
  Truncated,   // the head went to the client, then the body broke: no complete response
  Complete,    // the response is fine, but what follows it poisons the connection
};

struct ResponseCase {
  const char* name;
  std::string bytes;
  Expect expect;
};

class UpstreamFramingTest : public ::testing::TestWithParam<ResponseCase> {};

TEST_P(UpstreamFramingTest, Is502AndTheConnectionIsNotReused) {
  RawUpstream upstream(GetParam().bytes);
  SluiceUnderTest sluice(config(upstream.url()));
  for (int i = 0; i < 2; ++i) {
    const TestResponse r = httpRequest(sluice.port(), "GET", "/x");
    switch (GetParam().expect) {
      case Expect::BadGateway:
        EXPECT_EQ(r.status, 502) << r.body;
        EXPECT_EQ(nlohmann::json::parse(r.body, nullptr, false).value("type", ""),
                  "urn:sluice:problem:upstream-protocol-error");
        break;
      case Expect::Truncated:
        // Already under way: the client must see it cut (or nothing at all),
        // never a complete response.
        EXPECT_FALSE(r.complete) << r.body;
        break;
      case Expect::Complete:
        EXPECT_EQ(r.status, 200);
        EXPECT_TRUE(r.complete);
        EXPECT_EQ(r.body, "hello");
        break;
    }
  }
  EXPECT_EQ(upstream.accepted(), 2) << "a connection with broken framing must not be reused";
}

INSTANTIATE_TEST_SUITE_P(
    BrokenFraming, UpstreamFramingTest,
    ::testing::Values(
        ResponseCase{"ConflictingContentLengths",
                     "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 7\r\n\r\nhello",
                     Expect::BadGateway},
        ResponseCase{"ContentLengthAndChunked",
                     "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n0\r\n\r\n",
                     Expect::BadGateway},
        ResponseCase{"NotHttp", "SSH-2.0-OpenSSH_9.2\r\n\r\n", Expect::BadGateway},
        ResponseCase{"NulInHeaderValue",
                     "HTTP/1.1 200 OK\r\nx-a: a" + std::string(1, '\0') +
                         "b\r\ncontent-length: 5\r\n\r\nhello",
                     Expect::BadGateway},
        // A valid head and a broken chunk in one read: nothing reached the
        // client yet, so it is a 502, not an empty reply (issue 13, item 6).
        ResponseCase{"BadChunkSizeInTheHeadsRead",
                     "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n",
                     Expect::BadGateway},
        // More than sluice holds back (64 KiB) went to the client first: cut.
        ResponseCase{"BadChunkAfterMoreThanSluiceHoldsBack",
                     "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10001\r\n" +
                         std::string(0x10001, 'x') + "\r\nzz\r\n",
                     Expect::Truncated},
        // Nobody asked to upgrade (sluice never forwards Upgrade): not HTTP any more.
        ResponseCase{"UnsolicitedSwitchingProtocols",
                     "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\n"
                     "upgrade: websocket\r\n\r\n",
                     Expect::BadGateway},
        // Refused since llhttp (http-parser accepted the first two; a proxy
        // may not forward "name : value" as it is, RFC 9112 §5.1), and a
        // field without a name (refused before too).
        ResponseCase{"BareLfInTheHead", "HTTP/1.1 200 OK\ncontent-length: 5\n\nhello",
                     Expect::BadGateway},
        ResponseCase{"SpaceBeforeColon", "HTTP/1.1 200 OK\r\ncontent-length : 5\r\n\r\nhello",
                     Expect::BadGateway},
        ResponseCase{"EmptyHeaderName", "HTTP/1.1 200 OK\r\n: v\r\ncontent-length: 5\r\n\r\nhello",
                     Expect::BadGateway},
        // A head longer than 80 KiB (http-parser's bound, kept).
        ResponseCase{"HeadAbove80KiB",
                     "HTTP/1.1 200 OK\r\nx-a: " + std::string(81 * 1024, 'a') +
                         "\r\ncontent-length: 5\r\n\r\nhello",
                     Expect::BadGateway},
        ResponseCase{"ExtraBytesAfterTheBody",
                     "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n\r\n",
                     Expect::Complete}),
    [](const ::testing::TestParamInfo<ResponseCase>& info) {
      return std::string(info.param.name);
    });

// ... and it is counted as the 502 the client got, not as the upstream's 200,
// also when a valid chunk came before the broken one.
TEST(UpstreamFramingTest, AHeadAndABrokenChunkInOneReadAreCountedAs502) {
  RawUpstream upstream("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n");
  SluiceUnderTest sluice(config(upstream.url()));
  const TestResponse r = httpRequest(sluice.port(), "GET", "/x");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "502"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "200"}}), 0);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "reset"}}), 1);
}

// RFC 9112 §2.3: a higher minor version of HTTP/1 is read as HTTP/1.1 (llhttp
// alone refuses it; http-parser did not).
TEST(UpstreamFramingTest, AnHttp12ResponseIsReadAsHttp11) {
  RawUpstream upstream("HTTP/1.2 200 OK\r\ncontent-length: 5\r\n\r\nhello");
  SluiceUnderTest sluice(config(upstream.url()));
  const TestResponse r = httpRequest(sluice.port(), "GET", "/x");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "hello");
}

class NoContentTest : public ::testing::TestWithParam<int> {};

TEST_P(NoContentTest, LosesItsContentLengthAndNeverHasABody) {
  const int status = GetParam();
  // The upstream's wrong Content-Length and the bytes after the head (which
  // are not a body: RFC 9112 §6.3) must not reach the client.
  RawUpstream upstream("HTTP/1.1 " + std::to_string(status) +
                       " Whatever\r\ncontent-length: 5\r\nx-kept: yes\r\n\r\nhello");
  SluiceUnderTest sluice(config(upstream.url()));
  TestConnection conn(sluice.port());
  conn.sendRequest("GET", "/x");
  const TestResponse r = conn.readResponse();
  EXPECT_EQ(r.status, status);
  EXPECT_TRUE(r.complete);
  EXPECT_FALSE(r.headers.has("content-length")) << conn.raw();
  EXPECT_EQ(r.headers.get("x-kept").value_or(""), "yes");
  EXPECT_EQ(conn.raw().find("hello"), std::string::npos) << conn.raw();
}

INSTANTIATE_TEST_SUITE_P(NoContent, NoContentTest, ::testing::Values(204, 304));

TEST(UpstreamDateTest, AnUpstreamsDateIsKeptNotDoubled) {
  RawUpstream upstream(
      "HTTP/1.1 200 OK\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\ncontent-length: 2\r\n\r\nok");
  SluiceUnderTest sluice(config(upstream.url()));
  TestConnection conn(sluice.port());
  conn.sendRequest("GET", "/x");
  const TestResponse r = conn.readResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.getAll("date").size(), 1u) << conn.raw();
  EXPECT_EQ(r.headers.get("date").value_or(""), "Sun, 06 Nov 1994 08:49:37 GMT");
}

/**
 * A keep-alive scripted upstream: one connection, whose requests are answered
 * in order with `responses` (one per request head). With `slice` > 0 each
 * response goes out in sends of that many bytes (TCP_NODELAY: as many
 * segments), so sluice reads it in as many pieces as the timing gives.
 */
class KeepAliveUpstream {
 public:
  explicit KeepAliveUpstream(std::vector<std::string> responses, size_t slice = 0)
      : responses_(std::move(responses)), slice_(slice) {
    const LoopbackListener listener = listenOnLoopback(4);
    fd_ = listener.fd;
    port_ = listener.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~KeepAliveUpstream() {
    proceed();
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (client_ >= 0) ::shutdown(client_, SHUT_RDWR);
    thread_.join();
    if (client_ >= 0) ::close(client_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }
  /**
   * Response `response` stops after its first `bytes` bytes until proceed():
   * its rest then reaches sluice in a later read, for sure. Call before the
   * request is sent.
   */
  void pauseAt(size_t response, size_t bytes) {
    pause_response_ = response;
    pause_bytes_ = bytes;
  }
  void proceed() {
    const std::lock_guard<std::mutex> lock(mutex_);
    proceeded_ = true;
    proceed_cv_.notify_all();
  }

 private:
  void sendAll(int c, std::string_view bytes) {
    const size_t step = slice_ > 0 ? slice_ : bytes.size();
    for (size_t at = 0; at < bytes.size(); at += step) {
      const std::string_view piece = bytes.substr(at, step);
      (void)!::send(c, piece.data(), piece.size(), MSG_NOSIGNAL);
    }
  }

  void respond(int c, size_t index, const std::string& response) {
    if (index != pause_response_) {
      sendAll(c, response);
      return;
    }
    sendAll(c, std::string_view(response).substr(0, pause_bytes_));
    std::unique_lock<std::mutex> lock(mutex_);
    proceed_cv_.wait(lock, [this] { return proceeded_; });
    lock.unlock();
    sendAll(c, std::string_view(response).substr(pause_bytes_));
  }

  void serve() {
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    ++accepted_;
    client_ = c;
    const int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string in;
    char buf[4096];
    for (size_t i = 0; i < responses_.size(); ++i) {
      const std::string& response = responses_[i];
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      in.erase(0, end + 4);  // GET requests: no body
      respond(c, i, response);
    }
  }

  std::vector<std::string> responses_;
  size_t slice_ = 0;
  size_t pause_response_ = SIZE_MAX;
  size_t pause_bytes_ = 0;
  std::mutex mutex_;
  std::condition_variable proceed_cv_;
  bool proceeded_ = false;
  int fd_ = -1;
  int client_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<int> accepted_{0};
};

// A response head is held while the rest of its read parses, then reported;
// on a reused connection the next response's head starts empty: it carries
// only its own fields (also after a 100 Continue and a body in the same read).
TEST(UpstreamReuseTest, AReusedConnectionsNextHeadCarriesOnlyItsOwnFields) {
  KeepAliveUpstream upstream({
      "HTTP/1.1 100 Continue\r\nx-interim: 1\r\n\r\n"
      "HTTP/1.1 200 OK\r\nx-first: 1\r\ncontent-length: 5\r\n\r\nhello",
      "HTTP/1.1 201 Created\r\nx-second: 2\r\ncontent-length: 3\r\n\r\nbye",
  });
  SluiceUnderTest sluice(config(upstream.url()));
  const TestResponse first = httpRequest(sluice.port(), "GET", "/a");
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.body, "hello");
  EXPECT_EQ(first.headers.get("x-first").value_or(""), "1");
  EXPECT_FALSE(first.headers.has("x-interim"));
  const TestResponse second = httpRequest(sluice.port(), "GET", "/b");
  EXPECT_EQ(second.status, 201) << second.body;
  EXPECT_EQ(second.body, "bye");
  EXPECT_EQ(second.headers.get("x-second").value_or(""), "2");
  EXPECT_FALSE(second.headers.has("x-first"));
  EXPECT_FALSE(second.headers.has("x-interim"));
  EXPECT_EQ(upstream.accepted(), 1);  // the same upstream connection carried both
}

// An upstream's chunked trailer section (RFC 9110 §6.5) never reaches a
// head: not its own response's (where a `content-length` trailer would
// re-frame the body), not the next response's on the pooled connection,
// which is another client's. HTTP/1.1 clients get no trailers at all.
const std::string kWithTrailers =
    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-first: 1\r\n\r\n"
    "5\r\nhello\r\n0\r\nSet-Cookie: session=userA\r\nX-Leak: a\r\n"
    "Content-Length: 999\r\n\r\n";
const std::string kNext = "HTTP/1.1 200 OK\r\nx-second: 2\r\ncontent-length: 3\r\n\r\nbye";

void expectNoTrailerIn(const TestResponse& r, const std::string& raw = "") {
  EXPECT_FALSE(r.headers.has("set-cookie")) << raw;
  EXPECT_FALSE(r.headers.has("x-leak")) << raw;
  EXPECT_NE(r.headers.get("content-length").value_or(""), "999") << raw;
}

class UpstreamTrailersTest : public ::testing::TestWithParam<size_t> {};

TEST_P(UpstreamTrailersTest, NeverReachTheHeadOfThisOrTheNextClientsResponse) {
  KeepAliveUpstream upstream({kWithTrailers, kNext}, GetParam());
  SluiceUnderTest sluice(config(upstream.url()));
  const TestResponse a = httpRequest(sluice.port(), "GET", "/a");
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_TRUE(a.complete);
  EXPECT_EQ(a.body, "hello");
  EXPECT_EQ(a.headers.get("x-first").value_or(""), "1");
  expectNoTrailerIn(a);
  // Another client, on its own connection: the pooled upstream connection.
  const TestResponse b = httpRequest(sluice.port(), "GET", "/b");
  EXPECT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.body, "bye");
  EXPECT_EQ(b.headers.get("x-second").value_or(""), "2");
  EXPECT_FALSE(b.headers.has("x-first"));
  expectNoTrailerIn(b);
  EXPECT_EQ(upstream.accepted(), 1);  // the same upstream connection carried both
}

// One client pipelining both requests: a trailer's Content-Length in a head
// would frame the first response wrong and desynchronise the second.
TEST_P(UpstreamTrailersTest, NeverDesyncAPipeliningClient) {
  KeepAliveUpstream upstream({kWithTrailers, kNext}, GetParam());
  SluiceUnderTest sluice(config(upstream.url()));
  TestConnection conn(sluice.port());
  conn.send("GET /a HTTP/1.1\r\nhost: t\r\n\r\nGET /b HTTP/1.1\r\nhost: t\r\n\r\n");
  const TestResponse first = conn.readResponse();
  const TestResponse second = conn.readResponse();
  EXPECT_EQ(first.status, 200) << conn.raw();
  EXPECT_EQ(first.body, "hello") << conn.raw();
  expectNoTrailerIn(first, conn.raw());
  EXPECT_EQ(second.status, 200) << conn.raw();
  EXPECT_TRUE(second.complete) << conn.raw();
  EXPECT_EQ(second.body, "bye") << conn.raw();
  expectNoTrailerIn(second, conn.raw());
  EXPECT_EQ(conn.raw().find("userA"), std::string::npos) << conn.raw();
}

// 0: each response in one send; 1: a send per byte (reads of any size).
INSTANTIATE_TEST_SUITE_P(ReadSplits, UpstreamTrailersTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return info.param == 0 ? std::string("OneSend")
                                                  : std::string("SendPerByte");
                         });

// The trailers come in a later read than the head and body (which the client
// already has): they must not wait in the parser for the next response's head.
TEST(UpstreamTrailersTest, InALaterReadNeverReachTheNextClientsHead) {
  KeepAliveUpstream upstream({kWithTrailers, kNext});
  upstream.pauseAt(0, kWithTrailers.find("Set-Cookie"));
  SluiceUnderTest sluice(config(upstream.url()));
  TestConnection a(sluice.port());
  a.sendRequest("GET", "/a");
  a.readUntil([](const TestResponse& r) { return r.body == "hello"; });
  upstream.proceed();
  const TestResponse first = a.readResponse();
  EXPECT_TRUE(first.complete) << a.raw();
  EXPECT_EQ(first.body, "hello");
  expectNoTrailerIn(first, a.raw());
  const TestResponse b = httpRequest(sluice.port(), "GET", "/b");
  EXPECT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.body, "bye");
  expectNoTrailerIn(b);
  EXPECT_EQ(upstream.accepted(), 1);
}

// An HTTP/2 client that sent `te: trailers` gets them as a trailer section
// (HEADERS after the DATA), without what must not be a trailer
// (Content-Length); one that did not gets none. Neither sees them in a head.
TEST(UpstreamTrailersTest, GoAsTrailersToAnHttp2ClientThatAskedForThem) {
  KeepAliveUpstream upstream({kWithTrailers, kWithTrailers});
  SluiceUnderTest sluice(config(upstream.url()));
  H2Connection h2(sluice.port());
  const int32_t asked = h2.submit("GET", "/a", {{"te", "trailers"}});
  ASSERT_TRUE(h2.waitForStream(asked));
  const H2Response& a = h2.response(asked);
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(a.complete);
  EXPECT_EQ(a.body, "hello");
  EXPECT_FALSE(a.headers.has("set-cookie"));
  EXPECT_FALSE(a.headers.has("x-leak"));
  EXPECT_EQ(a.trailers.get("set-cookie").value_or(""), "session=userA");
  EXPECT_EQ(a.trailers.get("x-leak").value_or(""), "a");
  EXPECT_FALSE(a.trailers.has("content-length"));

  const int32_t silent = h2.submit("GET", "/b");
  ASSERT_TRUE(h2.waitForStream(silent));
  const H2Response& b = h2.response(silent);
  EXPECT_EQ(b.status, 200);
  EXPECT_TRUE(b.complete);
  EXPECT_EQ(b.body, "hello");
  EXPECT_TRUE(b.trailers.empty());
  EXPECT_FALSE(b.headers.has("set-cookie"));
  EXPECT_FALSE(b.headers.has("x-leak"));
  EXPECT_EQ(upstream.accepted(), 1);
}

/**
 * An upstream that answers as soon as it has a request's head and never
 * reads the rest: a big body stays unsent in sluice's output buffer.
 */
TEST(UpstreamReuseTest, AConnectionThatAnsweredBeforeTheWholeBodyWasSentIsNotReused) {
  RawUpstream upstream("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
  // Buffered whole (replayable up to 32 MiB): all 16 MiB are ready to send
  // when the early answer comes. budget: a reused connection would never
  // carry the next request, which would time out.
  SluiceUnderTest sluice(
      config(upstream.url(), "{attempts: 1, max_body: 32MiB}", "    budget: {default: 5s}"));
  const TestResponse first =
      httpRequest(sluice.port(), "POST", "/upload", {}, std::string(16 * 1024 * 1024, 'x'));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "ok");
  const TestResponse second = httpRequest(sluice.port(), "GET", "/next");
  EXPECT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.body, "ok");
  EXPECT_EQ(upstream.accepted(), 2) << "the first connection still owed 16 MiB: never pooled";
}

}  // namespace
}  // namespace sluice::test
