#include "tests/support/processes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <regex>
#include <sstream>
#include <thread>

#include "config/loader.h"
#include "tests/support/http_client.h"

namespace sluice::test {

std::string mockLlmPath() { return MOCK_LLM_PATH; }
std::string sluicePath() { return SLUICE_PATH; }
std::string sourceDir() { return SLUICE_SOURCE_DIR; }

std::pair<int, std::string> runCommand(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& ready_marker,
                           const std::string& stderr_path, bool stderr_to_pipe) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return;
  int errpipe[2] = {-1, -1};
  if (stderr_to_pipe && ::pipe2(errpipe, O_CLOEXEC) != 0) return;
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(pipefd[1], STDOUT_FILENO);
    if (stderr_to_pipe) {
      ::dup2(errpipe[1], STDERR_FILENO);
    } else if (!stderr_path.empty()) {
      const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) ::dup2(err, STDERR_FILENO);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(pipefd[1]);
  stdout_fd_ = pipefd[0];
  if (stderr_to_pipe) {
    ::close(errpipe[1]);
    stderr_fd_ = errpipe[0];
  }
  // Read the announcement line (poll with a deadline: a binary that hangs must
  // not hang the test; one that exits ends the wait at once, its pipe closed).
  // Generous: under ThreadSanitizer on two loaded cores a start took over 10 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string buf;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{stdout_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    char c;
    const ssize_t n = ::read(stdout_fd_, &c, 1);
    if (n <= 0) break;
    if (c == '\n') {
      lines_.push_back(buf);
      if (buf.find(ready_marker) != std::string::npos) {
        ready_line_ = buf;
        return;
      }
      buf.clear();
    } else {
      buf.push_back(c);
    }
  }
  ADD_FAILURE() << "process " << argv[0] << " did not announce '" << ready_marker << "'";
  stop();
}

ChildProcess::~ChildProcess() { stop(); }

bool ChildProcess::blockOutput() {
  if (pid_ <= 0) return false;
  std::vector<int> fds{STDOUT_FILENO};
  if (stderr_fd_ >= 0) fds.push_back(STDERR_FILENO);
  for (const int target : fds) {
    // A new open file description of the child's pipe: O_NONBLOCK here does
    // not touch the child's own (blocking) descriptor.
    const std::string path = "/proc/" + std::to_string(pid_) + "/fd/" + std::to_string(target);
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    ::fcntl(fd, F_SETPIPE_SZ, 4096);  // one page: quick to fill (may fail if fuller: fine)
    // Smaller and smaller writes: a partly used page still takes bytes that
    // a page-sized write cannot (a pipe merges small writes into it).
    const std::string junk(4096, '#');
    bool full = false;
    for (size_t size = junk.size(); size > 0 && (size == junk.size() || full); size /= 4) {
      full = false;
      while (!full) {
        const ssize_t n = ::write(fd, junk.data(), size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) full = errno == EAGAIN;
        if (n < 0 && !full) break;
      }
    }
    ::close(fd);
    if (!full) return false;
  }
  return true;
}

int ChildProcess::waitForExit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
  if (stderr_fd_ >= 0) ::close(stderr_fd_);
  stderr_fd_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int ChildProcess::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
  if (stderr_fd_ >= 0) ::close(stderr_fd_);
  stderr_fd_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

MockLlm::MockLlm(const std::string& tls_cert, const std::string& tls_key,
                 const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv{mockLlmPath(), "--listen", "127.0.0.1:0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  if (!tls_cert.empty()) {
    argv.insert(argv.end(), {"--tls-cert", tls_cert, "--tls-key", tls_key});
    tls_ = true;
  }
  proc_ = std::make_unique<ChildProcess>(argv, "mock-llm listening on");
  const auto& line = proc_->readyLine();
  const auto colon = line.rfind(':');
  if (colon != std::string::npos) port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
}

std::string MockLlm::url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

int MockLlm::answeredWith(int status) {
  int n = 0;
  for (const auto& e : ledger()) n += e.value("status", 0) == status ? 1 : 0;
  return n;
}

nlohmann::json MockLlm::ledger(const std::string& id) {
  // The ledger is read over plain HTTP on the same port; TLS mocks are read with curl.
  std::string path = "/_ledger" + (id.empty() ? std::string() : "?id=" + id);
  std::string body;
  if (tls_) {
    auto [code, out] = runCommand("curl -sk " + url() + path);
    body = out;
  } else {
    body = httpRequest(port_, "GET", path).body;
  }
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("requests")) {
    ADD_FAILURE() << "bad ledger: " << body;
    return nlohmann::json::array();
  }
  return j["requests"];
}

nlohmann::json MockLlm::entry(const std::string& id) {
  auto list = ledger(id);
  if (list.size() != 1) {
    ADD_FAILURE() << "expected one ledger entry for " << id << ", got " << list.dump();
    return nlohmann::json::object();
  }
  return list[0];
}

nlohmann::json MockLlm::waitForEntry(const std::string& id,
                                     const std::function<bool(const nlohmann::json&)>& pred,
                                     std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  nlohmann::json last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto list = ledger(id);
    if (list.size() == 1) {
      last = list[0];
      if (pred(last)) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "ledger entry " << id << " never matched; last: " << last.dump();
  return last;
}

void MockLlm::clearLedger() {
  if (tls_) {
    runCommand("curl -sk -X DELETE " + url() + "/_ledger");
  } else {
    httpRequest(port_, "DELETE", "/_ledger");
  }
}

std::string substitute(std::string text,
                       const std::vector<std::pair<std::string, std::string>>& vars) {
  for (const auto& [name, value] : vars) {
    const std::string key = "${" + name + "}";
    for (size_t pos; (pos = text.find(key)) != std::string::npos;)
      text.replace(pos, key.size(), value);
  }
  return text;
}

SluiceUnderTest::SluiceUnderTest(const std::string& yaml) {
  // No signal(SIGPIPE) here: Server::start ignores it for the process.
  auto loaded = config::loadConfigString(yaml, "test.yaml");
  if (!loaded.ok()) {
    ADD_FAILURE() << "test config invalid: " << loaded.error->toString();
    throw std::runtime_error("bad test config");
  }
  server_ = std::make_unique<Server>(loaded.config);
  std::string error;
  if (!server_->start(&error)) {
    ADD_FAILURE() << "sluice failed to start: " << error;
    throw std::runtime_error(error);
  }
}

SluiceUnderTest::~SluiceUnderTest() {
  if (server_) server_->stop();
}

std::string SluiceUnderTest::metricsText() {
  return httpRequest(adminPort(), "GET", "/metrics").body;
}

double SluiceUnderTest::metric(const std::string& name,
                               const std::vector<std::pair<std::string, std::string>>& labels) {
  const std::string text = metricsText();
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    bool all = true;
    for (const auto& [k, v] : labels) {
      if (line.find(k + "=\"" + v + "\"") == std::string::npos) all = false;
    }
    if (!all) continue;
    const auto space = line.rfind(' ');
    sum += std::stod(line.substr(space + 1));
  }
  return sum;
}

}  // namespace sluice::test
