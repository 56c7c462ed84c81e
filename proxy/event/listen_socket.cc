#include "proxy/event/listen_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace sluice {

namespace {

/** One listening socket bound with SO_REUSEPORT so every worker can have its own. */
evutil_socket_t bindOne(const std::string& host, uint16_t port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_str.c_str(), &hints, &res);
  if (rc != 0) {
    *error = "resolving " + host + ": " + gai_strerror(rc);
    return -1;
  }
  evutil_socket_t fd = -1;
  std::string last;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    // SOMAXCONN (the kernel caps it at net.core.somaxconn): a burst of
    // thousands of agents connecting at once overflowed a 1024 backlog in the
    // benchmark (bench/run, scenario C) and those clients were reset.
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    last = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) *error = "cannot listen on " + host + ":" + port_str + ": " + last;
  return fd;
}

/** A socket's local address as /proc/net/tcp{,6} prints it (hex words in memory order). */
std::string procAddress(const sockaddr_storage& ss) {
  char buf[40] = "";
  if (ss.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    std::snprintf(buf, sizeof(buf), "%08X", in.sin_addr.s_addr);
  } else if (ss.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
    uint32_t words[4];
    std::memcpy(words, &in6.sin6_addr, sizeof(words));
    std::snprintf(buf, sizeof(buf), "%08X%08X%08X%08X", words[0], words[1], words[2], words[3]);
  }
  return buf;
}

bool isWildcard(const std::string& proc_address) {
  return proc_address.find_first_not_of('0') == std::string::npos;
}

/**
 * True when a listening TCP socket in this network namespace, not in `ours`,
 * is on `port` at an address overlapping `address` (equal, or either is the
 * wildcard).
 */
bool foreignListener(uint16_t port, const std::string& address, const std::set<std::string>& ours) {
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      fields >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (st != "0A") continue;  // TCP_LISTEN
      const auto colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      const std::string addr = local.substr(0, colon);
      if (std::strtoul(local.c_str() + colon + 1, nullptr, 16) != port) continue;
      if (ours.count(inode) != 0) continue;
      if (addr == address || isWildcard(addr) || isWildcard(address)) return true;
    }
  }
  return false;
}

void closeAll(std::vector<evutil_socket_t>& fds) {
  for (evutil_socket_t fd : fds) ::close(fd);
  fds.clear();
}

}  // namespace

uint16_t boundPort(evutil_socket_t fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::vector<evutil_socket_t> bindListenerGroup(const std::string& host, uint16_t port, size_t count,
                                               std::string* error) {
  std::vector<evutil_socket_t> fds;
  std::set<std::string> inodes;
  for (size_t i = 0; i < count; ++i) {
    const evutil_socket_t fd = bindOne(host, port, error);
    if (fd < 0) {
      closeAll(fds);
      return fds;
    }
    if (i == 0) port = boundPort(fd);  // port 0: every worker shares the one we got
    fds.push_back(fd);
    struct stat st {};
    if (::fstat(fd, &st) == 0) inodes.insert(std::to_string(st.st_ino));
  }
  if (fds.empty()) return fds;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fds.front(), reinterpret_cast<sockaddr*>(&ss), &len);
  if (foreignListener(port, procAddress(ss), inodes)) {
    *error = "cannot listen on " + host + ":" + std::to_string(port) +
             ": another process is already listening there (another sluice? sharing the port "
             "with SO_REUSEPORT would split the traffic between them)";
    closeAll(fds);
  }
  return fds;
}

}  // namespace sluice
