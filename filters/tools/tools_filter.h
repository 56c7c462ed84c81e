#pragma once

// The tools filter (docs/design.md §10): on a `protocol: mcp` route it reads
// the JSON-RPC message of each request and applies the route's per-tool
// policy to `tools/call`:
//   - a body that is not one JSON-RPC request is answered 400 in JSON-RPC
//     (-32700 parse error, -32600 invalid request, batches included);
//   - a matched tool's `budget` lowers the request's deadline (the request's
//     own budget and its run's still apply: the earliest wins);
//   - each attempt says whether it may be sent again once sent
//     (FilterCallbacks::setSentResendable): per the tool's `retry`, else the
//     route's `tool_retry`, where `annotations` asks what the upstream's
//     tools/list said about the tool;
//   - it learns those annotations from the tools/list responses it sees;
//   - it counts each tools/call in sluice_tool_calls_total and
//     sluice_tool_call_duration_seconds;
//   - it learns which endpoint issued an MCP session (a response carrying
//     `Mcp-Session-Id`) and forgets the session once a DELETE of it was
//     answered (the Exchange places the session's requests there).
// Other methods (initialize, tools/list, ping, notifications) follow the
// route's retry policy unchanged. Only POSTs carry JSON-RPC: a GET (the
// server's event stream) or DELETE (the end of a session) passes through.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "filters/filter.h"
#include "filters/tools/jsonrpc.h"
#include "filters/tools/mcp_sessions.h"
#include "filters/tools/tool_annotations.h"
#include "filters/tools/tool_answer.h"
#include "filters/tools/tool_policy.h"

namespace sluice {

/**
 * What the tools filters of one route share (built once per route, used by
 * every worker): the policy, the annotation table of each upstream of the
 * route's chain, and the route's tool metric handles.
 */
class ToolRoute {
 public:
  ToolRoute(const config::ToolsConfig& config, Metrics& metrics, const std::string& route);

  /** Adds an upstream of the route's chain, its annotation table and its session table. */
  void addUpstream(std::string name, std::shared_ptr<ToolAnnotationTable> table,
                   std::shared_ptr<McpSessionTable> sessions = nullptr);
  /** The annotation table of `upstream`; null when it is not in the route's chain. */
  ToolAnnotationTable* annotations(std::string_view upstream) const;
  /** The session table of `upstream`; null when it is not in the route's chain. */
  McpSessionTable* sessions(std::string_view upstream) const;

  const ToolPolicy& policy() const { return policy_; }
  /** The route's `allowed_hosts`, besides localhost and IP literals. */
  const std::vector<std::string>& allowedHosts() const { return allowed_hosts_; }
  /** sluice_tool_calls_total{route,tool,outcome} for label `index`. */
  prometheus::Counter& calls(size_t index, std::string_view outcome) const;
  /** sluice_tool_call_duration_seconds{route,tool} for label `index`. */
  prometheus::Histogram& duration(size_t index) const { return *durations_.at(index); }

 private:
  ToolPolicy policy_;
  std::string route_;
  std::vector<std::string> allowed_hosts_;
  prometheus::Family<prometheus::Counter>& calls_family_;
  std::vector<prometheus::Histogram*> durations_;
  struct Upstream {
    std::string name;
    std::shared_ptr<ToolAnnotationTable> annotations;
    std::shared_ptr<McpSessionTable> sessions;
  };
  std::vector<Upstream> upstreams_;
};

class ToolsFilter final : public StreamFilter {
 public:
  /** The most of a tools/list response body read for annotations. */
  static constexpr size_t kMaxToolsListBytes = 4u << 20;

  explicit ToolsFilter(const ToolRoute& route) : route_(route) {}

  std::string_view name() const override { return "tools"; }
  FilterStatus decodeHeaders(RequestHead& request) override;
  FilterStatus decodeComplete(std::string_view body) override;
  Admission beforeAttempt(RequestHead& upstream_request, const AttemptContext& attempt) override;
  FilterStatus encodeHeaders(ResponseHead& response, bool end_stream) override;
  void encodeData(const char* data, size_t len, bool end_stream) override;
  void encodeLocalReply(Problem& problem) override;
  void onDestroy() override;

  /**
   * The `outcome` label of a finished tools/call: `ok` (a 2xx answer from
   * the server with a result), `tool_error` (a result the tool marked
   * `isError`), `jsonrpc_error` (a JSON-RPC error from the server),
   * `http_4xx` / `http_5xx` (the server's error status),
   * the cancel_reason of a request sluice cancelled (`budget_exhausted`,
   * `client_disconnect`, ...), or, when sluice answered for another reason,
   * its problem's slug with '_' for '-' (`upstream_connect_error`).
   */
  /**
   * Why the request must be refused before anything else (DNS rebinding): a
   * `Host`, or an `Origin` when there is one, that is neither localhost, an
   * IP literal nor one of `allowed`. nullopt when it may pass.
   */
  static std::optional<std::string> refuseHost(const RequestHead& request,
                                               const std::vector<std::string>& allowed);

  static std::string outcomeLabel(int status, ToolAnswer answer,
                                  const std::optional<std::string>& local_slug,
                                  std::optional<CancelReason> cancel_reason);

 private:
  void learnToolsList();

  /** Learns or forgets the request's session from the response head (see the header). */
  void trackSession(const ResponseHead& response);

  const ToolRoute& route_;
  bool post_ = true;        // a POST: one JSON-RPC message
  bool delete_ = false;     // a DELETE: the client ends its session
  std::string session_id_;  // the request's Mcp-Session-Id, "" without
  JsonRpcRequest call_;
  bool is_tool_call_ = false;
  ToolMatch match_;
  // The attempt's upstream and endpoint (beforeAttempt's AttemptContext):
  // its tool annotations, the session it issues.
  std::string_view upstream_;
  std::string_view endpoint_;
  // A tools/list answer being read for annotations.
  bool reading_tools_list_ = false;
  bool event_stream_ = false;
  std::string tools_list_;
  // How the call ended, for the metrics.
  int status_ = 0;
  std::unique_ptr<ToolAnswerReader> answer_;  // a 2xx tools/call answer being read
  std::optional<std::string> local_slug_;
};

}  // namespace sluice
