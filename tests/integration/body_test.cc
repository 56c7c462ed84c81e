// Request bodies against the real binary: the
// process-wide cap `limits.max_buffered_body_bytes` answers 503 `overloaded`
// when concurrent uploads would pass it; a body no retry can replay is
// streamed to the upstream while the client is still sending it, through a
// cap far smaller than the body; big bodies that were buffered give their
// memory back to the OS once they are gone. The upstream here is either
// mock-llm (`x-mock-status: 204`: no echo of a 48 MiB body) or a raw
// HTTP/1.1 server that counts the body bytes it has received so far.

#include <gtest/gtest.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/loopback.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

constexpr size_t kMiB = 1024 * 1024;

std::string config(const std::string& url, const std::string& limits, const std::string& retry) {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: up
    url: ${URL}
    http2: off
routes:
  - name: upload
    match: {path_prefix: /}
    upstream: up
    retry: ${RETRY}
limits:
  max_body: 64MiB
${LIMITS}
)",
                    {{"URL", url}, {"LIMITS", limits}, {"RETRY", retry}});
}

std::string uploadHead(size_t length, const std::string& extra = "") {
  return "POST /echo/upload HTTP/1.1\r\nhost: t\r\nx-mock-status: 204\r\n" + extra +
         "content-length: " + std::to_string(length) + "\r\n\r\n";
}

/** A field of /proc/PID/status in KiB (VmRSS: resident now; VmHWM: the peak). */
size_t statusKiB(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1));
  }
  return 0;
}

/** The sanitizers keep freed memory (quarantine) and ignore mallopt: RSS says nothing there. */
bool underSanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

/**
 * A raw HTTP/1.1 upstream that parses each request with http-parser and
 * counts the body bytes received so far (chunked or not), then answers
 * `200 ok` once the request is complete. One connection at a time.
 */
class CountingUpstream {
 public:
  CountingUpstream() {
    const LoopbackListener listener = listenOnLoopback(16);
    fd_ = listener.fd;
    port_ = listener.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~CountingUpstream() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    const int c = client_.load();
    if (c >= 0) ::shutdown(c, SHUT_RDWR);  // the serving thread closes it
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  size_t bodyBytes() const { return body_bytes_.load(); }
  bool chunked() const { return chunked_.load(); }

 private:
  void serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      client_ = c;
      http_parser parser;
      http_parser_init(&parser, HTTP_REQUEST);
      parser.data = this;
      http_parser_settings settings;
      http_parser_settings_init(&settings);
      settings.on_headers_complete = [](http_parser* p) {
        static_cast<CountingUpstream*>(p->data)->chunked_ = (p->flags & F_CHUNKED) != 0;
        return 0;
      };
      settings.on_body = [](http_parser* p, const char*, size_t n) {
        static_cast<CountingUpstream*>(p->data)->body_bytes_ += n;
        return 0;
      };
      settings.on_message_complete = [](http_parser* p) {
        static_cast<CountingUpstream*>(p->data)->complete_ = true;
        return 0;
      };
      char buf[64 * 1024];
      for (;;) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        http_parser_execute(&parser, &settings, buf, static_cast<size_t>(n));
        if (complete_.exchange(false)) {
          static constexpr char kOk[] = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
          (void)!::send(c, kOk, sizeof(kOk) - 1, MSG_NOSIGNAL);
        }
      }
      client_ = -1;
      ::close(c);
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<int> client_{-1};
  std::atomic<size_t> body_bytes_{0};
  std::atomic<bool> chunked_{false};
  std::atomic<bool> complete_{false};
};

std::string problemField(const std::string& body, const std::string& field) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains(field) || !j[field].is_string()) return "";
  return j[field].get<std::string>();
}

TEST(RequestBodyTest, ConcurrentUploadsAboveTheProcessCapGet503Overloaded) {
  MockLlm mock;
  // Bodies up to 32 MiB may be replayed: they are buffered whole, each
  // reserving its declared length of the 8 MiB the process may hold.
  SluiceProcess sluice(
      config(mock.url(), "  max_buffered_body_bytes: 8MiB", "{attempts: 1, max_body: 32MiB}"));
  const size_t kBody = 3 * kMiB;
  TestConnection a(sluice.port());
  TestConnection b(sluice.port());
  a.send(uploadHead(kBody) + std::string(kMiB, 'a'));
  b.send(uploadHead(kBody) + std::string(kMiB, 'b'));
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_request_body_buffered_bytes") >= 2.0 * kBody;
  })) << sluice.metric("sluice_request_body_buffered_bytes");

  // A third 3 MiB body does not fit: refused before any of it is read.
  TestConnection c(sluice.port());
  c.send(uploadHead(kBody));
  const TestResponse refused = c.readResponse();
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.headers.get("content-type").value_or(""), "application/problem+json");
  EXPECT_EQ(problemField(refused.body, "type"), "urn:sluice:problem:overloaded");
  EXPECT_EQ(problemField(refused.body, "cancel_reason"), "overloaded");
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "overloaded"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "503"}}), 1);

  // The two under the cap finish, and give their room back.
  a.send(std::string(kBody - kMiB, 'a'));
  b.send(std::string(kBody - kMiB, 'b'));
  EXPECT_EQ(a.readResponse().status, 204);
  EXPECT_EQ(b.readResponse().status, 204);
  EXPECT_TRUE(waitUntil([&] { return sluice.metric("sluice_request_body_buffered_bytes") == 0; }));
  const TestResponse again = httpRequest(sluice.port(), "POST", "/echo/again",
                                         {{"x-mock-status", "204"}}, std::string(kBody, 'c'));
  EXPECT_EQ(again.status, 204);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "204"}}), 3);
}

TEST(RequestBodyTest, ABodyAboveRetryMaxBodyStreamsUpstreamWhileTheClientIsStillSending) {
  CountingUpstream upstream;
  // 256 KiB may be replayed; the 48 MiB body cannot, and the process may
  // hold only 1 MiB of body: it can only pass by being streamed.
  SluiceProcess sluice(
      config(upstream.url(), "  max_buffered_body_bytes: 1MiB", "{attempts: 1, max_body: 256KiB}"));
  const size_t rss_before_kib = statusKiB(sluice.pid(), "VmRSS");
  const size_t kBody = 48 * kMiB;
  TestConnection conn(sluice.port());
  conn.send(uploadHead(kBody) + std::string(2 * kMiB, 'x'));
  // The upstream has the first bytes while the client still holds 46 MiB.
  ASSERT_TRUE(waitUntil([&] { return upstream.bodyBytes() > 0; }));
  EXPECT_LT(upstream.bodyBytes(), kBody);
  EXPECT_LE(sluice.metric("sluice_request_body_buffered_bytes"), 1.0 * kMiB);
  for (size_t sent = 2 * kMiB; sent < kBody; sent += kMiB) conn.send(std::string(kMiB, 'x'));
  const TestResponse r = conn.readResponse(std::chrono::seconds(30));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "ok");
  EXPECT_EQ(upstream.bodyBytes(), kBody);
  EXPECT_FALSE(upstream.chunked()) << "a declared length is forwarded as such";
  EXPECT_TRUE(waitUntil([&] { return sluice.metric("sluice_request_body_buffered_bytes") == 0; }));
  if (!underSanitizer()) {
    // Memory stayed bounded: the peak RSS is nowhere near the body's size.
    EXPECT_LT(statusKiB(sluice.pid(), "VmHWM"), rss_before_kib + 16 * 1024);
  }
}

TEST(RequestBodyTest, AnUploadPausedForAnUpstreamThatDoesNotReadIsNotCutByBodyReadTimeout) {
  // An upstream that accepts and never reads: once its socket buffers are
  // full, sluice stops reading the client (backpressure). That pause is not
  // the client's fault: body_read_timeout (short here) must not end the
  // request with 408; the budget ends it (504).
  const LoopbackListener never_reads = listenOnLoopback(4);
  SluiceProcess sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - {name: up, url: "${URL}", http2: off}
routes:
  - name: upload
    match: {path_prefix: /}
    upstream: up
    retry: {attempts: 1, max_body: 256KiB}
    budget: {default: 2s}
limits:
  max_body: 64MiB
  header_read_timeout: 300ms
  body_read_timeout: 200ms
)",
                                  {{"URL", never_reads.url()}}));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(sluice.port());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  // The sender blocks once sluice stops reading; shutdown() below frees it.
  std::thread sender([fd] {
    const size_t kBody = 48 * kMiB;
    const std::string head = uploadHead(kBody);
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) <= 0) return;
    const std::string block(64 * 1024, 'x');
    for (size_t sent = 0; sent < kBody; sent += block.size()) {
      if (::send(fd, block.data(), block.size(), MSG_NOSIGNAL) <= 0) return;
    }
  });
  std::string response;
  char buf[4096];
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (response.find("\r\n\r\n") == std::string::npos &&
         std::chrono::steady_clock::now() < give_up) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  ::shutdown(fd, SHUT_RDWR);
  sender.join();
  ::close(fd);
  ::close(never_reads.fd);
  EXPECT_EQ(response.rfind("HTTP/1.1 504", 0), 0u) << response;
  EXPECT_EQ(sluice.metric("sluice_downstream_rejections_total", {{"reason", "body_timeout"}}), 0);
}

TEST(RequestBodyTest, AChunkedBodyAboveRetryMaxBodyIsStreamedChunked) {
  CountingUpstream upstream;
  SluiceProcess sluice(
      config(upstream.url(), "  max_buffered_body_bytes: 1MiB", "{attempts: 1, max_body: 256KiB}"));
  TestConnection conn(sluice.port());
  conn.send("POST /up HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n");
  const std::string piece(512 * 1024, 'y');
  char size_line[32];
  const int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
  // Past 256 KiB the body is streamed (no length known: chunked upstream too).
  conn.send(std::string(size_line, static_cast<size_t>(n)) + piece + "\r\n");
  ASSERT_TRUE(waitUntil([&] { return upstream.bodyBytes() > 0; }));
  EXPECT_TRUE(upstream.chunked());
  for (int i = 0; i < 15; ++i) {
    conn.send(std::string(size_line, static_cast<size_t>(n)) + piece + "\r\n");
  }
  conn.send("0\r\n\r\n");
  const TestResponse r = conn.readResponse(std::chrono::seconds(30));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(upstream.bodyBytes(), 16 * piece.size());
}

TEST(RequestBodyTest, AnHttp2UploadStreamsUpstreamWhileTheClientIsStillSending) {
  CountingUpstream upstream;
  // An HTTP/2 client may have a stream window (1 MiB) in flight beyond the
  // pause: the cap leaves room for it.
  SluiceProcess sluice(
      config(upstream.url(), "  max_buffered_body_bytes: 4MiB", "{attempts: 1, max_body: 256KiB}"));
  H2Connection conn(sluice.port());
  // 3 MiB sent of a declared 64 MiB, then the client stalls: nothing would
  // reach the upstream if sluice waited for the end.
  const int32_t id = conn.submitStalled("/up", std::string(3 * kMiB, 'z'), 64 * kMiB);
  ASSERT_GT(id, 0);
  EXPECT_TRUE(conn.runUntil([&] { return upstream.bodyBytes() >= 2 * kMiB; }))
      << upstream.bodyBytes();
  EXPECT_FALSE(conn.response(id).closed);
  EXPECT_LE(sluice.metric("sluice_request_body_buffered_bytes"), 4.0 * kMiB);
  conn.drop();
}

TEST(RequestBodyTest, BigBufferedBodiesGiveTheirMemoryBackOnceDone) {
  if (underSanitizer()) GTEST_SKIP() << "RSS is meaningless under a sanitizer's allocator";
  MockLlm mock;
  // Replayable (buffered whole) up to 64 MiB. Two rounds of four concurrent
  // 24 MiB uploads, with and without a declared length: glibc's dynamic mmap
  // threshold rises to the first big block freed, so later ones would come
  // from the heap and stay resident.
  SluiceProcess sluice(config(mock.url(), "", "{attempts: 1, max_body: 64MiB}"));
  const size_t rss_before_kib = statusKiB(sluice.pid(), "VmRSS");
  const size_t kBody = 24 * kMiB;
  const std::string piece(kMiB, 'm');
  char size_line[32];
  const int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
  const std::string chunk = std::string(size_line, static_cast<size_t>(n)) + piece + "\r\n";
  for (const bool chunked : {false, true}) {
    std::vector<std::unique_ptr<TestConnection>> conns;
    for (int i = 0; i < 4; ++i) {
      conns.push_back(std::make_unique<TestConnection>(sluice.port()));
      TestConnection& c = *conns.back();
      if (!chunked) {
        c.send(uploadHead(kBody) + std::string(kBody, 'm'));
        continue;
      }
      c.send(
          "POST /echo/upload HTTP/1.1\r\nhost: t\r\nx-mock-status: 204\r\n"
          "transfer-encoding: chunked\r\n\r\n");
      for (size_t sent = 0; sent < kBody; sent += piece.size()) c.send(chunk);
      c.send("0\r\n\r\n");
    }
    for (auto& c : conns) EXPECT_EQ(c->readResponse(std::chrono::seconds(30)).status, 204);
  }
  EXPECT_TRUE(waitUntil([&] { return sluice.metric("sluice_request_body_buffered_bytes") == 0; }));
  // Freed bodies go back to the OS, not into a heap that keeps them.
  EXPECT_TRUE(waitUntil([&] {
    return statusKiB(sluice.pid(), "VmRSS") < rss_before_kib + 24 * 1024;
  })) << statusKiB(sluice.pid(), "VmRSS")
      << " KiB resident, " << rss_before_kib << " KiB before";
}

}  // namespace
}  // namespace sluice::test
