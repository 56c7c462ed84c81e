#include "tests/support/tcp_relay.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::test {

namespace {

int connectTo(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

}  // namespace

TcpRelay::TcpRelay(uint16_t target_port) : target_port_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 128) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::pipe2(wake_, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "TcpRelay: cannot listen";
    return;
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { run(); });
}

TcpRelay::~TcpRelay() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (const Pair& p : pairs_) {
    ::close(p.client);
    ::close(p.server);
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpRelay::blackhole() {
  {
    std::lock_guard lock(mu_);
    for (Pair& p : pairs_) p.dead = true;
  }
  (void)!::write(wake_[1], "x", 1);  // the relay stops polling them at once
}

void TcpRelay::run() {
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_[0], POLLIN, 0});
    std::vector<size_t> owners;  // fds[i + 2] belongs to pairs_[owners[i]]
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < pairs_.size(); ++i) {
        if (pairs_[i].dead || pairs_[i].client < 0) continue;
        fds.push_back({pairs_[i].client, POLLIN, 0});
        fds.push_back({pairs_[i].server, POLLIN, 0});
        owners.push_back(i);
        owners.push_back(i);
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;
    if ((fds[1].revents & POLLIN) != 0) {
      char buf[16];
      (void)!::read(wake_[0], buf, sizeof(buf));
    }
    if ((fds[0].revents & POLLIN) != 0) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        const int server = connectTo(target_port_);
        if (server < 0) {
          ::close(client);
        } else {
          std::lock_guard lock(mu_);
          pairs_.push_back({client, server, false});
          ++accepted_;
        }
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      std::lock_guard lock(mu_);
      Pair& p = pairs_[owners[i - 2]];
      if (p.dead || p.client < 0) continue;
      const int to = fds[i].fd == p.client ? p.server : p.client;
      char buf[16384];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0 || ::write(to, buf, static_cast<size_t>(n)) != n) {
        // One side closed: close both (the other side sees the end).
        ::close(p.client);
        ::close(p.server);
        p.client = p.server = -1;
      }
    }
  }
}

}  // namespace sluice::test
