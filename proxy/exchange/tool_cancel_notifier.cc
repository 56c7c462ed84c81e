#include "proxy/exchange/tool_cancel_notifier.h"

#include <nlohmann/json.hpp>

#include "filters/tools/mcp_sessions.h"
#include "proxy/http/header_rewrite.h"

namespace sluice {

std::unique_ptr<McpSession> McpSession::find(const RouteRuntime& route, const RequestHead& request,
                                             MonotonicTime now) {
  const std::optional<std::string_view> id = request.headers.get("mcp-session-id");
  if (!id || id->empty()) return nullptr;
  auto session = std::make_unique<McpSession>();
  session->headers = request.headers;
  const std::string key = sessionKey(*id);
  for (const UpstreamRuntime* upstream : route.chain) {
    const std::optional<std::string> name = upstream->mcp_sessions->lookup(key, now);
    if (!name) continue;
    // Gone after a reload: placed as usual (the server answers 404, the client re-initializes).
    for (const EndpointRuntime& e : upstream->endpoints) {
      if (e.name() == *name) session->endpoint = &e;
    }
    break;
  }
  return session;
}

std::string cancelledNotification(std::string_view request_id, std::string_view reason) {
  nlohmann::json id = nlohmann::json::parse(request_id, nullptr, /*allow_exceptions=*/false);
  if (id.is_discarded()) id = std::string(request_id);
  return nlohmann::json{
      {"jsonrpc", "2.0"},
      {"method", "notifications/cancelled"},
      {"params", {{"requestId", id}, {"reason", "sluice " + std::string(reason)}}}}
      .dump();
}

void ToolCancelNotifier::cancelCall(McpSession& session, const CancelledCall& call) {
  if (!call.jsonrpc_id || call.request.method != "POST") return;
  ToolCancel cancel;
  cancel.runtime = call.runtime;
  cancel.route = call.route;
  cancel.upstream = call.upstream;
  cancel.endpoint = call.endpoint;
  cancel.request.method = "POST";
  cancel.request.path = call.request.path;
  cancel.request.headers = std::move(session.headers);
  cancel.request_id = *call.jsonrpc_id;
  cancel.reason = toString(call.reason);
  send(std::move(cancel));
}

/** One notification under way: its head, body, stream and timer. */
class ToolCancelNotifier::Notification final : public DeferredDeletable, public UpstreamCallbacks {
 public:
  Notification(ToolCancelNotifier& owner, ToolCancel cancel)
      : owner_(owner),
        runtime_(std::move(cancel.runtime)),
        route_(cancel.route),
        head_(std::move(cancel.request)) {
    const std::string body = cancelledNotification(cancel.request_id, cancel.reason);
    body_.append(body.data(), body.size());
    body_.markComplete();
    head_.method = "POST";
    head_.headers.remove("content-length");
    head_.headers.remove("transfer-encoding");
    head_.headers.remove("expect");
    head_.headers.set("content-type", "application/json");
    head_.headers.set("accept", "application/json, text/event-stream");
    rewriteRequestForUpstream(head_, *cancel.upstream->config, cancel.endpoint->config->url,
                              ClientInfo{});
    pool_index_ = cancel.endpoint->pool_index;
    timeout_ = cancel.upstream->config->connect_timeout + kGrace;
  }
  ~Notification() override { teardown(/*reuse=*/false); }

  void start() {
    timer_ = owner_.dispatcher_.createTimer([this] { owner_.done(this, "timeout"); });
    timer_->arm(timeout_);
    stream_ = owner_.pool_(*runtime_, pool_index_).acquire();
    stream_->sendRequest(head_, body_, this);  // may report back synchronously
  }

  /** Stops everything: the stream goes back to its pool (`reuse`) or is reset. */
  void teardown(bool reuse) {
    if (timer_) timer_->disarm();
    if (stream_ == nullptr) return;
    UpstreamStream* stream = stream_;
    stream_ = nullptr;
    stream->detach();
    if (reuse) {
      stream->release();
    } else {
      stream->reset();
    }
  }

  const RouteRuntime* route() const { return route_; }
  const ConfigSnapshot& runtime() const { return *runtime_; }
  bool completed() const { return completed_; }

 private:
  void onUpstreamConnected() override {}
  void onUpstreamBodySent(uint64_t) override {}
  void onUpstreamHeaders(ResponseHead&& head, bool end_stream) override {
    status_ = head.status;
    if (end_stream) onUpstreamComplete();
  }
  void onUpstreamData(const char*, size_t) override {}  // an answer to a notification: nothing
  void onUpstreamComplete() override {
    if (completed_) return;
    completed_ = true;
    owner_.done(this, status_ >= 200 && status_ < 300 ? "sent" : "failed");
  }
  void onUpstreamError(UpstreamError, const std::string&) override { owner_.done(this, "failed"); }

  ToolCancelNotifier& owner_;
  ConfigSnapshotPtr runtime_;
  const RouteRuntime* route_;
  RequestHead head_;
  RequestBody body_;
  size_t pool_index_ = 0;
  std::chrono::milliseconds timeout_{0};
  ScheduledTimerPtr timer_;
  UpstreamStream* stream_ = nullptr;
  int status_ = 0;
  bool completed_ = false;
};

ToolCancelNotifier::~ToolCancelNotifier() { closeAll(); }

void ToolCancelNotifier::send(ToolCancel cancel) {
  const RouteRuntime* route = cancel.route;
  if (in_flight_.size() >= max_in_flight_) {
    route->runtime->metrics()
        .tool_cancel_notifications.Add({{"route", route->name()}, {"result", "dropped"}})
        .Increment();
    return;
  }
  auto* n = new Notification(*this, std::move(cancel));
  in_flight_.insert(n);
  n->start();
}

void ToolCancelNotifier::done(Notification* n, std::string_view result) {
  if (in_flight_.erase(n) == 0) return;
  DeferredDeletablePtr owned_ptr(n);
  Notification* owned = n;
  owned->teardown(/*reuse=*/owned->completed());
  owned->runtime()
      .metrics()
      .tool_cancel_notifications
      .Add({{"route", owned->route()->name()}, {"result", std::string(result)}})
      .Increment();
  // Maybe on its own stream's or timer's call stack: deleted after this turn.
  dispatcher_.deferredDelete(std::move(owned_ptr));
}

void ToolCancelNotifier::closeAll() {
  for (Notification* n : in_flight_) delete n;  // its destructor resets the stream
  in_flight_.clear();
}

}  // namespace sluice
