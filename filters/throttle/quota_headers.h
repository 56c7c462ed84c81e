#pragma once

// Reading an upstream's quota from its response headers, whichever dialect it
// speaks, into one shape the throttle can act on:
//
//   generic     x-ratelimit-limit / -remaining / -reset           (requests)
//   OpenAI      x-ratelimit-{limit,remaining,reset}-{requests,tokens}
//               reset as a Go duration: "1s", "6m0s", "20ms", "1m30.5s"
//   Anthropic   anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
//               {limit,remaining,reset}, reset as RFC 3339
//   IETF        RateLimit: "default";r=50;t=30 + RateLimit-Policy: "default";q=100;w=60
//               (draft-ietf-httpapi-ratelimit-headers-08+), the draft-07 dictionary
//               RateLimit: limit=100, remaining=50, reset=5, and the older
//               RateLimit-Limit / RateLimit-Remaining / RateLimit-Reset fields
//   429         Retry-After: nothing remains until then (applyRetryAfter)
//
// When several dialects carry the same quota, the most specific one present
// wins, in this order: OpenAI, Anthropic, IETF RateLimit, the IETF drafts'
// separate fields, generic x-ratelimit-*.
// Every field is parsed on its own and garbage is ignored per field: a quota
// needs a usable `remaining`; a bad limit or reset only leaves that part
// unknown. Resets become absolute *monotonic* times (clock.now() + the wait),
// with waits clamped to [0, 24 h], so the throttle never compares wall time.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/clock.h"
#include "common/http_headers.h"

namespace sluice {

/** One quota as last reported by the upstream. */
struct Quota {
  int64_t limit = -1;                     // -1 = unknown
  int64_t remaining = 0;                  // >= 0
  std::optional<MonotonicTime> reset_at;  // when it refills to `limit`; nullopt = not said

  friend bool operator==(const Quota&, const Quota&) = default;
};

/**
 * The quotas one response reported. `tokens` is the most restrictive token
 * quota: Anthropic's combined `tokens-*` when sent, else whichever of its
 * input/output quotas has the fewest tokens left (those stay available
 * separately for metrics).
 */
struct QuotaObservation {
  std::optional<Quota> requests;
  std::optional<Quota> tokens;
  std::optional<Quota> input_tokens;   // Anthropic only
  std::optional<Quota> output_tokens;  // Anthropic only

  bool empty() const { return !requests && !tokens && !input_tokens && !output_tokens; }
};

/** The longest reset wait accepted; later resets are clamped to it. */
inline constexpr std::chrono::milliseconds kMaxQuotaReset = std::chrono::hours(24);

/**
 * Numbers at or above this are absolute times, not waits: 1e9 s is ~31.7
 * years as a wait but 2001-09-09 as a Unix time, so no real value is ambiguous.
 * At or above kEpochMillisThreshold (1e12, year 33658 as seconds) the value is
 * read as Unix milliseconds.
 */
inline constexpr double kEpochSecondsThreshold = 1e9;
inline constexpr double kEpochMillisThreshold = 1e12;

/** Parses every quota header in `headers`. Ignores Retry-After (see applyRetryAfter). */
QuotaObservation parseQuotaHeaders(const HeaderMap& headers, const Clock& clock);

/**
 * For a 429 with a usable Retry-After (retry-after-ms, x-ms-retry-after-ms or
 * Retry-After): the request quota has nothing left until then. Sets
 * `requests.remaining = 0` and its reset to now + wait (keeping a later reset
 * already reported), creating the quota when absent. No-op otherwise.
 */
void applyRetryAfter(QuotaObservation& observation, int status, const HeaderMap& headers,
                     const Clock& clock);

/** parseQuotaHeaders followed by applyRetryAfter: what the throttle calls per response. */
QuotaObservation observeQuota(const HeaderMap& headers, int status, const Clock& clock);

/**
 * How long until every exhausted quota (remaining == 0, reset known) refills:
 * the latest such reset minus `now`, at least 0. nullopt when none is
 * exhausted. The retry decision uses it as a wait hint when no Retry-After
 * was sent.
 */
std::optional<std::chrono::milliseconds> exhaustedQuotaWait(const QuotaObservation& observation,
                                                            MonotonicTime now);

// --- the individual value parsers, public for tests ---------------------------

/**
 * A Go time.Duration string as OpenAI sends it: one or more `<decimal><unit>`
 * with units h, m, s, ms, us/µs, ns ("6m0s", "1m30.5s", "20ms", "0s"; also a
 * bare "0"). No sign. Rounded up to whole ms, clamped to kMaxQuotaReset.
 */
std::optional<std::chrono::milliseconds> parseGoDuration(std::string_view value);

/**
 * An RFC 3339 date-time: `2026-01-01T00:00:30Z`, with optional fractional
 * seconds and a `Z` or `±hh:mm` offset (`t`, `z` and a space separator accepted).
 */
std::optional<SystemTime> parseRfc3339(std::string_view value);

/**
 * A reset in any form seen in the wild, as an absolute monotonic time:
 * a decimal number of seconds to wait (or Unix seconds / milliseconds at or
 * above the thresholds above), a Go duration, or an RFC 3339 date-time.
 * Past times give clock.now().
 */
std::optional<MonotonicTime> parseResetValue(std::string_view value, const Clock& clock);

/** A non-negative decimal integer count ("150000"), surrounding whitespace ignored. */
std::optional<int64_t> parseQuotaCount(std::string_view value);

}  // namespace sluice
