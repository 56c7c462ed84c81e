#include "proxy/observability/access_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "proxy/observability/json_line.h"
#include "proxy/observability/log.h"

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

}  // namespace

void renderAccessRecord(const AccessRecord& r, std::string& out) {
  using namespace json;
  // One reserve for the whole line (fixed text and numbers fit in 700 bytes;
  // strings by their escaping bound), literal keys, one trim at the end.
  size_t bound = 700 + stringBound(r.request_id) + stringBound(r.trace_id) + stringBound(r.route) +
                 stringBound(r.upstream) + stringBound(r.endpoint) + stringBound(r.method) +
                 stringBound(r.path) + stringBound(r.protocol) + stringBound(r.model) +
                 stringBound(r.run_id) + stringBound(r.parent_run_id) +
                 stringBound(r.jsonrpc_method) + stringBound(r.tool);
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
  p = writeLiteral(p, ",\"run_id\":");
  p = writeStringOrNull(p, r.run_id);
  p = writeLiteral(p, ",\"parent_run_id\":");
  p = writeStringOrNull(p, r.parent_run_id);
  p = writeLiteral(p, ",\"jsonrpc_method\":");
  p = writeStringOrNull(p, r.jsonrpc_method);
  p = writeLiteral(p, ",\"tool\":");
  p = writeStringOrNull(p, r.tool);
  p = writeLiteral(p, "}\n");
  out.resize(static_cast<size_t>(p - out.data()));
}

// --- AccessLog -------------------------------------------------------------------

AccessLog::AccessLog(prometheus::Counter& dropped_lines)
    : dropped_(dropped_lines),
      writer_(
          kMaxPendingBytes,
          [this](uint64_t lines) { dropped_.Increment(static_cast<double>(lines)); },
          [this](int err) { writeFailed(err); }) {}

AccessLog::~AccessLog() { stop(); }

bool AccessLog::configure(const config::AccessLogConfig& config, std::string* error) {
  using Target = config::AccessLogConfig::Target;
  {
    std::lock_guard<std::mutex> lock(target_mu_);
    if (config == target_ && (has_target_ || config.target == Target::Off)) return true;
  }
  int fd = -1;
  if (config.target == Target::Stdout) fd = STDOUT_FILENO;
  if (config.target == Target::File) {
    fd = openForAppend(config.path, error);
    if (fd < 0) return false;
  }
  {
    std::lock_guard<std::mutex> lock(target_mu_);
    target_ = config;
    has_target_ = fd >= 0;
    // The writer closes the fd it replaces once it is done with it.
    writer_.setTarget(fd, fd > STDERR_FILENO);
  }
  enabled_.store(fd >= 0);
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
    std::lock_guard<std::mutex> lock(target_mu_);
    if (target_.target != config::AccessLogConfig::Target::File) return true;
    path = target_.path;
  }
  const int fd = openForAppend(path, error);
  if (fd < 0) return false;  // keep writing to the file we have
  std::lock_guard<std::mutex> lock(target_mu_);
  if (target_.target != config::AccessLogConfig::Target::File || target_.path != path) {
    ::close(fd);  // a reload changed the target meanwhile: it stands
    return true;
  }
  writer_.setTarget(fd, true);
  return true;
}

void AccessLog::submit(std::string&& chunk, size_t lines) {
  writer_.submit(std::move(chunk), lines);
}

void AccessLog::stop(std::chrono::steady_clock::time_point deadline) {
  writer_.stop(deadline);
  enabled_.store(false);
}

void AccessLog::writeFailed(int err) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(target_mu_);
    path = target_.target == config::AccessLogConfig::Target::File ? target_.path : "stdout";
  }
  logError("sluice: access log write failed; lines are dropped until it works again",
           {{"path", path}, {"error", std::strerror(err)}});
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
  if (buffer_.size() < kFlushBytes / 2) {
    // A timer flush of a few lines: hand over a copy of their size and keep
    // the buffer. The queue's bound counts memory held, so a stuck reader
    // never holds a 68 KiB buffer per 400-byte line.
    chunk.assign(buffer_);
    buffer_.clear();
  } else {
    chunk.reserve(kFlushBytes + 4096);
    chunk.swap(buffer_);
  }
  log_.submit(std::move(chunk), lines_);
  lines_ = 0;
}

}  // namespace sluice
