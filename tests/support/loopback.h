#pragma once

// A listening TCP socket on loopback for the scripted raw upstreams of the
// integration tests (bytes no real server would send on purpose).

#include <cstdint>
#include <string>

namespace sluice::test {

/** A bound, listening socket on 127.0.0.1 with a port the kernel chose. */
struct LoopbackListener {
  int fd = -1;
  uint16_t port = 0;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

/** Binds 127.0.0.1:0 and listens; fd < 0 when that failed. */
LoopbackListener listenOnLoopback(int backlog = 16);

}  // namespace sluice::test
