// HTTP/2 to the upstream (DESIGN.md §1, §3): sluice multiplexes attempts as
// streams of one session per upstream per worker; cancelling one attempt
// resets that stream only; REFUSED_STREAM and GOAWAY are retried whatever the
// method. The client side is HTTP/1.1 here (mixed protocols on purpose); what
// the upstream saw — protocol, connection, which streams were reset and with
// which code — comes from mock-llm's ledger.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/loopback.h"
#include "tests/support/processes.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

constexpr uint32_t kCancel = 8;  // RFC 9113 §7 CANCEL

std::string config(const std::string& mock_url, const std::string& http2,
                   const std::string& upstream_extra = "", const std::string& route_extra = "") {
  return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
upstreams:
  - name: mock
    url: ${MOCK_URL}
    http2: ${HTTP2}
${UPSTREAM_EXTRA}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
${ROUTE_EXTRA}
)",
                    {{"MOCK_URL", mock_url},
                     {"HTTP2", http2},
                     {"UPSTREAM_EXTRA", upstream_extra},
                     {"ROUTE_EXTRA", route_extra}});
}

const char* kStream = R"({"model":"gpt-4o-mini","stream":true,"messages":[]})";
const char* kJson = R"({"model":"gpt-4o-mini","messages":[]})";

TestResponse chat(uint16_t port, const std::vector<std::pair<std::string, std::string>>& headers,
                  const std::string& body = kJson) {
  return httpRequest(port, "POST", "/v1/chat/completions", headers, body);
}

/** The mock's answer to the same request sent to it directly (HTTP/1.1), volatile fields blanked.
 */
std::string directBody(MockLlm& mock, const std::vector<std::pair<std::string, std::string>>& h,
                       const std::string& body) {
  return withoutVolatileFields(
      httpRequest(mock.port(), "POST", "/v1/chat/completions", h, body).body);
}

TEST(Http2UpstreamTest, H2cPriorKnowledgeStreamsByteExact) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "on"));
  const std::vector<std::pair<std::string, std::string>> h = {{"x-mock-tokens", "40"}};
  for (int i = 0; i < 3; ++i) {
    auto headers = h;
    headers.push_back({"x-mock-request-id", "h2-" + std::to_string(i)});
    const TestResponse r = chat(sluice.port(), headers, kStream);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.get("content-type").value_or("").rfind("text/event-stream", 0), 0u);
    EXPECT_EQ(withoutVolatileFields(r.body), directBody(mock, h, kStream));
  }
  std::set<uint64_t> connections;
  for (int i = 0; i < 3; ++i) {
    const auto e = mock.entry("h2-" + std::to_string(i));
    EXPECT_EQ(e["protocol"], "h2");
    EXPECT_TRUE(e["completed"].get<bool>());
    connections.insert(e["connection_id"].get<uint64_t>());
  }
  EXPECT_EQ(connections.size(), 1u) << "the three requests share one HTTP/2 session";
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "chat"}, {"code", "200"}}), 3);
}

TEST(Http2UpstreamTest, OffSpeaksHttp11) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "off"));
  const TestResponse r = chat(sluice.port(), {{"x-mock-request-id", "h1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(mock.entry("h1")["protocol"], "http/1.1");
}

// Twenty streams share one upstream session; ten clients leave mid-stream.
// Exactly those ten upstream streams are reset with CANCEL, the other ten
// complete, and the session is never torn down (one connection throughout).
TEST(Http2UpstreamTest, ClientAbortResetsOnlyItsOwnStream) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "on"));
  constexpr int kStreams = 20;
  std::vector<std::unique_ptr<TestConnection>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(std::make_unique<TestConnection>(sluice.port()));
    clients.back()->sendRequest("POST", "/v1/chat/completions",
                                {{"x-mock-request-id", "s" + std::to_string(i)},
                                 {"x-mock-tokens", i % 2 == 0 ? "400" : "30"},
                                 {"x-mock-token-interval-ms", i % 2 == 0 ? "10" : "2"}},
                                kStream);
  }
  // Every stream is under way (some body arrived) before anyone leaves.
  for (auto& c : clients) {
    c->readUntil([](const TestResponse& r) { return !r.body.empty(); });
  }
  for (int i = 0; i < kStreams; i += 2) clients[i]->close();
  for (int i = 1; i < kStreams; i += 2) {
    const TestResponse r = clients[i]->readResponse();
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.complete) << "stream " << i;
  }
  std::set<uint64_t> connections;
  for (int i = 0; i < kStreams; ++i) {
    const std::string id = "s" + std::to_string(i);
    const auto e = mock.waitForEntry(id, [](const nlohmann::json& e) {
      return e["completed"].get<bool>() || e["client_reset"].get<bool>();
    });
    connections.insert(e["connection_id"].get<uint64_t>());
    EXPECT_EQ(e["protocol"], "h2");
    if (i % 2 == 0) {
      EXPECT_TRUE(e["client_reset"].get<bool>()) << id;
      EXPECT_EQ(e["rst_error_code"].get<uint32_t>(), kCancel) << id;
      EXPECT_LT(e["tokens_emitted"].get<int64_t>(), 400) << id;
    } else {
      EXPECT_FALSE(e["client_reset"].get<bool>()) << id;
      EXPECT_TRUE(e["completed"].get<bool>()) << id;
    }
  }
  EXPECT_EQ(connections.size(), 1u) << "one session carried every stream, and survived";
  // The session still works after the resets.
  EXPECT_EQ(chat(sluice.port(), {{"x-mock-request-id", "after"}}).status, 200);
  EXPECT_EQ(mock.entry("after")["connection_id"].get<uint64_t>(), *connections.begin());
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "client_disconnect"}}),
            kStreams / 2);
}

// A budget that runs out mid-stream resets the upstream stream (not the session).
TEST(Http2UpstreamTest, BudgetExpiryResetsTheStream) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "on", "", "    budget: {header: x-budget-ms, default: 30s}"));
  const TestResponse r = chat(sluice.port(),
                              {{"x-mock-request-id", "late"},
                               {"x-budget-ms", "200"},
                               {"x-mock-tokens", "1000"},
                               {"x-mock-token-interval-ms", "10"}},
                              kStream);
  EXPECT_FALSE(r.complete);
  const auto e = mock.waitForEntry(
      "late", [](const nlohmann::json& e) { return e["client_reset"].get<bool>(); });
  EXPECT_EQ(e["rst_error_code"].get<uint32_t>(), kCancel);
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "budget_exhausted"}}),
            1);
}

// REFUSED_STREAM means nothing was processed: retried even though the route
// says POST is not idempotent.
TEST(Http2UpstreamTest, RefusedStreamIsRetriedEvenWhenNotIdempotent) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "on", "",
                                "    retry: {attempts: 3, idempotent: never, on: [reset, 503],"
                                " backoff: {base: 1ms, max: 5ms}}"));
  const TestResponse r = chat(
      sluice.port(),
      {{"x-mock-refuse-stream", "1"}, {"x-mock-fail-times", "1"}, {"x-mock-fail-key", "refused"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "2");
  EXPECT_EQ(sluice.metric("sluice_retries_total", {{"route", "chat"}, {"cause", "reset"}}), 1);

  // A 503 on the same non-idempotent route is not retried: it may have been processed.
  const TestResponse r503 = chat(sluice.port(), {{"x-mock-status", "503"}});
  EXPECT_EQ(r503.status, 503);
  EXPECT_EQ(r503.headers.get("x-sluice-attempts").value_or(""), "1");
}

TEST(Http2UpstreamTest, GoawayBelowTheStreamIsRetriedOnANewSession) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "on", "",
                                "    retry: {attempts: 3, idempotent: never, on: [reset],"
                                " backoff: {base: 1ms, max: 5ms}}"));
  const TestResponse r =
      chat(sluice.port(),
           {{"x-mock-goaway", "1"}, {"x-mock-fail-times", "1"}, {"x-mock-fail-key", "ga"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "2");
  // Later requests still work: a new session replaced the one going away.
  EXPECT_EQ(chat(sluice.port(), {}).status, 200);
}

// A stream the upstream resets mid-response is a `reset` outcome: it counts
// towards the circuit breaker just like a broken HTTP/1.1 connection.
TEST(Http2UpstreamTest, CircuitOpensOnStreamResets) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "on", "    circuit_breaker: {consecutive_failures: 3, cooldown: 30s}"));
  for (int i = 0; i < 3; ++i) {
    const TestResponse r = chat(sluice.port(), {{"x-mock-status", "503"}});
    EXPECT_EQ(r.status, 503);
  }
  const TestResponse open = chat(sluice.port(), {{"x-mock-request-id", "never-sent"}});
  EXPECT_EQ(open.status, 503);
  EXPECT_NE(open.body.find("circuit_open"), std::string::npos) << open.body;
  EXPECT_TRUE(mock.ledger("never-sent").empty());
  EXPECT_EQ(sluice.metric("sluice_circuit_state", {{"upstream", "mock"}}), 1);
}

// A slow client pauses its upstream stream through HTTP/2 flow control: what
// sluice holds stays bounded, and everything still arrives byte-exact.
TEST(Http2UpstreamTest, SlowClientIsPausedThroughFlowControlAndLosesNothing) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "on"));
  const std::vector<std::pair<std::string, std::string>> h = {{"x-mock-tokens", "3000"}};
  TestConnection slow(sluice.port(), /*receive_buffer=*/4096);
  slow.sendRequest("POST", "/v1/chat/completions", h, kStream);
  // Read a little, then let the upstream run into the client's pace.
  slow.readUntil([](const TestResponse& r) { return r.body.size() > 1000; });
  const TestResponse r = slow.readResponse(std::chrono::seconds(30));
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(withoutVolatileFields(r.body), directBody(mock, h, kStream));
}

// The upstream allows two streams per connection: a third concurrent attempt
// opens another session instead of queueing behind the full one.
TEST(Http2UpstreamTest, OpensAnotherSessionWhenThePeersStreamLimitIsReached) {
  MockLlm mock("", "", {"--h2-max-concurrent-streams", "2"});
  SluiceUnderTest sluice(config(mock.url(), "on"));
  // One request first, so the session has the upstream's SETTINGS.
  ASSERT_EQ(chat(sluice.port(), {}).status, 200);
  constexpr int kStreams = 5;
  std::vector<std::unique_ptr<TestConnection>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(std::make_unique<TestConnection>(sluice.port()));
    clients.back()->sendRequest("POST", "/v1/chat/completions",
                                {{"x-mock-request-id", "c" + std::to_string(i)},
                                 {"x-mock-tokens", "20"},
                                 {"x-mock-token-interval-ms", "10"}},
                                kStream);
  }
  for (auto& c : clients) EXPECT_TRUE(c->readResponse().complete);
  // Per upstream connection, the most streams the mock was serving at once.
  std::map<uint64_t, std::vector<std::pair<int64_t, int>>> events;  // time, +1 / -1
  for (int i = 0; i < kStreams; ++i) {
    const auto e = mock.entry("c" + std::to_string(i));
    auto& ev = events[e["connection_id"].get<uint64_t>()];
    ev.push_back({e["received_us"].get<int64_t>(), +1});
    ev.push_back({e["finished_us"].get<int64_t>(), -1});
  }
  // A full session makes sluice open another (a stream sent before the new
  // session's SETTINGS arrived may wait in nghttp2's queue: never above the limit).
  EXPECT_GE(events.size(), 2u);
  for (auto& [conn, ev] : events) {
    std::sort(ev.begin(), ev.end());  // an end sorts before a start at the same time
    int open = 0, peak = 0;
    for (const auto& [t, d] : ev) peak = std::max(peak, open += d);
    EXPECT_LE(peak, 2) << "connection " << conn << " exceeded the peer's stream limit";
  }
}

// Issue 13, item 6: the upstream resets its stream right after the HEADERS
// (mock-llm writes them, waits until they left, then sends RST_STREAM: one
// read in sluice or two, as it comes). No body byte reached the client, so it
// gets a 502 problem, counted as 502, never an empty reply counted as 200.
TEST(Http2UpstreamTest, AResetRightAfterTheHeadIsA502NotAnEmptyReply) {
  MockLlm mock;
  SluiceUnderTest sluice(config(mock.url(), "on", "", "    retry: {attempts: 1}"));
  constexpr int kRequests = 5;
  for (int i = 0; i < kRequests; ++i) {
    const TestResponse r = chat(sluice.port(), {{"x-mock-reset-after-tokens", "0"}}, kStream);
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_TRUE(r.complete);
    EXPECT_NE(r.body.find("upstream-reset"), std::string::npos) << r.body;
  }
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "502"}}), kRequests);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "200"}}), 0);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "reset"}}), kRequests);
}

// ... and where the route allows, it is retried like any reset before the
// response started.
TEST(Http2UpstreamTest, AResetRightAfterTheHeadIsRetriedWhenTheRouteAllows) {
  MockLlm mock;
  SluiceUnderTest sluice(
      config(mock.url(), "on", "",
             "    retry: {attempts: 2, on: [reset], backoff: {base: 1ms, max: 2ms}}"));
  const TestResponse r = chat(sluice.port(), {{"x-mock-reset-after-tokens", "0"}}, kStream);
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "2");
  EXPECT_EQ(sluice.metric("sluice_retries_total", {{"cause", "reset"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "reset"}}), 2);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "502"}}), 1);
}

std::string h2Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  f += static_cast<char>((payload.size() >> 16) & 0xff);
  f += static_cast<char>((payload.size() >> 8) & 0xff);
  f += static_cast<char>(payload.size() & 0xff);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  for (int shift = 24; shift >= 0; shift -= 8) f += static_cast<char>((stream >> shift) & 0xff);
  return f + payload;
}

std::string be32(uint32_t v) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
  return out;
}

constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4, kGoaway = 0x7;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4, kAck = 0x1;
const std::string kStatus200(1, static_cast<char>(0x88));  // HPACK static index 8: :status 200

/**
 * A scripted h2c upstream (prior knowledge). The first request stream it
 * ever sees is answered by `first(stream)`, written with the connection's
 * SETTINGS and SETTINGS ACK in ONE send, so sluice parses it all in one
 * read; every later stream, on any connection, gets a clean 200 "ok".
 */
class RawH2Upstream {
 public:
  explicit RawH2Upstream(std::function<std::string(uint32_t)> first) : first_(std::move(first)) {
    const LoopbackListener listener = listenOnLoopback(8);
    fd_ = listener.fd;
    port_ = listener.port;
    thread_ = std::thread([this] { acceptLoop(); });
  }
  ~RawH2Upstream() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();  // no connection is added after this
    for (int c : clients_) ::shutdown(c, SHUT_RDWR);
    for (auto& t : connections_) t.join();
    for (int c : clients_) ::close(c);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }

 private:
  void acceptLoop() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++accepted_;
      clients_.push_back(c);
      connections_.emplace_back([this, c] { serve(c); });
    }
  }

  void serve(int c) {
    std::string in;
    char buf[16384];
    bool preface = false;
    bool greeted = false;
    for (;;) {
      const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
      if (!preface) {
        if (in.size() < 24) continue;
        in.erase(0, 24);  // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        preface = true;
      }
      while (in.size() >= 9) {
        const size_t len = (static_cast<uint8_t>(in[0]) << 16) |
                           (static_cast<uint8_t>(in[1]) << 8) | static_cast<uint8_t>(in[2]);
        if (in.size() < 9 + len) break;
        const uint8_t type = static_cast<uint8_t>(in[3]);
        const uint32_t stream = ((static_cast<uint8_t>(in[5]) & 0x7f) << 24) |
                                (static_cast<uint8_t>(in[6]) << 16) |
                                (static_cast<uint8_t>(in[7]) << 8) | static_cast<uint8_t>(in[8]);
        in.erase(0, 9 + len);
        if (type != kHeaders) continue;
        std::string out;
        if (!greeted) {
          out = h2Frame(kSettings, 0, 0, "") + h2Frame(kSettings, kAck, 0, "");
          greeted = true;
        }
        if (!first_done_.exchange(true)) {
          out += first_(stream);
        } else {
          out += h2Frame(kHeaders, kEndHeaders, stream, kStatus200) +
                 h2Frame(kData, kEndStream, stream, "ok");
        }
        (void)!::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      }
    }
  }

  std::function<std::string(uint32_t)> first_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::vector<std::thread> connections_;  // joined once the sockets are shut (destructor)
  std::vector<int> clients_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> first_done_{false};
  std::atomic<int> accepted_{0};
};

// HEADERS(200) + DATA + RST_STREAM in the read that carries the first DATA:
// the head and the bytes wait until that read parsed, so the reset fails the
// attempt before anything reached the client (as an HTTP/1.1 head and a
// broken chunk in one read do): a 502, never an empty reply counted as 200.
std::string headDataThenReset(uint32_t stream) {
  return h2Frame(kHeaders, kEndHeaders, stream, kStatus200) + h2Frame(kData, 0, stream, "hello") +
         h2Frame(kRstStream, 0, stream, be32(2));  // INTERNAL_ERROR
}

// ... and the same with a GOAWAY whose last-stream-id is below the stream:
// the upstream says it never processed it (refused: retried whatever the method).
std::string headDataThenGoawayBelow(uint32_t stream) {
  return h2Frame(kHeaders, kEndHeaders, stream, kStatus200) + h2Frame(kData, 0, stream, "hello") +
         h2Frame(kGoaway, 0, 0, be32(0) + be32(0));  // last-stream-id 0, NO_ERROR
}

TEST(Http2UpstreamOneReadTest, AResetInTheReadOfTheFirstDataIsA502) {
  RawH2Upstream upstream(headDataThenReset);
  SluiceUnderTest sluice(config(upstream.url(), "on", "", "    retry: {attempts: 1}"));
  const TestResponse r = chat(sluice.port(), {});
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_TRUE(r.complete);
  EXPECT_NE(r.body.find("upstream-reset"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("hello"), std::string::npos) << r.body;
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "502"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "200"}}), 0);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total", {{"result", "reset"}}), 1);
}

TEST(Http2UpstreamOneReadTest, AResetInTheReadOfTheFirstDataIsRetried) {
  RawH2Upstream upstream(headDataThenReset);
  SluiceUnderTest sluice(
      config(upstream.url(), "on", "",
             "    retry: {attempts: 2, on: [reset], backoff: {base: 1ms, max: 2ms}}"));
  const TestResponse r = chat(sluice.port(), {});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "ok");
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "2");
  EXPECT_EQ(sluice.metric("sluice_retries_total", {{"cause", "reset"}}), 1);
}

TEST(Http2UpstreamOneReadTest, AGoawayBelowTheStreamInTheReadOfTheFirstDataIsRetried) {
  RawH2Upstream upstream(headDataThenGoawayBelow);
  // Refused is retried even where the route retries nothing else.
  SluiceUnderTest sluice(config(upstream.url(), "on", "",
                                "    retry: {attempts: 2, idempotent: never, on: [reset],"
                                " backoff: {base: 1ms, max: 2ms}}"));
  const TestResponse r = chat(sluice.port(), {});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "ok");
  EXPECT_EQ(r.headers.get("x-sluice-attempts").value_or(""), "2");
  EXPECT_EQ(upstream.accepted(), 2) << "the retry goes to a new session";
}

TEST(Http2UpstreamOneReadTest, AGoawayBelowTheStreamInTheReadOfTheFirstDataIsA502) {
  RawH2Upstream upstream(headDataThenGoawayBelow);
  SluiceUnderTest sluice(config(upstream.url(), "on", "", "    retry: {attempts: 1}"));
  const TestResponse r = chat(sluice.port(), {});
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_TRUE(r.complete);
  EXPECT_NE(r.body.find("upstream-refused"), std::string::npos) << r.body;
  EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "200"}}), 0);
}

// A clean answer whose head, DATA and END_STREAM share one read still
// streams whole (the held head and bytes are reported after the read).
TEST(Http2UpstreamOneReadTest, HeadDataAndEndInOneReadArriveWhole) {
  RawH2Upstream upstream([](uint32_t stream) {
    return h2Frame(kHeaders, kEndHeaders, stream, kStatus200) + h2Frame(kData, 0, stream, "hel") +
           h2Frame(kData, kEndStream, stream, "lo");
  });
  SluiceUnderTest sluice(config(upstream.url(), "on"));
  const TestResponse r = chat(sluice.port(), {});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.body, "hello");
}

}  // namespace
}  // namespace sluice::test
