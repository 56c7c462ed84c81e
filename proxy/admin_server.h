#pragma once

// The admin HTTP server (DESIGN.md §2 `admin`), on its own thread with its own
// event loop so a slow scrape can never stall proxy traffic:
//   GET  /metrics    Prometheus text exposition
//   GET  /ready      200 while serving, 503 once draining
//   GET  /healthz    200 while the process is alive
//   GET  /config     the running config as JSON, secrets redacted
//   GET  /exchanges  in-flight exchanges and their states, from every worker
//   POST /drain      start draining (as SIGTERM does)
// Every request passes proxy/admin_access.h first (Host, Origin, and for POST
// the `x-sluice-admin` header): 403 otherwise. A known path asked with the
// wrong method gets 405 with `Allow`.
// libevent's evhttp serves it: the admin port is low-volume and local.

#include <event2/http.h>

#include <functional>
#include <string>
#include <thread>

#include "proxy/dispatcher.h"

namespace sluice {

class Server;

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
  static void onRequest(evhttp_request* req, void* arg);
  void handle(evhttp_request* req);

  Server& server_;
  Dispatcher dispatcher_;
  evhttp* http_ = nullptr;
  std::thread thread_;
  std::string host_;  // as configured; a Host naming it is accepted
  uint16_t port_ = 0;
};

}  // namespace sluice
