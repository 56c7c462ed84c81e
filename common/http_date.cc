#include "common/http_date.h"

#include <time.h>

#include <chrono>

namespace sluice {

namespace {

constexpr char kDays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr char kMonths[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

void put2(char* p, int v) {
  p[0] = static_cast<char>('0' + v / 10);
  p[1] = static_cast<char>('0' + v % 10);
}

// Written by hand: strftime's %a and %b follow the locale.
void format(int64_t seconds, char* out) {
  const time_t t = static_cast<time_t>(seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  const int year = tm.tm_year + 1900;
  char* p = out;
  for (int i = 0; i < 3; ++i) *p++ = kDays[tm.tm_wday][i];
  *p++ = ',';
  *p++ = ' ';
  put2(p, tm.tm_mday);
  p += 2;
  *p++ = ' ';
  for (int i = 0; i < 3; ++i) *p++ = kMonths[tm.tm_mon][i];
  *p++ = ' ';
  put2(p, (year / 100) % 100);
  put2(p + 2, year % 100);
  p += 4;
  *p++ = ' ';
  put2(p, tm.tm_hour);
  p[2] = ':';
  put2(p + 3, tm.tm_min);
  p[5] = ':';
  put2(p + 6, tm.tm_sec);
  p += 8;
  for (const char c : {' ', 'G', 'M', 'T'}) *p++ = c;
}

int64_t wholeSeconds(SystemTime t) {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

std::string formatImfFixdate(SystemTime t) {
  std::string out(HttpDateCache::kSize, ' ');
  format(wholeSeconds(t), out.data());
  return out;
}

std::string_view HttpDateCache::at(SystemTime now) {
  const int64_t second = wholeSeconds(now);
  if (second != second_) {
    format(second, text_);
    second_ = second;
    ++formatted_;
  }
  return {text_, kSize};
}

std::string_view httpDate(const Clock& clock) {
  static thread_local HttpDateCache cache;
  return cache.at(clock.systemNow());
}

}  // namespace sluice
