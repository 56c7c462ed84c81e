#pragma once

// How much of what sluice wrote to a client on this host still sits unread:
// the client socket's receive queue, read with sock_diag (NETLINK_SOCK_DIAG,
// what `ss` shows as Recv-Q), plus what sluice's own socket has not yet had
// acknowledged (SIOCOUTQ). Used to tell "written" from "read" when a client
// that stopped reading later resets the connection (docs/reference/metrics.md,
// "Delivered means read").
//
// Exact for a client on the same host and network namespace (loopback, or the
// host's own address): the kernel knows both ends. A remote client's socket is
// not ours to look at, so unreadBytes() answers nullopt and the caller falls
// back to what TCP itself says (a FIN or a reset). Unprivileged for TCP. One
// per worker: a netlink socket, opened with it, one request and one
// answer per sample, on the worker's thread.

#include <cstdint>
#include <optional>

namespace sluice {

class PeerUnreadProbe {
 public:
  /** Opens its netlink socket (none: every look answers nullopt). */
  PeerUnreadProbe();
  ~PeerUnreadProbe();
  PeerUnreadProbe(const PeerUnreadProbe&) = delete;
  PeerUnreadProbe& operator=(const PeerUnreadProbe&) = delete;

  /**
   * True when `fd`'s peer may be on this host (a loopback address, or the
   * same address as our end): only then is unreadBytes() worth asking.
   */
  static bool peerMayBeLocal(int fd);

  /**
   * Bytes written on connected TCP socket `fd` that its peer's application
   * has not read: our unacknowledged send queue plus the peer socket's
   * receive queue. nullopt when the peer socket is not found on this host
   * (remote, another network namespace, already closed) or sock_diag is
   * unavailable.
   */
  std::optional<uint64_t> unreadBytes(int fd);

 private:
  int netlink_ = -1;
  uint32_t sequence_ = 0;
};

}  // namespace sluice
