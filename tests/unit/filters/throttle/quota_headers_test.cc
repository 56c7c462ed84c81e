#include "filters/throttle/quota_headers.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

using namespace std::chrono;
using std::chrono::milliseconds;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr int64_t kNone = -1;  // "expect nullopt" in the tables below

HeaderMap make(const Headers& hs) {
  HeaderMap h;
  for (const auto& [k, v] : hs) h.add(k, v);
  return h;
}

// The expected shape of a Quota: reset as milliseconds after clock.now(), kNone = unknown.
struct Expect {
  int64_t limit;
  int64_t remaining;
  int64_t reset_in_ms;
};

void expectQuota(const std::optional<Quota>& q, const std::optional<Expect>& e,
                 const ManualClock& clock, const std::string& what) {
  ASSERT_EQ(q.has_value(), e.has_value()) << what;
  if (!q) return;
  EXPECT_EQ(q->limit, e->limit) << what;
  EXPECT_EQ(q->remaining, e->remaining) << what;
  if (e->reset_in_ms == kNone) {
    EXPECT_FALSE(q->reset_at) << what;
  } else {
    ASSERT_TRUE(q->reset_at) << what;
    EXPECT_EQ(duration_cast<milliseconds>(*q->reset_at - clock.now()).count(), e->reset_in_ms)
        << what;
  }
}

TEST(QuotaHeadersTest, GoDurations) {
  const std::pair<std::string, int64_t> cases[] = {
      {"1s", 1'000},
      {"6m0s", 360'000},
      {"20ms", 20},
      {"1m30.5s", 90'500},
      {"2h0m0s", 7'200'000},
      {"0s", 0},
      {"0", 0},
      {"59.56s", 59'560},
      {"1.5h", 5'400'000},
      {"7.66s", 7'660},
      {"300us", 1},
      {"300µs", 1},
      {"100ns", 1},
      {"1h1m1s1ms", 3'661'001},
      {" 12ms ", 12},
      {"25h", 86'400'000},
      {"99999999h", 86'400'000},  // clamped
      {"", kNone},
      {"s", kNone},
      {"1", kNone},
      {"-1s", kNone},
      {"+1s", kNone},
      {"1x", kNone},
      {"1s2", kNone},
      {"abc", kNone},
      {"1.s", kNone},
      {".5s", kNone},
      {"1 s", kNone},
      {"1e3s", kNone},
  };
  for (const auto& [in, want] : cases) {
    const auto got = parseGoDuration(in);
    EXPECT_EQ(got ? got->count() : kNone, want) << "'" << in << "'";
  }
}

TEST(QuotaHeadersTest, Rfc3339) {
  const auto base = sys_days(2026y / January / 1);
  const std::pair<std::string, std::optional<SystemTime>> cases[] = {
      {"2026-01-01T00:00:30Z", base + 30s},
      {"2026-01-01t00:00:30z", base + 30s},
      {"2026-01-01 00:00:30Z", base + 30s},
      {"2026-01-01T00:00:30.5Z", base + 30500ms},
      {"2026-01-01T00:00:30.123456789Z", base + 30s + 123456789ns},
      {"2026-01-01T01:00:30+01:00", base + 30s},
      {"2025-12-31T19:00:30-05:00", base + 30s},
      {"2026-01-01T00:00:30", std::nullopt},  // no offset
      {"2026-01-01T00:00Z", std::nullopt},
      {"2026-02-30T00:00:30Z", std::nullopt},
      {"2026-01-01T24:00:00Z", std::nullopt},
      {"2026-01-01T00:00:30.Z", std::nullopt},
      {"2026-01-01T00:00:30+0100", std::nullopt},
      {"26-01-01T00:00:30Z", std::nullopt},
      {"", std::nullopt},
      {"garbage", std::nullopt},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(parseRfc3339(in), want) << "'" << in << "'";
  }
}

TEST(QuotaHeadersTest, ResetValues) {
  ManualClock clock;  // wall time 2026-01-01T00:00:00Z = Unix 1767225600
  const std::pair<std::string, int64_t> cases[] = {
      {"30", 30'000},  // delta-seconds
      {"1.5", 1'500},
      {"0", 0},
      {"999999999", 86'400'000},  // just below the epoch threshold: a (clamped) wait
      {"1767225660", 60'000},     // Unix seconds
      {"1767225660.5", 60'500},
      {"1767225000", 0},          // Unix seconds in the past
      {"1000000000", 0},          // 2001: past
      {"1767225660000", 60'000},  // Unix milliseconds
      {"1767225600250", 250},
      {"6m0s", 360'000},                 // Go duration
      {"2026-01-01T00:00:30Z", 30'000},  // RFC 3339
      {"2025-01-01T00:00:00Z", 0},       // in the past
      {"9999-01-01T00:00:00Z", 86'400'000},
      {"-5", kNone},
      {"abc", kNone},
      {"", kNone},
      {"1e9", kNone},
      {" 60s ", 60'000},  // a Go duration with whitespace around it
      {"\t6m0s", 360'000},
      {"60s\t", 60'000},
      {"1.", kNone},
      {"1.5s", 1'500},
      {"s", kNone},
      {"   ", kNone},
      {"30 ", 30'000},
      {"2026-01-01T00:00:30z ", 30'000},
      {"2026-01-01T00:00:30+00:00", 30'000},
  };
  for (const auto& [in, want] : cases) {
    const auto got = parseResetValue(in, clock);
    EXPECT_EQ(got ? duration_cast<milliseconds>(*got - clock.now()).count() : kNone, want)
        << "'" << in << "'";
  }
}

TEST(QuotaHeadersTest, Counts) {
  EXPECT_EQ(parseQuotaCount("150000"), 150000);
  EXPECT_EQ(parseQuotaCount(" 0 "), 0);
  EXPECT_FALSE(parseQuotaCount("-1"));
  EXPECT_FALSE(parseQuotaCount("1.5"));
  EXPECT_FALSE(parseQuotaCount(""));
  EXPECT_FALSE(parseQuotaCount("12abc"));
  EXPECT_FALSE(parseQuotaCount("99999999999999999999"));
}

struct ObservationCase {
  std::string name;
  Headers headers;
  std::optional<Expect> requests;
  std::optional<Expect> tokens;
  std::optional<Expect> input_tokens = std::nullopt;
  std::optional<Expect> output_tokens = std::nullopt;
};

TEST(QuotaHeadersTest, Dialects) {
  const std::vector<ObservationCase> cases = {
      {"none", {{"content-type", "application/json"}}, std::nullopt, std::nullopt},

      // OpenAI's documented example (platform.openai.com/docs/guides/rate-limits).
      {"openai",
       {{"x-ratelimit-limit-requests", "60"},
        {"x-ratelimit-limit-tokens", "150000"},
        {"x-ratelimit-remaining-requests", "59"},
        {"x-ratelimit-remaining-tokens", "149984"},
        {"x-ratelimit-reset-requests", "1s"},
        {"x-ratelimit-reset-tokens", "6m0s"}},
       Expect{60, 59, 1'000},
       Expect{150000, 149984, 360'000}},
      {"openai sub-second and compound resets",
       {{"x-ratelimit-limit-requests", "10000"},
        {"x-ratelimit-remaining-requests", "9999"},
        {"x-ratelimit-reset-requests", "8.64ms"},
        {"x-ratelimit-limit-tokens", "2000000"},
        {"x-ratelimit-remaining-tokens", "0"},
        {"x-ratelimit-reset-tokens", "1m30.5s"}},
       Expect{10000, 9999, 9},
       Expect{2000000, 0, 90'500}},

      // Anthropic (docs.anthropic.com/en/api/rate-limits), RFC 3339 resets.
      {"anthropic combined tokens",
       {{"anthropic-ratelimit-requests-limit", "50"},
        {"anthropic-ratelimit-requests-remaining", "49"},
        {"anthropic-ratelimit-requests-reset", "2026-01-01T00:00:30Z"},
        {"anthropic-ratelimit-tokens-limit", "48000"},
        {"anthropic-ratelimit-tokens-remaining", "47000"},
        {"anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:01.5Z"},
        {"anthropic-ratelimit-input-tokens-limit", "40000"},
        {"anthropic-ratelimit-input-tokens-remaining", "39000"},
        {"anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:01.5Z"},
        {"anthropic-ratelimit-output-tokens-limit", "8000"},
        {"anthropic-ratelimit-output-tokens-remaining", "8000"},
        {"anthropic-ratelimit-output-tokens-reset", "2026-01-01T01:00:00+01:00"}},
       Expect{50, 49, 30'000},
       Expect{48000, 47000, 1'500},
       Expect{40000, 39000, 1'500},
       Expect{8000, 8000, 0}},
      {"anthropic tokens = the most restrictive of input/output",
       {{"anthropic-ratelimit-input-tokens-limit", "40000"},
        {"anthropic-ratelimit-input-tokens-remaining", "0"},
        {"anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:12Z"},
        {"anthropic-ratelimit-output-tokens-limit", "8000"},
        {"anthropic-ratelimit-output-tokens-remaining", "7000"},
        {"anthropic-ratelimit-output-tokens-reset", "2026-01-01T00:00:01Z"}},
       std::nullopt,
       Expect{40000, 0, 12'000},
       Expect{40000, 0, 12'000},
       Expect{8000, 7000, 1'000}},

      // IETF draft-ietf-httpapi-ratelimit-headers (-08 onwards).
      {"ietf",
       {{"RateLimit-Policy", R"("default";q=100;w=60)"}, {"RateLimit", R"("default";r=50;t=30)"}},
       Expect{100, 50, 30'000},
       std::nullopt},
      {"ietf, several policies: the most restrictive wins",
       {{"RateLimit-Policy", R"("burst";q=100;w=60, "daily";q=1000;w=86400)"},
        {"RateLimit", R"("burst";r=50;t=30, "daily";r=0;t=3600)"}},
       Expect{1000, 0, 3'600'000},
       std::nullopt},
      {"ietf, policies split over two fields",
       {{"RateLimit-Policy", R"("burst";q=100;w=60)"},
        {"RateLimit-Policy", R"("daily";q=1000;w=86400)"},
        {"RateLimit", R"("burst";r=5;t=30)"},
        {"RateLimit", R"("daily";r=900;t=3600)"}},
       Expect{100, 5, 30'000},
       std::nullopt},
      {"ietf, token names and extra params",
       {{"RateLimit-Policy", "burst;q=100;w=60;pk=:cHsdsRa894==:"},
        {"RateLimit", "burst;r=7;t=2;pk=:cHsdsRa894==:"}},
       Expect{100, 7, 2'000},
       std::nullopt},
      {"ietf, no policy field: limit unknown",
       {{"RateLimit", R"("default";r=3;t=1)"}},
       Expect{-1, 3, 1'000},
       std::nullopt},
      {"ietf, a content-bytes quota is not a request quota",
       {{"RateLimit-Policy", R"("bytes";q=1000000;qu="content-bytes";w=60, "req";q=10;w=1)"},
        {"RateLimit", R"("bytes";r=0;t=59, "req";r=9;t=1)"}},
       Expect{10, 9, 1'000},
       std::nullopt},
      {"ietf draft-07 dictionary",
       {{"RateLimit", "limit=100, remaining=50, reset=5"}},
       Expect{100, 50, 5'000},
       std::nullopt},
      {"ietf older separate fields",
       {{"RateLimit-Limit", "10, 10;w=1, 50;w=60"},
        {"RateLimit-Remaining", "9"},
        {"RateLimit-Reset", "1"}},
       Expect{10, 9, 1'000},
       std::nullopt},

      // Generic x-ratelimit-* (GitHub-style epoch, or delta-seconds).
      {"generic delta-seconds",
       {{"X-RateLimit-Limit", "5000"},
        {"X-RateLimit-Remaining", "4999"},
        {"X-RateLimit-Reset", "30"}},
       Expect{5000, 4999, 30'000},
       std::nullopt},
      {"generic epoch seconds",
       {{"x-ratelimit-limit", "5000"},
        {"x-ratelimit-remaining", "0"},
        {"x-ratelimit-reset", "1767225660"}},
       Expect{5000, 0, 60'000},
       std::nullopt},

      // Precedence: OpenAI's specific names over the generic ones.
      {"openai beats generic",
       {{"x-ratelimit-remaining", "1"}, {"x-ratelimit-remaining-requests", "2"}},
       Expect{-1, 2, kNone},
       std::nullopt},

      // Garbage is ignored per field.
      {"garbage remaining: no quota",
       {{"x-ratelimit-limit-requests", "60"},
        {"x-ratelimit-remaining-requests", "lots"},
        {"x-ratelimit-reset-requests", "1s"}},
       std::nullopt,
       std::nullopt},
      {"negative remaining: no quota",
       {{"x-ratelimit-remaining", "-1"}},
       std::nullopt,
       std::nullopt},
      {"garbage limit and reset: unknown",
       {{"x-ratelimit-limit-requests", "sixty"},
        {"x-ratelimit-remaining-requests", "59"},
        {"x-ratelimit-reset-requests", "soon"}},
       Expect{-1, 59, kNone},
       std::nullopt},
      {"garbage in one dialect falls through to the next",
       {{"x-ratelimit-remaining-requests", "NaN"}, {"x-ratelimit-remaining", "4"}},
       Expect{-1, 4, kNone},
       std::nullopt},
      {"ietf garbage",
       {{"RateLimit-Policy", R"("default";q=abc;w=60)"},
        {"RateLimit", R"("default";r=1.5;t=30, "other";r=2;t=x, ",;=")"}},
       Expect{-1, 2, kNone},
       std::nullopt},
      {"ietf unbalanced quotes",
       {{"RateLimit", R"("default;r=5;t=3)"}},
       std::nullopt,
       std::nullopt},
  };

  ManualClock clock;
  for (const auto& c : cases) {
    const QuotaObservation obs = parseQuotaHeaders(make(c.headers), clock);
    expectQuota(obs.requests, c.requests, clock, c.name + " / requests");
    expectQuota(obs.tokens, c.tokens, clock, c.name + " / tokens");
    expectQuota(obs.input_tokens, c.input_tokens, clock, c.name + " / input_tokens");
    expectQuota(obs.output_tokens, c.output_tokens, clock, c.name + " / output_tokens");
    EXPECT_EQ(obs.empty(), !c.requests && !c.tokens && !c.input_tokens && !c.output_tokens)
        << c.name;
  }
}

TEST(QuotaHeadersTest, RetryAfterOn429EmptiesTheRequestQuota) {
  struct Case {
    std::string name;
    int status;
    Headers headers;
    std::optional<Expect> requests;
  };
  const Case cases[] = {
      {"429 with Retry-After only", 429, {{"Retry-After", "20"}}, Expect{-1, 0, 20'000}},
      {"429 with retry-after-ms", 429, {{"retry-after-ms", "1500"}}, Expect{-1, 0, 1'500}},
      {"503 with Retry-After: not a quota", 503, {{"Retry-After", "20"}}, std::nullopt},
      {"429 without a usable Retry-After", 429, {{"Retry-After", "later"}}, std::nullopt},
      {"429 keeps the limit and takes the Retry-After",
       429,
       {{"x-ratelimit-limit-requests", "60"},
        {"x-ratelimit-remaining-requests", "59"},
        {"x-ratelimit-reset-requests", "1s"},
        {"Retry-After", "20"}},
       Expect{60, 0, 20'000}},
      {"429 keeps a later reset of an already empty quota",
       429,
       {{"x-ratelimit-limit-requests", "60"},
        {"x-ratelimit-remaining-requests", "0"},
        {"x-ratelimit-reset-requests", "1m0s"},
        {"Retry-After", "20"}},
       Expect{60, 0, 60'000}},
      {"429 moves an earlier reset later",
       429,
       {{"x-ratelimit-remaining-requests", "0"},
        {"x-ratelimit-reset-requests", "1s"},
        {"Retry-After", "20"}},
       Expect{-1, 0, 20'000}},
  };
  ManualClock clock;
  for (const auto& c : cases) {
    const auto obs = observeQuota(make(c.headers), c.status, clock);
    expectQuota(obs.requests, c.requests, clock, c.name);
  }
}

TEST(QuotaHeadersTest, ExhaustedQuotaWait) {
  ManualClock clock;
  const MonotonicTime now = clock.now();
  auto q = [&](int64_t remaining, std::optional<int64_t> reset_ms) {
    Quota out{-1, remaining, std::nullopt};
    if (reset_ms) out.reset_at = now + milliseconds(*reset_ms);
    return out;
  };
  QuotaObservation obs;
  EXPECT_FALSE(exhaustedQuotaWait(obs, now));
  obs.requests = q(5, 1000);
  EXPECT_FALSE(exhaustedQuotaWait(obs, now));
  obs.tokens = q(0, std::nullopt);  // exhausted but no reset known
  EXPECT_FALSE(exhaustedQuotaWait(obs, now));
  obs.tokens = q(0, 360'000);
  EXPECT_EQ(exhaustedQuotaWait(obs, now), milliseconds(360'000));
  obs.requests = q(0, 1'000);
  EXPECT_EQ(exhaustedQuotaWait(obs, now), milliseconds(360'000));  // the latest
  obs.tokens = q(0, -5'000);                                       // already reset
  EXPECT_EQ(exhaustedQuotaWait(obs, now), milliseconds(1'000));
  EXPECT_EQ(exhaustedQuotaWait(obs, now + milliseconds(2'000)), milliseconds(0));
}

// The x-ratelimit-* family as it was read before it was collected in the
// dialect pass: a HeaderMap::get per field (the first value of each name).
std::optional<Quota> oldTriple(const HeaderMap& h, const std::string& limit,
                               const std::string& remaining, const std::string& reset,
                               const Clock& clock) {
  const auto r = h.get(remaining);
  if (!r) return std::nullopt;
  const auto count = parseQuotaCount(*r);
  if (!count) return std::nullopt;
  Quota q;
  q.remaining = *count;
  if (auto v = h.get(limit)) q.limit = parseQuotaCount(*v).value_or(-1);
  if (auto v = h.get(reset)) q.reset_at = parseResetValue(*v, clock);
  return q;
}

TEST(QuotaHeadersTest, OnePassReadMatchesTheLookUps) {
  ManualClock clock;
  const std::vector<std::string> names = {"x-ratelimit-limit-requests",
                                          "x-ratelimit-remaining-requests",
                                          "x-ratelimit-reset-requests",
                                          "x-ratelimit-limit-tokens",
                                          "x-ratelimit-remaining-tokens",
                                          "x-ratelimit-reset-tokens",
                                          "x-ratelimit-limit",
                                          "x-ratelimit-remaining",
                                          "x-ratelimit-reset",
                                          "x-ratelimit-",
                                          "x-ratelimit-remaining-request",
                                          "x-ratelimit-reset-requestsx",
                                          "x-ratelimit-limitx",
                                          "x-ratelimit-remainingtokens",
                                          "X-RateLimit-Remaining",
                                          "content-type",
                                          "x-ratelimit-remaining-tokens-",
                                          "x-ratelimit-limit-request"};
  const std::vector<std::string> values = {
      "5",         "0",    "abc", "60s", "1.5", " 7 ", "",
      "6m0s",      "20ms", "1e3", "-1",  "30",  "2s ", "2026-01-01T00:00:30Z",
      "1767225660"};
  std::mt19937 rng(18);
  for (int round = 0; round < 20'000; ++round) {
    HeaderMap h;
    const int fields = static_cast<int>(rng() % 10);
    for (int i = 0; i < fields; ++i) {
      h.add(names[rng() % names.size()], values[rng() % values.size()]);
    }
    const auto obs = parseQuotaHeaders(h, clock);
    auto requests = oldTriple(h, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
                              "x-ratelimit-reset-requests", clock);
    if (!requests) {
      requests =
          oldTriple(h, "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", clock);
    }
    const auto tokens = oldTriple(h, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens",
                                  "x-ratelimit-reset-tokens", clock);
    std::string what;
    for (const auto& [k, v] : h) what += std::string(k) + ": " + std::string(v) + "; ";
    EXPECT_EQ(obs.requests, requests) << what;
    EXPECT_EQ(obs.tokens, tokens) << what;
    EXPECT_FALSE(obs.input_tokens) << what;
    EXPECT_FALSE(obs.output_tokens) << what;
  }
}

TEST(QuotaHeadersTest, ResetsNotEndingInADigitOrZAreGoDurationsOnly) {
  // parseResetValue sends a value that does not end in a digit or Z/z
  // straight to the Go-duration parser: neither a decimal nor an RFC 3339
  // time can end that way. Random values over the three forms' alphabets.
  ManualClock clock;
  const std::string alphabet = "0123456789.:-+TtZzsmhnu \t";
  std::mt19937 rng(9);
  int go_durations = 0;
  for (int round = 0; round < 50'000; ++round) {
    std::string v;
    const size_t n = rng() % 12;
    for (size_t i = 0; i < n; ++i) v.push_back(alphabet[rng() % alphabet.size()]);
    if (rng() % 4 == 0) v = "2026-01-01T00:00:3" + v;
    const std::string_view t = trimOws(v);
    if (t.empty()) continue;
    const char last = t.back();
    if ((last >= '0' && last <= '9') || last == 'Z' || last == 'z') continue;
    EXPECT_FALSE(parseRfc3339(v)) << "'" << v << "'";
    const auto got = parseResetValue(v, clock);
    const auto go = parseGoDuration(v);
    ASSERT_EQ(got.has_value(), go.has_value()) << "'" << v << "'";
    if (go) {
      ++go_durations;
      EXPECT_EQ(*got, clock.now() + *go) << "'" << v << "'";
    }
  }
  EXPECT_GT(go_durations, 100);
}

TEST(QuotaHeadersTest, ResetIsAnchoredToTheMonotonicClock) {
  // The wall clock may jump; resets are computed once, against now(), and
  // then only monotonic time matters.
  ManualClock clock;
  const auto obs = parseQuotaHeaders(
      make({{"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-reset-requests", "2s"}}), clock);
  const MonotonicTime reset_at = *obs.requests->reset_at;
  clock.setSystemTime(clock.systemNow() + std::chrono::hours(5));
  EXPECT_EQ(reset_at, clock.now() + 2s);
}

}  // namespace
}  // namespace sluice
