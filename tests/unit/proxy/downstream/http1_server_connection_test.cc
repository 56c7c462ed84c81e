// Regression tests for the HTTP/1.1 downstream connection, from fuzz findings
// (fuzz/README.md). Each feeds the exact reproducer through the same harness
// the fuzz target uses (fuzz/support/proxy_harness.h: the real
// ProtocolDetector, Http1ServerConnection, Exchange, filter chain and
// Http1ClientConnection against a loopback upstream) and asserts on what the
// client received and on the metrics.

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/support/proxy_harness.h"

namespace sluice::fuzz {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string corpus(const std::string& target, const std::string& name) {
  return readFile(std::string(SLUICE_SOURCE_DIR) + "/fuzz/corpus/" + target + "/" + name);
}

// The value of the first sample of `name` whose labels contain every one of
// `labels` (e.g. `code="200"`), or -1 when there is none.
double sample(const Metrics& metrics, const std::string& name,
              const std::vector<std::string>& labels) {
  std::istringstream text(metrics.serialize());
  for (std::string line; std::getline(text, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// Found by upstream_response_fuzzer (repro-http10-eof-after-flush): an
// HTTP/1.0 client, an upstream body delimited by the upstream's EOF. The
// body was already written to the client when the EOF completed the
// response, so the output buffer was empty at the final encodeData(), and the
// connection closed synchronously from inside the Exchange: the Exchange took
// its own connection close for a client disconnect and counted a fully
// delivered 200 as a 499 `client_disconnect` cancellation (and hit the
// illegal-transition assert in debug builds).
TEST(Http1ServerConnectionRegression, ResponseEndingAfterFlushIsNotAClientDisconnect) {
  ProxyHarness harness(kFuzzRoutes, "    rate_limit: {key: none, reserve: 0}\n");
  harness.setUpstreamResponse(corpus("upstream_response", "repro-http10-eof-after-flush"));
  harness.runClient("GET /v1/models HTTP/1.0\r\n\r\n", 0);

  EXPECT_EQ(harness.clientReceived().rfind("HTTP/1.1 200 OK\r\n", 0), 0u)
      << harness.clientReceived();
  EXPECT_NE(harness.clientReceived().find("\"total_tokens\":15}}"), std::string::npos);
  EXPECT_EQ(sample(harness.metrics(), "sluice_requests_total", {"code=\"200\"", "route=\"v1\""}),
            1);
  EXPECT_EQ(sample(harness.metrics(), "sluice_requests_total", {"code=\"499\""}), -1);
  EXPECT_LE(sample(harness.metrics(), "sluice_cancellations_total",
                   {"cancel_reason=\"client_disconnect\""}),
            0);
}

// Found by http1_request_fuzzer on its own seed (repro-close-after-flushed-response):
// a keep-alive HTTP/1.0 GET (then a HEAD). The streamed answer has no length,
// so for HTTP/1.0 it is close-delimited: its end found the output already
// flushed and the connection closed under the Exchange: same bug. (The HEAD
// is rightly never served: the connection closes after the first response.)
TEST(Http1ServerConnectionRegression, Http10PipelineEndsWithoutDisconnects) {
  ProxyHarness harness(kFuzzRoutes);
  harness.setUpstreamResponse(std::string(kSseAnswer));
  harness.runClient(corpus("http1_request", "repro-close-after-flushed-response"), 0);

  const std::string& got = harness.clientReceived();
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("connection: close\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos) << got;
  EXPECT_EQ(sample(harness.metrics(), "sluice_requests_total", {"code=\"200\"", "route=\"v1\""}),
            1);
  EXPECT_EQ(sample(harness.metrics(), "sluice_requests_total", {"code=\"499\""}), -1);
  EXPECT_LE(sample(harness.metrics(), "sluice_cancellations_total",
                   {"cancel_reason=\"client_disconnect\""}),
            0);
}

// The body of a chunked message, de-framed strictly: lower-case hex size
// lines, each chunk followed by CRLF, the last one empty. nullopt when the
// framing is broken or the message is cut.
std::optional<std::string> dechunk(std::string_view message) {
  size_t at = message.find("\r\n\r\n");
  if (at == std::string_view::npos) return std::nullopt;
  at += 4;
  std::string body;
  for (;;) {
    const size_t line_end = message.find("\r\n", at);
    if (line_end == std::string_view::npos || line_end == at) return std::nullopt;
    size_t size = 0;
    for (size_t i = at; i < line_end; ++i) {
      const char c = message[i];
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
      size = size * 16 + static_cast<size_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    at = line_end + 2;
    if (message.size() < at + size + 2 || message.substr(at + size, 2) != "\r\n") {
      return std::nullopt;
    }
    if (size == 0) return at + 2 == message.size() ? std::optional(body) : std::nullopt;
    body.append(message.substr(at, size));
    at += size + 2;
  }
}

// The downstream encoder frames small chunks in one buffer addition and
// larger ones in three (addChunk): both framings, and the sizes at the
// boundary, reach the client intact.
TEST(Http1ServerConnectionEncoder, ChunksOfEverySizeAreFramedExactly) {
  std::string upstream =
      "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
      "transfer-encoding: chunked\r\n\r\n";
  std::string want;
  for (const size_t size : {1, 15, 16, 200, 4095, 4096, 4097, 20000, 70000}) {
    std::string chunk(size, '\0');
    for (size_t i = 0; i < size; ++i) chunk[i] = static_cast<char>('a' + (i * 7 + size) % 26);
    std::ostringstream line;
    line << std::hex << size << "\r\n";
    upstream += line.str() + chunk + "\r\n";
    want += chunk;
  }
  upstream += "0\r\n\r\n";
  ProxyHarness harness(kFuzzRoutes);
  harness.setUpstreamResponse(upstream);
  harness.runClient("GET /v1/files HTTP/1.1\r\nhost: x\r\n\r\n", 0);

  const std::string& got = harness.clientReceived();
  ASSERT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got.substr(0, 300);
  ASSERT_NE(got.find("transfer-encoding: chunked\r\n"), std::string::npos);
  const std::optional<std::string> body = dechunk(got);
  ASSERT_TRUE(body.has_value()) << got.substr(0, 300);
  EXPECT_EQ(*body, want);
}

}  // namespace
}  // namespace sluice::fuzz

namespace sluice::fuzz {
namespace {

// Chunk extensions are cut out of what llhttp parses (it refuses some RFC
// 9112 allows), whichever reads they arrive in; the framing checks around
// them still apply.
TEST(Http1ServerConnectionChunkExtensions, AreCutInAnySlicing) {
  const std::string request =
      "POST /v1/x HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
      "5;a=b;c\r\nhello\r\n3 ; x = \"y z\"\r\nabc\r\n0;last\r\n\r\n";
  for (const size_t slice : {0, 1, 2, 5, 7}) {
    ProxyHarness harness(kFuzzRoutes);
    harness.setUpstreamResponse(std::string(kJsonAnswer));
    harness.runClient(request, slice);
    EXPECT_EQ(harness.clientReceived().rfind("HTTP/1.1 200 OK\r\n", 0), 0u)
        << "slice " << slice << ": " << harness.clientReceived();
  }
}

TEST(Http1ServerConnectionChunkExtensions, ABareLfInOneIsRefusedInAnySlicing) {
  const std::string request =
      "POST /v1/x HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
      "5;ext\nxx\r\nhello\r\n0\r\n\r\n";
  for (const size_t slice : {0, 1, 3}) {
    ProxyHarness harness(kFuzzRoutes);
    harness.setUpstreamResponse(std::string(kJsonAnswer));
    harness.runClient(request, slice);
    EXPECT_EQ(harness.clientReceived().rfind("HTTP/1.1 400 ", 0), 0u)
        << "slice " << slice << ": " << harness.clientReceived();
  }
}

}  // namespace
}  // namespace sluice::fuzz
