#pragma once

// Operational logs (docs/design.md §7): one JSON object per line on stderr, with
// `ts`, `level` and the human message in `msg`, then the event's own fields:
//
//   {"ts":"2026-01-01T00:00:00.000Z","level":"info","msg":"sluice: config reloaded from
//   /etc/sluice.yaml","path":"/etc/sluice.yaml"}
//
// What is logged: start, listeners, reload accepted / rejected (with the
// reason), circuit transitions, access log trouble, drain. Never a secret
// and never a header value: callers pass names, paths, counts and config
// errors (which show `${VAR}` text, not expanded values — config/loader.h).
//
// logEvent() never writes: it renders the line and queues it for a writer
// thread (proxy/observability/log_writer.h), so a log call never waits for stderr's reader
// (a stuck log shipper, a pipe nobody reads) and may be made from a worker.
// Lines are whole and never interleave. The queue holds
// kOperationalLogMaxPendingBytes; beyond that lines are dropped and counted
// in sluice_log_dropped_total{log="operational"}. Still, never log while
// holding a lock other threads need on the request path.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "common/clock.h"

namespace sluice {

enum class LogLevel { Debug, Info, Warn, Error };

/** "debug", "info", "warn", "error". */
std::string_view toString(LogLevel level);

/** One `key: value` of an operational log line. */
struct LogField {
  using Value = std::variant<std::string_view, int64_t, double, bool>;

  LogField(std::string_view k, std::string_view v) : key(k), value(v) {}
  LogField(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  LogField(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  LogField(std::string_view k, bool v) : key(k), value(v) {}
  LogField(std::string_view k, double v) : key(k), value(v) {}
  template <class I, class = std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>>>
  LogField(std::string_view k, I v) : key(k), value(static_cast<int64_t>(v)) {}

  std::string_view key;
  Value value;
};

/** Appends one operational log line ('\n' included) to `out`. Pure: for tests. */
void renderLogLine(std::string& out, SystemTime ts, LogLevel level, std::string_view msg,
                   std::initializer_list<LogField> fields);

/** Operational log lines waiting for stderr beyond which new lines are dropped (and counted). */
inline constexpr size_t kOperationalLogMaxPendingBytes = 1u << 20;

/** Queues one operational log line for stderr, stamped with the real wall clock. Never blocks. */
void logEvent(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields = {});

/**
 * Writes the queued operational lines and stops the stderr writer, waiting
 * for a slow reader until `deadline` at most (what is left then is dropped
 * and counted). Later lines are dropped. main() calls it on the way out.
 */
void stopOperationalLog(std::chrono::steady_clock::time_point deadline);

inline void logInfo(std::string_view msg, std::initializer_list<LogField> fields = {}) {
  logEvent(LogLevel::Info, msg, fields);
}
inline void logWarn(std::string_view msg, std::initializer_list<LogField> fields = {}) {
  logEvent(LogLevel::Warn, msg, fields);
}
inline void logError(std::string_view msg, std::initializer_list<LogField> fields = {}) {
  logEvent(LogLevel::Error, msg, fields);
}

}  // namespace sluice
