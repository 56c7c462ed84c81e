#pragma once

// A TCP relay on loopback for the shared-state tests: forwards every
// connection made to it to a target port, until blackhole() — from then on
// the connections open so far stay open but carry nothing either way (what a
// NAT or firewall that forgot the flow does), while new connections are
// forwarded as before. One thread, poll(2); no sleeps.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::test {

class TcpRelay {
 public:
  /** Listens on 127.0.0.1:0 and forwards to 127.0.0.1:`target_port`. */
  explicit TcpRelay(uint16_t target_port);
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  uint16_t port() const { return port_; }
  /** The connections open now go silent (kept open, nothing forwarded). */
  void blackhole();
  /** Connections accepted so far. */
  int accepted() const { return accepted_.load(); }

 private:
  struct Pair {
    int client = -1;
    int server = -1;
    bool dead = false;  // blackholed: nothing is read or written any more
  };
  void run();

  uint16_t target_port_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::vector<Pair> pairs_;
  std::thread thread_;
};

}  // namespace sluice::test
