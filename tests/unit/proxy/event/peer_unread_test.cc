// PeerUnreadProbe (proxy/event/peer_unread.h): what a client on this host has
// not read of what was written to it, from its socket's receive queue and our
// send queue, over real loopback sockets.

#include "proxy/event/peer_unread.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

namespace sluice {
namespace {

struct Pair {
  int server = -1;  // our end (accepted)
  int client = -1;  // the peer
  ~Pair() {
    if (server >= 0) ::close(server);
    if (client >= 0) ::close(client);
  }
};

void connectPair(Pair& pair) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  pair.client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(pair.client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  pair.server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  ASSERT_GE(pair.server, 0);
}

// Loopback hands written bytes to the peer's queue within the write; the
// wait is only for a loaded machine's softirq, bounded by a deadline.
std::optional<uint64_t> unreadSettledAt(PeerUnreadProbe& probe, int fd, uint64_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::optional<uint64_t> got;
  do {
    got = probe.unreadBytes(fd);
    if (got == want) return got;
  } while (std::chrono::steady_clock::now() < deadline);
  return got;
}

TEST(PeerUnreadProbeTest, CountsWhatTheLocalPeerHasNotRead) {
  Pair pair;
  connectPair(pair);
  ASSERT_TRUE(PeerUnreadProbe::peerMayBeLocal(pair.server));
  PeerUnreadProbe probe;
  EXPECT_EQ(probe.unreadBytes(pair.server), std::optional<uint64_t>(0));
  const std::string bytes(6000, 'x');
  ASSERT_EQ(::write(pair.server, bytes.data(), bytes.size()), 6000);
  EXPECT_EQ(unreadSettledAt(probe, pair.server, 6000), std::optional<uint64_t>(6000));
  char buf[2500];
  ASSERT_EQ(::recv(pair.client, buf, sizeof(buf), MSG_WAITALL), 2500);
  EXPECT_EQ(probe.unreadBytes(pair.server), std::optional<uint64_t>(3500));
  ASSERT_EQ(::recv(pair.client, buf, sizeof(buf), MSG_WAITALL), 2500);
  ASSERT_EQ(::recv(pair.client, buf, 1000, MSG_WAITALL), 1000);
  EXPECT_EQ(probe.unreadBytes(pair.server), std::optional<uint64_t>(0));
}

TEST(PeerUnreadProbeTest, CountsWhatIsStillInOurSendQueueWhenThePeerStoppedReading) {
  Pair pair;
  connectPair(pair);
  // A small receive buffer at the peer: most of a large write stays with us.
  const int small = 4096;
  ASSERT_EQ(::setsockopt(pair.client, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  PeerUnreadProbe probe;
  const std::string bytes(200000, 'x');
  const ssize_t wrote = ::send(pair.server, bytes.data(), bytes.size(), MSG_DONTWAIT);
  ASSERT_GT(wrote, 0);
  EXPECT_EQ(unreadSettledAt(probe, pair.server, static_cast<uint64_t>(wrote)),
            std::optional<uint64_t>(static_cast<uint64_t>(wrote)));
}

TEST(PeerUnreadProbeTest, AnswersNothingOnceThePeerIsGone) {
  Pair pair;
  connectPair(pair);
  PeerUnreadProbe probe;
  ASSERT_EQ(::write(pair.server, "hello", 5), 5);
  EXPECT_EQ(unreadSettledAt(probe, pair.server, 5), std::optional<uint64_t>(5));
  ::close(pair.client);  // unread data: a reset, the peer socket is gone
  pair.client = -1;
  EXPECT_EQ(probe.unreadBytes(pair.server), std::nullopt);
}

TEST(PeerUnreadProbeTest, IsNotForAnUnconnectedSocket) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(PeerUnreadProbe::peerMayBeLocal(fd));
  PeerUnreadProbe probe;
  EXPECT_EQ(probe.unreadBytes(fd), std::nullopt);
  ::close(fd);
}

}  // namespace
}  // namespace sluice
