#include "proxy/observability/log_writer.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sluice {

namespace {

uint64_t countLines(const std::string& data, size_t from) {
  if (from >= data.size()) return 0;
  return static_cast<uint64_t>(
      std::count(data.begin() + static_cast<ptrdiff_t>(from), data.end(), '\n'));
}

/** Where the line holding byte `done` starts: just past the last '\n' before it. */
size_t lineStart(const std::string& data, size_t done) {
  if (done == 0) return 0;
  const size_t nl = data.rfind('\n', done - 1);
  return nl == std::string::npos ? 0 : nl + 1;
}

}  // namespace

LogWriter::LogWriter(size_t max_pending_bytes, DropFn on_drop, ErrorFn on_error)
    : max_pending_bytes_(max_pending_bytes),
      on_drop_(std::move(on_drop)),
      on_error_(std::move(on_error)),
      write_(&::write),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

LogWriter::~LogWriter() {
  stop();
  if (owned_ && fd_ >= 0) ::close(fd_);
  // A target set but never adopted (the writer stopped first).
  if (next_owned_ && next_fd_ >= 0 && next_fd_ != fd_) ::close(next_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void LogWriter::setTarget(int fd, bool owned) {
  int unused = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) {
      if (owned) unused = fd;
    } else {
      // A target set and replaced before the writer adopted it.
      if (target_changed_.load() && next_owned_ && next_fd_ >= 0 && next_fd_ != fd) {
        unused = next_fd_;
      }
      next_fd_ = fd;
      next_owned_ = owned;
      target_changed_.store(true);
      if (!thread_.joinable() && fd >= 0) thread_ = std::thread([this] { run(); });
      cv_.notify_one();
    }
  }
  if (unused >= 0) ::close(unused);
  wake();
}

bool LogWriter::submit(std::string&& chunk, size_t lines) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The bound is on memory held: a chunk's capacity, not just its text.
    const size_t bytes = std::max(chunk.size(), chunk.capacity());
    if (!stopped_ && pending_bytes_ + bytes <= max_pending_bytes_) {
      pending_bytes_ += bytes;
      pending_.push_back(Chunk{std::move(chunk), lines});
      cv_.notify_one();
      return true;
    }
  }
  drop(lines);
  return false;
}

void LogWriter::stop(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopping_ = true;
    deadline_ = deadline;
    cv_.notify_one();
  }
  wake();
  if (thread_.joinable()) thread_.join();
  uint64_t lost = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    for (const Chunk& c : pending_) lost += c.lines;  // the writer gave up (or never ran)
    pending_.clear();
    pending_bytes_ = 0;
  }
  drop(lost);
}

void LogWriter::drop(uint64_t lines) {
  if (lines > 0 && on_drop_) on_drop_(lines);
}

void LogWriter::wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void LogWriter::run() {
  std::vector<Chunk> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || target_changed_.load() || !pending_.empty(); });
      if (stopping_ && pending_.empty() && !target_changed_.load()) return;
      batch.swap(pending_);
      pending_bytes_ = 0;
    }
    if (target_changed_.load()) adoptTarget();
    for (size_t i = 0; i < batch.size(); ++i) {
      if (writeChunk(batch[i])) continue;
      // The stop deadline passed with a reader that takes nothing: give up.
      uint64_t lost = 0;
      for (size_t j = i + 1; j < batch.size(); ++j) lost += batch[j].lines;
      drop(lost);
      return;  // stop() drops (and counts) whatever is still queued
    }
    batch.clear();
  }
}

bool LogWriter::adoptTarget() {
  int fd = -1;
  bool owned = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fd = next_fd_;
    owned = next_owned_;
    target_changed_.store(false);
  }
  if (fd == fd_) return false;
  if (owned_ && fd_ >= 0) ::close(fd_);
  fd_ = fd;
  owned_ = owned;
  struct stat st {};
  regular_ = fd_ >= 0 && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  torn_ = false;
  last_errno_ = 0;
  return true;
}

LogWriter::Wait LogWriter::waitWritable() {
  int timeout = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      const auto left = deadline_ - std::chrono::steady_clock::now();
      timeout = static_cast<int>(
          std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    }
  }
  pollfd fds[2] = {{fd_, POLLOUT, 0}, {wake_fd_, POLLIN, 0}};
  const int n = ::poll(fds, wake_fd_ >= 0 ? 2 : 1, timeout);
  if (n < 0) return errno == EINTR ? Wait::Woken : Wait::Writable;  // the write reports it
  if (n > 0 && (fds[1].revents & POLLIN) != 0) {
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &count, sizeof count);
    return Wait::Woken;
  }
  if (n > 0) return Wait::Writable;  // POLLOUT, or POLLERR / POLLHUP: the write reports it
  return Wait::Abandon;              // only a stop deadline times out
}

bool LogWriter::writeChunk(const Chunk& chunk) {
  // After a torn line that could not be cut, start on a fresh line.
  std::string prefixed;
  const std::string* data = &chunk.text;
  size_t prefix = 0;
  if (torn_) {
    prefixed.reserve(chunk.text.size() + 1);
    prefixed.push_back('\n');
    prefixed += chunk.text;
    data = &prefixed;
    prefix = 1;
  }
  size_t done = 0;
  while (done < data->size()) {
    if (target_changed_.load()) {
      // A reload or reopen: the rest goes to the new fd from the next whole
      // line. A line cut here stays torn at the end of the old fd (the last
      // bytes written there) and is counted.
      const bool cut = done > lineStart(*data, done);
      if (!adoptTarget()) continue;
      if (cut) {
        const size_t nl = data->find('\n', done);
        done = nl == std::string::npos ? data->size() : nl + 1;
        drop(1);
      }
      done = std::max(done, prefix);  // the new fd owes no '\n'
      continue;
    }
    if (fd_ < 0) {
      drop(countLines(*data, std::max(done, prefix)));
      return true;
    }
    size_t want = data->size() - done;
    if (!regular_) {
      const Wait w = waitWritable();
      if (w == Wait::Woken) continue;
      if (w == Wait::Abandon) {
        // A line cut here is the last thing the process writes to this fd.
        drop(countLines(*data, std::max(lineStart(*data, done), prefix)));
        return false;
      }
      want = std::min<size_t>(want, PIPE_BUF);
    }
    const ssize_t n = write_(fd_, data->data() + done, want);
    if (n > 0) {
      done += static_cast<size_t>(n);
      if (done >= prefix) torn_ = false;
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    writeFailed(*data, prefix, done, n < 0 ? errno : EIO);
    return true;
  }
  last_errno_ = 0;
  return true;
}

void LogWriter::writeFailed(const std::string& data, size_t prefix, size_t done, int err) {
  const size_t keep = lineStart(data, done);
  size_t torn = done - keep;
  if (torn > 0 && regular_) {
    // A full disk took part of a line: cut it off, so the file ends whole.
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && static_cast<size_t>(st.st_size) >= torn &&
        ::ftruncate(fd_, st.st_size - static_cast<off_t>(torn)) == 0) {
      torn = 0;
    }
  }
  torn_ = torn > 0 || (done < prefix);  // a prefix '\n' not written yet is still owed
  drop(countLines(data, std::max(keep, prefix)));
  if (err != last_errno_) {
    last_errno_ = err;
    if (on_error_) on_error_(err);
  }
}

}  // namespace sluice
