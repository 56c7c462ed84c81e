#include "tools/mock-llm/schedule.h"

#include <charconv>

namespace mockllm {

namespace {

std::vector<std::string_view> splitWords(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

std::optional<int64_t> parseWhole(std::string_view s) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The fault named by `words` (after the two times), or nullopt with `error`.
std::optional<ScheduledFault> parseFault(const std::vector<std::string_view>& words,
                                         std::string* error) {
  ScheduledFault fault;
  const std::string_view kind = words[0];
  if (kind == "status") {
    const auto status = words.size() >= 2 ? parseWhole(words[1]) : std::nullopt;
    if (!status || *status < 200 || *status > 599) {
      *error = "'status' needs a status code 200-599";
      return std::nullopt;
    }
    fault.kind = ScheduledFault::Kind::kStatus;
    fault.status = static_cast<int>(*status);
    for (size_t i = 2; i < words.size(); ++i) {
      constexpr std::string_view kRetryAfter = "retry-after=";
      const auto seconds = words[i].substr(0, kRetryAfter.size()) == kRetryAfter
                               ? parseWhole(words[i].substr(kRetryAfter.size()))
                               : std::nullopt;
      if (!seconds || *seconds < 0) {
        *error = "unknown option '" + std::string(words[i]) + "' (want retry-after=SECONDS)";
        return std::nullopt;
      }
      fault.retry_after_s = *seconds;
    }
    return fault;
  }
  if (kind == "slow") {
    const auto delay = words.size() == 2 ? parseScheduleDuration(words[1]) : std::nullopt;
    if (!delay) {
      *error = "'slow' needs one duration, e.g. slow 300ms";
      return std::nullopt;
    }
    fault.kind = ScheduledFault::Kind::kSlow;
    fault.delay = *delay;
    return fault;
  }
  if (kind == "reset" || kind == "hang") {
    if (words.size() != 1) {
      *error = "'" + std::string(kind) + "' takes no arguments";
      return std::nullopt;
    }
    fault.kind = kind == "reset" ? ScheduledFault::Kind::kReset : ScheduledFault::Kind::kHang;
    return fault;
  }
  *error = "unknown fault '" + std::string(kind) + "' (want status, slow, reset or hang)";
  return std::nullopt;
}

}  // namespace

std::optional<std::chrono::milliseconds> parseScheduleDuration(std::string_view text) {
  size_t unit = text.size();
  while (unit > 0 && (text[unit - 1] < '0' || text[unit - 1] > '9')) --unit;
  const std::string_view number = text.substr(0, unit);
  const std::string_view suffix = text.substr(unit);
  double scale = 0;
  if (suffix == "ms") {
    scale = 1;
  } else if (suffix == "s") {
    scale = 1000;
  } else if (suffix == "m") {
    scale = 60'000;
  } else if (suffix == "h") {
    scale = 3'600'000;
  } else {
    return std::nullopt;
  }
  double value = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size() || number.empty() || value < 0) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(value * scale + 0.5));
}

std::optional<FaultSchedule> FaultSchedule::parse(std::string_view text, std::string* error) {
  FaultSchedule schedule;
  size_t line_no = 0;
  std::string why;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    line = line.substr(0, line.find('#'));
    const auto words = splitWords(line);
    if (words.empty()) continue;
    const auto fail = [&](const std::string& what) {
      *error = "line " + std::to_string(line_no) + ": " + what;
      return std::nullopt;
    };
    if (words[0] == "repeat") {
      const auto period = words.size() == 2 ? parseScheduleDuration(words[1]) : std::nullopt;
      if (!period || period->count() <= 0) return fail("'repeat' needs one positive duration");
      schedule.period_ = *period;
      continue;
    }
    if (words.size() < 3) return fail("want FROM TO FAULT [ARGS], e.g. 0s 2s status 503");
    const auto from = parseScheduleDuration(words[0]);
    const auto to = parseScheduleDuration(words[1]);
    if (!from || !to) return fail("bad duration (want e.g. 250ms, 2s, 1.5s, 3m, 1h)");
    if (*to <= *from) return fail("the window ends before it starts");
    auto fault = parseFault({words.begin() + 2, words.end()}, &why);
    if (!fault) return fail(why);
    schedule.windows_.push_back(ScheduleWindow{*from, *to, *fault});
  }
  if (schedule.period_.count() > 0) {
    for (const auto& w : schedule.windows_) {
      if (w.to > schedule.period_) {
        *error = "a window ends after the 'repeat' period";
        return std::nullopt;
      }
    }
  }
  return schedule;
}

const ScheduledFault* FaultSchedule::activeAt(std::chrono::milliseconds elapsed) const {
  if (elapsed.count() < 0) return nullptr;
  if (period_.count() > 0) elapsed = elapsed % period_;
  for (const auto& w : windows_) {
    if (elapsed >= w.from && elapsed < w.to) return &w.fault;
  }
  return nullptr;
}

std::string ScheduledFault::describe() const {
  switch (kind) {
    case Kind::kStatus: {
      std::string out = "status " + std::to_string(status);
      if (retry_after_s) out += " retry-after=" + std::to_string(*retry_after_s);
      return out;
    }
    case Kind::kSlow:
      return "slow " + std::to_string(delay.count()) + "ms";
    case Kind::kReset:
      return "reset";
    case Kind::kHang:
      return "hang";
  }
  return "";
}

}  // namespace mockllm
