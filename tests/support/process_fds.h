#pragma once

// A process's open file descriptors, read from /proc: how many, and how many
// are TCP connections to a given port (sluice's upstream connections to a
// mock). Leak checks compare them with a baseline.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace sluice::test {

struct FdCount {
  size_t total = 0;
  size_t upstream = 0;  // sockets connected to the given remote port
  size_t others() const { return total - upstream; }
};

/** `pid`'s open fds, and those that are TCP connections to 127.0.0.1/any:`remote_port`. */
FdCount countFds(pid_t pid, uint16_t remote_port);

}  // namespace sluice::test
