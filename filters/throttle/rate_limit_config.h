#pragma once

// `upstreams[].rate_limit` (docs/design.md §2, §3 "Rate-limit throttling"): how the
// throttle filter keys and spends an upstream's quota, and its YAML decoder.
// config/config.h composes it into UpstreamConfig.

#include <cstdint>
#include <string>

#include "common/yaml/field_reader.h"

namespace sluice::config {

/** Where a quota is keyed: one per upstream, or one per value of a request header. */
struct RateLimitKey {
  enum class Kind { None, Header };
  Kind kind = Kind::Header;
  std::string header = "authorization";  // lower-case; only for Kind::Header
};

/**
 * `upstreams[].rate_limit`: proactive throttling from the upstream's quota
 * headers. Absent in YAML = throttling off for that upstream.
 */
struct RateLimitConfig {
  RateLimitKey key;
  int64_t reserve = 1;
  uint32_t max_queue = 1000;
};

/**
 * Decodes `rate_limit: {key, reserve, max_queue}`: key is `none` or
 * `header:<name>` (lower-cased); reserve and max_queue may be 0.
 */
RateLimitConfig decodeRateLimit(detail::FieldReader& reader, const detail::Field& f);

}  // namespace sluice::config
