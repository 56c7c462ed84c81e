#include "proxy/log.h"

#include <unistd.h>

#include <cerrno>

#include "proxy/json_line.h"

namespace sluice {

std::string_view toString(LogLevel level) {
  switch (level) {
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warn";
    case LogLevel::Error:
      return "error";
  }
  return "info";
}

void renderLogLine(std::string& out, SystemTime ts, LogLevel level, std::string_view msg,
                   std::initializer_list<LogField> fields) {
  JsonLine line(out);
  line.time("ts", ts).str("level", toString(level)).str("msg", msg);
  for (const LogField& f : fields) {
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string_view>) {
            line.str(f.key, v);
          } else if constexpr (std::is_same_v<T, bool>) {
            line.boolean(f.key, v);
          } else {
            line.num(f.key, v);
          }
        },
        f.value);
  }
  line.end();
}

void logEvent(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields) {
  std::string out;
  renderLogLine(out, RealClock::instance().systemNow(), level, msg, fields);
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(STDERR_FILENO, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone: nothing better to do with a log line
    done += static_cast<size_t>(n);
  }
}

}  // namespace sluice
