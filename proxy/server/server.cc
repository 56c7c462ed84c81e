#include "proxy/server/server.h"

#include <event2/thread.h>
#include <malloc.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "config/loader.h"
#include "proxy/event/listen_socket.h"
#include "proxy/observability/log.h"
#include "proxy/server/cpu_limit.h"

namespace sluice {

namespace {

/**
 * glibc raises its mmap threshold to the size of the largest block freed (up
 * to 32 MiB), so after one big request body the next ones come from the heap,
 * whose free space is seldom given back: four 60 MiB uploads left 137 MB
 * resident after they closed. A fixed threshold keeps every block
 * of 256 KiB or more — big request bodies — in its own mapping, returned to
 * the OS the moment it is freed. Small blocks (streamed body chunks, buffers)
 * stay on the heap as before.
 */
void returnLargeBlocksToTheOs() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
}

bool sameAddress(const config::SocketAddress& a, const config::SocketAddress& b) {
  return a.host == b.host && a.port == b.port;
}

std::string workersText(uint32_t workers) {
  return workers == 0 ? "auto" : std::to_string(workers);
}

/**
 * What a reload from `running` to `next` would change that only a restart
 * can apply (sockets are bound and threads started once), as a message
 * naming the key; "" when nothing. Listeners' certificates may change.
 */
std::string restartOnlyChange(const config::Config& running, const config::Config& next) {
  const auto& before = running.listeners;
  const auto& after = next.listeners;
  if (before.size() != after.size()) {
    return "listen: adding or removing listeners needs a restart (" +
           std::to_string(before.size()) + " running, " + std::to_string(after.size()) +
           " in the new file)";
  }
  for (size_t i = 0; i < before.size(); ++i) {
    if (!sameAddress(before[i].address, after[i].address)) {
      return "listen: changing " + before[i].address.toString() + " to " +
             after[i].address.toString() + " needs a restart";
    }
    if (before[i].tls.has_value() != after[i].tls.has_value()) {
      return "listen: turning TLS " + std::string(after[i].tls ? "on" : "off") + " for " +
             before[i].address.toString() + " needs a restart";
    }
  }
  if (!sameAddress(running.admin, next.admin)) {
    return "admin: changing " + running.admin.toString() + " to " + next.admin.toString() +
           " needs a restart";
  }
  if (running.shared_state != next.shared_state) {
    return "shared_state: changing it needs a restart";
  }
  if (running.workers != next.workers) {
    return "workers: changing " + workersText(running.workers) + " to " +
           workersText(next.workers) + " needs a restart";
  }
  return "";
}

void logWarnings(const ConfigSnapshot& runtime) {
  for (const auto& warning : runtime.warnings()) {
    logWarn("sluice: warning: " + warning, {{"event", "config_warning"}});
  }
}

}  // namespace

bool Server::check(const config::ConfigPtr& config, std::string* error) {
  if (config->shared_state && config->shared_state->redis.tls) {
    TlsError tls_error;
    if (!makeClientSslCtx(config->shared_state->tls, &tls_error)) {
      *error = "shared_state: " + tls_error.message;
      return false;
    }
  }
  Metrics metrics;
  if (!ConfigSnapshot::build(config, metrics, RealClock::instance(), error, nullptr, nullptr)) {
    return false;
  }
  return AccessLog::check(config->access_log, error);
}

Server::Server(config::ConfigPtr config, const Clock& clock)
    : clock_(clock), access_log_(metrics_.accessLogDropped()), admin_(*this) {
  std::string error;
  if (config && config->shared_state) {
    const config::SharedStateConfig& shared = *config->shared_state;
    SslCtxPtr ssl_ctx;
    if (shared.redis.tls) {
      TlsError tls_error;
      ssl_ctx = makeClientSslCtx(shared.tls, &tls_error);
      if (!ssl_ctx) init_error_ = "shared_state: " + tls_error.message;
    }
    if (init_error_.empty()) {
      shared_ = std::make_unique<SharedState>(shared, metrics_, clock_, std::move(ssl_ctx));
    }
  }
  if (!init_error_.empty()) return;
  runtime_ =
      ConfigSnapshot::build(std::move(config), metrics_, clock_, &error, nullptr, shared_.get());
  if (!runtime_) init_error_ = error;
}

Server::~Server() { stop(); }

bool Server::ready() const {
  if (draining_.load()) return false;
  // shared_state.required: the store being down takes the replica out of rotation.
  return shared_ == nullptr || !shared_->config().required || shared_->up();
}

bool Server::start(std::string* error) {
  if (!runtime_) {
    *error = init_error_;
    return false;
  }
  std::signal(SIGPIPE, SIG_IGN);
  returnLargeBlocksToTheOs();
  logWarnings(*runtime_);
  const config::Config& cfg = runtime_->config();
  if (!access_log_.configure(cfg.access_log, error)) return false;
  const size_t nworkers = resolveWorkerCount(cfg.workers);  // auto: CPUs, cgroup quota included

  // TLS listeners need no special socket: the ConfigSnapshot holds their contexts
  // and each Worker picks the current one at accept time.
  std::vector<std::vector<ListenSocket>> sockets(nworkers);
  for (size_t l = 0; l < cfg.listeners.size(); ++l) {
    const auto& listener = cfg.listeners[l];
    // One SO_REUSEPORT socket per worker, shared with no other process.
    const std::vector<evutil_socket_t> group =
        bindListenerGroup(listener.address.host, listener.address.port, nworkers, error);
    if (group.empty()) {
      for (auto& list : sockets)
        for (const auto& ls : list) ::close(ls.fd);
      return false;
    }
    for (size_t w = 0; w < nworkers; ++w) sockets[w].push_back(ListenSocket{group[w], l});
    listener_ports_.push_back(boundPort(group.front()));
  }
  for (size_t w = 0; w < nworkers; ++w) {
    workers_.push_back(std::make_unique<Worker>(w, clock_, runtime_, std::move(sockets[w]),
                                                access_log_, in_flight_, open_connections_));
  }
  if (!admin_.start(cfg.admin.host, cfg.admin.port, error)) {
    workers_.clear();
    return false;
  }
  if (shared_) {
    std::vector<Dispatcher*> loops;
    for (auto& w : workers_) loops.push_back(&w->dispatcher());
    shared_->attach(loops);  // each client is built and connects on its worker's loop
  }
  for (auto& w : workers_) w->start();
  started_ = true;
  return true;
}

void Server::stop() {
  if (!started_.exchange(false)) return;
  admin_.stop();
  for (auto& w : workers_) w->stop();
  if (shared_) shared_->detach();  // the loops stopped: nothing else touches the clients
  workers_.clear();
  // After the workers: their last lines are written, if the reader takes them in time.
  access_log_.stop(shutdownDeadline());
}

std::chrono::steady_clock::time_point Server::shutdownDeadline() const {
  const auto ticks = drain_deadline_.load();
  if (ticks != 0) {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ticks));
  }
  const ConfigSnapshotPtr rt = runtime();
  return std::chrono::steady_clock::now() +
         (rt ? rt->config().drain_timeout : std::chrono::milliseconds(0));
}

size_t Server::drain() {
  // requestShutdown() already set draining_ (so /ready answered 503 at once);
  // a separate flag keeps drain() itself from running twice.
  draining_.store(true);
  if (drain_started_.exchange(true)) return 0;
  const auto deadline = std::chrono::steady_clock::now() + runtime()->config().drain_timeout;
  drain_deadline_.store(deadline.time_since_epoch().count());
  for (auto& w : workers_) w->stopAccepting();
  // Wakes when the last exchange is retired (a real wait: the condition
  // variable sleeps on the steady clock, whatever clock the workers use).
  in_flight_.waitForZero(deadline);
  const size_t left = in_flight_.value();
  for (auto& w : workers_) w->cancelAll(CancelReason::Draining);
  in_flight_.waitForZero();
  // The connections told to close when idle (stopAccepting) close once their
  // last answer, RST_STREAM or GOAWAY is written: stop() would drop what they
  // have not written yet. A client that does not read gets kDrainFlush.
  open_connections_.waitForZero(std::chrono::steady_clock::now() + kDrainFlush);
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
  // Sockets are bound and threads started once: a reload may change
  // certificates but not `listen`, `admin` or `workers` (the whole reload is
  // refused, so /config never shows a value that is not in force).
  if (const ConfigSnapshotPtr current = runtime()) {
    const std::string change = restartOnlyChange(current->config(), *config);
    if (!change.empty()) {
      *error = change;
      metrics_.countReload(false);
      return false;
    }
  }
  // The access log's new target first: a file that cannot be opened rejects
  // the reload before anything changed; a reload rejected after it was
  // switched switches it back.
  const ConfigSnapshotPtr current = runtime();
  if (!access_log_.configure(config->access_log, error)) {
    metrics_.countReload(false);
    return false;
  }
  ConfigSnapshotPtr next = ConfigSnapshot::build(std::move(config), metrics_, clock_, error,
                                                 current.get(), shared_.get());
  if (!next) {
    std::string ignored;
    if (current) access_log_.configure(current->config().access_log, &ignored);
    metrics_.countReload(false);
    return false;
  }
  logWarnings(*next);
  {
    std::lock_guard<std::mutex> lock(mu_);
    runtime_ = next;
  }
  // Counted once every worker took it (each within a second; a worker that
  // did not still takes it on its next loop turn): a request that starts
  // after the reload is counted sees the new config.
  std::vector<std::shared_future<void>> applied;
  applied.reserve(workers_.size());
  for (auto& w : workers_) applied.push_back(w->setRuntime(next));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (const auto& a : applied) a.wait_until(until);
  metrics_.countReload(true);
  return true;
}

bool Server::reloadFile(const std::string& path, std::string* error) {
  // logrotate moved the file and sent SIGHUP: reopen whatever the config says.
  std::string reopen_error;
  if (!access_log_.reopen(&reopen_error)) {
    logError("sluice: access log not reopened; still writing to the old file: " + reopen_error,
             {{"event", "access_log_error"}});
  }
  auto loaded = config::loadConfigFile(path);
  if (!loaded.ok()) {
    *error = loaded.error->toString();
    metrics_.countReload(false);
    return false;
  }
  return reload(loaded.config, error);
}

ConfigSnapshotPtr Server::runtime() const {
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

size_t Server::activeExchanges() const { return in_flight_.value(); }

}  // namespace sluice
