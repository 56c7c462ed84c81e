#pragma once

// The access log (docs/design.md §7): one JSON object per finished request,
// written off the request path.
//
//   Exchange::finish ──AccessRecord──► AccessLogBuffer (per worker: render, append)
//                                          │ 64 KiB full, or 50 ms after its first line
//                                          ▼
//                                     AccessLog::submit (one lock per chunk, not per request)
//                                          │ bounded queue: beyond 16 MiB waiting,
//                                          │ the chunk is dropped and its lines counted
//                                          ▼
//                                     writer thread ── write(2) ──► file | stdout
//
// A worker never blocks on the log's file: it renders into its own buffer
// and hands whole chunks over; only the writer thread (proxy/observability/log_writer.h)
// touches the file. When the disk (or the stdout reader) falls behind, lines
// are dropped and counted in sluice_access_log_dropped_total and
// sluice_log_dropped_total{log="access"} rather than slowing requests.
// SIGHUP reopens the file (logrotate's `create` / `move` scheme).

#include <prometheus/counter.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/cancel_reason.h"
#include "common/clock.h"
#include "config/config.h"
#include "proxy/event/event_util.h"
#include "proxy/observability/log_writer.h"

namespace sluice {

/**
 * One finished request as the access log shows it. Views point into the
 * Exchange that builds the record; it is rendered at once, never stored.
 */
struct AccessRecord {
  SystemTime start;  // `ts`: when the request head arrived (wall clock)
  std::string_view request_id;
  std::string_view trace_id;
  std::string_view route;     // "none" when no route matched
  std::string_view upstream;  // "none" when no route matched
  std::string_view endpoint;  // host:port of the upstream's url; "" = null
  std::string_view method;
  std::string_view path;      // without the query string (it may carry secrets)
  std::string_view protocol;  // "HTTP/1.1", "HTTP/2", ...
  int status = 0;             // as counted in sluice_requests_total (499: client gone)
  uint32_t attempts = 0;
  std::span<const std::string> retry_causes;  // sluice_retries_total `cause` of each retry
  uint32_t fallbacks = 0;
  double duration_ms = 0;
  std::optional<double> ttfb_ms;  // first response byte to the client; none = null
  std::optional<CancelReason> cancel_reason;
  std::string_view model;  // the model the request or response named; "" = null
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  double spend_usd = 0;  // delivered + leaked
  double leaked_usd = 0;
  uint64_t bytes_in = 0;           // request body bytes received
  uint64_t bytes_out = 0;          // response body bytes handed to the client
  std::string_view run_id;         // the request's run (docs/design.md §9); "" = null
  std::string_view parent_run_id;  // that run's parent run; "" = null
  std::string_view
      jsonrpc_method;     // MCP routes: the JSON-RPC method (docs/design.md §10); "" = null
  std::string_view tool;  // MCP routes: a tools/call's tool name; "" = null
};

/** Appends `r` as one JSON line (fields in docs/design.md §7 order, '\n' included) to `out`. */
void renderAccessRecord(const AccessRecord& r, std::string& out);

/**
 * The process's access log: its target (off, stdout or a file) and the
 * writer thread (a LogWriter). Thread-safe. Owned by the Server. No call
 * waits for the file or the stdout reader: reload, SIGHUP and shutdown
 * finish whatever the reader does.
 */
class AccessLog {
 public:
  /** Lines waiting for the writer beyond which new chunks are dropped. */
  static constexpr size_t kMaxPendingBytes = 16u << 20;

  /** `dropped_lines` counts lines lost to a full queue, a failed write or shutdown. */
  explicit AccessLog(prometheus::Counter& dropped_lines);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  /**
   * Points the log at `config`: opens the file (append, created 0640) or
   * takes stdout, or turns the log off. When the file cannot be opened,
   * false + `error` (naming the path and errno) and the previous target stays.
   * An unchanged target is left as it is.
   */
  bool configure(const config::AccessLogConfig& config, std::string* error);
  /**
   * `--check-config`: whether configure() could open `config`'s file, with
   * the message it would give, without creating the file.
   */
  static bool check(const config::AccessLogConfig& config, std::string* error);
  /**
   * SIGHUP: reopens the file by its path, so lines after this call go to a
   * new file when logrotate moved the old one (the writer switches before
   * its next write; it never waits for a write in progress). A no-op for
   * stdout and off.
   */
  bool reopen(std::string* error);
  /** True while the log has a target (workers skip building records otherwise). */
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  /** Hands complete lines to the writer; drops (and counts) them when kMaxPendingBytes wait. */
  void submit(std::string&& chunk, size_t lines);
  /**
   * Writes what is pending and stops the writer thread, waiting for a slow
   * reader until `deadline` at most; the lines still pending then are
   * dropped and counted. Later submits are dropped.
   */
  void stop(std::chrono::steady_clock::time_point deadline = {});

  /** Replaces the writer's write(2) (tests: short writes, a full disk). Before configure(). */
  void setWriteFunction(LogWriter::WriteFn fn) { writer_.setWriteFunction(fn); }

 private:
  void writeFailed(int err);

  prometheus::Counter& dropped_;
  std::atomic<bool> enabled_{false};

  std::mutex target_mu_;  // guards target_; never held across I/O
  config::AccessLogConfig target_;
  bool has_target_ = false;  // an fd was handed to the writer for target_
  LogWriter writer_;         // last: its thread stops before the rest goes
};

/**
 * One worker's side of the access log: renders records into a local buffer
 * and hands it to the AccessLog when it passes kFlushBytes or kFlushInterval
 * after its first line. Lives on (and is used only from) the worker thread.
 */
class AccessLogBuffer {
 public:
  static constexpr size_t kFlushBytes = 64 * 1024;
  static constexpr std::chrono::milliseconds kFlushInterval{50};

  AccessLogBuffer(AccessLog& log, event_base* base);

  /** True while the access log is on: only then do Exchanges build records. */
  bool enabled() const { return log_.enabled(); }
  /** Renders `record` into the buffer. */
  void append(const AccessRecord& record);
  /** Hands what is buffered to the writer now (timer, worker shutdown). */
  void flush();

 private:
  AccessLog& log_;
  std::string buffer_;
  size_t lines_ = 0;
  Timer timer_;
};

}  // namespace sluice
