#include "proxy/event/peer_unread.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace sluice {

namespace {

bool sameAddress(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

bool isLoopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

bool endpoints(int fd, sockaddr_storage& ours, sockaddr_storage& peer) {
  socklen_t len = sizeof(ours);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ours), &len) != 0) return false;
  len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return false;
  return ours.ss_family == peer.ss_family &&
         (ours.ss_family == AF_INET || ours.ss_family == AF_INET6);
}

// Fills one end of an inet_diag_sockid: port (network order) and address.
void fillEnd(const sockaddr_storage& a, __be16& port, __be32 (&addr)[4]) {
  std::memset(addr, 0, sizeof(addr));
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    port = v4.sin_port;
    addr[0] = v4.sin_addr.s_addr;
  } else {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    port = v6.sin6_port;
    std::memcpy(addr, &v6.sin6_addr, sizeof(in6_addr));
  }
}

}  // namespace

PeerUnreadProbe::PeerUnreadProbe()
    : netlink_(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_SOCK_DIAG)) {
}

PeerUnreadProbe::~PeerUnreadProbe() {
  if (netlink_ >= 0) ::close(netlink_);
}

bool PeerUnreadProbe::peerMayBeLocal(int fd) {
  sockaddr_storage ours{};
  sockaddr_storage peer{};
  if (!endpoints(fd, ours, peer)) return false;
  return isLoopback(peer) || sameAddress(ours, peer);
}

std::optional<uint64_t> PeerUnreadProbe::unreadBytes(int fd) {
  sockaddr_storage ours{};
  sockaddr_storage peer{};
  if (!endpoints(fd, ours, peer)) return std::nullopt;
  // Our side: every byte written is acknowledged (bytes_acked) or still
  // queued (SIOCOUTQ).
  int outq = 0;
  if (::ioctl(fd, SIOCOUTQ, &outq) != 0 || outq < 0) return std::nullopt;
  tcp_info ours_info{};
  socklen_t info_len = sizeof(ours_info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ours_info, &info_len) != 0 ||
      info_len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(ours_info.tcpi_bytes_received)) {
    return std::nullopt;
  }
  const uint64_t written = ours_info.tcpi_bytes_acked + static_cast<uint64_t>(outq);
  if (netlink_ < 0) return std::nullopt;
  // The peer's socket: its source is the client's address and port, its
  // destination ours (an exact lookup, not a dump).
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;
  message.header.nlmsg_seq = ++sequence_;
  message.request.sdiag_family = static_cast<uint8_t>(ours.ss_family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0U;
  message.request.idiag_ext = 1U << (INET_DIAG_INFO - 1);  // the peer's tcp_info
  fillEnd(peer, message.request.id.idiag_sport, message.request.id.idiag_src);
  fillEnd(ours, message.request.id.idiag_dport, message.request.id.idiag_dst);
  message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(netlink_, &message, sizeof(message), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) != static_cast<ssize_t>(sizeof(message))) {
    return std::nullopt;
  }
  // The kernel answers within sendto: one inet_diag_msg, or an error (ENOENT
  // for a socket not found). An answer to an earlier request (never expected)
  // is skipped by its sequence number.
  alignas(nlmsghdr) std::array<char, 1024> answer{};
  for (;;) {
    const ssize_t got = ::recv(netlink_, answer.data(), answer.size(), MSG_DONTWAIT);
    if (got <= 0) return std::nullopt;
    const auto* reply = reinterpret_cast<const nlmsghdr*>(answer.data());
    if (!NLMSG_OK(reply, static_cast<unsigned>(got))) return std::nullopt;
    if (reply->nlmsg_seq != sequence_) continue;
    if (reply->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        reply->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      return std::nullopt;
    }
    const auto* diag = static_cast<const inet_diag_msg*>(NLMSG_DATA(reply));
    // The peer's side: bytes it received (acknowledged to us or not yet: a
    // delayed ACK would count them twice in our send queue), of which
    // idiag_rqueue its application has not read. Unread = not yet received
    // + received and not read.
    const auto* attr = reinterpret_cast<const rtattr*>(diag + 1);
    int left = static_cast<int>(reply->nlmsg_len - NLMSG_LENGTH(sizeof(*diag)));
    for (; RTA_OK(attr, left); attr = RTA_NEXT(attr, left)) {
      if (attr->rta_type != INET_DIAG_INFO) continue;
      tcp_info peer_info{};
      const size_t len = std::min<size_t>(RTA_PAYLOAD(attr), sizeof(peer_info));
      if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(peer_info.tcpi_bytes_received)) {
        return std::nullopt;
      }
      std::memcpy(&peer_info, RTA_DATA(attr), len);
      const uint64_t received = peer_info.tcpi_bytes_received;
      const uint64_t in_flight = written > received ? written - received : 0;
      return in_flight + diag->idiag_rqueue;
    }
    return std::nullopt;
  }
}

}  // namespace sluice
