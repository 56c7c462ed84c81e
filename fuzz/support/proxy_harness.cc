#include "fuzz/support/proxy_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>

#include "config/loader.h"
#include "proxy/downstream/protocol_detector.h"

namespace sluice::fuzz {

namespace {

constexpr size_t kMaxClientBytesKept = 1 << 20;
constexpr int kMaxLoopTurns = 20000;
constexpr int kQuietTurns = 4;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "proxy harness: %s\n", why.c_str());
  std::abort();
}

}  // namespace

ProxyHarness::ProxyHarness(const std::string& routes_yaml, const std::string& upstream_yaml)
    : dispatcher_(clock_) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  upstream_listener_.reset(
      evconnlistener_new_bind(dispatcher_.base(), &ProxyHarness::onUpstreamAccept, this,
                              LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                              reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
  if (!upstream_listener_) die("cannot listen on 127.0.0.1");
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(evconnlistener_get_fd(upstream_listener_.get()), reinterpret_cast<sockaddr*>(&bound),
              &len);
  const std::string yaml =
      "listen: 127.0.0.1:0\n"
      "upstreams:\n"
      "  - name: up\n"
      "    url: http://127.0.0.1:" +
      std::to_string(ntohs(bound.sin_port)) +
      "\n"
      "    connect_timeout: 60s\n" +
      upstream_yaml + routes_yaml;
  auto loaded = config::loadConfigString(yaml, "fuzz-harness.yaml",
                                         [](const std::string&) { return std::nullopt; });
  if (!loaded.ok()) die(loaded.error->toString());
  config_ = loaded.config;
}

ProxyHarness::~ProxyHarness() { teardown(); }

void ProxyHarness::runClient(std::string_view input, size_t slice) {
  client_received_.clear();
  upstream_bytes_ = 0;
  std::string error;
  runtime_ = ConfigSnapshot::build(config_, metrics_, clock_, &error);
  if (!runtime_) die(error);

  bufferevent* pair[2] = {nullptr, nullptr};
  if (bufferevent_pair_new(dispatcher_.base(), BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS,
                           pair) != 0) {
    die("bufferevent_pair_new failed");
  }
  BufferEventPtr server(pair[0]);
  client_.reset(pair[1]);
  bufferevent_setcb(client_.get(), &ProxyHarness::onClientRead, nullptr, nullptr, this);
  bufferevent_enable(client_.get(), EV_READ | EV_WRITE);

  registry_.addConnection(
      std::make_unique<ProtocolDetector>(*this, std::move(server), "127.0.0.1", false));

  if (slice == 0) slice = input.size();
  for (size_t off = 0; off < input.size(); off += slice) {
    const size_t n = std::min(slice, input.size() - off);
    bufferevent_write(client_.get(), input.data() + off, n);
    settle();
  }
  settle();
  teardown();
}

void ProxyHarness::teardown() {
  if (client_) {
    // The client leaves: EOF on the connection, whatever is in flight.
    bufferevent_flush(client_.get(), EV_WRITE, BEV_FINISHED);
    settle();
  }
  // What is still alive is shut down as Worker::stop() does.
  for (Exchange* ex : registry_.exchanges()) ex->cancel(CancelReason::Draining);
  for (DownstreamConnection* conn : registry_.connections()) conn->close();
  settle();
  registry_.clear();
  client_.reset();
  upstream_sides_.clear();
  pools_.clear();
  settle();
  runtime_.reset();
}

void ProxyHarness::settle() {
  event_base* base = dispatcher_.base();
  uint64_t last = progress();
  int quiet = 0;
  for (int turn = 0; turn < kMaxLoopTurns && quiet < kQuietTurns; ++turn) {
    event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    const uint64_t now = progress();
    if (now == last && event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE) == 0) {
      ++quiet;
    } else {
      quiet = 0;
    }
    last = now;
  }
}

uint64_t ProxyHarness::progress() const {
  uint64_t p = client_received_.size();
  p = p * 31 + upstream_bytes_;
  p = p * 31 + registry_.exchangeCount();
  p = p * 31 + registry_.connectionCount();
  p = p * 31 + upstream_sides_.size();
  if (client_) p = p * 31 + evbuffer_get_length(bufferevent_get_output(client_.get()));
  return p;
}

// --- the loopback upstream ------------------------------------------------------------

void ProxyHarness::onUpstreamAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int,
                                    void* arg) {
  auto* self = static_cast<ProxyHarness*>(arg);
  bufferevent* bev = bufferevent_socket_new(self->dispatcher_.base(), fd, BEV_OPT_CLOSE_ON_FREE);
  if (bev == nullptr) {
    evutil_closesocket(fd);
    return;
  }
  auto side = std::make_unique<UpstreamSide>();
  side->harness = self;
  side->bev.reset(bev);
  bufferevent_setcb(bev, &ProxyHarness::onUpstreamRead, &ProxyHarness::onUpstreamWrite, nullptr,
                    side.get());
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  self->upstream_sides_.push_back(std::move(side));
}

void ProxyHarness::onUpstreamRead(bufferevent* bev, void* arg) {
  auto* side = static_cast<UpstreamSide*>(arg);
  evbuffer* input = bufferevent_get_input(bev);
  side->harness->upstream_bytes_ += evbuffer_get_length(input);
  evbuffer_drain(input, evbuffer_get_length(input));
  if (side->responded) return;
  side->responded = true;
  const std::string& response = side->harness->upstream_response_;
  if (response.empty()) {
    side->shut = true;
    shutdown(bufferevent_getfd(bev), SHUT_WR);
    return;
  }
  bufferevent_write(bev, response.data(), response.size());
}

void ProxyHarness::onUpstreamWrite(bufferevent* bev, void* arg) {
  auto* side = static_cast<UpstreamSide*>(arg);
  // Everything written: FIN, so a close-delimited body ends and a short one is cut.
  if (side->responded && !side->shut && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
    side->shut = true;
    shutdown(bufferevent_getfd(bev), SHUT_WR);
  }
}

void ProxyHarness::onClientRead(bufferevent* bev, void* arg) {
  auto* self = static_cast<ProxyHarness*>(arg);
  evbuffer* input = bufferevent_get_input(bev);
  const size_t n = evbuffer_get_length(input);
  if (self->client_received_.size() < kMaxClientBytesKept) {
    const size_t keep = std::min(n, kMaxClientBytesKept - self->client_received_.size());
    const size_t old = self->client_received_.size();
    self->client_received_.resize(old + keep);
    evbuffer_copyout(input, self->client_received_.data() + old, keep);
  }
  evbuffer_drain(input, n);
}

// --- the hosts ----------------------------------------------------------------------

RequestDecoder& ProxyHarness::newStream(RequestHead& head, DownstreamStream& downstream,
                                        MonotonicTime start) {
  return registry_.newExchange(*this, runtime_, head, downstream, start);
}

void ProxyHarness::countUnparsedRequest(int status) {
  runtime_->noRoute().metrics->requests(status).Increment();
}

void ProxyHarness::countRejection(Rejection reason) {
  runtime_->metrics().rejections(reason).Increment();
}

void ProxyHarness::connectionClosed(DownstreamConnection& conn) {
  registry_.connectionClosed(conn);
}

void ProxyHarness::replaceConnection(DownstreamConnection& from, DownstreamConnectionPtr to) {
  registry_.replaceConnection(from, std::move(to));
}

UpstreamPool& ProxyHarness::pool(const ConfigSnapshot& runtime, size_t index) {
  if (pools_.empty()) {
    for (size_t i = 0; i < runtime.poolCount(); ++i) {
      const auto [up, endpoint] = runtime.poolEndpoint(i);
      pools_.push_back(
          std::make_unique<UpstreamPool>(dispatcher_, *up->config, *endpoint->config, up->ssl_ctx));
    }
  }
  return *pools_.at(index);
}

void ProxyHarness::retire(Exchange& exchange) { registry_.retire(exchange); }

}  // namespace sluice::fuzz
