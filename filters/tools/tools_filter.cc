#include "filters/tools/tools_filter.h"

#include <chrono>

#include "common/host_names.h"

namespace sluice {

ToolRoute::ToolRoute(const config::ToolsConfig& config, Metrics& metrics, const std::string& route)
    : policy_(config),
      route_(route),
      allowed_hosts_(config.allowed_hosts),
      calls_family_(metrics.tool_calls) {
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

std::string ToolsFilter::outcomeLabel(int status, ToolAnswer answer,
                                      const std::optional<std::string>& local_slug,
                                      std::optional<CancelReason> cancel_reason) {
  if (cancel_reason) return std::string(toString(*cancel_reason));
  if (local_slug) {
    std::string label = *local_slug;
    for (char& c : label) {
      if (c == '-') c = '_';
    }
    return label;
  }
  if (status >= 200 && status < 300) {
    if (answer == ToolAnswer::JsonRpcError) return "jsonrpc_error";
    if (answer == ToolAnswer::ToolError) return "tool_error";
    return "ok";
  }
  if (status >= 400 && status < 500) return "http_4xx";
  if (status >= 500) return "http_5xx";
  return "other";
}

std::optional<std::string> ToolsFilter::refuseHost(const RequestHead& request,
                                                   const std::vector<std::string>& allowed) {
  const auto shown = [](std::string_view v) {
    return "\"" + std::string(v.substr(0, 100)) + (v.size() > 100 ? "...\"" : "\"");
  };
  const std::optional<std::string_view> host_header = request.headers.get("host");
  if (host_header) {
    const std::optional<HostName> host = hostOfAuthority(*host_header);
    if (!host || !isAllowedHost(*host, allowed)) {
      return "Host " + shown(*host_header) +
             " is not one this MCP route serves (accepted: localhost, an IP address and the "
             "route's allowed_hosts; this stops DNS rebinding)";
    }
  }
  if (const std::optional<std::string_view> origin = request.headers.get("origin")) {
    const std::optional<HostName> host = hostOfOrigin(*origin);
    if (!host || !isAllowedHost(*host, allowed)) {
      return "Origin " + shown(*origin) +
             " is not one this MCP route serves (accepted: localhost, an IP address and the "
             "route's allowed_hosts; this stops DNS rebinding)";
    }
  }
  return std::nullopt;
}

FilterStatus ToolsFilter::decodeHeaders(RequestHead& request) {
  if (std::optional<std::string> refusal = refuseHost(request, route_.allowedHosts())) {
    callbacks_->sendLocalReply(makeProblem(problems::kHostNotAllowed, *refusal));
    return FilterStatus::StopIteration;
  }
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
  callbacks_->record().setJsonRpc(call_.method, id, call_.tool);
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
  const std::string_view type = response.headers.get("content-type").value_or("");
  const bool event_stream = type.find("text/event-stream") != std::string_view::npos;
  answer_.reset();
  if (is_tool_call_ && response.status >= 200 && response.status < 300 && !end_stream) {
    answer_ = std::make_unique<ToolAnswerReader>(event_stream);
  }
  tools_list_.clear();
  reading_tools_list_ =
      call_.method == "tools/list" && response.status >= 200 && response.status < 300;
  if (reading_tools_list_) {
    event_stream_ = event_stream;
    if (end_stream) learnToolsList();
  }
  return FilterStatus::Continue;
}

void ToolsFilter::encodeData(const char* data, size_t len, bool end_stream) {
  if (answer_) {
    answer_->feed(data, len);
    if (end_stream) answer_->finish();
    return;
  }
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
  const ToolAnswer answer = answer_ ? answer_->answer() : ToolAnswer::Unknown;
  route_
      .calls(match_.index,
             outcomeLabel(status_, answer, local_slug_, callbacks_->record().cancelReason()))
      .Increment();
  route_.duration(match_.index)
      .Observe(std::chrono::duration<double>(callbacks_->clock().now() - callbacks_->startTime())
                   .count());
}

}  // namespace sluice
