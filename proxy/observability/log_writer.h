#pragma once

// The writer thread behind both logs: the operational log (stderr) and the
// access log (stdout or a file). Whoever logs — a worker, the signal thread,
// a circuit breaker's listener — only renders a line and queues it; the
// writer thread alone touches the file descriptor.
//
//   submit(lines) ──► bounded queue ──► writer thread ── write(2) ──► fd
//                     (full: dropped,      (waits for a slow reader with
//                      and counted)         poll(), never under a lock)
//
// Nothing here may block the caller on the reader: a stuck log shipper, a
// pipe nobody reads, a full disk cost dropped lines, counted through the
// drop callback, never a request's time.
//
// - submit() never waits for I/O: when the queue holds `max_pending_bytes`
//   (counted as the chunks' capacity: the memory they hold), the new lines
//   are dropped.
// - setTarget() (access log reload, SIGHUP reopen) swaps the fd without
//   waiting for a write in progress: the writer moves to the new fd before
//   its next write. A line cut by the swap is dropped, the rest of its
//   chunk goes to the new fd from the next whole line.
// - stop(deadline) writes what is queued, waiting for the reader until
//   `deadline` at most; past it, anything it cannot write without waiting
//   is dropped (counted) and the thread ends.
// - Whole lines or none: a write that fails after writing part of a line to
//   a regular file (a full disk, EFBIG) is truncated back to the last whole
//   line; where that is impossible (a pipe, a failed truncate) the next
//   write starts with '\n', so the torn fragment stands alone on its line
//   and the next line starts clean. The lines lost are counted.
// - On anything but a regular file (pipe, socket, terminal) the writer
//   waits for POLLOUT and then writes at most PIPE_BUF bytes, which a pipe
//   with room takes without blocking.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice {

class LogWriter {
 public:
  /** The write(2) the writer calls; tests inject short writes and failures. */
  using WriteFn = ssize_t (*)(int fd, const void* data, size_t size);
  /** Lines lost (queue full, failed write, abandoned at stop). Any thread; never under a lock. */
  using DropFn = std::function<void(uint64_t lines)>;
  /** A write failed with `err` (once per run of failures). Writer thread, no lock held. */
  using ErrorFn = std::function<void(int err)>;

  LogWriter(size_t max_pending_bytes, DropFn on_drop, ErrorFn on_error = {});
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  /**
   * Where lines go from now on: `fd` (closed by the writer once replaced,
   * when `owned`), or -1 for nowhere (what is queued is dropped, counted).
   * Returns at once; the writer thread starts with the first fd.
   */
  void setTarget(int fd, bool owned);

  /**
   * Queues whole lines ('\n'-terminated) for the writer. False when they
   * were dropped instead (and counted): the queue already holds
   * max_pending_bytes, or the writer stopped. Never waits for I/O.
   */
  bool submit(std::string&& chunk, size_t lines);

  /**
   * Writes what is queued and ends the writer thread, waiting for a slow
   * reader until `deadline` at most (the default: not at all; a regular
   * file or a reader with room still takes everything). What cannot be
   * written by then is dropped and counted. Later submits are dropped.
   */
  void stop(std::chrono::steady_clock::time_point deadline = {});

  /** Replaces write(2) (tests). Call before the first setTarget(). */
  void setWriteFunction(WriteFn fn) { write_ = fn; }

 private:
  struct Chunk {
    std::string text;
    size_t lines = 0;
  };
  enum class Wait { Writable, Woken, Abandon };

  void run();
  /** Adopts the fd of the last setTarget(), closing the one it replaces; false = the same fd. */
  bool adoptTarget();
  /** Writes one chunk; false when the stop deadline passed and it was abandoned. */
  bool writeChunk(const Chunk& chunk);
  /** A write failed after `done` bytes of `data`: cuts the torn line, counts what is lost. */
  void writeFailed(const std::string& data, size_t prefix, size_t done, int err);
  Wait waitWritable();
  void wake();
  void drop(uint64_t lines);

  const size_t max_pending_bytes_;
  const DropFn on_drop_;
  const ErrorFn on_error_;
  WriteFn write_;
  int wake_fd_ = -1;  // eventfd: stop() and setTarget() interrupt a wait for the reader

  std::mutex mu_;  // guards the queue and the fields below; never held across I/O
  std::condition_variable cv_;
  std::vector<Chunk> pending_;
  size_t pending_bytes_ = 0;
  bool stopping_ = false;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point deadline_{};
  int next_fd_ = -1;
  bool next_owned_ = false;
  std::atomic<bool> target_changed_{false};
  std::thread thread_;

  // The writer thread's own (and the destructor's, after the join).
  int fd_ = -1;
  bool owned_ = false;
  bool regular_ = false;  // fd_ is a regular file: writes never wait for a reader
  bool torn_ = false;     // fd_ ends in a partial line: the next write starts with '\n'
  int last_errno_ = 0;    // the last write error reported (reported once until a write succeeds)
};

}  // namespace sluice
