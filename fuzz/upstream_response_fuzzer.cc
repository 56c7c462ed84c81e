// Upstream response path: the fuzz input is what the upstream answers, on a
// real TCP connection, to a fixed client request. It is parsed by
// Http1ClientConnection (llhttp, 1xx, chunked, close-delimited, HEAD), then
// goes through the Exchange and every filter's response side — the quota
// observer (rate_limit is on), the circuit breaker, the retry decision with
// held answers and problem+json bodies, the spend meter (JSON usage, SSE) —
// and out through the HTTP/1.1 response encoder. The upstream then closes.
// Which client request is sent is the input's last byte modulo the table
// below (nothing is consumed). Seeds: fuzz/corpus/upstream_response/.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/support/proxy_harness.h"

namespace {

constexpr std::string_view kRequests[] = {
    "POST /v1/chat/completions HTTP/1.1\r\nhost: s\r\ncontent-type: application/json\r\n"
    "content-length: 61\r\n\r\n"
    "{\"model\":\"gpt-4o\",\"stream\":true,\"messages\":[{\"role\":\"user\"}]}",
    "POST /v1/responses HTTP/1.1\r\nhost: s\r\ncontent-length: 37\r\n\r\n"
    "{\"model\":\"gpt-4o-mini\",\"stream\":true}",
    "POST /v1/messages HTTP/1.1\r\nhost: s\r\ncontent-length: 43\r\n\r\n"
    "{\"model\":\"claude-sonnet-4\",\"max_tokens\":16}",
    "HEAD /v1/models HTTP/1.1\r\nhost: s\r\n\r\n",
    "GET /v1/models HTTP/1.0\r\n\r\n",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sluice::fuzz::ProxyHarness* harness = new sluice::fuzz::ProxyHarness(
      sluice::fuzz::kFuzzRoutes, "    rate_limit: {key: none, reserve: 0}\n");
  const std::string_view response(reinterpret_cast<const char*>(data), size);
  const size_t pick = size == 0 ? 0 : data[size - 1] % std::size(kRequests);
  harness->setUpstreamResponse(std::string(response));
  harness->runClient(kRequests[pick], 0);
  return 0;
}
