#include "proxy/access_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "proxy/json_line.h"
#include "proxy/log.h"

namespace sluice {

namespace {

/** Opens `path` for appending (created 0640); -1 + `error` on failure. */
int openForAppend(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0 && error != nullptr) {
    *error = "access_log.path: cannot open " + path + ": " + std::strerror(errno);
  }
  return fd;
}

/** Writes all of `data` to `fd`; errno of the failure, or 0. */
int writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

void renderAccessRecord(const AccessRecord& r, std::string& out) {
  using namespace json;
  // One reserve for the whole line (fixed text and numbers fit in 640 bytes;
  // strings by their escaping bound), literal keys, one trim at the end.
  size_t bound = 640 + stringBound(r.request_id) + stringBound(r.trace_id) + stringBound(r.route) +
                 stringBound(r.upstream) + stringBound(r.endpoint) + stringBound(r.method) +
                 stringBound(r.path) + stringBound(r.protocol) + stringBound(r.model);
  for (const std::string& cause : r.retry_causes) bound += 1 + stringBound(cause);
  const size_t used = out.size();
  out.resize(used + bound);
  char* p = out.data() + used;

  p = writeLiteral(p, "{\"ts\":");
  p = writeTimestamp(p, r.start);
  p = writeLiteral(p, ",\"request_id\":");
  p = writeString(p, r.request_id);
  p = writeLiteral(p, ",\"trace_id\":");
  p = writeString(p, r.trace_id);
  p = writeLiteral(p, ",\"route\":");
  p = writeString(p, r.route);
  p = writeLiteral(p, ",\"upstream\":");
  p = writeString(p, r.upstream);
  p = writeLiteral(p, ",\"endpoint\":");
  p = writeStringOrNull(p, r.endpoint);
  p = writeLiteral(p, ",\"method\":");
  p = writeString(p, r.method);
  p = writeLiteral(p, ",\"path\":");
  p = writeString(p, r.path);
  p = writeLiteral(p, ",\"protocol\":");
  p = writeString(p, r.protocol);
  p = writeLiteral(p, ",\"status\":");
  p = writeInteger(p, static_cast<int64_t>(r.status));
  p = writeLiteral(p, ",\"attempts\":");
  p = writeInteger(p, static_cast<uint64_t>(r.attempts));
  p = writeLiteral(p, ",\"retry_causes\":[");
  for (size_t i = 0; i < r.retry_causes.size(); ++i) {
    if (i > 0) *p++ = ',';
    p = writeString(p, r.retry_causes[i]);
  }
  p = writeLiteral(p, "],\"fallbacks\":");
  p = writeInteger(p, static_cast<uint64_t>(r.fallbacks));
  p = writeLiteral(p, ",\"duration_ms\":");
  p = writeFixed(p, r.duration_ms, 3);
  p = writeLiteral(p, ",\"ttfb_ms\":");
  p = r.ttfb_ms ? writeFixed(p, *r.ttfb_ms, 3) : writeLiteral(p, "null");
  p = writeLiteral(p, ",\"cancel_reason\":");
  p = r.cancel_reason ? writeString(p, toString(*r.cancel_reason)) : writeLiteral(p, "null");
  p = writeLiteral(p, ",\"model\":");
  p = writeStringOrNull(p, r.model);
  p = writeLiteral(p, ",\"input_tokens\":");
  p = writeInteger(p, r.input_tokens);
  p = writeLiteral(p, ",\"output_tokens\":");
  p = writeInteger(p, r.output_tokens);
  p = writeLiteral(p, ",\"spend_usd\":");
  p = writeDouble(p, r.spend_usd);
  p = writeLiteral(p, ",\"leaked_usd\":");
  p = writeDouble(p, r.leaked_usd);
  p = writeLiteral(p, ",\"bytes_in\":");
  p = writeInteger(p, r.bytes_in);
  p = writeLiteral(p, ",\"bytes_out\":");
  p = writeInteger(p, r.bytes_out);
  p = writeLiteral(p, "}\n");
  out.resize(static_cast<size_t>(p - out.data()));
}

// --- AccessLog -------------------------------------------------------------------

AccessLog::AccessLog(prometheus::Counter& dropped_lines) : dropped_(dropped_lines) {}

AccessLog::~AccessLog() {
  stop();
  std::lock_guard<std::mutex> lock(file_mu_);
  if (fd_ > STDERR_FILENO) ::close(fd_);
}

bool AccessLog::configure(const config::AccessLogConfig& config, std::string* error) {
  using Target = config::AccessLogConfig::Target;
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    if (config == target_ && (fd_ >= 0 || config.target == Target::Off)) return true;
  }
  if (config.target == Target::Stdout) fd = STDOUT_FILENO;
  if (config.target == Target::File) {
    fd = openForAppend(config.path, error);
    if (fd < 0) return false;
  }
  int old = -1;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    old = fd_;
    fd_ = fd;
    target_ = config;
    last_errno_ = 0;
  }
  if (old > STDERR_FILENO) ::close(old);
  enabled_.store(fd >= 0);
  if (fd >= 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writer_.joinable() && !stopped_) writer_ = std::thread([this] { run(); });
  }
  return true;
}

bool AccessLog::check(const config::AccessLogConfig& config, std::string* error) {
  if (config.target != config::AccessLogConfig::Target::File) return true;
  int fd = ::open(config.path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  int err = errno;
  if (err == ENOENT) {
    // configure() would create it: the directory must exist and be writable.
    const std::string dir = std::filesystem::path(config.path).parent_path().string();
    struct stat st {};
    if (::stat(dir.empty() ? "." : dir.c_str(), &st) != 0) {
      err = errno;
    } else if (!S_ISDIR(st.st_mode)) {
      err = ENOTDIR;
    } else if (::access(dir.empty() ? "." : dir.c_str(), W_OK | X_OK) != 0) {
      err = errno;
    } else {
      return true;
    }
  }
  *error = "access_log.path: cannot open " + config.path + ": " + std::strerror(err);
  return false;
}

bool AccessLog::reopen(std::string* error) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    if (target_.target != config::AccessLogConfig::Target::File) return true;
    path = target_.path;
  }
  const int fd = openForAppend(path, error);
  if (fd < 0) return false;  // keep writing to the file we have
  int old = -1;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    old = fd_;
    fd_ = fd;
    last_errno_ = 0;
  }
  if (old > STDERR_FILENO) ::close(old);
  return true;
}

void AccessLog::submit(std::string&& chunk, size_t lines) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_ && pending_bytes_ + chunk.size() <= kMaxPendingBytes) {
      pending_bytes_ += chunk.size();
      pending_.push_back(Chunk{std::move(chunk), lines});
      cv_.notify_one();
      return;
    }
  }
  dropped_.Increment(static_cast<double>(lines));
}

void AccessLog::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  enabled_.store(false);
}

void AccessLog::run() {
  std::vector<Chunk> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, and everything is written
      batch.swap(pending_);
      pending_bytes_ = 0;
    }
    for (const Chunk& chunk : batch) writeChunk(chunk.text, chunk.lines);
    batch.clear();
  }
}

void AccessLog::writeChunk(const std::string& chunk, size_t lines) {
  int err = 0;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    if (fd_ < 0) {
      err = -1;  // turned off by a reload: what was pending is dropped
    } else {
      err = writeAll(fd_, chunk);
      if (err == 0) last_errno_ = 0;
      if (err > 0 && err == last_errno_) err = -1;  // already logged
      if (err > 0) {
        last_errno_ = err;
        path = target_.target == config::AccessLogConfig::Target::File ? target_.path : "stdout";
      }
    }
  }
  if (err == 0) return;
  dropped_.Increment(static_cast<double>(lines));
  if (err > 0) {
    logError("sluice: access log write failed; lines are dropped until it works again",
             {{"path", path}, {"error", std::strerror(err)}});
  }
}

// --- AccessLogBuffer ---------------------------------------------------------------

AccessLogBuffer::AccessLogBuffer(AccessLog& log, event_base* base)
    : log_(log), timer_(base, [this] { flush(); }) {
  buffer_.reserve(kFlushBytes + 4096);  // a full buffer plus the line that filled it
}

void AccessLogBuffer::append(const AccessRecord& record) {
  renderAccessRecord(record, buffer_);
  ++lines_;
  if (buffer_.size() >= kFlushBytes) {
    flush();
  } else if (lines_ == 1) {
    timer_.arm(kFlushInterval);
  }
}

void AccessLogBuffer::flush() {
  timer_.disarm();
  if (lines_ == 0) return;
  std::string chunk;
  chunk.reserve(kFlushBytes + 4096);
  chunk.swap(buffer_);
  log_.submit(std::move(chunk), lines_);
  lines_ = 0;
}

}  // namespace sluice
