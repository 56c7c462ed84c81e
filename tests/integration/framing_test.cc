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
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

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
        RequestCase{"ObsoleteLineFolding", kHead + "x-folded: a\r\n  b\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"NulInHeaderValue",
                    kHead + "x-nul: a" + std::string(1, '\0') + "b\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"BareCrInHeaderValue", kHead + "x-cr: a\rb\r\ncontent-length: 0\r\n\r\n"},
        RequestCase{"SpaceBeforeColon", kHead + "content-length : 0\r\n\r\n"}),
    [](const ::testing::TestParamInfo<RequestCase>& info) { return std::string(info.param.name); });

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
        ResponseCase{"ExtraBytesAfterTheBody",
                     "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n\r\n",
                     Expect::Complete}),
    [](const ::testing::TestParamInfo<ResponseCase>& info) { return std::string(info.param.name); });

TEST(UpstreamFramingTest, AHeadAndABrokenChunkInOneReadAreCountedAs502) {
  RawUpstream upstream(
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n");
  SluiceUnderTest sluice(config(upstream.url()));
  const TestResponse r = httpRequest(sluice.port(), "GET", "/x");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "502"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "200"}}), 0);
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
