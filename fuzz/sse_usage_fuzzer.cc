// The spend meter's parsers: an LLM response body through UsageMeter (SSE
// events of OpenAI chat, the Responses API and Anthropic, or a JSON body with
// `usage`), with delivery progress reported part-way, then splitSpend on the
// result; and the same bytes through a bare SseParser with a tiny event cap
// (the oversized-event path). The first byte chooses the API kind, the body
// format, the status class and the slice size; the rest is the body.
// Seeds: fuzz/corpus/sse_usage/ (first byte + a real provider body).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "filters/spend/pricing.h"
#include "filters/spend/spend_split.h"
#include "filters/spend/sse_parser.h"
#include "filters/spend/usage_meter.h"

namespace {

constexpr sluice::ApiKind kKinds[] = {sluice::ApiKind::OpenAiChat, sluice::ApiKind::OpenAiResponses,
                                      sluice::ApiKind::AnthropicMessages, sluice::ApiKind::Generic};
constexpr std::string_view kContentTypes[] = {"text/event-stream; charset=utf-8",
                                              "application/json"};
constexpr std::string_view kRequestBody =
    R"({"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const sluice::ApiKind kind = kKinds[control & 0x3];
  const std::string_view content_type = kContentTypes[(control >> 2) & 0x1];
  const int status = (control & 0x08) ? 429 : 200;
  const size_t slice = (control >> 4) == 0 ? body.size() + 1 : (control >> 4);

  sluice::UsageMeter meter(kind, kRequestBody);
  meter.onResponseHeaders(status, content_type);
  for (size_t off = 0; off < body.size(); off += slice) {
    const size_t n = std::min(slice, body.size() - off);
    meter.onResponseData(body.data() + off, n);
    meter.onBytesDelivered(off / 2);  // the client lags behind
  }
  meter.onResponseEnd();
  meter.onBytesDelivered(body.size() / 2);
  (void)meter.model();
  (void)meter.deliveredOutputTokens();
  (void)meter.anyOutputDelivered();
  (void)meter.eventsSkipped();

  static const sluice::PriceTable prices(
      std::vector<sluice::config::PriceConfig>{{"gpt-4o*", 2.5, 10.0}, {"claude-*", 3.0, 15.0}});
  const sluice::AttemptTokens tokens = meter.tokenCounts();
  for (auto d : {sluice::AttemptDisposition::Completed, sluice::AttemptDisposition::Cancelled,
                 sluice::AttemptDisposition::Abandoned, sluice::AttemptDisposition::Finished}) {
    (void)sluice::splitSpend(tokens, d, prices.match(meter.model()));
  }

  uint64_t events = 0;
  sluice::SseParser parser([&](const sluice::SseEvent& e) { events += e.data.size() + 1; }, 64);
  for (size_t off = 0; off < body.size(); off += slice) {
    parser.feed(body.data() + off, std::min(slice, body.size() - off));
  }
  parser.finish();
  return 0;
}
