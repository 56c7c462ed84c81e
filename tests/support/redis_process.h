#pragma once

// Debian's redis-server as a child process for the shared-state tests
// (docs/design.md §6), and a listener that accepts connections but never answers.
// redis-server cannot announce a port-0 bind, so the helper picks a free
// port outside the kernel's ephemeral range (no other test's port 0 lands
// there) and retries on a lost race. Ready = its "Ready to accept
// connections" line, never a sleep.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tests/support/processes.h"

namespace sluice::test {

/** A TLS-only redis-server's certificate files (TestPki's). */
struct RedisTls {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
};

class RedisProcess {
 public:
  /**
   * Starts redis-server on 127.0.0.1 (no persistence); fails the test when it
   * cannot. With `tls` it listens for TLS only (clients are not asked for a
   * certificate).
   */
  explicit RedisProcess(std::optional<RedisTls> tls = std::nullopt);
  ~RedisProcess();
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  uint16_t port() const { return port_; }
  /** redis://127.0.0.1:PORT/`db` (rediss://localhost:PORT/`db` with TLS). */
  std::string url(int db = 0) const;
  bool running() const { return proc_ && proc_->running(); }

  /** SIGKILL: gone at once, as a crashed Redis is (its state with it). */
  void kill();
  /** SIGSTOP: connections stay open and accepted, nothing is answered. */
  void pause();
  /** SIGCONT after pause(). */
  void resume();
  /** Starts it again on the same port (after kill()). */
  void restart();

  /** redis-cli against it: the reply's text (trimmed), for assertions. */
  std::string cli(const std::string& args) const;

 private:
  bool startOn(uint16_t port);

  std::optional<RedisTls> tls_;
  uint16_t port_ = 0;
  std::unique_ptr<ChildProcess> proc_;
};

/**
 * A TCP port whose connections the kernel completes but nobody ever reads:
 * a Redis that accepts and never answers.
 */
class SilentListener {
 public:
  SilentListener();
  ~SilentListener();
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace sluice::test
