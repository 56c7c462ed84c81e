#include "proxy/observability/log.h"

#include <unistd.h>

#include "common/metrics.h"
#include "proxy/observability/json_line.h"
#include "proxy/observability/log_writer.h"

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

LogWriter& operationalLog() {
  // Built on first use and never destroyed: logs may come from any thread
  // until the process exits. stopOperationalLog() flushes it at the end.
  static LogWriter* const writer = [] {
    auto* w = new LogWriter(kOperationalLogMaxPendingBytes, [](uint64_t lines) {
      operationalLogDropped().fetch_add(lines, std::memory_order_relaxed);
    });
    w->setTarget(STDERR_FILENO, false);
    return w;
  }();
  return *writer;
}

void logEvent(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields) {
  std::string out;
  renderLogLine(out, RealClock::instance().systemNow(), level, msg, fields);
  operationalLog().submit(std::move(out), 1);
}

void stopOperationalLog(std::chrono::steady_clock::time_point deadline) {
  operationalLog().stop(deadline);
}

}  // namespace sluice
