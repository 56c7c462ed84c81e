#pragma once

// Real processes for integration tests: mock-llm (the fake provider) started
// on port 0, and an in-process sluice Server built from inline YAML. Ports
// are read back, never guessed; nothing sleeps to wait for a server.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "proxy/server/server.h"

namespace sluice::test {

/** A child process whose first stdout line announces its address. */
class ChildProcess {
 public:
  /**
   * Starts `argv`, waits (up to 10 s) for a stdout line containing
   * `ready_marker`. A non-empty `stderr_path` receives the child's stderr
   * (otherwise it is inherited); with `stderr_to_pipe`, stderr is a pipe
   * this object holds and never reads (a stuck log shipper).
   */
  ChildProcess(const std::vector<std::string>& argv, const std::string& ready_marker,
               const std::string& stderr_path = "", bool stderr_to_pipe = false);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running() const { return pid_ > 0; }
  const std::string& readyLine() const { return ready_line_; }
  /** Every stdout line read up to and including the ready line. */
  const std::vector<std::string>& lines() const { return lines_; }
  pid_t pid() const { return pid_; }
  /**
   * Makes the child's stdout (and stderr, when a pipe) a full pipe nobody
   * reads: shrinks each pipe to one page and fills it, so the child's next
   * write to it would block. False when that failed.
   */
  bool blockOutput();
  /** SIGTERM, then wait; returns the exit status (or -1). */
  int stop();
  /**
   * Waits (up to `timeout`) for the child to exit by itself; returns its exit
   * status, or -1 if it was killed by a signal or is still running (then it
   * is left running).
   */
  int waitForExit(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;  // the read end of a stderr pipe (stderr_to_pipe), never read
  std::string ready_line_;
  std::vector<std::string> lines_;
};

/** mock-llm on 127.0.0.1:0 (optionally TLS, plus any of its flags), and its ledger. */
class MockLlm {
 public:
  explicit MockLlm(const std::string& tls_cert = "", const std::string& tls_key = "",
                   const std::vector<std::string>& extra_args = {});
  uint16_t port() const { return port_; }
  std::string url() const;
  /** The ledger entries (all, or those with this request id). */
  nlohmann::json ledger(const std::string& id = "");
  /** The single ledger entry for `id` (fails the test when there is not exactly one). */
  nlohmann::json entry(const std::string& id);
  /**
   * Polls the ledger until `pred(entry(id))` holds or `timeout` passes — the
   * mock records asynchronously, so tests wait for the fact, not a time.
   */
  nlohmann::json waitForEntry(const std::string& id,
                              const std::function<bool(const nlohmann::json&)>& pred,
                              std::chrono::milliseconds timeout = std::chrono::seconds(5));
  void clearLedger();
  /** How many requests the mock answered with `status` (e.g. the provider's 429s). */
  int answeredWith(int status);

 private:
  std::unique_ptr<ChildProcess> proc_;
  uint16_t port_ = 0;
  bool tls_ = false;
};

/** sluice in-process on port 0 from inline YAML (the mock's URL substituted for ${MOCK_URL}). */
class SluiceUnderTest {
 public:
  explicit SluiceUnderTest(const std::string& yaml);
  ~SluiceUnderTest();
  uint16_t port() const { return server_->listenerPort(0); }
  uint16_t adminPort() const { return server_->adminPort(); }
  Server& server() { return *server_; }
  /** The Prometheus exposition, fetched over HTTP from the admin port. */
  std::string metricsText();
  /** The sum of the samples of `name` whose labels include `labels`; 0 if none. */
  double metric(const std::string& name,
                const std::vector<std::pair<std::string, std::string>>& labels);

 private:
  std::unique_ptr<Server> server_;
};

/** Expands ${NAME} in `text` from `vars` (test configs only). */
std::string substitute(std::string text,
                       const std::vector<std::pair<std::string, std::string>>& vars);

/** Path of a built binary or source file, from the build's compile definitions. */
std::string mockLlmPath();
std::string sluicePath();
std::string sourceDir();

/** Runs a command, returns {exit code, stdout+stderr}. */
std::pair<int, std::string> runCommand(const std::string& cmd);

}  // namespace sluice::test
