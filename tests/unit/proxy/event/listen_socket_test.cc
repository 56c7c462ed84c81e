// bindListenerGroup (proxy/event/listen_socket.h): one SO_REUSEPORT socket per
// worker on one address, refused when a socket that is not in the group
// already listens there (another process's, in production).

#include "proxy/event/listen_socket.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace sluice {
namespace {

void closeAll(const std::vector<evutil_socket_t>& fds) {
  for (evutil_socket_t fd : fds) ::close(fd);
}

TEST(ListenSocketTest, BindsOneSocketPerWorkerOnOnePort) {
  std::string error;
  const auto group = bindListenerGroup("127.0.0.1", 0, 3, &error);
  ASSERT_EQ(group.size(), 3u) << error;
  const uint16_t port = boundPort(group[0]);
  EXPECT_NE(port, 0);
  for (evutil_socket_t fd : group) EXPECT_EQ(boundPort(fd), port);
  closeAll(group);
}

TEST(ListenSocketTest, RefusesAnAddressAnotherGroupListensOn) {
  std::string error;
  const auto first = bindListenerGroup("127.0.0.1", 0, 2, &error);
  ASSERT_EQ(first.size(), 2u) << error;
  const uint16_t port = boundPort(first[0]);
  for (const char* host : {"127.0.0.1", "0.0.0.0"}) {
    error.clear();
    const auto second = bindListenerGroup(host, port, 2, &error);
    EXPECT_TRUE(second.empty()) << host;
    EXPECT_EQ(error, "cannot listen on " + std::string(host) + ":" + std::to_string(port) +
                         ": another process is already listening there (another sluice? sharing "
                         "the port with SO_REUSEPORT would split the traffic between them)");
    closeAll(second);
  }
  closeAll(first);
  // Once the first group is gone the address is free again.
  error.clear();
  const auto again = bindListenerGroup("127.0.0.1", port, 2, &error);
  EXPECT_EQ(again.size(), 2u) << error;
  closeAll(again);
}

}  // namespace
}  // namespace sluice
