// Tests for tools/mock-llm: a real mockllm::Server on port 0 in this process,
// driven by a small blocking HTTP/1.1 client (http-parser for the responses).
// The ledger is checked through Server::ledger().waitUntil(), because entries
// are finalised on the server's loop, possibly just after the client has read
// the last byte.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/unit/mock_llm/test_cert.h"
#include "tools/mock-llm/fault_counters.h"
#include "tools/mock-llm/server.h"
#include "tools/mock-llm/wire_format.h"

namespace mockllm {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr milliseconds kWait{5000};

int64_t nowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// --- a tiny blocking HTTP/1.1 client -------------------------------------------

struct HttpResponse {
  int status = 0;
  Headers headers;  // lower-case names
  std::string body;

  std::optional<std::string> header(const std::string& name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return std::nullopt;
  }
  json jsonBody() const { return json::parse(body, nullptr, false); }
};

std::string request(const std::string& method, const std::string& path, const Headers& headers,
                    const std::string& body) {
  std::string out = method + " " + path + " HTTP/1.1\r\nHost: mock\r\n";
  for (const auto& [n, v] : headers) out += n + ": " + v + "\r\n";
  if (!body.empty() || method == "POST")
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "\r\n" + body;
  return out;
}

class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{10, 0};  // a hung test fails instead of hanging
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    http_parser_init(&parser_, HTTP_RESPONSE);
    parser_.data = this;
    http_parser_settings_init(&settings_);
    settings_.on_message_begin = [](http_parser* p) {
      auto* c = static_cast<Client*>(p->data);
      c->cur_ = HttpResponse();
      return 0;
    };
    settings_.on_header_field = [](http_parser* p, const char* at, size_t len) {
      auto* c = static_cast<Client*>(p->data);
      if (c->in_value_) c->cur_.headers.emplace_back(std::move(c->field_), std::move(c->value_));
      if (c->in_value_) c->field_.clear(), c->value_.clear();
      c->in_value_ = false;
      c->field_ += lower(std::string(at, len));
      return 0;
    };
    settings_.on_header_value = [](http_parser* p, const char* at, size_t len) {
      auto* c = static_cast<Client*>(p->data);
      c->in_value_ = true;
      c->value_.append(at, len);
      return 0;
    };
    settings_.on_headers_complete = [](http_parser* p) {
      auto* c = static_cast<Client*>(p->data);
      if (c->in_value_) c->cur_.headers.emplace_back(std::move(c->field_), std::move(c->value_));
      c->field_.clear();
      c->value_.clear();
      c->in_value_ = false;
      c->cur_.status = static_cast<int>(p->status_code);
      c->headers_seen_ = true;
      return 0;
    };
    settings_.on_body = [](http_parser* p, const char* at, size_t len) {
      static_cast<Client*>(p->data)->cur_.body.append(at, len);
      return 0;
    };
    settings_.on_message_complete = [](http_parser* p) {
      auto* c = static_cast<Client*>(p->data);
      c->done_.push_back(std::move(c->cur_));
      c->cur_ = HttpResponse();
      c->headers_seen_ = false;
      return 0;
    };
  }
  ~Client() { closeNow(); }

  bool connected() const { return connected_; }

  void send(const std::string& raw) {
    size_t off = 0;
    while (off < raw.size()) {
      const ssize_t n = ::send(fd_, raw.data() + off, raw.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  // The next complete response; nullopt if the connection ended first.
  std::optional<HttpResponse> read() {
    while (done_.empty()) {
      if (!fill()) break;
    }
    if (done_.empty()) return std::nullopt;
    HttpResponse r = std::move(done_.front());
    done_.pop_front();
    return r;
  }

  std::optional<HttpResponse> roundTrip(const std::string& raw) {
    send(raw);
    return read();
  }

  // Reads until `pred(body so far)` holds for the response in progress.
  bool readBodyUntil(const std::function<bool(const std::string&)>& pred) {
    while (!pred(cur_.body)) {
      if (!fill()) return false;
    }
    return true;
  }

  // Reads until EOF or error. Returns false if the end was a reset (ECONNRESET).
  bool readToEnd() {
    while (fill()) {
    }
    return !reset_;
  }

  const std::string& raw() const { return raw_; }
  bool reset() const { return reset_; }
  bool headersSeen() const { return headers_seen_; }
  const HttpResponse& partial() const { return cur_; }

  void closeNow() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool fill() {
    if (fd_ < 0 || eof_) return false;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      eof_ = true;
      if (n < 0 && errno == ECONNRESET) reset_ = true;
      http_parser_execute(&parser_, &settings_, buf, 0);  // EOF may complete a body
      return false;
    }
    raw_.append(buf, static_cast<size_t>(n));
    http_parser_execute(&parser_, &settings_, buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  bool reset_ = false;
  bool headers_seen_ = false;
  http_parser parser_;
  http_parser_settings settings_;
  HttpResponse cur_;
  std::string field_, value_;
  bool in_value_ = false;
  std::deque<HttpResponse> done_;
  std::string raw_;
};

struct SseEvent {
  std::string event;
  std::string data;
};

std::vector<SseEvent> parseSse(const std::string& body) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    SseEvent ev;
    size_t line_start = pos;
    while (line_start < end) {
      size_t nl = body.find('\n', line_start);
      if (nl == std::string::npos || nl > end) nl = end;
      const std::string line = body.substr(line_start, nl - line_start);
      if (line.rfind("event: ", 0) == 0) ev.event = line.substr(7);
      if (line.rfind("data: ", 0) == 0) ev.data += line.substr(6);
      line_start = nl + 1;
    }
    out.push_back(std::move(ev));
    pos = end + 2;
  }
  return out;
}

int64_t ceilDiv4(size_t n) { return static_cast<int64_t>((n + 3) / 4); }

// --- fixture ---------------------------------------------------------------------

class MockLlmTest : public ::testing::Test {
 protected:
  void SetUp() override { startServer(ServerOptions{}); }

  void startServer(ServerOptions options) {
    server_.reset();
    server_ = std::make_unique<Server>(std::move(options));
    std::string error;
    ASSERT_TRUE(server_->start(&error)) << error;
    ASSERT_NE(server_->port(), 0);
  }

  uint16_t port() const { return server_->port(); }

  std::optional<HttpResponse> post(const std::string& path, const std::string& body,
                                   const Headers& headers = {}) {
    Client c(port());
    return c.roundTrip(request("POST", path, headers, body));
  }

  // The entry with `id` once `pred` holds for it (fails the test on timeout).
  LedgerEntry waitEntry(const std::string& id,
                        const std::function<bool(const LedgerEntry&)>& pred) {
    LedgerEntry found;
    const bool ok = server_->ledger().waitUntil(
        [&](const std::vector<LedgerEntry>& entries) {
          for (const auto& e : entries) {
            if (e.id == id && pred(e)) {
              found = e;
              return true;
            }
          }
          return false;
        },
        kWait);
    EXPECT_TRUE(ok) << "ledger entry " << id << " never reached the expected state";
    return found;
  }

  LedgerEntry waitFinished(const std::string& id) {
    return waitEntry(id, [](const LedgerEntry& e) { return e.finished_us != 0; });
  }

  std::unique_ptr<Server> server_;
};

const std::string kChatBody =
    R"({"model":"gpt-test","messages":[{"role":"user","content":"Say hi"}]})";
const std::string kChatStreamUsage =
    R"({"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[]})";
const std::string kChatStream = R"({"model":"gpt-test","stream":true,"messages":[]})";

// --- OpenAI Chat Completions -----------------------------------------------------

TEST_F(MockLlmTest, ChatCompletionJsonWithUsage) {
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-tokens", "3"}, {"x-mock-request-id", "chat1"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->header("content-length"), std::to_string(r->body.size()));
  const json j = r->jsonBody();
  ASSERT_TRUE(j.is_object()) << r->body;
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "gpt-test");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "tok0 tok1 tok2 ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], ceilDiv4(kChatBody.size()));
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], ceilDiv4(kChatBody.size()) + 3);

  const LedgerEntry e = waitEntry("chat1", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_EQ(e.method, "POST");
  EXPECT_EQ(e.path, "/v1/chat/completions");
  EXPECT_EQ(e.model, "gpt-test");
  EXPECT_FALSE(e.stream);
  EXPECT_EQ(e.status, 200);
  EXPECT_EQ(e.tokens_emitted, 3);
  EXPECT_TRUE(e.usage_reported);
  EXPECT_EQ(e.input_tokens, ceilDiv4(kChatBody.size()));
  EXPECT_FALSE(e.peer_closed);
  EXPECT_GT(e.received_us, 0);
  EXPECT_GE(e.headers_sent_us, e.received_us);
  EXPECT_GE(e.finished_us, e.headers_sent_us);
  EXPECT_LE(e.finished_us, nowMicros());  // same clock as steady_clock
  ASSERT_EQ(e.request_headers.size(),
            4u);  // host, x-mock-tokens, x-mock-request-id, content-length
  EXPECT_EQ(e.request_headers[1], (std::pair<std::string, std::string>("x-mock-tokens", "3")));
}

TEST_F(MockLlmTest, ChatMaxTokensTruncatesWithFinishReasonLength) {
  auto r = post("/v1/chat/completions", R"({"model":"m","max_tokens":2,"messages":[]})",
                {{"x-mock-tokens", "5"}});
  ASSERT_TRUE(r);
  const json j = r->jsonBody();
  EXPECT_EQ(j["choices"][0]["message"]["content"], "tok0 tok1 ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
}

TEST_F(MockLlmTest, ChatStreamWithIncludeUsage) {
  auto r = post("/v1/chat/completions", kChatStreamUsage,
                {{"x-mock-tokens", "4"}, {"x-mock-request-id", "s1"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("content-type"), "text/event-stream; charset=utf-8");
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  EXPECT_FALSE(r->header("content-length"));
  const auto events = parseSse(r->body);
  ASSERT_EQ(events.size(), 4u + 3u) << r->body;
  for (int i = 0; i < 4; ++i) {
    const json c = json::parse(events[i].data);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["model"], "gpt-test");
    EXPECT_EQ(c["choices"][0]["delta"]["content"], "tok" + std::to_string(i) + " ");
    EXPECT_EQ(c["choices"][0]["delta"].contains("role"), i == 0);
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  }
  const json finish = json::parse(events[4].data);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
  const json usage = json::parse(events[5].data);
  EXPECT_TRUE(usage["choices"].is_array() && usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], ceilDiv4(kChatStreamUsage.size()));
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(usage["usage"]["total_tokens"], ceilDiv4(kChatStreamUsage.size()) + 4);
  EXPECT_EQ(events[6].data, "[DONE]");

  const LedgerEntry e = waitEntry("s1", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_TRUE(e.stream);
  EXPECT_EQ(e.tokens_emitted, 4);
  EXPECT_TRUE(e.usage_reported);
  EXPECT_GE(e.last_token_us, e.headers_sent_us);
}

TEST_F(MockLlmTest, ChatStreamWithoutIncludeUsageHasNoUsageChunk) {
  auto r = post("/v1/chat/completions", kChatStream,
                {{"x-mock-tokens", "2"}, {"x-mock-request-id", "s2"}});
  ASSERT_TRUE(r);
  const auto events = parseSse(r->body);
  ASSERT_EQ(events.size(), 2u + 2u) << r->body;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i].data);
    EXPECT_FALSE(c.contains("usage")) << events[i].data;
    EXPECT_FALSE(c["choices"].empty());
  }
  EXPECT_EQ(json::parse(events[2].data)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events.back().data, "[DONE]");
  const LedgerEntry e = waitEntry("s2", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_FALSE(e.usage_reported);
  EXPECT_EQ(e.tokens_emitted, 2);
}

TEST_F(MockLlmTest, StreamTokensTravelInSeparateChunks) {
  Client c(port());
  c.send(request("POST", "/v1/chat/completions", {{"x-mock-tokens", "3"}}, kChatStream));
  ASSERT_TRUE(c.read());
  // Each token is its own HTTP chunk: a size line right before every "data:".
  const std::string& raw = c.raw();
  size_t chunks = 0;
  for (size_t pos = raw.find("\r\ndata: "); pos != std::string::npos;
       pos = raw.find("\r\ndata: ", pos + 1)) {
    ++chunks;
  }
  EXPECT_EQ(chunks, 3u + 2u);
}

// --- OpenAI Responses ---------------------------------------------------------------

TEST_F(MockLlmTest, ResponsesStreamEvents) {
  const std::string body = R"({"model":"gpt-resp","stream":true,"input":"hello"})";
  auto r = post("/v1/responses", body, {{"x-mock-tokens", "3"}, {"x-mock-request-id", "r1"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const auto events = parseSse(r->body);
  ASSERT_GE(events.size(), 5u);
  std::vector<std::string> deltas;
  for (const auto& ev : events) {
    const json d = json::parse(ev.data);
    EXPECT_EQ(d["type"], ev.event);  // `event: NAME` matches data.type
    if (ev.event == "response.output_text.delta") deltas.push_back(d["delta"]);
  }
  EXPECT_EQ(events.front().event, "response.created");
  EXPECT_EQ(deltas, (std::vector<std::string>{"tok0 ", "tok1 ", "tok2 "}));
  const auto done = std::find_if(events.begin(), events.end(), [](const SseEvent& e) {
    return e.event == "response.output_text.done";
  });
  ASSERT_NE(done, events.end());
  EXPECT_EQ(json::parse(done->data)["text"], "tok0 tok1 tok2 ");
  EXPECT_EQ(events.back().event, "response.completed");
  const json completed = json::parse(events.back().data)["response"];
  EXPECT_EQ(completed["status"], "completed");
  EXPECT_EQ(completed["model"], "gpt-resp");
  EXPECT_EQ(completed["usage"]["input_tokens"], ceilDiv4(body.size()));
  EXPECT_EQ(completed["usage"]["output_tokens"], 3);
  EXPECT_EQ(completed["usage"]["total_tokens"], ceilDiv4(body.size()) + 3);
  const LedgerEntry e = waitEntry("r1", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_TRUE(e.usage_reported);
  EXPECT_EQ(e.tokens_emitted, 3);
}

TEST_F(MockLlmTest, ResponsesJson) {
  const std::string body = R"({"model":"gpt-resp","input":"hello"})";
  auto r = post("/v1/responses", body, {{"x-mock-tokens", "2"}});
  ASSERT_TRUE(r);
  const json j = r->jsonBody();
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "tok0 tok1 ");
  EXPECT_EQ(j["usage"]["input_tokens"], ceilDiv4(body.size()));
  EXPECT_EQ(j["usage"]["output_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], ceilDiv4(body.size()) + 2);
}

// --- Anthropic Messages -----------------------------------------------------------

TEST_F(MockLlmTest, AnthropicStreamReportsCumulativeOutputTokens) {
  const std::string body =
      R"({"model":"claude-test","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]})";
  auto r = post("/v1/messages", body, {{"x-mock-tokens", "5"}, {"x-mock-request-id", "a1"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const auto events = parseSse(r->body);
  std::vector<std::string> names;
  for (const auto& ev : events) names.push_back(ev.event);
  const std::vector<std::string> expected = {
      "message_start",       "content_block_start", "ping",
      "content_block_delta", "content_block_delta", "content_block_delta",
      "content_block_delta", "content_block_delta", "content_block_stop",
      "message_delta",       "message_stop"};
  EXPECT_EQ(names, expected);
  const json start = json::parse(events[0].data);
  EXPECT_EQ(start["message"]["model"], "claude-test");
  EXPECT_EQ(start["message"]["usage"]["input_tokens"], ceilDiv4(body.size()));
  EXPECT_EQ(start["message"]["usage"]["output_tokens"], 1);
  for (int i = 0; i < 5; ++i) {
    const json d = json::parse(events[3 + i].data);
    EXPECT_EQ(d["delta"]["type"], "text_delta");
    EXPECT_EQ(d["delta"]["text"], "tok" + std::to_string(i) + " ");
  }
  const json delta = json::parse(events[9].data);
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(delta["usage"]["output_tokens"], 5);  // cumulative, not incremental
  const LedgerEntry e = waitEntry("a1", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_TRUE(e.usage_reported);
  EXPECT_EQ(e.tokens_emitted, 5);
  EXPECT_EQ(e.model, "claude-test");
}

TEST_F(MockLlmTest, AnthropicJson) {
  const std::string body = R"({"model":"claude-test","max_tokens":1024,"messages":[]})";
  auto r = post("/v1/messages", body, {{"x-mock-tokens", "2"}});
  ASSERT_TRUE(r);
  const json j = r->jsonBody();
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["content"][0]["text"], "tok0 tok1 ");
  EXPECT_EQ(j["stop_reason"], "end_turn");
  EXPECT_EQ(j["usage"]["input_tokens"], ceilDiv4(body.size()));
  EXPECT_EQ(j["usage"]["output_tokens"], 2);
}

// --- status injection ---------------------------------------------------------------

TEST_F(MockLlmTest, InjectedStatusCarriesRetryAfterHeaders) {
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-status", "503"},
                 {"x-mock-retry-after", "7"},
                 {"x-mock-retry-after-ms", "6500"},
                 {"x-mock-request-id", "e1"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->header("retry-after"), "7");
  EXPECT_EQ(r->header("retry-after-ms"), "6500");
  EXPECT_EQ(r->header("content-type"), "application/json");
  const json j = r->jsonBody();
  EXPECT_EQ(j["error"]["type"], "server_error");
  EXPECT_TRUE(j["error"]["message"].is_string());
  const LedgerEntry e = waitFinished("e1");
  EXPECT_EQ(e.status, 503);
  EXPECT_EQ(e.tokens_emitted, 0);
  EXPECT_FALSE(e.usage_reported);
}

TEST_F(MockLlmTest, RetryAfterHeadersAlsoOnSuccess) {
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("retry-after"), "Wed, 21 Oct 2015 07:28:00 GMT");
}

TEST_F(MockLlmTest, ProblemJsonBody) {
  auto r = post(
      "/v1/chat/completions", kChatBody,
      {{"x-mock-status", "500"}, {"x-mock-problem", "1"}, {"x-mock-problem-retriable", "false"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->header("content-type"), "application/problem+json");
  json j = r->jsonBody();
  EXPECT_TRUE(j["type"].is_string());
  EXPECT_EQ(j["title"], "Internal Server Error");
  EXPECT_EQ(j["status"], 500);
  EXPECT_TRUE(j["detail"].is_string());
  EXPECT_EQ(j["is_retriable"], false);

  r = post("/v1/chat/completions", kChatBody, {{"x-mock-status", "502"}, {"x-mock-problem", "1"}});
  ASSERT_TRUE(r);
  j = r->jsonBody();
  EXPECT_EQ(j["status"], 502);
  EXPECT_FALSE(j.contains("is_retriable"));
}

TEST_F(MockLlmTest, AnthropicErrorsUseAnthropicShape) {
  auto r = post("/v1/messages", R"({"model":"c"})", {{"x-mock-status", "529"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 529);
  const json j = r->jsonBody();
  EXPECT_EQ(j["type"], "error");
  EXPECT_EQ(j["error"]["type"], "overloaded_error");
}

TEST_F(MockLlmTest, FailTimesThenSucceedAcrossConnections) {
  const Headers h = {{"x-mock-fail-times", "2"}, {"x-mock-fail-key", "k1"}};
  std::vector<int> statuses;
  for (int i = 0; i < 4; ++i) {
    Headers hi = h;
    hi.emplace_back("x-mock-request-id", "f" + std::to_string(i));
    auto r = post("/v1/chat/completions", kChatBody, hi);
    ASSERT_TRUE(r);
    statuses.push_back(r->status);
  }
  EXPECT_EQ(statuses, (std::vector<int>{503, 503, 200, 200}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(waitFinished("f" + std::to_string(i)).attempt_for_key, i + 1);
  }
  // Another key counts separately, with a custom status.
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-fail-times", "1"}, {"x-mock-fail-key", "k2"}, {"x-mock-status", "429"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  // A request without the fail key records attempt 0.
  r = post("/v1/chat/completions", kChatBody, {{"x-mock-request-id", "nokey"}});
  EXPECT_EQ(waitFinished("nokey").attempt_for_key, 0);
}

// --- quotas --------------------------------------------------------------------------

TEST_F(MockLlmTest, QuotaHeadersInAllStylesAndThe429) {
  const Headers h = {{"x-mock-quota", "2/60000"}, {"x-mock-quota-key", "q1"}};
  const std::regex go_duration(R"(^((\d+h)?\d+m)?\d+(\.\d+)?s$|^\d+ms$)");
  const std::regex rfc3339(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$)");
  for (int i = 0; i < 3; ++i) {
    Headers hi = h;
    hi.emplace_back("x-mock-request-id", "q" + std::to_string(i));
    auto r = post("/v1/chat/completions", kChatBody, hi);
    ASSERT_TRUE(r);
    const std::string remaining = i == 0 ? "1" : "0";
    EXPECT_EQ(r->status, i < 2 ? 200 : 429);
    EXPECT_EQ(r->header("x-ratelimit-limit-requests"), "2");
    EXPECT_EQ(r->header("x-ratelimit-remaining-requests"), remaining);
    ASSERT_TRUE(r->header("x-ratelimit-reset-requests"));
    EXPECT_TRUE(std::regex_match(*r->header("x-ratelimit-reset-requests"), go_duration))
        << *r->header("x-ratelimit-reset-requests");
    EXPECT_EQ(r->header("x-ratelimit-limit"), "2");
    EXPECT_EQ(r->header("x-ratelimit-remaining"), remaining);
    EXPECT_EQ(r->header("x-ratelimit-reset"), "60");
    EXPECT_EQ(r->header("anthropic-ratelimit-requests-limit"), "2");
    EXPECT_EQ(r->header("anthropic-ratelimit-requests-remaining"), remaining);
    ASSERT_TRUE(r->header("anthropic-ratelimit-requests-reset"));
    EXPECT_TRUE(std::regex_match(*r->header("anthropic-ratelimit-requests-reset"), rfc3339));
    EXPECT_EQ(r->header("ratelimit"), "\"default\";r=" + remaining + ";t=60");
    EXPECT_EQ(r->header("ratelimit-policy"), "\"default\";q=2;w=60");
    if (i == 2) {
      EXPECT_EQ(r->header("retry-after"), "60");
      EXPECT_EQ(r->jsonBody()["error"]["code"], "rate_limit_exceeded");
    } else {
      EXPECT_FALSE(r->header("retry-after"));
    }
  }
  EXPECT_EQ(waitFinished("q2").status, 429);  // the 429 is in the ledger
  // Another key has its own quota.
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-quota", "2/60000"}, {"x-mock-quota-key", "other"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("x-ratelimit-remaining"), "1");
}

TEST_F(MockLlmTest, QuotaStyleSelectsHeaderFamilies) {
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-quota", "5/1000"}, {"x-mock-quota-style", "openai"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("x-ratelimit-remaining-requests"), "4");
  EXPECT_FALSE(r->header("x-ratelimit-remaining"));
  EXPECT_FALSE(r->header("anthropic-ratelimit-requests-remaining"));
  EXPECT_FALSE(r->header("ratelimit"));

  r = post("/v1/chat/completions", kChatBody,
           {{"x-mock-quota", "5/1000"}, {"x-mock-quota-style", "ietf"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("ratelimit"), "\"default\";r=3;t=1");
  EXPECT_EQ(r->header("ratelimit-policy"), "\"default\";q=5;w=1");
  EXPECT_FALSE(r->header("x-ratelimit-remaining-requests"));

  r = post("/v1/chat/completions", kChatBody,
           {{"x-mock-quota", "5/1000"}, {"x-mock-quota-style", "generic"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("x-ratelimit-remaining"), "2");
  EXPECT_EQ(r->header("x-ratelimit-reset"), "1");
  EXPECT_FALSE(r->header("ratelimit"));

  r = post("/v1/chat/completions", kChatBody,
           {{"x-mock-quota", "5/1000"}, {"x-mock-quota-style", "anthropic"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("anthropic-ratelimit-requests-remaining"), "1");
  EXPECT_FALSE(r->header("x-ratelimit-remaining"));

  r = post("/v1/chat/completions", kChatBody,
           {{"x-mock-quota", "5/1000"}, {"x-mock-quota-style", "bogus"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
}

TEST_F(MockLlmTest, QuotaWindowRefills) {
  const Headers h = {{"x-mock-quota", "1/50"}, {"x-mock-quota-key", "short"}};
  auto r = post("/v1/chat/completions", kChatBody, h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = post("/v1/chat/completions", kChatBody, h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->header("retry-after"), "1");  // seconds, rounded up
  EXPECT_TRUE(std::regex_match(*r->header("x-ratelimit-reset-requests"), std::regex(R"(^\d+ms$)")));
  std::this_thread::sleep_for(milliseconds(60));  // let the 50 ms window pass
  r = post("/v1/chat/completions", kChatBody, h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("x-ratelimit-remaining-requests"), "0");
}

TEST_F(MockLlmTest, TokenQuotaCountsWhatUsageReportsAndRefusesWhatDoesNotFit) {
  // Each answer's usage: prompt = body bytes / 4 (rounded up), completion = 10.
  const int64_t cost = static_cast<int64_t>(ceilDiv4(kChatBody.size())) + 10;
  const int64_t limit = 2 * cost + cost / 2;  // room for two requests and a half
  const Headers h = {{"x-mock-token-quota", std::to_string(limit) + "/60000"},
                     {"x-mock-quota-key", "t1"},
                     {"x-mock-tokens", "10"}};
  const std::regex rfc3339(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$)");
  for (int i = 0; i < 3; ++i) {
    Headers hi = h;
    hi.emplace_back("x-mock-request-id", "t" + std::to_string(i));
    auto r = post("/v1/chat/completions", kChatBody, hi);
    ASSERT_TRUE(r);
    const std::string remaining = std::to_string(limit - std::min(i + 1, 2) * cost);
    EXPECT_EQ(r->status, i < 2 ? 200 : 429);
    if (i < 2) {
      const json usage = r->jsonBody()["usage"];
      EXPECT_EQ(usage["prompt_tokens"].get<int64_t>() + usage["completion_tokens"].get<int64_t>(),
                cost);
    }
    EXPECT_EQ(r->header("x-ratelimit-limit-tokens"), std::to_string(limit));
    EXPECT_EQ(r->header("x-ratelimit-remaining-tokens"), remaining);
    EXPECT_TRUE(r->header("x-ratelimit-reset-tokens"));
    EXPECT_EQ(r->header("anthropic-ratelimit-tokens-limit"), std::to_string(limit));
    EXPECT_EQ(r->header("anthropic-ratelimit-tokens-remaining"), remaining);
    ASSERT_TRUE(r->header("anthropic-ratelimit-tokens-reset"));
    EXPECT_TRUE(std::regex_match(*r->header("anthropic-ratelimit-tokens-reset"), rfc3339));
    // The generic and IETF fields name the request quota: none here.
    EXPECT_FALSE(r->header("x-ratelimit-remaining"));
    EXPECT_FALSE(r->header("ratelimit"));
    EXPECT_FALSE(r->header("x-ratelimit-remaining-requests"));
    if (i == 2) {
      EXPECT_EQ(r->header("retry-after"), "60");
      EXPECT_EQ(r->jsonBody()["error"]["code"], "rate_limit_exceeded");
    }
  }
  EXPECT_EQ(waitFinished("t2").status, 429);
  // A smaller request still fits what is left.
  const std::string tiny = R"({"model":"m","messages":[]})";
  auto r = post("/v1/chat/completions", tiny,
                {{"x-mock-token-quota", std::to_string(limit) + "/60000"},
                 {"x-mock-quota-key", "t1"},
                 {"x-mock-tokens", "1"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(MockLlmTest, TokenQuotaWithARequestQuotaRefusedByEitherConsumesNeither) {
  const int64_t cost = static_cast<int64_t>(ceilDiv4(kChatBody.size())) + 10;
  const Headers h = {{"x-mock-quota", "5/60000"},
                     {"x-mock-token-quota", std::to_string(cost) + "/60000"},
                     {"x-mock-quota-key", "both"},
                     {"x-mock-quota-style", "openai"},
                     {"x-mock-tokens", "10"}};
  auto r = post("/v1/chat/completions", kChatBody, h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("x-ratelimit-remaining-requests"), "4");
  EXPECT_EQ(r->header("x-ratelimit-remaining-tokens"), "0");
  r = post("/v1/chat/completions", kChatBody, h);  // the tokens do not fit
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->header("retry-after"), "60");
  EXPECT_EQ(r->header("x-ratelimit-remaining-requests"), "4") << "a refusal consumes nothing";
  EXPECT_NE(r->body.find("tokens"), std::string::npos) << r->body;
  r = post("/v1/chat/completions", kChatBody,
           {{"x-mock-token-quota", "0/60000"}, {"x-mock-quota-key", "bad"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  r = post("/v1/chat/completions", kChatBody, {{"x-mock-token-quota", "12"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
}

TEST_F(MockLlmTest, TokenQuotaWindowRefills) {
  const Headers h = {{"x-mock-token-quota", "100/50"},
                     {"x-mock-quota-key", "tshort"},
                     {"x-mock-tokens", "60"},
                     {"x-mock-quota-style", "openai"}};
  auto r = post("/v1/chat/completions", kChatBody, h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = post("/v1/chat/completions", kChatBody, h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->header("retry-after"), "1");
  std::this_thread::sleep_for(milliseconds(60));  // let the 50 ms window pass
  r = post("/v1/chat/completions", kChatBody, h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// --- connection faults ----------------------------------------------------------------

TEST_F(MockLlmTest, ResetAfterTokensResetsTheConnection) {
  Client c(port());
  c.send(request(
      "POST", "/v1/chat/completions",
      {{"x-mock-tokens", "10"}, {"x-mock-reset-after-tokens", "3"}, {"x-mock-request-id", "rst"}},
      kChatStream));
  EXPECT_FALSE(c.readToEnd()) << "expected ECONNRESET, got a clean close";
  EXPECT_TRUE(c.reset());
  EXPECT_NE(c.raw().find("tok2 "), std::string::npos);
  EXPECT_EQ(c.raw().find("tok3 "), std::string::npos);
  const LedgerEntry e = waitFinished("rst");
  EXPECT_EQ(e.tokens_emitted, 3);
  EXPECT_FALSE(e.completed);
  EXPECT_FALSE(e.peer_closed);
  EXPECT_FALSE(e.usage_reported);
  EXPECT_TRUE(e.mock_reset);
  EXPECT_EQ(e.mock_rst_error_code, 0u);  // a TCP RST has no HTTP/2 error code
  EXPECT_EQ(e.protocol, "http/1.1");
  EXPECT_EQ(e.stream_id, 0);
  EXPECT_FALSE(e.client_reset);
}

TEST_F(MockLlmTest, ResetBeforeAnyByteWhenNotStreaming) {
  Client c(port());
  c.send(request("POST", "/v1/chat/completions", {{"x-mock-reset-after-tokens", "0"}}, kChatBody));
  EXPECT_FALSE(c.readToEnd());
  EXPECT_TRUE(c.raw().empty());
}

TEST_F(MockLlmTest, PeerCloseMidStreamIsRecorded) {
  Client c(port());
  c.send(request(
      "POST", "/v1/chat/completions",
      {{"x-mock-tokens", "1000"}, {"x-mock-token-interval-ms", "5"}, {"x-mock-request-id", "gone"}},
      kChatStream));
  ASSERT_TRUE(c.readBodyUntil(
      [](const std::string& body) { return body.find("tok1 ") != std::string::npos; }));
  const int64_t closed_at = nowMicros();
  c.closeNow();
  const LedgerEntry e = waitEntry("gone", [](const LedgerEntry& e) { return e.peer_closed; });
  EXPECT_FALSE(e.completed);
  EXPECT_GE(e.peer_closed_us, closed_at);
  EXPECT_LT(e.peer_closed_us - closed_at, 1'000'000) << "close detected late";
  EXPECT_EQ(e.finished_us, e.peer_closed_us);
  EXPECT_GE(e.tokens_emitted, 2);
  EXPECT_LT(e.tokens_emitted, 1000);
  EXPECT_FALSE(e.usage_reported);
  // The stream stopped: nothing more is emitted after the close.
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(server_->ledger().find("gone").at(0).tokens_emitted, e.tokens_emitted);
}

TEST_F(MockLlmTest, PeerCloseWhileStallingBeforeHeadersIsRecorded) {
  Client c(port());
  c.send(request("POST", "/v1/chat/completions",
                 {{"x-mock-stall-before-headers-ms", "-1"}, {"x-mock-request-id", "stall"}},
                 kChatStream));
  // The request is in the ledger (with its status decided) before anything is sent.
  const LedgerEntry before = waitEntry("stall", [](const LedgerEntry& e) { return e.status != 0; });
  EXPECT_EQ(before.headers_sent_us, 0);
  c.closeNow();
  const LedgerEntry e = waitEntry("stall", [](const LedgerEntry& e) { return e.peer_closed; });
  EXPECT_EQ(e.headers_sent_us, 0);
  EXPECT_GT(e.peer_closed_us, 0);
  EXPECT_EQ(e.tokens_emitted, 0);
}

TEST_F(MockLlmTest, PeerCloseDuringMidStreamStallForever) {
  Client c(port());
  c.send(request("POST", "/v1/messages",
                 {{"x-mock-tokens", "5"},
                  {"x-mock-stall-after-tokens", "2"},
                  {"x-mock-stall-ms", "-1"},
                  {"x-mock-request-id", "stall2"}},
                 R"({"model":"c","stream":true})"));
  ASSERT_TRUE(c.readBodyUntil(
      [](const std::string& body) { return body.find("tok1 ") != std::string::npos; }));
  waitEntry("stall2", [](const LedgerEntry& e) { return e.tokens_emitted == 2; });
  c.closeNow();
  const LedgerEntry e = waitEntry("stall2", [](const LedgerEntry& e) { return e.peer_closed; });
  EXPECT_EQ(e.tokens_emitted, 2);
  EXPECT_FALSE(e.usage_reported);
}

TEST_F(MockLlmTest, StallBeforeHeadersDelaysTheAnswer) {
  const auto start = std::chrono::steady_clock::now();
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-stall-before-headers-ms", "100"}, {"x-mock-request-id", "slow"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(100));
  const LedgerEntry e = waitFinished("slow");
  EXPECT_GE(e.headers_sent_us - e.received_us, 100'000);
}

// Lower bounds only, measured from points known to lie before the timers were
// armed (request sent / received) to points after they fired (answer read /
// finished), so a loaded machine cannot make them flaky.
TEST_F(MockLlmTest, StallAfterTokensAndTokenIntervalShapeTheStream) {
  auto start = std::chrono::steady_clock::now();
  auto r = post("/v1/chat/completions", kChatStream,
                {{"x-mock-tokens", "4"},
                 {"x-mock-stall-after-tokens", "2"},
                 {"x-mock-stall-ms", "80"},
                 {"x-mock-request-id", "shape1"}});
  ASSERT_TRUE(r);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(80));
  EXPECT_EQ(parseSse(r->body).size(), 4u + 2u);
  LedgerEntry e = waitEntry("shape1", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_EQ(e.tokens_emitted, 4);
  EXPECT_GE(e.last_token_us - e.received_us, 80'000);

  start = std::chrono::steady_clock::now();
  r = post("/v1/chat/completions", kChatStream,
           {{"x-mock-tokens", "5"},
            {"x-mock-token-interval-ms", "20"},
            {"x-mock-request-id", "shape2"}});
  ASSERT_TRUE(r);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(4 * 20));
  e = waitEntry("shape2", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_EQ(e.tokens_emitted, 5);
  EXPECT_GE(e.last_token_us - e.received_us, 4 * 20'000);
}

TEST_F(MockLlmTest, CloseAfterHeaders) {
  Client c(port());
  c.send(request("POST", "/v1/chat/completions",
                 {{"x-mock-close-after-headers", "1"}, {"x-mock-request-id", "cah"}}, kChatStream));
  EXPECT_FALSE(c.read());
  EXPECT_TRUE(c.headersSeen());
  EXPECT_EQ(c.raw().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_NE(c.raw().find("\r\n\r\n"), std::string::npos);
  const LedgerEntry e = waitFinished("cah");
  EXPECT_GT(e.headers_sent_us, 0);
  EXPECT_FALSE(e.completed);
  EXPECT_EQ(e.tokens_emitted, 0);
}

TEST_F(MockLlmTest, GarbageIsNotHttp) {
  Client c(port());
  c.send(request("POST", "/v1/chat/completions", {{"x-mock-garbage", "1"}}, kChatBody));
  EXPECT_FALSE(c.read());
  c.readToEnd();
  EXPECT_FALSE(c.raw().empty());
  EXPECT_NE(c.raw().rfind("HTTP/", 0), 0u);
}

// --- HTTP/1.1 behaviour ----------------------------------------------------------------

TEST_F(MockLlmTest, KeepAliveReusesOneConnection) {
  Client a(port());
  for (const char* id : {"ka1", "ka2"}) {
    auto r = a.roundTrip(
        request("POST", "/v1/chat/completions", {{"x-mock-request-id", id}}, kChatBody));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  Client b(port());
  ASSERT_TRUE(b.roundTrip(
      request("POST", "/v1/chat/completions", {{"x-mock-request-id", "ka3"}}, kChatBody)));
  const LedgerEntry e1 = waitFinished("ka1");
  const LedgerEntry e2 = waitFinished("ka2");
  const LedgerEntry e3 = waitFinished("ka3");
  EXPECT_EQ(e1.connection_id, e2.connection_id);
  EXPECT_NE(e1.connection_id, e3.connection_id);
  EXPECT_NE(e1.connection_id, 0u);
}

TEST_F(MockLlmTest, PipelinedRequestsAnsweredInOrder) {
  Client c(port());
  c.send(
      request(
          "POST", "/v1/chat/completions",
          {{"x-mock-request-id", "p1"}, {"x-mock-tokens", "5"}, {"x-mock-token-interval-ms", "5"}},
          kChatStream) +
      request("GET", "/echo/second", {{"x-mock-request-id", "p2"}}, "") +
      request("POST", "/v1/messages", {{"x-mock-request-id", "p3"}}, R"({"model":"c"})"));
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) {
    auto r = c.read();
    ASSERT_TRUE(r) << "response " << i;
    EXPECT_EQ(r->status, 200);
    order.push_back(r->header("x-request-id").value_or("?"));
    if (i == 0) {
      EXPECT_NE(r->body.find("[DONE]"), std::string::npos);
    } else if (i == 1) {
      EXPECT_EQ(r->jsonBody()["path"], "/echo/second");
    } else {
      EXPECT_EQ(r->jsonBody()["type"], "message");
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"p1", "p2", "p3"}));
  const LedgerEntry e1 = waitFinished("p1");
  const LedgerEntry e2 = waitFinished("p2");
  EXPECT_EQ(e1.connection_id, e2.connection_id);
  EXPECT_GE(e2.headers_sent_us, e1.finished_us);
  const auto all = server_->ledger().snapshot();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, "p1");  // arrival order
  EXPECT_EQ(all[2].id, "p3");
}

TEST_F(MockLlmTest, ChunkedRequestBodyIsAccepted) {
  Client c(port());
  c.send(
      "POST /echo HTTP/1.1\r\nHost: mock\r\nTransfer-Encoding: chunked\r\n\r\n"
      "6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n");
  auto r = c.read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->jsonBody()["body"], "hello world");
}

TEST_F(MockLlmTest, ChunkedRequestBodyCountsDecodedBytes) {
  Client c(port());
  const std::string body = R"({"model":"m","messages":[]})";
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", body.size());
  c.send(std::string("POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\n"
                     "x-mock-request-id: chunked\r\nTransfer-Encoding: chunked\r\n\r\n") +
         size + "\r\n" + body + "\r\n0\r\n\r\n");
  auto r = c.read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->jsonBody()["usage"]["prompt_tokens"], ceilDiv4(body.size()));
  EXPECT_EQ(waitFinished("chunked").input_tokens, ceilDiv4(body.size()));
}

TEST_F(MockLlmTest, EchoReportsMethodPathHeadersAndBody) {
  Client c(port());
  auto r = c.roundTrip(request("PUT", "/echo/x?y=1",
                               {{"X-Multi", "a"}, {"x-multi", "b"}, {"Authorization", "Bearer k"}},
                               "payload"));
  ASSERT_TRUE(r);
  const json j = r->jsonBody();
  EXPECT_EQ(j["method"], "PUT");
  EXPECT_EQ(j["path"], "/echo/x?y=1");
  EXPECT_EQ(j["headers"]["authorization"], "Bearer k");
  EXPECT_EQ(j["headers"]["x-multi"], json::array({"a", "b"}));
  EXPECT_EQ(j["headers"]["host"], "mock");
  EXPECT_EQ(j["body"], "payload");
}

TEST_F(MockLlmTest, UnknownPathIs404InOpenAiShape) {
  auto r = post("/v1/nope", "{}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  const json j = r->jsonBody();
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"].contains("code"));
}

TEST_F(MockLlmTest, ModelsList) {
  Client c(port());
  auto r = c.roundTrip(request("GET", "/v1/models", {}, ""));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json j = r->jsonBody();
  EXPECT_EQ(j["object"], "list");
  ASSERT_FALSE(j["data"].empty());
  EXPECT_EQ(j["data"][0]["object"], "model");
}

TEST_F(MockLlmTest, InvalidJsonIs400) {
  auto r = post("/v1/chat/completions", "{nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
}

TEST_F(MockLlmTest, MalformedRequestGets400AndClose) {
  Client c(port());
  c.send("THIS IS NOT HTTP\r\n\r\n");
  auto r = c.read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.readToEnd());
}

TEST_F(MockLlmTest, UpgradeRequestIsAnsweredInHttp11) {
  Client c(port());
  auto r = c.roundTrip(request("GET", "/echo/up",
                               {{"Connection", "Upgrade, HTTP2-Settings"},
                                {"Upgrade", "h2c"},
                                {"HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA"}},
                               ""));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->jsonBody()["path"], "/echo/up");
  // The connection still serves HTTP/1.1 afterwards.
  r = c.roundTrip(request("GET", "/v1/models", {}, ""));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(MockLlmTest, LedgerEndpoints) {
  Client c(port());
  ASSERT_TRUE(c.roundTrip(
      request("POST", "/v1/chat/completions",
              {{"x-mock-request-id", "L1"}, {"x-mock-fail-times", "1"}, {"x-mock-fail-key", "lk"}},
              kChatBody)));
  ASSERT_TRUE(c.roundTrip(
      request("POST", "/v1/chat/completions", {{"x-mock-request-id", "L2"}}, kChatBody)));
  auto r = c.roundTrip(request("GET", "/_health", {}, ""));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);

  // On the same connection the previous answers are complete in the ledger.
  r = c.roundTrip(request("GET", "/_ledger", {}, ""));
  ASSERT_TRUE(r);
  json j = r->jsonBody();
  ASSERT_EQ(j["requests"].size(), 2u);  // control endpoints are not recorded
  const json& first = j["requests"][0];
  EXPECT_EQ(first["id"], "L1");
  EXPECT_EQ(first["status"], 503);
  EXPECT_EQ(first["attempt_for_key"], 1);
  EXPECT_EQ(j["requests"][1]["completed"], true);
  for (const char* field : {"id", "method", "path", "model", "stream", "status", "attempt_for_key",
                            "tokens_emitted", "usage_reported", "input_tokens", "completed",
                            "peer_closed", "received_us", "headers_sent_us", "last_token_us",
                            "peer_closed_us", "finished_us", "connection_id", "request_headers"}) {
    EXPECT_TRUE(first.contains(field)) << field;
  }
  EXPECT_EQ(first["request_headers"]["x-mock-fail-key"], "lk");

  r = c.roundTrip(request("GET", "/_ledger?id=L2", {}, ""));
  ASSERT_TRUE(r);
  j = r->jsonBody();
  ASSERT_EQ(j["requests"].size(), 1u);
  EXPECT_EQ(j["requests"][0]["id"], "L2");

  r = c.roundTrip(request("DELETE", "/_ledger", {}, ""));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(server_->ledger().snapshot().empty());
  // The fail-key counter was reset too: the key fails again.
  r = c.roundTrip(request("POST", "/v1/chat/completions",
                          {{"x-mock-fail-times", "1"}, {"x-mock-fail-key", "lk"}}, kChatBody));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
}

TEST_F(MockLlmTest, BadFaultHeaderIs400) {
  auto r = post("/v1/chat/completions", kChatBody, {{"x-mock-tokens", "many"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->jsonBody()["error"]["message"].get<std::string>().find("x-mock-tokens"),
            std::string::npos);
}

TEST_F(MockLlmTest, ManyThreadsShareOneLedger) {
  ServerOptions options;
  options.threads = 4;
  startServer(options);
  constexpr int kConnections = 16, kPerConnection = 5;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < kConnections; ++i) {
    clients.emplace_back([&, i] {
      Client c(port());
      for (int k = 0; k < kPerConnection; ++k) {
        auto r = c.roundTrip(
            request("POST", "/v1/chat/completions",
                    {{"x-mock-request-id", "t" + std::to_string(i) + "-" + std::to_string(k)},
                     {"x-mock-fail-times", "3"},
                     {"x-mock-fail-key", "shared"}},
                    kChatStreamUsage));
        if (r && (r->status == 200 || r->status == 503)) ++ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kConnections * kPerConnection);
  ASSERT_TRUE(server_->ledger().waitUntil(
      [](const std::vector<LedgerEntry>& all) {
        if (all.size() != kConnections * kPerConnection) return false;
        for (const auto& e : all) {
          if (e.finished_us == 0) return false;
        }
        return true;
      },
      kWait));
  const auto all = server_->ledger().snapshot();
  std::set<uint64_t> connections;
  std::set<int64_t> attempts;
  int failures = 0;
  for (const auto& e : all) {
    connections.insert(e.connection_id);
    attempts.insert(e.attempt_for_key);
    if (e.status == 503) ++failures;
  }
  EXPECT_EQ(connections.size(), static_cast<size_t>(kConnections));
  EXPECT_EQ(attempts.size(), all.size());  // every attempt number handed out once
  EXPECT_EQ(failures, 3);
}

// --- TLS -----------------------------------------------------------------------------

using test::writeSelfSignedCert;

TEST_F(MockLlmTest, ServesHttpsWithTlsCertAndKey) {
  const std::string dir = ::testing::TempDir();
  const std::string cert = dir + "/" + test::uniqueName("mock-llm-test-cert.pem");
  const std::string key = dir + "/" + test::uniqueName("mock-llm-test-key.pem");
  ASSERT_TRUE(writeSelfSignedCert(cert, key));
  ServerOptions options;
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  startServer(options);
  ASSERT_TRUE(server_->tls());

  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  ASSERT_EQ(SSL_connect(ssl), 1);
  const std::string req = request("POST", "/v1/chat/completions",
                                  {{"x-mock-tokens", "2"}, {"connection", "close"}}, kChatBody);
  ASSERT_EQ(SSL_write(ssl, req.data(), static_cast<int>(req.size())), static_cast<int>(req.size()));
  std::string got;
  char buf[4096];
  int n;
  while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("tok0 tok1 "), std::string::npos);
}

// --- pure helpers ----------------------------------------------------------------------

TEST(MockLlmFormat, GoDurations) {
  EXPECT_EQ(formatGoDuration(milliseconds(0)), "0s");
  EXPECT_EQ(formatGoDuration(milliseconds(20)), "20ms");
  EXPECT_EQ(formatGoDuration(milliseconds(1000)), "1s");
  EXPECT_EQ(formatGoDuration(milliseconds(1500)), "1.5s");
  EXPECT_EQ(formatGoDuration(milliseconds(8640)), "8.64s");
  EXPECT_EQ(formatGoDuration(milliseconds(360000)), "6m0s");
  EXPECT_EQ(formatGoDuration(milliseconds(3723500)), "1h2m3.5s");
  EXPECT_EQ(formatGoDuration(milliseconds(3600000)), "1h0m0s");
}

TEST(MockLlmFormat, QuotaStylesAndRfc3339) {
  EXPECT_EQ(parseQuotaStyles("all"), static_cast<unsigned>(kQuotaAll));
  EXPECT_EQ(parseQuotaStyles("openai,ietf"), static_cast<unsigned>(kQuotaOpenAi | kQuotaIetf));
  EXPECT_FALSE(parseQuotaStyles("nope"));
  EXPECT_FALSE(parseQuotaStyles(""));
  EXPECT_EQ(formatRfc3339Utc(std::chrono::system_clock::time_point(std::chrono::seconds(0))),
            "1970-01-01T00:00:00Z");
}

TEST(MockLlmFormat, ListenAddress) {
  std::string host;
  uint16_t port = 1;
  EXPECT_TRUE(parseListenAddress("127.0.0.1:0", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 0);
  EXPECT_TRUE(parseListenAddress("[::1]:8080", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 8080);
  EXPECT_FALSE(parseListenAddress("127.0.0.1", &host, &port));
  EXPECT_FALSE(parseListenAddress("127.0.0.1:99999", &host, &port));
}

// --- --schedule: server-side faults by time ---------------------------------------

FaultSchedule mustParse(std::string_view text) {
  std::string error;
  auto schedule = FaultSchedule::parse(text, &error);
  EXPECT_TRUE(schedule) << error;
  return schedule ? *schedule : FaultSchedule{};
}

TEST(MockLlmSchedule, WindowsApplyFromTheirStartUntilTheirEnd) {
  const FaultSchedule s = mustParse(
      "# outage, then a 429 burst, then slow\n"
      "0s 2s status 503\n"
      "2s   4s  status 429 retry-after=1   # burst\n"
      "\n"
      "4500ms 6s slow 300ms\n"
      "6s 7s reset\n"
      "7s 8s hang\n");
  ASSERT_EQ(s.windows().size(), 5u);
  ASSERT_NE(s.activeAt(milliseconds(0)), nullptr);
  EXPECT_EQ(s.activeAt(milliseconds(0))->describe(), "status 503");
  EXPECT_EQ(s.activeAt(milliseconds(1999))->describe(), "status 503");
  EXPECT_EQ(s.activeAt(milliseconds(2000))->describe(), "status 429 retry-after=1");
  EXPECT_EQ(s.activeAt(milliseconds(4200)), nullptr);  // a gap: healthy
  EXPECT_EQ(s.activeAt(milliseconds(4500))->describe(), "slow 300ms");
  EXPECT_EQ(s.activeAt(milliseconds(6000))->kind, ScheduledFault::Kind::kReset);
  EXPECT_EQ(s.activeAt(milliseconds(7999))->kind, ScheduledFault::Kind::kHang);
  EXPECT_EQ(s.activeAt(milliseconds(8000)), nullptr);  // runs once
  EXPECT_EQ(s.activeAt(milliseconds(100000)), nullptr);
}

TEST(MockLlmSchedule, RepeatLoopsThePeriod) {
  const FaultSchedule s = mustParse("1s 2s status 502\nrepeat 3s\n");
  EXPECT_EQ(s.period(), milliseconds(3000));
  EXPECT_EQ(s.activeAt(milliseconds(500)), nullptr);
  EXPECT_NE(s.activeAt(milliseconds(1500)), nullptr);
  EXPECT_EQ(s.activeAt(milliseconds(2500)), nullptr);
  ASSERT_NE(s.activeAt(milliseconds(4500)), nullptr);  // second period
  EXPECT_EQ(s.activeAt(milliseconds(4500))->status, 502);
}

TEST(MockLlmSchedule, ErrorsNameTheLine) {
  const auto error_of = [](std::string_view text) {
    std::string error;
    EXPECT_FALSE(FaultSchedule::parse(text, &error)) << text;
    return error;
  };
  EXPECT_EQ(error_of("0s 1s status 503\n2s 1s status 503\n"),
            "line 2: the window ends before it starts");
  EXPECT_EQ(error_of("0s 1s status 99\n"), "line 1: 'status' needs a status code 200-599");
  EXPECT_EQ(error_of("0s 1s explode\n"),
            "line 1: unknown fault 'explode' (want status, slow, reset or hang)");
  EXPECT_EQ(error_of("0 1s reset\n"), "line 1: bad duration (want e.g. 250ms, 2s, 1.5s, 3m, 1h)");
  EXPECT_EQ(error_of("0s 1s slow\n"), "line 1: 'slow' needs one duration, e.g. slow 300ms");
  EXPECT_EQ(error_of("0s 1s status 429 after=2\n"),
            "line 1: unknown option 'after=2' (want retry-after=SECONDS)");
  EXPECT_EQ(error_of("0s 5s reset\nrepeat 2s\n"), "a window ends after the 'repeat' period");
  EXPECT_EQ(parseScheduleDuration("1.5s"), milliseconds(1500));
  EXPECT_EQ(parseScheduleDuration("2m"), milliseconds(120000));
  EXPECT_FALSE(parseScheduleDuration("-1s"));
}

TEST_F(MockLlmTest, ScheduledOutageFailsEveryRequestWhateverItsHeaders) {
  ServerOptions options;
  options.schedule = mustParse("0s 1h status 503\n");
  startServer(std::move(options));
  // The client asks for success explicitly: the outage wins.
  auto r = post("/v1/chat/completions", kChatBody,
                {{"x-mock-status", "200"}, {"x-mock-request-id", "out1"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  const LedgerEntry e = waitFinished("out1");
  EXPECT_EQ(e.status, 503);
  EXPECT_EQ(e.scheduled_fault, "status 503");
  // The client's own headers are recorded as sent, not as the schedule shaped them.
  for (const auto& [name, value] : e.request_headers) EXPECT_NE(value, "503") << name;

  Client c(port());
  auto state = c.roundTrip(request("GET", "/_schedule", {}, ""));
  ASSERT_TRUE(state);
  EXPECT_EQ(state->status, 200);
  EXPECT_EQ(state->jsonBody()["active"], "status 503");
  EXPECT_EQ(state->jsonBody()["scheduled"], true);
}

TEST_F(MockLlmTest, ScheduledBurstSends429WithRetryAfterAndHealthyGapsAnswer) {
  ServerOptions options;
  // The window starts an hour in: until then the provider is healthy.
  options.schedule = mustParse("1h 2h status 429 retry-after=7\n");
  startServer(std::move(options));
  auto ok = post("/v1/chat/completions", kChatBody, {{"x-mock-request-id", "gap"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(waitFinished("gap").scheduled_fault, "");
}

TEST_F(MockLlmTest, ScheduledBurstCarriesRetryAfter) {
  ServerOptions options;
  options.schedule = mustParse("0s 1h status 429 retry-after=7\n");
  startServer(std::move(options));
  auto r = post("/v1/chat/completions", kChatBody);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->header("retry-after"), "7");
}

TEST_F(MockLlmTest, ScheduledResetBreaksTheAnswerBeforeAnyByte) {
  ServerOptions options;
  options.schedule = mustParse("0s 1h reset\n");
  startServer(std::move(options));
  auto r = post("/v1/chat/completions", kChatBody, {{"x-mock-request-id", "rst"}});
  EXPECT_FALSE(r);  // no response: the connection was reset
  EXPECT_TRUE(waitEntry("rst", [](const LedgerEntry& e) { return e.mock_reset; }).mock_reset);
}

TEST(MockLlmSchedule, TwoServersFailIndependently) {
  ServerOptions down;
  down.schedule = mustParse("0s 1h status 503\n");
  Server primary(std::move(down));
  Server fallback(ServerOptions{});
  std::string error;
  ASSERT_TRUE(primary.start(&error)) << error;
  ASSERT_TRUE(fallback.start(&error)) << error;
  Client a(primary.port());
  Client b(fallback.port());
  auto ra = a.roundTrip(request("POST", "/v1/chat/completions", {}, kChatBody));
  auto rb = b.roundTrip(request("POST", "/v1/chat/completions", {}, kChatBody));
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->status, 503);
  EXPECT_EQ(rb->status, 200);
  EXPECT_EQ(primary.ledger().snapshot().size(), 1u);
  EXPECT_EQ(fallback.ledger().snapshot().size(), 1u);
}

TEST(MockLlmFormat, TokensAreDeterministic) {
  EXPECT_EQ(tokenText(0), "tok0 ");
  EXPECT_EQ(fullText(3), "tok0 tok1 tok2 ");
}

}  // namespace
}  // namespace mockllm
