#pragma once

// Cancel reaches a session-ful MCP server (docs/design.md §10): when a
// request that carried `Mcp-Session-Id` is cancelled after it was sent,
// closing its upstream stream is the cancel of MCP 2026-07-28, but older
// servers do not read a disconnect as one. So sluice also POSTs
//   {"jsonrpc":"2.0","method":"notifications/cancelled",
//    "params":{"requestId":<the call's id>,"reason":"sluice <cancel_reason>"}}
// with that session id to the endpoint that has the call.
//
// Off the request path: one per worker, fire-and-forget on the worker's own
// loop and upstream pools. Each notification is bounded in time (the
// upstream's connect_timeout + 2 s), never retried, and at most
// kMaxInFlight are under way per worker: beyond that one is dropped (and
// counted). Outcomes: sluice_tool_cancel_notifications_total{route,result},
// result sent (a 2xx answer) | failed (another status, a transport error)
// | timeout | dropped.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/cancel_reason.h"
#include "common/http_message.h"
#include "proxy/event/dispatcher.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/upstream/upstream_stream.h"

namespace sluice {

/** One notifications/cancelled to send. */
struct ToolCancel {
  ConfigSnapshotPtr runtime;  // pinned: the upstream's config and pool stay while it is under way
  const RouteRuntime* route = nullptr;
  const UpstreamRuntime* upstream = nullptr;
  const EndpointRuntime* endpoint = nullptr;
  // The client's request head (its path and headers: Mcp-Session-Id,
  // MCP-Protocol-Version, Authorization); rewritten for the endpoint as the
  // call was.
  RequestHead request;
  std::string request_id;   // the call's JSON-RPC id as JSON text
  std::string_view reason;  // the cancel_reason
};

/**
 * An MCP request that carried `Mcp-Session-Id` (docs/design.md §10): the
 * endpoint that issued the session (its attempts go there), and the
 * client's headers, for the `notifications/cancelled` a cancel sends.
 */
struct McpSession {
  HeaderMap headers;                          // the client's request headers
  const EndpointRuntime* endpoint = nullptr;  // where the session lives; null: unknown

  /**
   * The session of `request` on `route` (an MCP route), its endpoint looked
   * up in the route's upstreams' session tables at `now`; null when the
   * request carries no session id.
   */
  static std::unique_ptr<McpSession> find(const RouteRuntime& route, const RequestHead& request,
                                          MonotonicTime now);
};

/** A sent call of an MCP session, cancelled: what its Exchange knows of it. */
struct CancelledCall {
  const RequestHead& request;                    // the client's (its method and path)
  const std::optional<std::string>& jsonrpc_id;  // as JSON text; none: a notification
  CancelReason reason;
  ConfigSnapshotPtr runtime;  // where the call went: its attempt's upstream and endpoint
  const RouteRuntime* route = nullptr;
  const UpstreamRuntime* upstream = nullptr;
  const EndpointRuntime* endpoint = nullptr;
};

/** The JSON-RPC notification body for `request_id` (JSON text) and `reason`. */
std::string cancelledNotification(std::string_view request_id, std::string_view reason);

class ToolCancelNotifier {
 public:
  static constexpr size_t kMaxInFlight = 64;
  static constexpr std::chrono::seconds kGrace{2};  // on top of the upstream's connect_timeout

  /** `pool` finds this worker's pool `index` of a runtime (ExchangeHost::pool). */
  using PoolFor = std::function<UpstreamStreamSource&(const ConfigSnapshot&, size_t)>;

  ToolCancelNotifier(Dispatcher& dispatcher, PoolFor pool, size_t max_in_flight = kMaxInFlight)
      : dispatcher_(dispatcher), pool_(std::move(pool)), max_in_flight_(max_in_flight) {}
  ~ToolCancelNotifier();
  ToolCancelNotifier(const ToolCancelNotifier&) = delete;
  ToolCancelNotifier& operator=(const ToolCancelNotifier&) = delete;

  /** Sends `cancel` (or drops it when kMaxInFlight are under way). Never blocks. */
  void send(ToolCancel cancel);
  /**
   * Tells the server of `session` that `call` was cancelled: its
   * notifications/cancelled, with the session's headers (taken) on the
   * call's path. Nothing for a notification (no id) or a call that was not
   * a POST: only a JSON-RPC request sent as a POST has something to cancel.
   */
  void cancelCall(McpSession& session, const CancelledCall& call);
  /** Tears down what is under way (the worker stops): its streams are reset. */
  void closeAll();

  size_t inFlight() const { return in_flight_.size(); }

 private:
  class Notification;
  void done(Notification* n, std::string_view result);

  Dispatcher& dispatcher_;
  PoolFor pool_;
  const size_t max_in_flight_;
  std::unordered_set<Notification*> in_flight_;  // owned
};

}  // namespace sluice
