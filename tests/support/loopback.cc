#include "tests/support/loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::test {

LoopbackListener listenOnLoopback(int backlog) {
  LoopbackListener l;
  l.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (l.fd < 0) return l;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(l.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(l.fd, backlog) != 0 ||
      ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(l.fd);
    l.fd = -1;
    return l;
  }
  l.port = ntohs(addr.sin_port);
  return l;
}

}  // namespace sluice::test
