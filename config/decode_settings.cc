// Decodes the process-wide settings: `limits`, `access_log` and
// `shared_state` (Redis). `pricing[]` is the spend filter's
// (filters/spend/price_config.h).

#include "config/render.h"
#include "config/sections.h"

namespace sluice::config::detail {

LimitsConfig Decoder::limits(const Field& f) {
  LimitsConfig l;
  // A size within [min, max] bytes, worded with the units the file uses.
  const auto boundedSize = [&](const Field& v, uint64_t min, uint64_t max) {
    const uint64_t bytes = size(v);
    if (bytes < min) fail(v, "must be at least " + formatSize(min));
    if (bytes > max) fail(v, "must be at most " + formatSize(max));
    return bytes;
  };
  decodeMap(
      f,
      {
          {"max_header_bytes",
           [&](const Field& v) { l.max_header_bytes = boundedSize(v, 1024, 16ull << 20); }},
          {"max_headers", [&](const Field& v) { l.max_headers = u32Max(v, 1, 10'000); }},
          {"max_body", [&](const Field& v) { l.max_body = boundedSize(v, 1, 1ull << 30); }},
          {"max_buffered_body_bytes",
           [&](const Field& v) {
             l.max_buffered_body_bytes = boundedSize(v, 64 * 1024, 1ull << 40);
           }},
          {"max_connections_per_worker",
           [&](const Field& v) { l.max_connections_per_worker = u32Max(v, 1, 1'000'000); }},
          {"http2_max_concurrent_streams",
           [&](const Field& v) { l.http2_max_concurrent_streams = u32Max(v, 1, 100'000); }},
          {"header_read_timeout",
           [&](const Field& v) { l.header_read_timeout = duration(v, true); }},
          {"body_read_timeout", [&](const Field& v) { l.body_read_timeout = duration(v, true); }},
          {"idle_timeout", [&](const Field& v) { l.idle_timeout = duration(v, true); }},
          {"send_timeout", [&](const Field& v) { l.send_timeout = duration(v, true); }},
      });
  return l;
}

AccessLogConfig Decoder::accessLog(const Field& f) {
  AccessLogConfig a;
  decodeMap(f,
            {
                {"path",
                 [&](const Field& v) {
                   a.path = nonEmptyString(v);
                   if (a.path == "off") {
                     a.target = AccessLogConfig::Target::Off;
                     a.path.clear();
                   } else if (a.path == "stdout") {
                     a.target = AccessLogConfig::Target::Stdout;
                     a.path.clear();
                   } else {
                     a.target = AccessLogConfig::Target::File;
                   }
                 }},
                {"format",
                 [&](const Field& v) {
                   oneOf<bool>(v, {{"json", true}});
                 }},
            },
            {"path"});
  return a;
}

SharedStateConfig Decoder::sharedState(const Field& f) {
  SharedStateConfig shared;
  decodeMap(f,
            {
                {"redis",
                 [&](const Field& v) {
                   shared.raw_redis = scalar(v, "a redis:// URL");
                   std::string why;
                   const std::optional<RedisUrl> url = parseRedisUrl(shared.raw_redis, &why);
                   if (!url) fail(v, why);
                   shared.redis = *url;
                 }},
                {"prefix",
                 [&](const Field& v) {
                   shared.prefix = scalar(v, "a string");
                   if (shared.prefix.size() > 64) fail(v, "must be at most 64 characters");
                 }},
                {"timeout", [&](const Field& v) { shared.timeout = duration(v, false); }},
                {"tls", [&](const Field& v) { shared.tls = clientTls(v); }},
                {"required", [&](const Field& v) { shared.required = boolean(v); }},
            },
            {"redis"});
  return shared;
}

}  // namespace sluice::config::detail
