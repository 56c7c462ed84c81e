#pragma once

// One event loop of mock-llm: an event_base, its listener and the connections
// it accepted. Each worker runs on its own thread; with several workers every
// one listens on its own SO_REUSEPORT socket bound to the same port. Every
// accepted socket starts as a ProtocolDetector, which hands it to an
// HTTP/1.1 or an HTTP/2 connection.

#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "tools/mock-llm/http2_connection.h"
#include "tools/mock-llm/router.h"

namespace mockllm {

class Connection;

/** An event loop with its listening socket and connections. */
class Worker {
 public:
  /** `ssl_ctx` null: plain HTTP. The worker does not own `ssl_ctx`. */
  Worker(SharedState& state, SSL_CTX* ssl_ctx, Http2Settings http2);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /** Creates the event_base and starts accepting on the listening socket `fd` (owned from now on).
   */
  bool init(int listen_fd, std::string* error);

  /** Runs the loop on the calling thread until stop(). */
  void run();

  /** Makes run() return. Safe from any thread. */
  void stop();

  event_base* base() const { return base_; }
  SharedState& state() const { return state_; }
  const Http2Settings& http2Settings() const { return http2_; }

  /** Takes ownership of a new connection (a detector's successor) and starts it. */
  void adopt(std::unique_ptr<Connection> conn);

  /** Called by a connection that closed itself: it is deleted on the next loop turn. */
  void retire(Connection* conn);

  /** Brings every connection's ledger entry up to date (before serving /_ledger). */
  void syncLedgers();

 private:
  static void onAccept(evconnlistener* listener, evutil_socket_t fd, sockaddr* addr, int len,
                       void* arg);
  static void onReap(evutil_socket_t fd, short what, void* arg);
  static void onStop(evutil_socket_t fd, short what, void* arg);

  SharedState& state_;
  SSL_CTX* ssl_ctx_;
  const Http2Settings http2_;
  event_base* base_ = nullptr;
  evconnlistener* listener_ = nullptr;
  event* reap_ = nullptr;
  event* stop_ = nullptr;
  std::unordered_set<Connection*> live_;
  std::vector<Connection*> retired_;
};

}  // namespace mockllm
