#pragma once

// Listening sockets that only this process's workers share.
//
// Each worker accepts on its own socket, all bound to the same address with
// SO_REUSEPORT, so the kernel spreads new connections across the workers.
// SO_REUSEPORT alone would also let a second sluice (same user) bind that
// address and silently take half the traffic. So after binding its group a
// process looks at every TCP socket listening in its network namespace
// (/proc/self/net/tcp, tcp6): one on the same port and an overlapping
// address (equal, or either side the wildcard) whose inode is not one of
// ours belongs to someone else, and the bind fails with a clear error.
// Two processes starting at the same moment: whichever checks last sees
// the other, so at most one of them keeps the address (or neither), never
// both. A process that binds without SO_REUSEPORT (nginx, anything else)
// makes our bind fail with EADDRINUSE as before.

#include <event2/util.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

/**
 * Binds and listens on `count` non-blocking SO_REUSEPORT sockets at
 * host:port (port 0: any free port, the same one for all). Empty + `error`
 * when the address cannot be bound or another process listens there.
 */
std::vector<evutil_socket_t> bindListenerGroup(const std::string& host, uint16_t port, size_t count,
                                               std::string* error);

/** The port `fd` is bound to (0 if unknown). */
uint16_t boundPort(evutil_socket_t fd);

}  // namespace sluice
