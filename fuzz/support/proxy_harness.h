#pragma once

// The whole request path of one worker, in one process and one thread, for
// fuzz targets: what Worker::accept does (ProtocolDetector → HTTP/1.1 or
// HTTP/2 codec → one Exchange per request, real filter chain, real
// UpstreamPool) minus the listening socket and the thread.
//
//   client (fuzz bytes) ──bufferevent pair──► ProtocolDetector / codec ─► Exchange
//                                                                          │
//   loopback upstream  ◄──── TCP 127.0.0.1, the real Http1ClientConnection ◄──┘
//   (answers every request with the same bytes, then half-closes)
//
// Each runClient() builds a fresh ConfigSnapshot from the same parsed config (so
// circuit breakers and quotas start clean: one input never changes how the
// next one runs), feeds the input, runs the loop until nothing moves, then
// disconnects the client, cancels what is left and deletes everything, so a
// leak or a use-after-free shows up in the iteration that caused it.
//
// Time: a ManualClock that never moves drives every deadline sluice
// computes, and the libevent timers armed from it are seconds away (budget,
// connect and idle timeouts), so they never fire while an input runs.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "proxy/downstream/downstream_connection.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange.h"
#include "proxy/http/request_id.h"
#include "proxy/server/host_registry.h"
#include "proxy/upstream/upstream_pool.h"

namespace sluice::fuzz {

class ProxyHarness final : public DownstreamConnectionHost, public ExchangeHost {
 public:
  /**
   * `routes_yaml` is the config after `listen:` and `upstreams:` (routes,
   * pricing); its routes name the upstream `up`, which is the harness's
   * loopback upstream (plain HTTP/1.1); `upstream_yaml` adds keys to that
   * upstream (indented 4 spaces, e.g. a `rate_limit`). Aborts if the config
   * is invalid.
   */
  explicit ProxyHarness(const std::string& routes_yaml, const std::string& upstream_yaml = "");
  ~ProxyHarness() override;

  /** The bytes the loopback upstream sends on every connection (then FIN). */
  void setUpstreamResponse(std::string bytes) { upstream_response_ = std::move(bytes); }

  /**
   * One client connection: sends `input` in slices of `slice` bytes (0 = all
   * at once; the loop runs between slices, so each slice is its own read),
   * then EOF, then tears everything down.
   */
  void runClient(std::string_view input, size_t slice);

  /** Client bytes received in the last runClient() (the responses). */
  const std::string& clientReceived() const { return client_received_; }
  /** The metrics every runClient() counts into (for regression tests). */
  const Metrics& metrics() const { return metrics_; }

  // DownstreamConnectionHost / ExchangeHost
  Dispatcher& dispatcher() override { return dispatcher_; }
  RequestDecoder& newStream(RequestHead& head, DownstreamStream& downstream,
                            MonotonicTime start) override;
  void countUnparsedRequest(int status) override;
  void countRejection(Rejection reason) override;
  void connectionClosed(DownstreamConnection& conn) override;
  void replaceConnection(DownstreamConnection& from, DownstreamConnectionPtr to) override;
  UpstreamPool& pool(const ConfigSnapshot& runtime, size_t index) override;
  void retire(Exchange& exchange) override;
  bool alive(uint64_t id) const override { return registry_.alive(id); }
  IdGenerator& ids() override { return ids_; }
  AccessLogBuffer* accessLog() override { return nullptr; }  // the access log is off

 private:
  static void onUpstreamAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg);
  static void onUpstreamRead(bufferevent* bev, void* arg);
  static void onUpstreamWrite(bufferevent* bev, void* arg);
  static void onClientRead(bufferevent* bev, void* arg);
  /** Runs the loop until a few turns in a row change nothing observable. */
  void settle();
  uint64_t progress() const;
  void teardown();

  ManualClock clock_;
  Dispatcher dispatcher_;
  Metrics metrics_;
  config::ConfigPtr config_;
  ConfigSnapshotPtr runtime_;
  ListenerPtr upstream_listener_;
  std::string upstream_response_;

  HostRegistry registry_{dispatcher_};  // the live exchanges and connections, as a Worker's
  std::vector<std::unique_ptr<UpstreamPool>> pools_;
  /** One accepted connection of the loopback upstream. */
  struct UpstreamSide {
    ProxyHarness* harness = nullptr;
    BufferEventPtr bev;
    bool responded = false;  // the canned response was written
    bool shut = false;       // and the FIN sent after it
  };
  std::vector<std::unique_ptr<UpstreamSide>> upstream_sides_;
  BufferEventPtr client_;
  std::string client_received_;
  uint64_t upstream_bytes_ = 0;
  IdGenerator ids_{1};  // fixed seed: an input runs the same way every time
};

}  // namespace sluice::fuzz

namespace sluice::fuzz {

/**
 * The routes and prices the downstream and upstream targets run with: a
 * budgeted chat route, a catch-all /v1/ route with `idempotent: auto`, and
 * prices for both model families. Backoff is an hour long so a retry never
 * fires while an input runs (the retry decision itself still runs).
 */
inline constexpr const char* kFuzzRoutes = R"(routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [POST]}
    upstream: up
    budget: {header: x-budget-ms, default: 120s, max: 600s, propagate: true}
    retry: {attempts: 2, backoff: {base: 1h, max: 1h}}
  - name: v1
    match: {path_prefix: /v1/}
    upstream: up
    retry: {attempts: 2, idempotent: auto, backoff: {base: 1h, max: 1h}}
    on_client_disconnect: finish
pricing:
  - {model: "gpt-4o*", input: 2.50, output: 10.00}
  - {model: "claude-*", input: 3.00, output: 15.00}
)";

/** The loopback upstream's answer in the HTTP/1.1 target: a chunked SSE chat stream. */
inline constexpr std::string_view kSseAnswer =
    "HTTP/1.1 200 OK\r\n"
    "content-type: text/event-stream\r\n"
    "transfer-encoding: chunked\r\n"
    "x-ratelimit-remaining-requests: 99\r\n"
    "\r\n"
    "55\r\n"
    "data: "
    "{\"id\":\"c1\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]"
    "}\n\n"
    "\r\n"
    "e\r\n"
    "data: [DONE]\n\n"
    "\r\n"
    "0\r\n\r\n";

/** The loopback upstream's answer in the HTTP/2 target: a JSON completion with usage. */
inline constexpr std::string_view kJsonAnswer =
    "HTTP/1.1 200 OK\r\n"
    "content-type: application/json\r\n"
    "content-length: 96\r\n"
    "\r\n"
    "{\"id\":\"c1\",\"model\":\"gpt-4o\",\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,"
    "\"total_tokens\":12}}";

}  // namespace sluice::fuzz
