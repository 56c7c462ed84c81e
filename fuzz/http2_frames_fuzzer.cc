// HTTP/2 server path: the client preface and frames, through the
// ProtocolDetector into Http2ServerConnection (nghttp2 server session, header
// limits, per-stream Exchanges, flow control, RST_STREAM / GOAWAY handling)
// and on to real Exchanges and a loopback upstream, responses coming back as
// frames. Inputs that do not start with the client preface get it prepended,
// so mutations are spent on frames. The last input byte may choose slicing
// (fuzz/support/fuzz_input.h). Seeds: fuzz/corpus/http2_frames/.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/support/fuzz_input.h"
#include "fuzz/support/proxy_harness.h"
#include "proxy/downstream/protocol_detector.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sluice::fuzz::ProxyHarness* harness = [] {
    auto* h = new sluice::fuzz::ProxyHarness(sluice::fuzz::kFuzzRoutes);
    h->setUpstreamResponse(std::string(sluice::fuzz::kJsonAnswer));
    return h;
  }();
  const auto input =
      sluice::fuzz::splitControl(std::string_view(reinterpret_cast<const char*>(data), size));
  constexpr std::string_view preface = sluice::ProtocolDetector::kHttp2Preface;
  if (input.stream.substr(0, preface.size()) == preface) {
    harness->runClient(input.stream, input.slice);
  } else {
    std::string framed(preface);
    framed.append(input.stream);
    harness->runClient(framed, input.slice);
  }
  return 0;
}
