#include "proxy/server.h"

#include <event2/thread.h>
#include <malloc.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <thread>

#include "config/loader.h"

namespace sluice {

namespace {

/**
 * glibc raises its mmap threshold to the size of the largest block freed (up
 * to 32 MiB), so after one big request body the next ones come from the heap,
 * whose free space is seldom given back: four 60 MiB uploads left 137 MB
 * resident after they closed (issue 13). A fixed threshold keeps every block
 * of 256 KiB or more — big request bodies — in its own mapping, returned to
 * the OS the moment it is freed. Small blocks (streamed body chunks, buffers)
 * stay on the heap as before.
 */
void returnLargeBlocksToTheOs() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
}

/** One listening socket bound with SO_REUSEPORT so every worker can have its own. */
evutil_socket_t bindListener(const std::string& host, uint16_t port, std::string* error) {
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

uint16_t boundPort(evutil_socket_t fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void logWarnings(const Runtime& runtime) {
  for (const auto& warning : runtime.warnings()) std::cerr << "sluice: warning: " << warning << "\n";
}

}  // namespace

Server::Server(config::ConfigPtr config, const Clock& clock) : clock_(clock), admin_(*this) {
  std::string error;
  runtime_ = Runtime::build(std::move(config), metrics_, clock_, &error);
  if (!runtime_) init_error_ = error;
}

Server::~Server() { stop(); }

bool Server::start(std::string* error) {
  if (!runtime_) {
    *error = init_error_;
    return false;
  }
  std::signal(SIGPIPE, SIG_IGN);
  returnLargeBlocksToTheOs();
  logWarnings(*runtime_);
  const config::Config& cfg = runtime_->config();
  const size_t nworkers =
      cfg.workers > 0 ? cfg.workers : std::max(1u, std::thread::hardware_concurrency());

  // TLS listeners need no special socket: the Runtime holds their contexts
  // and each Worker picks the current one at accept time.
  std::vector<std::vector<ListenSocket>> sockets(nworkers);
  for (size_t l = 0; l < cfg.listeners.size(); ++l) {
    const auto& listener = cfg.listeners[l];
    uint16_t port = listener.address.port;
    for (size_t w = 0; w < nworkers; ++w) {
      evutil_socket_t fd = bindListener(listener.address.host, port, error);
      if (fd < 0) {
        for (auto& list : sockets) for (const auto& ls : list) ::close(ls.fd);
        return false;
      }
      if (w == 0) port = boundPort(fd);  // port 0: every worker shares the one we got
      sockets[w].push_back(ListenSocket{fd, l});
    }
    listener_ports_.push_back(port);
  }
  for (size_t w = 0; w < nworkers; ++w) {
    workers_.push_back(std::make_unique<Worker>(w, clock_, runtime_, std::move(sockets[w])));
  }
  if (!admin_.start(cfg.admin.host, cfg.admin.port, error)) {
    workers_.clear();
    return false;
  }
  for (auto& w : workers_) w->start();
  started_ = true;
  return true;
}

void Server::stop() {
  if (!started_.exchange(false)) return;
  admin_.stop();
  for (auto& w : workers_) w->stop();
  workers_.clear();
}

size_t Server::drain() {
  // requestShutdown() already set draining_ (so /ready answered 503 at once);
  // a separate flag keeps drain() itself from running twice.
  draining_.store(true);
  if (drain_started_.exchange(true)) return 0;
  for (auto& w : workers_) w->stopAccepting();
  const auto deadline = clock_.now() + runtime()->config().drain_timeout;
  // Poll the workers' counts; draining is rare and coarse, 10 ms steps are fine.
  while (activeExchanges() > 0 && clock_.now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const size_t left = activeExchanges();
  for (auto& w : workers_) w->cancelAll(CancelReason::Draining);
  while (activeExchanges() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return left;
}

void Server::requestShutdown() {
  draining_.store(true);  // /ready turns 503 at once
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  shutdown_requested_ = true;
  shutdown_cv_.notify_all();
}

void Server::waitForShutdownRequest() {
  std::unique_lock<std::mutex> lock(shutdown_mu_);
  shutdown_cv_.wait(lock, [this] { return shutdown_requested_; });
}

bool Server::reload(config::ConfigPtr config, std::string* error) {
  // Sockets are bound once, at start: a reload may change certificates but
  // not which listeners exist or whether they speak TLS.
  if (const RuntimePtr current = runtime()) {
    const auto& before = current->config().listeners;
    const auto& after = config->listeners;
    bool same = before.size() == after.size();
    for (size_t i = 0; same && i < before.size(); ++i) {
      same = before[i].tls.has_value() == after[i].tls.has_value();
    }
    if (!same) {
      *error = "listen: adding or removing listeners, or turning TLS on or off, needs a restart";
      metrics_.countReload(false);
      return false;
    }
  }
  RuntimePtr next = Runtime::build(std::move(config), metrics_, clock_, error, runtime().get());
  if (!next) {
    metrics_.countReload(false);
    return false;
  }
  logWarnings(*next);
  metrics_.countReload(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    runtime_ = next;
  }
  for (auto& w : workers_) w->setRuntime(next);
  return true;
}

bool Server::reloadFile(const std::string& path, std::string* error) {
  auto loaded = config::loadConfigFile(path);
  if (!loaded.ok()) {
    *error = loaded.error->toString();
    metrics_.countReload(false);
    return false;
  }
  return reload(loaded.config, error);
}

RuntimePtr Server::runtime() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runtime_;
}

std::vector<ExchangeSnapshot> Server::exchanges() {
  std::vector<ExchangeSnapshot> all;
  for (auto& w : workers_) {
    auto part = w->snapshotExchanges();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

size_t Server::activeExchanges() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w->activeExchanges();
  return n;
}

}  // namespace sluice
