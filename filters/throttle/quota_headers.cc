#include "filters/throttle/quota_headers.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/retry_after.h"

namespace sluice {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

constexpr size_t kMaxIntegerDigits = 15;
constexpr int64_t kMaxResetNs = std::chrono::duration_cast<nanoseconds>(kMaxQuotaReset).count();

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// A non-negative decimal "1*DIGIT [ . 1*DIGIT ]" read from the front of `s`
// (advancing it): the whole part and the fraction as nanoseconds-of-one-unit
// (nine digits kept, the rest truncated).
struct Decimal {
  uint64_t whole = 0;
  uint64_t frac_nano = 0;  // fraction * 1e9
  bool frac_rest = false;  // nonzero digits beyond the ninth
};

std::optional<Decimal> scanDecimal(std::string_view& s) {
  Decimal d;
  size_t i = 0;
  while (i < s.size() && isDigit(s[i])) {
    if (i >= kMaxIntegerDigits) return std::nullopt;
    d.whole = d.whole * 10 + static_cast<uint64_t>(s[i] - '0');
    ++i;
  }
  if (i == 0) return std::nullopt;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t start = i;
    while (i < s.size() && isDigit(s[i])) {
      if (i - start < 9) {
        d.frac_nano = d.frac_nano * 10 + static_cast<uint64_t>(s[i] - '0');
      } else if (s[i] != '0') {
        d.frac_rest = true;
      }
      ++i;
    }
    const size_t digits = i - start;
    if (digits == 0) return std::nullopt;
    for (size_t pad = digits; pad < 9; ++pad) d.frac_nano *= 10;
  }
  s.remove_prefix(i);
  return d;
}

// `d` units of `unit_ns` nanoseconds, saturating at kMaxResetNs.
int64_t decimalToNs(const Decimal& d, int64_t unit_ns) {
  const auto unit = static_cast<uint64_t>(unit_ns);
  if (d.whole > static_cast<uint64_t>(kMaxResetNs) / unit) return kMaxResetNs;
  // frac_nano / 1e9 of a unit, computed without overflow: unit = q * 1e9 + r.
  const uint64_t q = unit / 1'000'000'000ULL;
  const uint64_t r = unit % 1'000'000'000ULL;
  uint64_t frac_ns = d.frac_nano * q + (d.frac_nano * r + 999'999'999ULL) / 1'000'000'000ULL;
  if (d.frac_rest) frac_ns += 1;
  const uint64_t total = d.whole * unit + frac_ns;
  return static_cast<int64_t>(std::min<uint64_t>(total, static_cast<uint64_t>(kMaxResetNs)));
}

milliseconds ceilMs(int64_t ns) { return std::chrono::ceil<milliseconds>(nanoseconds(ns)); }

MonotonicTime afterWait(const Clock& clock, nanoseconds wait) {
  wait = std::clamp(wait, nanoseconds(0), nanoseconds(kMaxResetNs));
  return clock.now() + std::chrono::duration_cast<MonotonicTime::duration>(wait);
}

// `wait_ms` may be any int64 (e.g. an epoch far from now): clamped before
// converting to nanoseconds.
MonotonicTime afterWaitMs(const Clock& clock, int64_t wait_ms) {
  const int64_t max_ms = kMaxQuotaReset.count();
  return afterWait(clock, milliseconds(std::clamp<int64_t>(wait_ms, 0, max_ms)));
}

int64_t systemNowMs(const Clock& clock) {
  return std::chrono::duration_cast<milliseconds>(clock.systemNow().time_since_epoch()).count();
}

// Callers pass times from parseRfc3339 (clamped to [1900, 2200]), so the
// nanosecond difference cannot overflow.
MonotonicTime atWallTime(const Clock& clock, SystemTime when) {
  return afterWait(clock, std::chrono::duration_cast<nanoseconds>(when - clock.systemNow()));
}

// A plain decimal number that is the whole value.
std::optional<Decimal> parseWholeDecimal(std::string_view value) {
  std::string_view s = trimOws(value);
  auto d = scanDecimal(s);
  if (!d || !s.empty()) return std::nullopt;
  return d;
}

// --- a small RFC 8941 structured-field list reader ---------------------------
// Enough of the grammar for RateLimit / RateLimit-Policy: members separated by
// commas, each an item (token, string or number) with `;key=value` parameters.
// Quoted strings may contain separators.

struct SfMember {
  std::string item;                                         // unquoted
  std::vector<std::pair<std::string, std::string>> params;  // values unquoted

  std::optional<std::string_view> param(std::string_view key) const {
    for (const auto& [k, v] : params) {
      if (k == key) return std::string_view(v);
    }
    return std::nullopt;
  }
};

std::vector<std::string_view> splitOutsideQuotes(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && quoted) {
      ++i;
    } else if (s[i] == '"') {
      quoted = !quoted;
    } else if (s[i] == sep && !quoted) {
      parts.push_back(trimOws(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  parts.push_back(trimOws(s.substr(start)));
  return parts;
}

std::string unquote(std::string_view s) {
  s = trimOws(s);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] == '\\' && i + 2 < s.size()) ++i;
      out.push_back(s[i]);
    }
    return out;
  }
  return std::string(s);
}

std::vector<SfMember> parseSfList(std::string_view field) {
  std::vector<SfMember> members;
  for (std::string_view raw : splitOutsideQuotes(field, ',')) {
    if (raw.empty()) continue;
    const auto parts = splitOutsideQuotes(raw, ';');
    SfMember m;
    m.item = unquote(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) {
      const size_t eq = parts[i].find('=');
      if (eq == std::string_view::npos) {
        m.params.emplace_back(toLower(parts[i]), "?1");
      } else {
        m.params.emplace_back(toLower(trimOws(parts[i].substr(0, eq))),
                              unquote(parts[i].substr(eq + 1)));
      }
    }
    members.push_back(std::move(m));
  }
  return members;
}

// All values of a header, joined as one list (a field may be split over lines).
std::string joinedField(const HeaderMap& headers, std::string_view name) {
  std::string out;
  for (std::string_view v : headers.getAll(name)) {
    if (!out.empty()) out += ", ";
    out += v;
  }
  return out;
}

// --- the dialects -----------------------------------------------------------

// The header names of one limit/remaining/reset triple, spelled out so no
// lookup builds a string (every answer is parsed). The x-ratelimit-* names
// are matched in XRateLimitValues::note.
struct TripleNames {
  std::string_view limit;
  std::string_view remaining;
  std::string_view reset;
};
constexpr TripleNames kAnthropicRequests{"anthropic-ratelimit-requests-limit",
                                         "anthropic-ratelimit-requests-remaining",
                                         "anthropic-ratelimit-requests-reset"};
constexpr TripleNames kAnthropicTokens{"anthropic-ratelimit-tokens-limit",
                                       "anthropic-ratelimit-tokens-remaining",
                                       "anthropic-ratelimit-tokens-reset"};
constexpr TripleNames kAnthropicInputTokens{"anthropic-ratelimit-input-tokens-limit",
                                            "anthropic-ratelimit-input-tokens-remaining",
                                            "anthropic-ratelimit-input-tokens-reset"};
constexpr TripleNames kAnthropicOutputTokens{"anthropic-ratelimit-output-tokens-limit",
                                             "anthropic-ratelimit-output-tokens-remaining",
                                             "anthropic-ratelimit-output-tokens-reset"};

// The first values of one triple's three fields (absent = not sent).
struct TripleValues {
  std::optional<std::string_view> limit;
  std::optional<std::string_view> remaining;
  std::optional<std::string_view> reset;
};

// limit/remaining/reset from their values; nullopt unless remaining parses.
std::optional<Quota> readTriple(const TripleValues& values, const Clock& clock) {
  if (!values.remaining) return std::nullopt;
  const auto remaining = parseQuotaCount(*values.remaining);
  if (!remaining) return std::nullopt;
  Quota q;
  q.remaining = *remaining;
  if (values.limit) q.limit = parseQuotaCount(*values.limit).value_or(-1);
  if (values.reset) q.reset_at = parseResetValue(*values.reset, clock);
  return q;
}

// limit/remaining/reset under three header names; nullopt unless remaining parses.
std::optional<Quota> readTriple(const HeaderMap& headers, const TripleNames& names,
                                const Clock& clock) {
  const auto remaining_value = headers.get(names.remaining);
  if (!remaining_value) return std::nullopt;
  return readTriple(TripleValues{.limit = headers.get(names.limit),
                                 .remaining = remaining_value,
                                 .reset = headers.get(names.reset)},
                    clock);
}

// The x-ratelimit-* family (OpenAI's two triples and the generic one), read
// in the one pass that finds the dialects: HeaderMap::get keeps the first
// value of a name, and so does note().
struct XRateLimitValues {
  TripleValues requests;  // x-ratelimit-*-requests
  TripleValues tokens;    // x-ratelimit-*-tokens
  TripleValues generic;   // x-ratelimit-*

  // `suffix` is the name after "x-ratelimit-".
  void note(std::string_view suffix, std::string_view value) {
    auto keep = [&](std::optional<std::string_view>& slot) {
      if (!slot) slot = value;
    };
    switch (suffix.size()) {
      case 5:
        if (suffix == "limit") keep(generic.limit);
        if (suffix == "reset") keep(generic.reset);
        break;
      case 9:
        if (suffix == "remaining") keep(generic.remaining);
        break;
      case 12:
        if (suffix == "limit-tokens") keep(tokens.limit);
        if (suffix == "reset-tokens") keep(tokens.reset);
        break;
      case 14:
        if (suffix == "limit-requests") keep(requests.limit);
        if (suffix == "reset-requests") keep(requests.reset);
        break;
      case 16:
        if (suffix == "remaining-tokens") keep(tokens.remaining);
        break;
      case 18:
        if (suffix == "remaining-requests") keep(requests.remaining);
        break;
      default:
        break;
    }
  }
};

// `RateLimit` (draft-08+ list, or the draft-07 dictionary) with `RateLimit-Policy`.
std::optional<Quota> ietfRateLimit(const HeaderMap& h, const Clock& clock) {
  const std::string field = joinedField(h, "ratelimit");
  if (field.empty()) return std::nullopt;
  const auto members = parseSfList(field);

  // Draft-07 dictionary: `limit=100, remaining=50, reset=5`.
  if (!members.empty() && members[0].item.find('=') != std::string::npos) {
    std::optional<Quota> q;
    int64_t limit = -1;
    std::optional<MonotonicTime> reset;
    for (const auto& m : members) {
      const size_t eq = m.item.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = toLower(trimOws(std::string_view(m.item).substr(0, eq)));
      const std::string_view value = trimOws(std::string_view(m.item).substr(eq + 1));
      if (key == "remaining") {
        if (auto r = parseQuotaCount(value)) {
          q = Quota{.limit = -1, .remaining = *r, .reset_at = std::nullopt};
        }
      } else if (key == "limit") {
        limit = parseQuotaCount(value).value_or(-1);
      } else if (key == "reset") {
        reset = parseResetValue(value, clock);
      }
    }
    if (q) {
      q->limit = limit;
      q->reset_at = reset;
    }
    return q;
  }

  const auto policies = parseSfList(joinedField(h, "ratelimit-policy"));
  auto policyFor = [&](const std::string& name) -> const SfMember* {
    for (const auto& p : policies) {
      if (p.item == name) return &p;
    }
    return policies.size() == 1 ? &policies[0] : nullptr;
  };

  // Several policies may be reported (burst, daily): keep the most restrictive,
  // i.e. the fewest remaining, then the latest reset.
  std::optional<Quota> best;
  for (const auto& m : members) {
    const auto r = m.param("r");
    if (!r) continue;
    const auto remaining = parseQuotaCount(*r);
    if (!remaining) continue;
    const SfMember* policy = policyFor(m.item);
    if (policy) {
      // Only request quotas: a content-bytes or concurrency policy is another thing.
      if (auto qu = policy->param("qu"); qu && *qu != "requests") continue;
    }
    Quota q;
    q.remaining = *remaining;
    if (auto t = m.param("t")) {
      if (auto d = parseWholeDecimal(*t))
        q.reset_at = afterWait(clock, nanoseconds(decimalToNs(*d, 1'000'000'000)));
    }
    if (policy) {
      if (auto qv = policy->param("q")) q.limit = parseQuotaCount(*qv).value_or(-1);
    }
    const bool better =
        !best || q.remaining < best->remaining ||
        (q.remaining == best->remaining &&
         q.reset_at.value_or(MonotonicTime::min()) > best->reset_at.value_or(MonotonicTime::min()));
    if (better) best = q;
  }
  return best;
}

// The drafts' separate fields. RateLimit-Limit may be `10, 10;w=1, 50;w=60`:
// its first number is the limit in force.
std::optional<Quota> ietfSeparateFields(const HeaderMap& h, const Clock& clock) {
  const auto remaining_value = h.get("ratelimit-remaining");
  if (!remaining_value) return std::nullopt;
  const auto members = parseSfList(*remaining_value);
  if (members.empty()) return std::nullopt;
  const auto remaining = parseQuotaCount(members[0].item);
  if (!remaining) return std::nullopt;
  Quota q;
  q.remaining = *remaining;
  if (auto v = h.get("ratelimit-limit")) {
    const auto limits = parseSfList(*v);
    if (!limits.empty()) q.limit = parseQuotaCount(limits[0].item).value_or(-1);
  }
  if (auto v = h.get("ratelimit-reset")) q.reset_at = parseResetValue(*v, clock);
  return q;
}

// Anthropic's input/output token quotas folded into one: fewest left wins,
// ties go to the later reset.
std::optional<Quota> mostRestrictive(const std::optional<Quota>& a, const std::optional<Quota>& b) {
  if (!a) return b;
  if (!b) return a;
  if (a->remaining != b->remaining) return a->remaining < b->remaining ? a : b;
  return a->reset_at.value_or(MonotonicTime::min()) >= b->reset_at.value_or(MonotonicTime::min())
             ? a
             : b;
}

}  // namespace

std::optional<int64_t> parseQuotaCount(std::string_view value) {
  const std::string_view s = trimOws(value);
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (!isDigit(c)) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::optional<milliseconds> parseGoDuration(std::string_view value) {
  std::string_view s = trimOws(value);
  if (s == "0") return milliseconds(0);
  if (s.empty()) return std::nullopt;
  int64_t total_ns = 0;
  while (!s.empty()) {
    auto d = scanDecimal(s);
    if (!d) return std::nullopt;
    int64_t unit_ns = 0;
    // Longest unit names first: "ms" before "m".
    if (s.starts_with("ns")) {
      unit_ns = 1;
      s.remove_prefix(2);
    } else if (s.starts_with("us")) {
      unit_ns = 1'000;
      s.remove_prefix(2);
    } else if (s.starts_with("\xC2\xB5s") || s.starts_with("\xCE\xBCs")) {  // µs, μs
      unit_ns = 1'000;
      s.remove_prefix(3);
    } else if (s.starts_with("ms")) {
      unit_ns = 1'000'000;
      s.remove_prefix(2);
    } else if (s.starts_with("s")) {
      unit_ns = 1'000'000'000;
      s.remove_prefix(1);
    } else if (s.starts_with("m")) {
      unit_ns = 60'000'000'000;
      s.remove_prefix(1);
    } else if (s.starts_with("h")) {
      unit_ns = 3'600'000'000'000;
      s.remove_prefix(1);
    } else {
      return std::nullopt;  // missing or unknown unit
    }
    total_ns = std::min(total_ns + decimalToNs(*d, unit_ns), kMaxResetNs);
  }
  return ceilMs(total_ns);
}

std::optional<SystemTime> parseRfc3339(std::string_view value) {
  using namespace std::chrono;
  const std::string_view s = trimOws(value);
  size_t i = 0;
  auto num = [&](size_t n) -> std::optional<int> {
    if (i + n > s.size()) return std::nullopt;
    int v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (!isDigit(s[i + k])) return std::nullopt;
      v = v * 10 + (s[i + k] - '0');
    }
    i += n;
    return v;
  };
  auto lit = [&](auto pred) {
    if (i < s.size() && pred(s[i])) {
      ++i;
      return true;
    }
    return false;
  };
  auto is = [](char want) { return [want](char c) { return c == want; }; };

  const auto y = num(4);
  if (!y || !lit(is('-'))) return std::nullopt;
  const auto mo = num(2);
  if (!mo || !lit(is('-'))) return std::nullopt;
  const auto d = num(2);
  if (!d || !lit([](char c) { return c == 'T' || c == 't' || c == ' '; })) return std::nullopt;
  const auto h = num(2);
  if (!h || !lit(is(':'))) return std::nullopt;
  const auto mi = num(2);
  if (!mi || !lit(is(':'))) return std::nullopt;
  const auto sec = num(2);
  if (!sec) return std::nullopt;
  if (*h > 23 || *mi > 59 || *sec > 60) return std::nullopt;

  nanoseconds frac(0);
  if (lit(is('.'))) {
    const size_t start = i;
    int64_t ns = 0;
    while (i < s.size() && isDigit(s[i])) {
      if (i - start < 9) ns = ns * 10 + (s[i] - '0');
      ++i;
    }
    if (i == start) return std::nullopt;
    for (size_t pad = i - start; pad < 9; ++pad) ns *= 10;
    frac = nanoseconds(ns);
  }

  minutes offset(0);
  if (lit([](char c) { return c == 'Z' || c == 'z'; })) {
    // UTC
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    const bool negative = s[i] == '-';
    ++i;
    const auto oh = num(2);
    if (!oh || !lit(is(':'))) return std::nullopt;
    const auto om = num(2);
    if (!om || *oh > 23 || *om > 59) return std::nullopt;
    offset = minutes(*oh * 60 + *om);
    if (negative) offset = -offset;
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;

  const year_month_day ymd{year(*y), month(static_cast<unsigned>(*mo)),
                           day(static_cast<unsigned>(*d))};
  if (!ymd.ok()) return std::nullopt;
  // In seconds first (no overflow for any 4-digit year), clamped to
  // [1900, 2200] so nanosecond SystemTime arithmetic cannot overflow.
  const sys_seconds utc = sys_days(ymd) + hours(*h) + minutes(*mi) + seconds(*sec) - offset;
  const sys_seconds lo = sys_days(year(1900) / January / 1);
  const sys_seconds hi = sys_days(year(2200) / January / 1);
  return time_point_cast<SystemTime::duration>(std::clamp(utc, lo, hi)) + frac;
}

std::optional<MonotonicTime> parseResetValue(std::string_view value, const Clock& clock) {
  // A decimal ends in a digit and an RFC 3339 time in a digit or Z: a value
  // ending in anything else can only be a Go duration ("60s", "6m0s"), which
  // is OpenAI's form, so it skips the two parsers that would refuse it.
  const std::string_view trimmed = trimOws(value);
  if (!trimmed.empty()) {
    const char last = trimmed.back();
    if (!isDigit(last) && last != 'Z' && last != 'z') {
      if (auto wait = parseGoDuration(trimmed)) return afterWait(clock, *wait);
      return std::nullopt;
    }
  }
  if (auto d = parseWholeDecimal(value)) {
    // d->whole < 1e15, so these int64 millisecond values cannot overflow.
    const double approx = static_cast<double>(d->whole);
    if (approx >= kEpochMillisThreshold) {
      return afterWaitMs(clock, static_cast<int64_t>(d->whole) - systemNowMs(clock));
    }
    if (approx >= kEpochSecondsThreshold) {
      const auto epoch_ms = static_cast<int64_t>(d->whole) * 1000 +
                            static_cast<int64_t>((d->frac_nano + 999'999) / 1'000'000);
      return afterWaitMs(clock, epoch_ms - systemNowMs(clock));
    }
    return afterWait(clock, nanoseconds(decimalToNs(*d, 1'000'000'000)));
  }
  if (auto t = parseRfc3339(value)) return atWallTime(clock, *t);
  if (auto wait = parseGoDuration(value)) return afterWait(clock, *wait);
  return std::nullopt;
}

QuotaObservation parseQuotaHeaders(const HeaderMap& headers, const Clock& clock) {
  QuotaObservation obs;
  // Every answer is parsed, so look only for the dialects it speaks: one pass
  // over the (lower-case) names instead of a failed lookup per dialect and
  // kind (PROFILE.md). x-ratelimit-* is OpenAI's and the generic triple.
  // The x-ratelimit-* values are kept in that pass, not looked up again.
  constexpr std::string_view kXRateLimit = "x-ratelimit-";
  bool x_ratelimit = false;
  bool anthropic_ratelimit = false;
  bool ietf = false;
  XRateLimitValues x;
  for (const auto& [name, value] : headers) {
    // The three prefixes start with different letters: one test per field
    // for the many that have none of them.
    if (name.empty()) continue;
    switch (name.front()) {
      case 'x':
        if (name.starts_with(kXRateLimit)) {
          x_ratelimit = true;
          x.note(name.substr(kXRateLimit.size()), value);
        }
        break;
      case 'a':
        anthropic_ratelimit = anthropic_ratelimit || name.starts_with("anthropic-ratelimit-");
        break;
      case 'r':
        ietf = ietf || name.starts_with("ratelimit");
        break;
      default:
        break;
    }
  }

  if (x_ratelimit) obs.requests = readTriple(x.requests, clock);
  if (!obs.requests && anthropic_ratelimit) {
    obs.requests = readTriple(headers, kAnthropicRequests, clock);
  }
  if (!obs.requests && ietf) obs.requests = ietfRateLimit(headers, clock);
  if (!obs.requests && ietf) obs.requests = ietfSeparateFields(headers, clock);
  if (!obs.requests && x_ratelimit) obs.requests = readTriple(x.generic, clock);

  if (anthropic_ratelimit) {
    obs.input_tokens = readTriple(headers, kAnthropicInputTokens, clock);
    obs.output_tokens = readTriple(headers, kAnthropicOutputTokens, clock);
  }
  if (x_ratelimit) obs.tokens = readTriple(x.tokens, clock);
  if (!obs.tokens && anthropic_ratelimit) {
    obs.tokens = readTriple(headers, kAnthropicTokens, clock);
  }
  if (!obs.tokens) obs.tokens = mostRestrictive(obs.input_tokens, obs.output_tokens);
  return obs;
}

void applyRetryAfter(QuotaObservation& observation, int status, const HeaderMap& headers,
                     const Clock& clock) {
  if (status != 429) return;
  const auto wait = parseRetryAfter(headers, clock.systemNow());
  if (!wait) return;
  const MonotonicTime until = afterWait(clock, *wait);
  if (!observation.requests) {
    observation.requests = Quota{.limit = -1, .remaining = 0, .reset_at = std::nullopt};
  }
  Quota& q = *observation.requests;
  const bool keep_later = q.remaining == 0 && q.reset_at && *q.reset_at > until;
  q.remaining = 0;
  if (!keep_later) q.reset_at = until;
}

QuotaObservation observeQuota(const HeaderMap& headers, int status, const Clock& clock) {
  QuotaObservation obs = parseQuotaHeaders(headers, clock);
  applyRetryAfter(obs, status, headers, clock);
  return obs;
}

std::optional<milliseconds> exhaustedQuotaWait(const QuotaObservation& observation,
                                               MonotonicTime now) {
  std::optional<milliseconds> wait;
  for (const auto* q : {&observation.requests, &observation.tokens, &observation.input_tokens,
                        &observation.output_tokens}) {
    if (!*q || (*q)->remaining > 0 || !(*q)->reset_at) continue;
    const auto w =
        std::max(milliseconds(0), std::chrono::ceil<milliseconds>(*(*q)->reset_at - now));
    if (!wait || w > *wait) wait = w;
  }
  return wait;
}

}  // namespace sluice
