#include "tools/mock-llm/fault_counters.h"

#include <algorithm>
#include <ctime>

namespace mockllm {

using std::chrono::milliseconds;

std::string formatGoDuration(milliseconds d) {
  int64_t ms = d.count();
  if (ms <= 0) return "0s";
  if (ms < 1000) return std::to_string(ms) + "ms";
  std::string out;
  const int64_t hours = ms / 3'600'000;
  ms %= 3'600'000;
  const int64_t minutes = ms / 60'000;
  ms %= 60'000;
  if (hours > 0) out += std::to_string(hours) + "h";
  if (hours > 0 || minutes > 0) out += std::to_string(minutes) + "m";
  out += std::to_string(ms / 1000);
  if (const int64_t frac = ms % 1000; frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 3 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  out += "s";
  return out;
}

std::string formatRfc3339Utc(std::chrono::system_clock::time_point t) {
  const std::time_t secs =
      std::chrono::system_clock::to_time_t(std::chrono::floor<std::chrono::seconds>(t));
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t ceilSeconds(milliseconds d) {
  if (d.count() <= 0) return 0;
  return (d.count() + 999) / 1000;
}

int64_t FailCounter::next(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return ++attempts_[key];
}

void FailCounter::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  attempts_.clear();
}

std::optional<unsigned> parseQuotaStyles(std::string_view text) {
  unsigned styles = 0;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "openai") {
      styles |= kQuotaOpenAi;
    } else if (item == "generic") {
      styles |= kQuotaGeneric;
    } else if (item == "anthropic") {
      styles |= kQuotaAnthropic;
    } else if (item == "ietf") {
      styles |= kQuotaIetf;
    } else if (item == "all") {
      styles |= kQuotaAll;
    } else {
      return std::nullopt;
    }
  }
  if (styles == 0) return std::nullopt;
  return styles;
}

HeaderList quotaHeaders(const QuotaStatus& q, unsigned styles,
                        std::chrono::system_clock::time_point wall_now, QuotaUnit unit) {
  const std::string limit = std::to_string(q.limit);
  const std::string remaining = std::to_string(q.remaining);
  const int64_t reset_s = ceilSeconds(q.reset_in);
  const bool tokens = unit == QuotaUnit::kTokens;
  const std::string counted = tokens ? "tokens" : "requests";
  HeaderList out;
  if (styles & kQuotaOpenAi) {
    out.emplace_back("x-ratelimit-limit-" + counted, limit);
    out.emplace_back("x-ratelimit-remaining-" + counted, remaining);
    out.emplace_back("x-ratelimit-reset-" + counted, formatGoDuration(q.reset_in));
  }
  if ((styles & kQuotaGeneric) && !tokens) {
    out.emplace_back("x-ratelimit-limit", limit);
    out.emplace_back("x-ratelimit-remaining", remaining);
    out.emplace_back("x-ratelimit-reset", std::to_string(reset_s));
  }
  if (styles & kQuotaAnthropic) {
    // Round up to the whole second so the advertised reset is never early.
    const auto reset_at = std::chrono::ceil<std::chrono::seconds>(wall_now + q.reset_in);
    out.emplace_back("anthropic-ratelimit-" + counted + "-limit", limit);
    out.emplace_back("anthropic-ratelimit-" + counted + "-remaining", remaining);
    out.emplace_back("anthropic-ratelimit-" + counted + "-reset", formatRfc3339Utc(reset_at));
  }
  if ((styles & kQuotaIetf) && !tokens) {
    const int64_t window_s = std::max<int64_t>(1, ceilSeconds(q.window));
    out.emplace_back("RateLimit", "\"default\";r=" + remaining + ";t=" + std::to_string(reset_s));
    out.emplace_back("RateLimit-Policy",
                     "\"default\";q=" + limit + ";w=" + std::to_string(window_s));
  }
  return out;
}

QuotaStatus QuotaBook::admit(const std::string& key, int64_t limit, milliseconds window,
                             std::chrono::steady_clock::time_point now) {
  return admitAll({QuotaAsk{QuotaUnit::kRequests, key, limit, window, 1}}, now).front();
}

std::vector<QuotaStatus> QuotaBook::admitAll(const std::vector<QuotaAsk>& asks,
                                             std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Window*> windows;
  std::vector<QuotaStatus> out;
  bool admitted = true;
  for (const QuotaAsk& ask : asks) {
    // Each unit counts in its own windows ("\n" cannot occur in a header value).
    const std::string name = (ask.unit == QuotaUnit::kTokens ? "t\n" : "r\n") + ask.key;
    auto [it, inserted] = windows_.try_emplace(name);
    Window& w = it->second;
    if (inserted) w.start = now;
    if (now - w.start >= ask.window) {
      // Windows follow back to back from the key's first request.
      const auto elapsed = now - w.start;
      w.start += (elapsed / ask.window) * ask.window;
      w.used = 0;
    }
    QuotaStatus status;
    status.limit = ask.limit;
    status.window = ask.window;
    status.reset_in = std::chrono::ceil<milliseconds>(w.start + ask.window - now);
    if (status.reset_in.count() <= 0) status.reset_in = milliseconds(1);
    status.fits = ask.cost <= ask.limit - w.used;
    admitted = admitted && status.fits;
    windows.push_back(&w);
    out.push_back(status);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (admitted) windows[i]->used += asks[i].cost;
    out[i].admitted = admitted;
    out[i].remaining = out[i].limit > windows[i]->used ? out[i].limit - windows[i]->used : 0;
  }
  return out;
}

void QuotaBook::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  windows_.clear();
}

}  // namespace mockllm
