#include "filters/tools/tools_filter.h"

#include <chrono>

namespace sluice {

ToolRoute::ToolRoute(const config::ToolsConfig& config, Metrics& metrics, const std::string& route)
    : policy_(config), route_(route), calls_family_(metrics.tool_calls) {
  for (size_t i = 0; i < policy_.labelCount(); ++i) {
    durations_.push_back(&metrics.tool_call_duration.Add(
        {{"route", route_}, {"tool", std::string(policy_.label(i))}}, Metrics::durationBuckets()));
  }
}

void ToolRoute::addUpstream(std::string name, std::shared_ptr<ToolAnnotationTable> table,
                            std::shared_ptr<McpSessionTable> sessions) {
  upstreams_.push_back({std::move(name), std::move(table), std::move(sessions)});
}

ToolAnnotationTable* ToolRoute::annotations(std::string_view upstream) const {
  for (const Upstream& u : upstreams_) {
    if (u.name == upstream) return u.annotations.get();
  }
  return nullptr;
}

McpSessionTable* ToolRoute::sessions(std::string_view upstream) const {
  for (const Upstream& u : upstreams_) {
    if (u.name == upstream) return u.sessions.get();
  }
  return nullptr;
}

prometheus::Counter& ToolRoute::calls(size_t index, std::string_view outcome) const {
  // Family::Add finds the series once it exists; outcomes are a closed set.
  return calls_family_.Add({{"route", route_},
                            {"tool", std::string(policy_.label(index))},
                            {"outcome", std::string(outcome)}});
}

std::string ToolsFilter::outcomeLabel(int status, const std::optional<std::string>& local_slug,
                                      std::optional<CancelReason> cancel_reason) {
  if (cancel_reason) return std::string(toString(*cancel_reason));
  if (local_slug) {
    std::string label = *local_slug;
    for (char& c : label) {
      if (c == '-') c = '_';
    }
    return label;
  }
  if (status >= 200 && status < 300) return "ok";
  if (status >= 400 && status < 500) return "http_4xx";
  if (status >= 500) return "http_5xx";
  return "other";
}

FilterStatus ToolsFilter::decodeHeaders(RequestHead& request) {
  post_ = request.method == "POST";
  delete_ = request.method == "DELETE";
  session_id_ = std::string(request.headers.get("mcp-session-id").value_or(""));
  return FilterStatus::Continue;
}

FilterStatus ToolsFilter::decodeComplete(std::string_view body) {
  if (!post_) return FilterStatus::Continue;  // GET (the server's stream), DELETE: no JSON-RPC
  call_ = readJsonRpcRequest(body);
  const std::optional<std::string_view> id =
      call_.id ? std::optional<std::string_view>(*call_.id) : std::nullopt;
  callbacks_->recordJsonRpc(call_.method, id, call_.tool);
  if (call_.status != JsonRpcRequest::Status::Ok) {
    callbacks_->sendLocalReply(makeProblem(call_.status == JsonRpcRequest::Status::ParseError
                                               ? problems::kJsonRpcParseError
                                               : problems::kJsonRpcInvalidRequest,
                                           call_.detail));
    return FilterStatus::StopIteration;
  }
  if (call_.method != "tools/call") return FilterStatus::Continue;
  is_tool_call_ = true;
  match_ = route_.policy().match(call_.tool);
  if (match_.rule != nullptr && match_.rule->budget) {
    // Lowers, never raises: the request's budget and its run's still bound it.
    callbacks_->lowerDeadline(
        callbacks_->startTime() +
            std::chrono::duration_cast<MonotonicTime::duration>(*match_.rule->budget),
        CancelReason::BudgetExhausted);
  }
  return FilterStatus::Continue;
}

Admission ToolsFilter::beforeAttempt(RequestHead&, const AttemptContext& attempt) {
  upstream_ = attempt.destination.upstream;
  endpoint_ = attempt.destination.endpoint;
  if (!is_tool_call_) return Admission::proceed();
  std::optional<ToolHints> hints;
  if (const ToolAnnotationTable* table = route_.annotations(upstream_)) {
    hints = table->lookup(call_.tool);
  }
  callbacks_->setSentResendable(maySendAgain(route_.policy().retryFor(match_), hints));
  return Admission::proceed();
}

void ToolsFilter::trackSession(const ResponseHead& response) {
  McpSessionTable* sessions = route_.sessions(upstream_);
  if (sessions == nullptr) return;
  if (delete_) {
    // Ended by the client (2xx) or unknown to the server (404): forgotten.
    // A 405 (the server does not let clients end sessions) keeps it.
    if (!session_id_.empty() &&
        ((response.status >= 200 && response.status < 300) || response.status == 404)) {
      sessions->forget(sessionKey(session_id_));
    }
    return;
  }
  if (response.status < 200 || response.status >= 300) return;
  const std::optional<std::string_view> issued = response.headers.get("mcp-session-id");
  if (!issued || issued->empty()) return;
  sessions->learn(sessionKey(*issued), std::string(endpoint_), callbacks_->clock().now());
}

FilterStatus ToolsFilter::encodeHeaders(ResponseHead& response, bool end_stream) {
  status_ = response.status;
  trackSession(response);
  tools_list_.clear();
  reading_tools_list_ =
      call_.method == "tools/list" && response.status >= 200 && response.status < 300;
  if (reading_tools_list_) {
    const std::string_view type = response.headers.get("content-type").value_or("");
    event_stream_ = type.find("text/event-stream") != std::string_view::npos;
    if (end_stream) learnToolsList();
  }
  return FilterStatus::Continue;
}

void ToolsFilter::encodeData(const char* data, size_t len, bool end_stream) {
  if (!reading_tools_list_) return;
  if (tools_list_.size() + len > kMaxToolsListBytes) {
    // Too big to read: the tools stay as they were known.
    reading_tools_list_ = false;
    tools_list_ = std::string();
    return;
  }
  tools_list_.append(data, len);
  if (end_stream) learnToolsList();
}

void ToolsFilter::learnToolsList() {
  reading_tools_list_ = false;
  if (ToolAnnotationTable* table = route_.annotations(upstream_)) {
    table->learnFromToolsList(tools_list_, event_stream_);
  }
  tools_list_ = std::string();
}

void ToolsFilter::encodeLocalReply(Problem& problem) {
  if (!local_slug_) local_slug_ = problem.slug;
}

void ToolsFilter::onDestroy() {
  if (!is_tool_call_) return;
  route_.calls(match_.index, outcomeLabel(status_, local_slug_, callbacks_->cancelReason()))
      .Increment();
  route_.duration(match_.index)
      .Observe(std::chrono::duration<double>(callbacks_->clock().now() - callbacks_->startTime())
                   .count());
}

}  // namespace sluice
