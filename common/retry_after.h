#pragma once

// What wait an upstream asked for before the next request: `retry-after-ms`,
// Azure's `x-ms-retry-after-ms` and `Retry-After` (RFC 9110 §10.2.3), as sent
// by OpenAI, Anthropic, Azure OpenAI and most HTTP APIs.
//
// Every parser here is total: any input, however malformed, yields either a
// value or nullopt, never an exception or UB. A malformed header is treated as
// absent. Accepted waits are capped at kMaxRetryAfter; an HTTP-date in the
// past means "now" (0 ms). Fractional waits round *up* to the next whole
// millisecond, since the upstream asked for "at least" that long.

#include <chrono>
#include <optional>
#include <string_view>

#include "common/clock.h"
#include "common/http_headers.h"

namespace sluice {

/** The longest wait sluice accepts from an upstream; longer waits are clamped to it. */
inline constexpr std::chrono::milliseconds kMaxRetryAfter = std::chrono::hours(24);

/**
 * The upstream's requested wait, from `retry-after-ms`, then
 * `x-ms-retry-after-ms`, then `Retry-After` (the first header that parses
 * wins; malformed ones are skipped). `now` resolves HTTP-dates.
 * nullopt = no usable hint.
 */
std::optional<std::chrono::milliseconds> parseRetryAfter(const HeaderMap& headers, SystemTime now);

/**
 * A `retry-after-ms` / `x-ms-retry-after-ms` value: a non-negative decimal
 * number of milliseconds, fractions allowed ("1500", "12.5"), surrounding
 * whitespace ignored. Rejects signs, exponents, NaN/inf, empty.
 */
std::optional<std::chrono::milliseconds> parseRetryAfterMsValue(std::string_view value);

/**
 * A `Retry-After` value: delay-seconds ("120", fractional "1.5" tolerated)
 * or an HTTP-date in any of the three forms of RFC 9110 §5.6.7.
 */
std::optional<std::chrono::milliseconds> parseRetryAfterValue(std::string_view value,
                                                              SystemTime now);

/** Delay-seconds: a non-negative decimal number of seconds ("120", "1.5", "  3  "). */
std::optional<std::chrono::milliseconds> parseDelaySeconds(std::string_view value);

/** An HTTP-date in any accepted form (IMF-fixdate, RFC 850, asctime). */
std::optional<SystemTime> parseHttpDate(std::string_view value, SystemTime now);

/** IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`. */
std::optional<SystemTime> parseImfFixdate(std::string_view value);

/**
 * Obsolete RFC 850 date: `Sunday, 06-Nov-94 08:49:37 GMT`. The two-digit year
 * is resolved per RFC 9110 §5.6.7: a year that would be more than 50 years
 * after `now` means the most recent past year with those two digits.
 */
std::optional<SystemTime> parseRfc850Date(std::string_view value, SystemTime now);

/** ANSI C asctime() date: `Sun Nov  6 08:49:37 1994` (always UTC). */
std::optional<SystemTime> parseAsctimeDate(std::string_view value);

}  // namespace sluice
