// HTTP/1.1 request path: bytes from a client, through the ProtocolDetector and
// Http1ServerConnection (HeadScanner + llhttp, limits, body framing,
// 100-continue, pipelining) into real Exchanges, the filter chain and the
// upstream (a loopback server answering a small SSE stream), and back out
// through the response encoder. The last input byte may choose slicing
// (fuzz/support/fuzz_input.h). Seeds: fuzz/corpus/http1_request/.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/support/fuzz_input.h"
#include "fuzz/support/proxy_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sluice::fuzz::ProxyHarness* harness = [] {
    auto* h = new sluice::fuzz::ProxyHarness(sluice::fuzz::kFuzzRoutes);
    h->setUpstreamResponse(std::string(sluice::fuzz::kSseAnswer));
    return h;
  }();
  const auto input =
      sluice::fuzz::splitControl(std::string_view(reinterpret_cast<const char*>(data), size));
  harness->runClient(input.stream, input.slice);
  return 0;
}
