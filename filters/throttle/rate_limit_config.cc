// Decodes `upstreams[].rate_limit`.

#include "filters/throttle/rate_limit_config.h"

#include <string_view>

#include "common/http_headers.h"

namespace sluice::config {

using detail::Field;
using detail::inQuotes;

RateLimitConfig decodeRateLimit(detail::FieldReader& reader, const Field& f) {
  RateLimitConfig r;
  reader.decodeMap(
      f,
      {
          {"key",
           [&](const Field& v) {
             const std::string s = reader.scalar(v, "\"none\" or \"header:<name>\"");
             constexpr std::string_view kHeader = "header:";
             if (s == "none") {
               r.key.kind = RateLimitKey::Kind::None;
               r.key.header.clear();
             } else if (s.compare(0, kHeader.size(), kHeader) == 0) {
               const std::string name = s.substr(kHeader.size());
               if (!detail::isToken(name)) {
                 reader.fail(v, "invalid header name " + inQuotes(name));
               }
               r.key.kind = RateLimitKey::Kind::Header;
               r.key.header = toLower(name);
             } else {
               reader.fail(v, "must be \"none\" or \"header:<name>\" (got " + inQuotes(s) + ")");
             }
           }},
          {"reserve", [&](const Field& v) { r.reserve = reader.integer(v, 0, detail::kI64Max); }},
          {"max_queue", [&](const Field& v) { r.max_queue = reader.u32(v, 0); }},
      });
  return r;
}

}  // namespace sluice::config
