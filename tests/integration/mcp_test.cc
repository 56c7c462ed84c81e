// MCP routes end to end (docs/design.md §10): the real sluice in front of a
// scripted MCP server speaking JSON-RPC over HTTP/1.1. Asserts what the
// client saw and how many calls each tool got.

#include <gtest/gtest.h>
#include <http_parser.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/loopback.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using nlohmann::json;

/**
 * A scripted MCP server: tools/list names three tools with annotations;
 * tools/call answers a JSON-RPC result, or 503 once for a tool armed with
 * failNext(), or never for `hang` (and `hang_stream`, after an SSE head).
 * One thread per connection, keep-alive.
 */
class MockMcpServer {
 public:
  MockMcpServer() {
    const LoopbackListener listener = listenOnLoopback(16);
    fd_ = listener.fd;
    port_ = listener.port;
    accept_thread_ = std::thread([this] { acceptLoop(); });
  }
  ~MockMcpServer() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int c : clients_) ::shutdown(c, SHUT_RDWR);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void failNext(const std::string& tool) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_.insert(tool);
  }
  int calls(const std::string& tool) {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_[tool];
  }

 private:
  struct Parse {
    MockMcpServer* self;
    std::string body;
    bool complete = false;
  };

  void acceptLoop() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::lock_guard<std::mutex> lock(mu_);
      clients_.insert(c);
      threads_.emplace_back([this, c] { serve(c); });
    }
  }

  void serve(int c) {
    http_parser parser;
    http_parser_init(&parser, HTTP_REQUEST);
    Parse state{this, "", false};
    parser.data = &state;
    http_parser_settings settings;
    http_parser_settings_init(&settings);
    settings.on_body = [](http_parser* p, const char* at, size_t n) {
      static_cast<Parse*>(p->data)->body.append(at, n);
      return 0;
    };
    settings.on_message_complete = [](http_parser* p) {
      static_cast<Parse*>(p->data)->complete = true;
      return 0;
    };
    char buf[16 * 1024];
    for (;;) {
      const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      http_parser_execute(&parser, &settings, buf, static_cast<size_t>(n));
      if (!state.complete) continue;
      state.complete = false;
      const std::string reply = answer(state.body);
      state.body.clear();
      if (reply.empty()) {  // hang: hold the call until the connection goes
        while (!stopping_ && ::recv(c, buf, sizeof(buf), 0) > 0) {
        }
        break;
      }
      (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
    std::lock_guard<std::mutex> lock(mu_);
    clients_.erase(c);
    ::close(c);
  }

  static std::string http(int status, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) +
           " X\r\ncontent-type: application/json\r\ncontent-length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  std::string answer(const std::string& body) {
    const json req = json::parse(body, nullptr, false);
    const json id = req.value("id", json(nullptr));
    const std::string method = req.value("method", "");
    if (method == "tools/list") {
      const json tools = json::array({
          {{"name", "read_docs"}, {"annotations", {{"readOnlyHint", true}}}},
          {{"name", "drop_table"}, {"annotations", {{"destructiveHint", true}}}},
          {{"name", "hang"}},
      });
      return http(200, json{{"jsonrpc", "2.0"}, {"id", id}, {"result", {{"tools", tools}}}}.dump());
    }
    if (method != "tools/call") {
      return http(200, json{{"jsonrpc", "2.0"}, {"id", id}, {"result", json::object()}}.dump());
    }
    const std::string tool = req["params"].value("name", "");
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_[tool];
      if (fail_next_.erase(tool) > 0) return http(503, R"({"error":"busy"})");
    }
    if (tool == "hang") return "";
    if (tool == "hang_stream") {
      // An SSE head and one whole event, then nothing.
      const std::string event =
          "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
          "\"notifications/progress\",\"params\":{}}\n\n";
      char size[16];
      std::snprintf(size, sizeof(size), "%zx", event.size());
      return "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: "
             "chunked\r\n\r\n" +
             std::string(size) + "\r\n" + event + "\r\n";
    }
    const json result = {{"content", json::array({{{"type", "text"}, {"text", "done " + tool}}})}};
    return http(200, json{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}}.dump());
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::set<int> clients_;
  std::vector<std::thread> threads_;
  std::set<std::string> fail_next_;
  std::map<std::string, int> calls_;
};

std::string config(const std::string& upstream_url, const std::string& access_log = "{path: off}") {
  return R"(listen: 127.0.0.1:0
admin: 127.0.0.1:0
access_log: )" +
         access_log +
         R"(
upstreams:
  - name: tool-server
    url: )" +
         upstream_url +
         R"(
routes:
  - name: tools
    match: {path_prefix: /mcp}
    upstream: tool-server
    protocol: mcp
    retry: {attempts: 3, backoff: {base: 0s, max: 0s}}
    tools:
      - {name: "hang*", budget: 300ms}
      - {name: "search_*", retry: safe}
    tool_retry: annotations
)";
}

TestResponse post(const SluiceProcess& sluice, const std::string& body) {
  return httpRequest(
      sluice.port(), "POST", "/mcp",
      {{"content-type", "application/json"}, {"accept", "application/json, text/event-stream"}},
      body);
}

std::string toolCall(int id, const std::string& tool) {
  return json{{"jsonrpc", "2.0"},
              {"id", id},
              {"method", "tools/call"},
              {"params", {{"name", tool}, {"arguments", json::object()}}}}
      .dump();
}

class McpTest : public ::testing::Test {
 protected:
  MockMcpServer server_;
  SluiceProcess sluice_{config(server_.url())};
};

TEST_F(McpTest, ABodyThatIsNotJsonRpcGetsAJsonRpcError) {
  const TestResponse parse = post(sluice_, "{not json");
  EXPECT_EQ(parse.status, 400);
  EXPECT_EQ(parse.headers.get("content-type"), "application/json");
  const json p = json::parse(parse.body);
  EXPECT_TRUE(p["id"].is_null());
  EXPECT_EQ(p["error"]["code"], -32700);

  const TestResponse batch = post(sluice_, R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])");
  EXPECT_EQ(batch.status, 400);
  EXPECT_EQ(json::parse(batch.body)["error"]["code"], -32600);
}

TEST_F(McpTest, AToolSluiceKnowsNothingAboutIsNotRetriedOnceSent) {
  server_.failNext("read_docs");
  const TestResponse r = post(sluice_, toolCall(1, "read_docs"));  // no tools/list seen yet
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(server_.calls("read_docs"), 1);
}

TEST_F(McpTest, AnnotationsFromToolsListDecideTheRetry) {
  const TestResponse list =
      post(sluice_, R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}})");
  ASSERT_EQ(list.status, 200);

  server_.failNext("read_docs");  // readOnlyHint: retried
  const TestResponse read = post(sluice_, toolCall(2, "read_docs"));
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(json::parse(read.body)["id"], 2);
  EXPECT_EQ(server_.calls("read_docs"), 2);

  server_.failNext("drop_table");  // destructiveHint: called exactly once
  const TestResponse drop = post(sluice_, toolCall(3, "drop_table"));
  EXPECT_EQ(drop.status, 503);
  EXPECT_EQ(server_.calls("drop_table"), 1);

  server_.failNext("search_web");  // retry: safe in the config
  EXPECT_EQ(post(sluice_, toolCall(4, "search_web")).status, 200);
  EXPECT_EQ(server_.calls("search_web"), 2);

  // Other methods follow the route's retry policy.
  EXPECT_EQ(sluice_.metric("sluice_tool_calls_total",
                           {{"route", "tools"}, {"tool", "other"}, {"outcome", "ok"}}),
            1);
  EXPECT_EQ(sluice_.metric("sluice_tool_calls_total",
                           {{"route", "tools"}, {"tool", "other"}, {"outcome", "http_5xx"}}),
            1);
  EXPECT_EQ(sluice_.metric("sluice_tool_calls_total",
                           {{"route", "tools"}, {"tool", "search_*"}, {"outcome", "ok"}}),
            1);
}

TEST_F(McpTest, AToolBudgetOverrunIsAJsonRpcTimeoutForTheRequestsId) {
  const TestResponse r = post(sluice_, toolCall(42, "hang"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.get("content-type"), "application/json");
  const json body = json::parse(r.body);
  EXPECT_EQ(body["jsonrpc"], "2.0");
  EXPECT_EQ(body["id"], 42);
  EXPECT_EQ(body["error"]["code"], -32001);
  EXPECT_EQ(body["error"]["message"].get<std::string>().rfind("sluice budget-exhausted: ", 0), 0u);
  EXPECT_EQ(body["error"]["data"]["cancel_reason"], "budget_exhausted");
  EXPECT_EQ(sluice_.metric("sluice_tool_calls_total",
                           {{"tool", "hang*"}, {"outcome", "budget_exhausted"}}),
            1);
}

TEST_F(McpTest, ACutEventStreamEndsWithTheJsonRpcError) {
  const TestResponse r = post(sluice_, toolCall(7, "hang_stream"));
  EXPECT_EQ(r.status, 200);
  const std::string marker = "event: message\ndata: ";
  const size_t last = r.body.rfind(marker);
  ASSERT_NE(last, std::string::npos) << r.body;
  ASSERT_NE(last, r.body.find(marker)) << "only the server's event: " << r.body;
  const std::string data = r.body.substr(last + marker.size());
  const json error = json::parse(data.substr(0, data.find('\n')));
  EXPECT_EQ(error["id"], 7);
  EXPECT_EQ(error["error"]["code"], -32001);
}

TEST(McpAccessLogTest, ShowsTheMethodAndTheTool) {
  MockMcpServer server;
  char dir_template[] = "/tmp/sluice-mcp-log-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string log_path = std::string(dir_template) + "/access.log";
  std::vector<json> lines;
  {
    SluiceProcess sluice(config(server.url(), "{path: " + log_path + "}"));
    ASSERT_EQ(post(sluice, toolCall(1, "search_web")).status, 200);
    ASSERT_EQ(post(sluice, R"({"jsonrpc":"2.0","id":2,"method":"ping"})").status, 200);
    auto read = [&] {
      lines.clear();
      std::ifstream in(log_path);
      for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
      return lines.size() >= 2;
    };
    ASSERT_TRUE(waitUntil(read));
  }
  // Two requests may be served by two workers, each with its own log
  // buffer: the lines' order is not the requests' order.
  ASSERT_EQ(lines.size(), 2u);
  const bool call_first = lines[0]["jsonrpc_method"] == "tools/call";
  const json& call = lines[call_first ? 0 : 1];
  const json& ping = lines[call_first ? 1 : 0];
  EXPECT_EQ(call["jsonrpc_method"], "tools/call");
  EXPECT_EQ(call["tool"], "search_web");
  EXPECT_EQ(ping["jsonrpc_method"], "ping");
  EXPECT_TRUE(ping["tool"].is_null());
  std::remove(log_path.c_str());
  ::rmdir(dir_template);
}

}  // namespace
}  // namespace sluice::test
