#pragma once

// The admin HTTP server (docs/design.md §2 `admin`), on its own thread with its own
// event loop so a slow scrape can never stall proxy traffic:
//   GET  /metrics    Prometheus text exposition
//   GET  /ready      200 while serving, 503 once draining
//   GET  /healthz    200 while the process is alive
//   GET  /config     the running config as JSON, secrets redacted
//   GET  /exchanges  in-flight exchanges and their states, from every worker
//   POST /drain      start draining (as SIGTERM does)
// Every request passes proxy/server/admin_access.h first (Host, Origin, and for POST
// the `x-sluice-admin` header): 403 otherwise. A known path asked with the
// wrong method gets 405 with `Allow`.
//
// A small HTTP/1.x server of its own (one request per connection, answered
// with `Connection: close`), so every limit applies before sluice reads what
// it would refuse (README "Security"):
//   - the request head is at most kAdminMaxHeadBytes: 431 and closed;
//   - Host and Origin are checked as soon as the head is complete, before any
//     body byte is read;
//   - a body is at most kAdminMaxBodyBytes, refused from Content-Length (413)
//     without reading it; Transfer-Encoding is refused (411);
//   - the head must complete within `limits.header_read_timeout` and the body
//     within `limits.body_read_timeout` of the head (408 and closed), however
//     slowly bytes keep arriving;
//   - at most kAdminMaxConnections at once; more are closed on accept.

#include <event2/listener.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "proxy/event/dispatcher.h"

namespace sluice {

class Server;
class AdminConnection;
struct AdminResponse;

/** Request line + headers, CRLF CRLF included. */
inline constexpr size_t kAdminMaxHeadBytes = 8 * 1024;
/** Request body (no admin call needs one; a few bytes of JSON at most). */
inline constexpr size_t kAdminMaxBodyBytes = 4 * 1024;
/** Admin connections open at once. */
inline constexpr size_t kAdminMaxConnections = 64;

class AdminServer {
 public:
  explicit AdminServer(Server& server);
  ~AdminServer();

  /**
   * Binds `host:port` (port 0 = any). Returns false with `error` set on
   * failure: "cannot listen on admin address HOST:PORT: <strerror>".
   */
  bool start(const std::string& host, uint16_t port, std::string* error);
  void stop();
  uint16_t port() const { return port_; }

 private:
  friend class AdminConnection;
  static void onAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg);
  /** The answer to a complete, admitted request (path and method already known good). */
  AdminResponse answer(const std::string& path);
  /** `/runs`, `/runs/{id}` (GET) and `/runs/{id}/cancel` (POST): docs/design.md §9. */
  struct RunPath {
    enum class Kind { None, List, One, Cancel };
    Kind kind = Kind::None;
    std::string id;  // percent-decoded
  };
  static RunPath parseRunPath(std::string_view path);
  AdminResponse answerRuns(const RunPath& run);
  /** Access, path and method: a refusal, or nullptr when the request may go on. */
  std::unique_ptr<AdminResponse> admit(const AdminConnection& conn, const std::string& path);
  void close(AdminConnection* conn);

  Server& server_;
  bool stopped_ = false;  // stop() ran: connections closing now start no drain
  Dispatcher dispatcher_;
  ListenerPtr listener_;
  std::unordered_map<AdminConnection*, std::unique_ptr<AdminConnection>> connections_;
  std::thread thread_;
  std::string host_;  // as configured; a Host naming it is accepted
  uint16_t port_ = 0;
};

}  // namespace sluice
