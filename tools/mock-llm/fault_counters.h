#pragma once

// Cross-connection counters behind the mock's scripted faults: the
// `x-mock-fail-key` attempt counter and the `x-mock-quota` /
// `x-mock-token-quota` fixed-window request and token quotas, plus the formatting of the rate-limit
// headers each provider family sends. Both counters are shared by all worker threads (mutex).

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tools/mock-llm/header_list.h"

namespace mockllm {

/**
 * Formats a duration the way Go's time.Duration.String() does at millisecond
 * precision, as OpenAI's `x-ratelimit-reset-*` headers do: `0s`, `20ms`,
 * `1s`, `1.5s`, `6m0s`, `1h2m3.5s`.
 */
std::string formatGoDuration(std::chrono::milliseconds d);

/** RFC 3339 UTC timestamp with whole seconds, e.g. `2026-01-01T00:00:05Z` (truncates). */
std::string formatRfc3339Utc(std::chrono::system_clock::time_point t);

/** Counts requests per `x-mock-fail-key`, across all connections. */
class FailCounter {
 public:
  /** Counts one more request carrying `key`; returns its 1-based attempt number. */
  int64_t next(const std::string& key);
  void clear();

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, int64_t> attempts_;
};

/** The quota a response reports, as seen right after admitting (or refusing) a request. */
struct QuotaStatus {
  bool admitted = false;  // the request was admitted (by every quota it asked)
  bool fits = false;      // this quota had room for the request's cost
  int64_t limit = 0;
  int64_t remaining = 0;
  std::chrono::milliseconds window{0};
  std::chrono::milliseconds reset_in{0};  // until the current window ends (> 0)
};

/** Which rate-limit header families a response carries (`x-mock-quota-style`). */
enum QuotaStyle : unsigned {
  kQuotaOpenAi = 1,     // x-ratelimit-{limit,remaining,reset}-requests
  kQuotaGeneric = 2,    // x-ratelimit-{limit,remaining,reset}
  kQuotaAnthropic = 4,  // anthropic-ratelimit-requests-{limit,remaining,reset}
  kQuotaIetf = 8,       // RateLimit / RateLimit-Policy
  kQuotaAll = 15,
};

/** Parses `openai|generic|anthropic|ietf|all`, or a comma-separated list of them. */
std::optional<unsigned> parseQuotaStyles(std::string_view text);

/** What a quota counts. */
enum class QuotaUnit { kRequests, kTokens };

/**
 * The rate-limit response headers for `status` in the selected styles.
 * `wall_now` anchors Anthropic's absolute reset timestamp. A token quota
 * (kTokens) has headers in the openai (`x-ratelimit-*-tokens`) and anthropic
 * (`anthropic-ratelimit-tokens-*`) styles only: the generic and IETF fields
 * name one quota, the request quota.
 */
HeaderList quotaHeaders(const QuotaStatus& status, unsigned styles,
                        std::chrono::system_clock::time_point wall_now,
                        QuotaUnit unit = QuotaUnit::kRequests);

/** Whole seconds, rounded up (so a client waiting this long never wakes early). */
int64_t ceilSeconds(std::chrono::milliseconds d);

/** One quota a request asks for: `cost` of `key`'s LIMIT per WINDOW (1 for a request quota). */
struct QuotaAsk {
  QuotaUnit unit = QuotaUnit::kRequests;
  std::string key;
  int64_t limit = 0;
  std::chrono::milliseconds window{0};
  int64_t cost = 1;
};

/**
 * Fixed-window quotas (of requests or tokens), one per key and unit. A key's
 * first window starts at its first request; windows follow back to back.
 * Refused requests do not consume quota. The latest request's LIMIT/WINDOW
 * configure the key.
 */
class QuotaBook {
 public:
  /** Admits one request against `key` at `now` if the window has room. */
  QuotaStatus admit(const std::string& key, int64_t limit, std::chrono::milliseconds window,
                    std::chrono::steady_clock::time_point now);
  /**
   * Admits one request against every quota in `asks` at once: only when each
   * has room for its cost (cost <= what is left), and then each is consumed;
   * a refused request consumes none. Returns each quota's status, in order.
   */
  std::vector<QuotaStatus> admitAll(const std::vector<QuotaAsk>& asks,
                                    std::chrono::steady_clock::time_point now);
  void clear();

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    int64_t used = 0;
  };
  std::mutex mutex_;
  std::unordered_map<std::string, Window> windows_;
};

}  // namespace mockllm
