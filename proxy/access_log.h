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
// and hands whole chunks over; only the writer thread touches the file. When
// the disk (or the stdout reader) falls behind, lines are dropped and counted
// in sluice_access_log_dropped_lines_total rather than slowing requests.
// SIGHUP reopens the file (logrotate's `create` / `move` scheme).

#include <prometheus/counter.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/cancel_reason.h"
#include "common/clock.h"
#include "config/config.h"
#include "proxy/event_util.h"

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
};

/** Appends `r` as one JSON line (fields in docs/design.md §7 order, '\n' included) to `out`. */
void renderAccessRecord(const AccessRecord& r, std::string& out);

/**
 * The process's access log: its target (off, stdout or a file) and the
 * writer thread. Thread-safe. Owned by the Server.
 */
class AccessLog {
 public:
  /** Lines waiting for the writer beyond which new chunks are dropped. */
  static constexpr size_t kMaxPendingBytes = 16u << 20;

  /** `dropped_lines` counts lines lost to a full queue or a failed write. */
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
   * new file when logrotate moved the old one. Synchronous: once it returns,
   * the writer writes to the new file. A no-op for stdout and off.
   */
  bool reopen(std::string* error);
  /** True while the log has a target (workers skip building records otherwise). */
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  /** Hands complete lines to the writer; drops (and counts) them when kMaxPendingBytes wait. */
  void submit(std::string&& chunk, size_t lines);
  /** Writes what is pending and stops the writer thread. Later submits are dropped. */
  void stop();

 private:
  void run();
  void writeChunk(const std::string& chunk, size_t lines);

  prometheus::Counter& dropped_;
  std::atomic<bool> enabled_{false};

  std::mutex file_mu_;  // guards the target; held by the writer while it writes
  config::AccessLogConfig target_;
  int fd_ = -1;         // -1 = off; 1 = stdout (never closed)
  int last_errno_ = 0;  // the last write error logged (logged once until a write succeeds)

  std::mutex mu_;  // guards the queue
  std::condition_variable cv_;
  struct Chunk {
    std::string text;
    size_t lines = 0;
  };
  std::vector<Chunk> pending_;
  size_t pending_bytes_ = 0;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread writer_;
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
