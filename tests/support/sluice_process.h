#pragma once

// The real sluice binary as a child process, for what only a process can
// show: signals (SIGTERM drain, SIGHUP reload), the exit status, what it
// writes to stderr, its file descriptors and memory. The config is a file the
// test can rewrite before a reload; ports are port 0, read back from stdout.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "tests/support/processes.h"

namespace sluice::test {

class SluiceProcess {
 public:
  /**
   * Writes `yaml` to a temporary config file and starts `sluice --config` on
   * it. With `stderr_to_pipe`, stderr is a pipe nobody reads (stderrText()
   * is then empty; see blockOutput()).
   */
  explicit SluiceProcess(const std::string& yaml, bool stderr_to_pipe = false);
  ~SluiceProcess();
  SluiceProcess(const SluiceProcess&) = delete;
  SluiceProcess& operator=(const SluiceProcess&) = delete;

  bool running() const { return proc_ && proc_->running(); }
  pid_t pid() const { return proc_->pid(); }
  uint16_t port() const { return port_; }
  uint16_t adminPort() const { return admin_port_; }
  const std::string& configPath() const { return config_path_; }

  /** Replaces the config file (the next SIGHUP reads it). */
  void writeConfig(const std::string& yaml);
  /** Sends `sig` to the process. */
  void signal(int sig);
  /** Fills the process's stdout pipe (and stderr's, when a pipe) and never reads them. */
  bool blockOutput() { return proc_ && proc_->blockOutput(); }
  /** Everything the process wrote to stderr so far. */
  std::string stderrText() const;
  /** GET `path` on the admin port; the body, or "" when the admin port does not answer. */
  std::string adminGet(const std::string& path) const;
  /** Status of GET `path` on the admin port (0 when it does not answer). */
  int adminStatus(const std::string& path) const;
  /** The sum of `name`'s samples whose labels include `labels` (from /metrics). */
  double metric(const std::string& name,
                const std::vector<std::pair<std::string, std::string>>& labels = {}) const;
  /** Waits for the process to exit by itself; its exit status, or -1. */
  int waitForExit(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /** SIGTERM and wait (what the destructor does); the exit status. */
  int stop();

 private:
  std::string config_path_;
  std::string stderr_path_;
  std::unique_ptr<ChildProcess> proc_;
  uint16_t port_ = 0;
  uint16_t admin_port_ = 0;
};

/** The sum of `name`'s samples in a Prometheus exposition whose labels include `labels`. */
double metricSum(const std::string& exposition, const std::string& name,
                 const std::vector<std::pair<std::string, std::string>>& labels = {});

/** True when a TCP connection to 127.0.0.1:`port` is accepted by the kernel. */
bool canConnect(uint16_t port);

}  // namespace sluice::test
