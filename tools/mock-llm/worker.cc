#include "tools/mock-llm/worker.h"

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tools/mock-llm/connection.h"
#include "tools/mock-llm/protocol_detector.h"

namespace mockllm {

Worker::Worker(SharedState& state, SSL_CTX* ssl_ctx, Http2Settings http2)
    : state_(state), ssl_ctx_(ssl_ctx), http2_(http2) {}

Worker::~Worker() {
  if (listener_ != nullptr) evconnlistener_free(listener_);
  for (Connection* c : live_) delete c;
  for (Connection* c : retired_) delete c;
  live_.clear();
  retired_.clear();
  // Freed bufferevents finish on the loop (deferred callbacks hold a
  // reference): give them one turn before the base goes away.
  if (base_ != nullptr) event_base_loop(base_, EVLOOP_NONBLOCK);
  if (reap_ != nullptr) event_free(reap_);
  if (stop_ != nullptr) event_free(stop_);
  if (base_ != nullptr) event_base_free(base_);
}

bool Worker::init(int listen_fd, std::string* error) {
  // Precise (not coarse, not cached) monotonic time: a timer armed late in a
  // loop turn still waits its full delay. Token intervals and stalls are lower
  // bounds tests rely on.
  event_config* config = event_config_new();
  event_config_set_flag(config, EVENT_BASE_FLAG_NO_CACHE_TIME | EVENT_BASE_FLAG_PRECISE_TIMER);
  base_ = event_base_new_with_config(config);
  event_config_free(config);
  if (base_ == nullptr) {
    *error = "event_base_new failed";
    ::close(listen_fd);
    return false;
  }
  reap_ = event_new(base_, -1, 0, &Worker::onReap, this);
  stop_ = event_new(base_, -1, 0, &Worker::onStop, this);
  // backlog 0: the socket is already listening.
  listener_ =
      evconnlistener_new(base_, &Worker::onAccept, this, LEV_OPT_CLOSE_ON_FREE, 0, listen_fd);
  if (listener_ == nullptr || reap_ == nullptr || stop_ == nullptr) {
    *error = "evconnlistener_new failed";
    if (listener_ == nullptr) ::close(listen_fd);
    return false;
  }
  return true;
}

void Worker::run() { event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY); }

// An activated event stays pending until the loop runs it, so a stop() that
// races ahead of run() is not lost (event_base_loop clears a prior loopbreak).
void Worker::stop() { event_active(stop_, EV_READ, 0); }

void Worker::onStop(evutil_socket_t, short, void* arg) {
  event_base_loopbreak(static_cast<Worker*>(arg)->base_);
}

void Worker::onAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
  auto* self = static_cast<Worker*>(arg);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int options = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
  bufferevent* bev = nullptr;
  if (self->ssl_ctx_ != nullptr) {
    SSL* ssl = SSL_new(self->ssl_ctx_);
    if (ssl == nullptr) {
      evutil_closesocket(fd);
      return;
    }
    bev = bufferevent_openssl_socket_new(self->base_, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, options);
    if (bev != nullptr) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
  } else {
    bev = bufferevent_socket_new(self->base_, fd, options);
  }
  if (bev == nullptr) {
    evutil_closesocket(fd);
    return;
  }
  self->adopt(
      std::make_unique<ProtocolDetector>(*self, bev, self->state_.next_connection_id.fetch_add(1)));
}

void Worker::adopt(std::unique_ptr<Connection> conn) {
  Connection* c = conn.release();
  live_.insert(c);
  c->start();
}

void Worker::retire(Connection* conn) {
  live_.erase(conn);
  retired_.push_back(conn);
  event_active(reap_, EV_READ, 0);
}

void Worker::onReap(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Worker*>(arg);
  std::vector<Connection*> dead;
  dead.swap(self->retired_);
  for (Connection* c : dead) delete c;
}

void Worker::syncLedgers() {
  for (Connection* c : live_) c->syncLedger();
}

}  // namespace mockllm
