#pragma once

// The `Date` field of responses (RFC 9110 §6.6.1): an origin server with a
// clock sends it, and a proxy adds it to a response it forwards without one.
// Every response sluice writes downstream carries it, its own errors too.
// The text changes once a second, so each worker thread formats it once a
// second and copies it into heads, as nginx (ngx_cached_http_time) and
// Envoy (its date provider) do.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"

namespace sluice {

/** IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) of `t`, whole seconds. */
std::string formatImfFixdate(SystemTime t);

/** One thread's Date value, formatted again only when the second changes. */
class HttpDateCache {
 public:
  static constexpr size_t kSize = 29;  // "Sun, 06 Nov 1994 08:49:37 GMT"

  /** The IMF-fixdate of `now`; the view is valid until the next call. */
  std::string_view at(SystemTime now);
  /** How many times the text was formatted (tests). */
  uint64_t formatted() const { return formatted_; }

 private:
  int64_t second_ = INT64_MIN;
  char text_[kSize] = {};
  uint64_t formatted_ = 0;
};

/** This thread's HttpDateCache, at `clock.systemNow()`. */
std::string_view httpDate(const Clock& clock);

}  // namespace sluice
