// HTTP/2 tests for tools/mock-llm: a real mockllm::Server on port 0 in this
// process, driven by a tiny nghttp2 client (h2_test_client.h) over h2c with
// prior knowledge or TLS with ALPN, and by the real `curl` and `nghttp` CLIs.
// The ledger is read through Server::ledger().waitUntil(): entries are
// finalised on the server's loop, possibly just after the client saw the end.

#include <gtest/gtest.h>
#include <http_parser.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/mock_llm/h2_test_client.h"
#include "tests/unit/mock_llm/test_cert.h"
#include "tools/mock-llm/protocol_detector.h"
#include "tools/mock-llm/server.h"
#include "tools/mock-llm/wire_format.h"

namespace mockllm {
namespace {

using nlohmann::json;
using test::H2Client;
using test::H2Stream;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr std::chrono::milliseconds kWait{10000};

const std::string kChatStream = R"({"model":"gpt-test","stream":true,"messages":[]})";
const std::string kChatStreamUsage =
    R"({"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[]})";
const std::string kMessagesStream =
    R"({"model":"claude-test","stream":true,"max_tokens":100,"messages":[]})";
const std::string kMessagesJson = R"({"model":"claude-test","max_tokens":100,"messages":[]})";

// The concatenated `delta.content` of a chat SSE body, and whether it ended with [DONE].
struct ChatText {
  std::string text;
  bool done = false;
};

ChatText chatText(const std::string& body) {
  ChatText out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string data = body.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (data == "[DONE]") {
      out.done = true;
      continue;
    }
    const json j = json::parse(data, nullptr, false);
    if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) continue;
    const json& delta = j["choices"][0]["delta"];
    if (delta.contains("content")) out.text += delta["content"].get<std::string>();
  }
  return out;
}

// --- a one-shot HTTP/1.1 exchange (Connection: close), body de-chunked ---------

struct Http1Result {
  int status = 0;
  std::string body;
};

Http1Result http1Exchange(uint16_t port, const std::string& method, const std::string& path,
                          const Headers& headers, const std::string& body) {
  std::string raw = method + " " + path + " HTTP/1.1\r\nHost: mock\r\nConnection: close\r\n";
  for (const auto& [n, v] : headers) raw += n + ": " + v + "\r\n";
  raw += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  Http1Result result;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    ::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
    http_parser parser;
    http_parser_init(&parser, HTTP_RESPONSE);
    parser.data = &result;
    http_parser_settings settings;
    http_parser_settings_init(&settings);
    settings.on_headers_complete = [](http_parser* p) {
      static_cast<Http1Result*>(p->data)->status = static_cast<int>(p->status_code);
      return 0;
    };
    settings.on_body = [](http_parser* p, const char* at, size_t len) {
      static_cast<Http1Result*>(p->data)->body.append(at, len);
      return 0;
    };
    char buf[16384];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
      http_parser_execute(&parser, &settings, buf, static_cast<size_t>(n));
    }
    http_parser_execute(&parser, &settings, buf, 0);
  }
  ::close(fd);
  return result;
}

// The output of a shell command (stdout and stderr).
std::string runCommand(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  ::pclose(pipe);
  return out;
}

H2Client::Options tlsClient(std::vector<std::string> alpn = {"h2", "http/1.1"}) {
  H2Client::Options options;
  options.tls = true;
  options.alpn = std::move(alpn);
  return options;
}

// A client whose receive windows open only when the test says so.
H2Client::Options windowedClient(uint32_t window) {
  H2Client::Options options;
  options.initial_window = window;
  options.manual_window = true;
  return options;
}

bool haveCommand(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

// --- fixture ---------------------------------------------------------------------

class MockLlmH2Test : public ::testing::Test {
 protected:
  void SetUp() override { startServer(ServerOptions{}); }

  void startServer(ServerOptions options) {
    server_.reset();
    server_ = std::make_unique<Server>(std::move(options));
    std::string error;
    ASSERT_TRUE(server_->start(&error)) << error;
    ASSERT_NE(server_->port(), 0);
  }

  // Serves HTTPS with a throwaway self-signed certificate.
  void startTlsServer(bool http2) {
    const std::string dir = ::testing::TempDir();
    const std::string cert = dir + "/" + test::uniqueName("mock-llm-h2-cert.pem");
    const std::string key = dir + "/" + test::uniqueName("mock-llm-h2-key.pem");
    ASSERT_TRUE(test::writeSelfSignedCert(cert, key));
    ServerOptions options;
    options.tls_cert_file = cert;
    options.tls_key_file = key;
    options.http2 = http2;
    startServer(options);
    ASSERT_TRUE(server_->tls());
  }

  uint16_t port() const { return server_->port(); }

  // Every ledger entry once `pred` holds for the whole ledger (fails on timeout).
  std::vector<LedgerEntry> waitLedger(
      const std::function<bool(const std::vector<LedgerEntry>&)>& pred) {
    std::vector<LedgerEntry> seen;
    const bool ok = server_->ledger().waitUntil(
        [&](const std::vector<LedgerEntry>& all) {
          seen = all;
          return pred(all);
        },
        kWait);
    EXPECT_TRUE(ok) << "the ledger never reached the expected state";
    return seen;
  }

  // The entry with `id` once `pred` holds for it.
  LedgerEntry waitEntry(const std::string& id,
                        const std::function<bool(const LedgerEntry&)>& pred) {
    LedgerEntry found;
    waitLedger([&](const std::vector<LedgerEntry>& all) {
      for (const auto& e : all) {
        if (e.id == id && pred(e)) {
          found = e;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  LedgerEntry waitFinished(const std::string& id) {
    return waitEntry(id, [](const LedgerEntry& e) { return e.finished_us != 0; });
  }

  std::unique_ptr<Server> server_;
};

// --- cleartext h2c with prior knowledge ---------------------------------------------

TEST(MockLlmH2Preface, FirstBytesDecideTheProtocol) {
  EXPECT_EQ(matchHttp2Preface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), PrefaceMatch::kHttp2);
  EXPECT_EQ(matchHttp2Preface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04"),
            PrefaceMatch::kHttp2);
  EXPECT_EQ(matchHttp2Preface("PRI * HTTP/2"), PrefaceMatch::kNeedMore);
  EXPECT_EQ(matchHttp2Preface("P"), PrefaceMatch::kNeedMore);
  EXPECT_EQ(matchHttp2Preface("POST /v1/chat/completions HTTP/1.1\r\n"), PrefaceMatch::kHttp1);
  EXPECT_EQ(matchHttp2Preface("PRI * HTTP/1.1\r\n"), PrefaceMatch::kHttp1);
}

TEST_F(MockLlmH2Test, H2cPriorKnowledgeStreamsChatSse) {
  H2Client client(port());
  ASSERT_TRUE(client.connected());
  const int32_t id =
      client.submit("POST", "/v1/chat/completions",
                    {{"x-mock-tokens", "3"}, {"x-mock-request-id", "h2-sse"}}, kChatStreamUsage);
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(client.runUntilClosed({id}));
  const H2Stream& s = client.stream(id);
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.close_error, static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  EXPECT_EQ(s.header("content-type"), "text/event-stream; charset=utf-8");
  EXPECT_EQ(s.header("x-request-id"), "h2-sse");
  // No HTTP/1.1 framing headers on HTTP/2.
  EXPECT_FALSE(s.header("transfer-encoding"));
  EXPECT_FALSE(s.header("connection"));
  const ChatText text = chatText(s.body);
  EXPECT_EQ(text.text, fullText(3));
  EXPECT_TRUE(text.done);
  EXPECT_NE(s.body.find("\"usage\":{"), std::string::npos);
  // Every SSE event in its own DATA frame: 3 tokens, the stop chunk, usage, [DONE].
  EXPECT_EQ(s.data_frames, 6);

  const LedgerEntry e = waitEntry("h2-sse", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_EQ(e.protocol, "h2");
  EXPECT_EQ(e.stream_id, 1);
  EXPECT_EQ(e.status, 200);
  EXPECT_TRUE(e.stream);
  EXPECT_EQ(e.tokens_emitted, 3);
  EXPECT_TRUE(e.usage_reported);
  EXPECT_FALSE(e.peer_closed);
  EXPECT_FALSE(e.client_reset);
  EXPECT_FALSE(e.mock_reset);
  EXPECT_FALSE(e.refused);
  EXPECT_GT(e.headers_sent_us, 0);
  EXPECT_GE(e.last_token_us, e.headers_sent_us);
  // :authority shows up as host, like an HTTP/1.1 request's Host.
  ASSERT_FALSE(e.request_headers.empty());
  EXPECT_EQ(e.request_headers.front().first, "host");
  EXPECT_EQ(e.request_headers.front().second, "127.0.0.1:" + std::to_string(port()));

  // The control endpoints answer over h2 too, with the new ledger fields.
  const int32_t ledger_id = client.submit("GET", "/_ledger?id=h2-sse");
  ASSERT_TRUE(client.runUntilClosed({ledger_id}));
  const json ledger = json::parse(client.stream(ledger_id).body);
  ASSERT_EQ(ledger["requests"].size(), 1u);
  const json& entry = ledger["requests"][0];
  EXPECT_EQ(entry["protocol"], "h2");
  EXPECT_EQ(entry["stream_id"], 1);
  EXPECT_EQ(entry["client_reset"], false);
  EXPECT_EQ(entry["rst_error_code"], 0);
  EXPECT_EQ(entry["mock_reset"], false);
  EXPECT_EQ(entry["mock_rst_error_code"], 0);
  EXPECT_EQ(entry["refused"], false);
  EXPECT_EQ(entry["completed"], true);
}

TEST_F(MockLlmH2Test, SameBytesAsHttp11OnTheSamePort) {
  // Anthropic's formats carry no timestamps: the bodies must match byte for byte.
  const Headers h1_headers = {{"x-mock-tokens", "4"}, {"x-mock-request-id", "same"}};
  const Http1Result h1_stream =
      http1Exchange(port(), "POST", "/v1/messages", h1_headers, kMessagesStream);
  const Http1Result h1_json =
      http1Exchange(port(), "POST", "/v1/messages", h1_headers, kMessagesJson);
  ASSERT_EQ(h1_stream.status, 200);
  ASSERT_EQ(h1_json.status, 200);

  H2Client client(port());
  const int32_t a = client.submit("POST", "/v1/messages", h1_headers, kMessagesStream);
  const int32_t b = client.submit("POST", "/v1/messages", h1_headers, kMessagesJson);
  ASSERT_TRUE(client.runUntilClosed({a, b}));
  EXPECT_EQ(client.stream(a).body, h1_stream.body);
  EXPECT_EQ(client.stream(b).body, h1_json.body);
  EXPECT_EQ(client.stream(b).header("content-length"), std::to_string(h1_json.body.size()));
  EXPECT_EQ(client.stream(a).header("request-id"), "same");

  const auto all = waitLedger([](const std::vector<LedgerEntry>& all) {
    return all.size() == 4 &&
           std::all_of(all.begin(), all.end(), [](const LedgerEntry& e) { return e.completed; });
  });
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].protocol, "http/1.1");
  EXPECT_EQ(all[0].stream_id, 0);
  EXPECT_EQ(all[1].protocol, "http/1.1");
  EXPECT_EQ(all[2].protocol, "h2");
  EXPECT_EQ(all[3].protocol, "h2");
  EXPECT_EQ(all[2].connection_id, all[3].connection_id);
  EXPECT_NE(all[2].stream_id, all[3].stream_id);
  for (const LedgerEntry& e : all) EXPECT_EQ(e.tokens_emitted, 4) << e.protocol;
}

TEST_F(MockLlmH2Test, AdvertisesMaxConcurrentStreams) {
  ServerOptions options;
  options.http2_max_concurrent_streams = 5;
  startServer(options);
  H2Client client(port());
  const int32_t id = client.submit("GET", "/_health");
  ASSERT_TRUE(client.runUntilClosed({id}));
  EXPECT_EQ(nghttp2_session_get_remote_settings(client.session(),
                                                NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS),
            5u);
}

// --- TLS and ALPN -------------------------------------------------------------------------

TEST_F(MockLlmH2Test, TlsAlpnNegotiatesH2) {
  startTlsServer(/*http2=*/true);
  H2Client client(port(), tlsClient());
  ASSERT_TRUE(client.connected());
  EXPECT_EQ(client.alpn(), "h2");
  const int32_t id =
      client.submit("POST", "/v1/chat/completions",
                    {{"x-mock-tokens", "5"}, {"x-mock-request-id", "tls-h2"}}, kChatStream);
  ASSERT_TRUE(client.runUntilClosed({id}));
  EXPECT_EQ(client.stream(id).status, 200);
  EXPECT_EQ(chatText(client.stream(id).body).text, fullText(5));
  const LedgerEntry e = waitEntry("tls-h2", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_EQ(e.protocol, "h2");
  EXPECT_EQ(e.stream_id, 1);
  EXPECT_EQ(e.tokens_emitted, 5);
}

TEST_F(MockLlmH2Test, TlsAlpnHttp11StaysHttp11) {
  startTlsServer(/*http2=*/true);
  // A client offering only http/1.1 gets HTTP/1.1 (the h2 client's preface is
  // then not understood: the server answers 400 in HTTP/1.1 and closes).
  H2Client client(port(), tlsClient({"http/1.1"}));
  EXPECT_EQ(client.alpn(), "http/1.1");
  client.submit("GET", "/_health");
  EXPECT_FALSE(client.run([] { return false; }, std::chrono::seconds(5)));
  EXPECT_TRUE(client.eof());
  const auto all = waitLedger([](const std::vector<LedgerEntry>& all) { return !all.empty(); });
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].protocol, "http/1.1");
  EXPECT_EQ(all[0].status, 400);
}

TEST_F(MockLlmH2Test, TlsWithHttp2OffOffersOnlyHttp11) {
  startTlsServer(/*http2=*/false);
  H2Client client(port(), tlsClient());
  EXPECT_EQ(client.alpn(), "http/1.1");
}

TEST_F(MockLlmH2Test, Http2OffTreatsThePrefaceAsHttp11) {
  ServerOptions options;
  options.http2 = false;
  startServer(options);
  H2Client client(port());
  client.submit("GET", "/_health");
  EXPECT_FALSE(client.run([] { return false; }, std::chrono::seconds(5)));
  EXPECT_TRUE(client.eof());
}

// --- per-stream cancellation ----------------------------------------------------------------

TEST_F(MockLlmH2Test, HundredConcurrentStreamsHalfResetByTheClient) {
  constexpr int kStreams = 100;
  constexpr int kTokens = 30;
  H2Client client(port());
  ASSERT_TRUE(client.connected());
  std::map<int32_t, std::string> request_ids;  // stream id → x-mock-request-id
  std::set<std::string> to_reset;
  for (int i = 0; i < kStreams; ++i) {
    const std::string rid = "c" + std::to_string(i);
    const int32_t id = client.submit("POST", "/v1/chat/completions",
                                     {{"x-mock-tokens", std::to_string(kTokens)},
                                      {"x-mock-token-interval-ms", "10"},
                                      {"x-mock-request-id", rid}},
                                     kChatStream);
    ASSERT_GT(id, 0);
    request_ids[id] = rid;
    if (i % 2 == 0) to_reset.insert(rid);
  }
  // Every other stream is cancelled as soon as its first token arrives.
  client.on_data = [&](H2Stream& s) {
    if (!s.reset_sent && to_reset.count(request_ids[s.id]) &&
        s.body.find("tok0 ") != std::string::npos) {
      client.reset(s.id, NGHTTP2_CANCEL);
    }
  };
  std::vector<int32_t> ids;
  for (const auto& [id, rid] : request_ids) ids.push_back(id);
  ASSERT_TRUE(client.runUntilClosed(ids, std::chrono::seconds(30)));

  // The client side: the 50 others arrived whole; the connection is still up.
  for (const auto& [id, rid] : request_ids) {
    const H2Stream& s = client.stream(id);
    if (to_reset.count(rid)) {
      EXPECT_TRUE(s.reset_sent) << rid;
      continue;
    }
    EXPECT_EQ(s.status, 200) << rid;
    const ChatText text = chatText(s.body);
    EXPECT_EQ(text.text, fullText(kTokens)) << rid;
    EXPECT_TRUE(text.done) << rid;
  }
  const int32_t after = client.submit("GET", "/_health");  // not recorded in the ledger
  ASSERT_TRUE(client.runUntilClosed({after}));
  EXPECT_EQ(client.stream(after).status, 200);

  // The ledger: exactly those 50 were reset by the client, the other 50 completed.
  const auto all = waitLedger([&](const std::vector<LedgerEntry>& all) {
    return all.size() == kStreams && std::all_of(all.begin(), all.end(), [](const LedgerEntry& e) {
             return e.finished_us != 0;
           });
  });
  ASSERT_EQ(all.size(), static_cast<size_t>(kStreams));
  std::set<std::string> reset_ids;
  std::set<std::string> completed_ids;
  std::set<int32_t> stream_ids;
  for (const LedgerEntry& e : all) {
    EXPECT_EQ(e.protocol, "h2");
    EXPECT_EQ(e.connection_id, all[0].connection_id);
    stream_ids.insert(e.stream_id);
    EXPECT_EQ(request_ids[e.stream_id], e.id);
    if (e.client_reset) {
      reset_ids.insert(e.id);
      EXPECT_EQ(e.rst_error_code, static_cast<uint32_t>(NGHTTP2_CANCEL)) << e.id;
      EXPECT_TRUE(e.peer_closed) << e.id;
      EXPECT_GE(e.peer_closed_us, e.received_us) << e.id;
      EXPECT_EQ(e.finished_us, e.peer_closed_us) << e.id;
      EXPECT_FALSE(e.completed) << e.id;
      EXPECT_GE(e.tokens_emitted, 1) << e.id;  // the client saw tok0 before resetting
      EXPECT_LT(e.tokens_emitted, kTokens) << e.id;
    }
    if (e.completed) {
      completed_ids.insert(e.id);
      EXPECT_FALSE(e.peer_closed) << e.id;
      EXPECT_EQ(e.tokens_emitted, kTokens) << e.id;
    }
  }
  EXPECT_EQ(reset_ids, to_reset);
  EXPECT_EQ(completed_ids.size(), static_cast<size_t>(kStreams / 2));
  for (const std::string& id : completed_ids) EXPECT_EQ(to_reset.count(id), 0u) << id;
  EXPECT_EQ(stream_ids.size(), static_cast<size_t>(kStreams));
}

TEST_F(MockLlmH2Test, ClientResetWhileStalledBeforeHeaders) {
  H2Client client(port());
  const int32_t id = client.submit(
      "POST", "/v1/chat/completions",
      {{"x-mock-stall-before-headers-ms", "-1"}, {"x-mock-request-id", "stalled"}}, kChatStream);
  ASSERT_TRUE(client.run([&] { return !server_->ledger().find("stalled").empty(); }));
  client.reset(id, NGHTTP2_CANCEL);
  ASSERT_TRUE(client.runUntilClosed({id}));
  const LedgerEntry e = waitFinished("stalled");
  EXPECT_TRUE(e.client_reset);
  EXPECT_EQ(e.rst_error_code, static_cast<uint32_t>(NGHTTP2_CANCEL));
  EXPECT_EQ(e.headers_sent_us, 0);
  EXPECT_EQ(e.tokens_emitted, 0);
}

TEST_F(MockLlmH2Test, ConnectionLossIsPeerClosedNotAReset) {
  H2Client client(port());
  client.submit("POST", "/v1/chat/completions",
                {{"x-mock-tokens", "50"},
                 {"x-mock-token-interval-ms", "20"},
                 {"x-mock-request-id", "dropped"}},
                kChatStream);
  ASSERT_TRUE(client.run([&] { return client.find(1) && !client.stream(1).body.empty(); }));
  client.dropConnection();
  const LedgerEntry e = waitFinished("dropped");
  EXPECT_TRUE(e.peer_closed);
  EXPECT_GT(e.peer_closed_us, 0);
  EXPECT_FALSE(e.client_reset);
  EXPECT_FALSE(e.completed);
  EXPECT_LT(e.tokens_emitted, 50);
}

// --- faults in HTTP/2 terms ---------------------------------------------------------------

TEST_F(MockLlmH2Test, RefuseStreamIsRstStreamRefusedBeforeAnyResponse) {
  H2Client client(port());
  const int32_t refused =
      client.submit("POST", "/v1/chat/completions",
                    {{"x-mock-refuse-stream", "1"}, {"x-mock-request-id", "refused"}}, kChatStream);
  ASSERT_TRUE(client.runUntilClosed({refused}));
  const H2Stream& s = client.stream(refused);
  EXPECT_EQ(s.status, 0);  // no response HEADERS
  EXPECT_EQ(s.rst_received, static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
  const LedgerEntry e = waitFinished("refused");
  EXPECT_TRUE(e.refused);
  EXPECT_EQ(e.mock_rst_error_code, static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
  EXPECT_EQ(e.status, 0);
  EXPECT_EQ(e.headers_sent_us, 0);
  EXPECT_FALSE(e.completed);
  EXPECT_FALSE(e.client_reset);

  // With x-mock-fail-times only the failing attempts are refused: a retry on
  // the same connection gets through.
  const Headers once = {{"x-mock-refuse-stream", "1"},
                        {"x-mock-fail-times", "1"},
                        {"x-mock-fail-key", "refuse-once"},
                        {"x-mock-request-id", "refuse-once"}};
  const int32_t first = client.submit("POST", "/v1/chat/completions", once, kChatStream);
  ASSERT_TRUE(client.runUntilClosed({first}));
  const int32_t retry = client.submit("POST", "/v1/chat/completions", once, kChatStream);
  ASSERT_TRUE(client.runUntilClosed({retry}));
  EXPECT_EQ(client.stream(first).rst_received, static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
  EXPECT_EQ(client.stream(retry).status, 200);
  EXPECT_EQ(chatText(client.stream(retry).body).text, fullText(10));
  const auto attempts = waitLedger([](const std::vector<LedgerEntry>& all) {
    return std::count_if(all.begin(), all.end(), [](const LedgerEntry& e) {
             return e.id == "refuse-once" && e.finished_us != 0;
           }) == 2;
  });
  std::vector<LedgerEntry> tries;
  for (const LedgerEntry& e : attempts) {
    if (e.id == "refuse-once") tries.push_back(e);
  }
  ASSERT_EQ(tries.size(), 2u);
  EXPECT_TRUE(tries[0].refused);
  EXPECT_EQ(tries[0].attempt_for_key, 1);
  EXPECT_FALSE(tries[1].refused);
  EXPECT_TRUE(tries[1].completed);
  EXPECT_EQ(tries[1].attempt_for_key, 2);
}

TEST_F(MockLlmH2Test, RefusalHeadersAreIgnoredOnHttp11) {
  // HTTP/1.1 cannot turn a request away unprocessed: it is answered normally.
  const Http1Result r = http1Exchange(
      port(), "POST", "/v1/chat/completions",
      {{"x-mock-refuse-stream", "1"}, {"x-mock-goaway", "1"}, {"x-mock-tokens", "2"}}, kChatStream);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(chatText(r.body).text, fullText(2));
  const auto all = waitLedger(
      [](const std::vector<LedgerEntry>& all) { return all.size() == 1 && all[0].completed; });
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].refused);
}

TEST_F(MockLlmH2Test, GoawayHeaderRefusesThisStreamButFinishesEarlierOnes) {
  H2Client client(port());
  const int32_t earlier = client.submit("POST", "/v1/chat/completions",
                                        {{"x-mock-tokens", "5"},
                                         {"x-mock-token-interval-ms", "20"},
                                         {"x-mock-request-id", "before-goaway"}},
                                        kChatStream);
  ASSERT_TRUE(client.run([&] { return !client.stream(earlier).body.empty(); }));
  const int32_t trigger =
      client.submit("POST", "/v1/chat/completions",
                    {{"x-mock-goaway", "1"}, {"x-mock-request-id", "goaway"}}, kChatStream);
  ASSERT_TRUE(client.runUntilClosed({earlier, trigger}));
  ASSERT_TRUE(client.goaway());
  EXPECT_EQ(client.goaway()->last_stream_id, earlier);
  EXPECT_EQ(client.goaway()->error_code, static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  EXPECT_EQ(client.stream(trigger).status, 0);
  EXPECT_EQ(client.stream(earlier).status, 200);
  EXPECT_EQ(chatText(client.stream(earlier).body).text, fullText(5));
  // With no stream left, the server closes the connection.
  EXPECT_FALSE(client.run([] { return false; }, std::chrono::seconds(5)));
  EXPECT_TRUE(client.eof());

  const LedgerEntry g = waitFinished("goaway");
  EXPECT_TRUE(g.refused);
  EXPECT_EQ(g.status, 0);
  EXPECT_EQ(g.stream_id, trigger);
  const LedgerEntry b =
      waitEntry("before-goaway", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_FALSE(b.refused);
  EXPECT_EQ(b.tokens_emitted, 5);
}

TEST_F(MockLlmH2Test, ResetAfterTokensIsRstStreamInternalError) {
  H2Client client(port());
  const int32_t id = client.submit(
      "POST", "/v1/chat/completions",
      {{"x-mock-tokens", "5"}, {"x-mock-reset-after-tokens", "2"}, {"x-mock-request-id", "rst2"}},
      kChatStream);
  ASSERT_TRUE(client.runUntilClosed({id}));
  const H2Stream& s = client.stream(id);
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.rst_received, static_cast<uint32_t>(NGHTTP2_INTERNAL_ERROR));
  EXPECT_EQ(chatText(s.body).text, fullText(2));
  EXPECT_FALSE(chatText(s.body).done);
  const LedgerEntry e = waitFinished("rst2");
  EXPECT_EQ(e.tokens_emitted, 2);
  EXPECT_TRUE(e.mock_reset);
  EXPECT_EQ(e.mock_rst_error_code, static_cast<uint32_t>(NGHTTP2_INTERNAL_ERROR));
  EXPECT_FALSE(e.completed);
  EXPECT_FALSE(e.client_reset);
  // Only that stream was reset: the connection serves the next one.
  const int32_t next = client.submit("GET", "/v1/models");
  ASSERT_TRUE(client.runUntilClosed({next}));
  EXPECT_EQ(client.stream(next).status, 200);
}

TEST_F(MockLlmH2Test, CloseAfterHeadersIsRstStreamAfterTheHeaders) {
  H2Client client(port());
  const int32_t id = client.submit(
      "POST", "/v1/chat/completions",
      {{"x-mock-close-after-headers", "1"}, {"x-mock-request-id", "cah"}}, kChatStream);
  ASSERT_TRUE(client.runUntilClosed({id}));
  const H2Stream& s = client.stream(id);
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.body.empty());
  EXPECT_EQ(s.rst_received, static_cast<uint32_t>(NGHTTP2_INTERNAL_ERROR));
  const LedgerEntry e = waitFinished("cah");
  EXPECT_GT(e.headers_sent_us, 0);
  EXPECT_TRUE(e.mock_reset);
  EXPECT_EQ(e.tokens_emitted, 0);
  EXPECT_FALSE(e.completed);
}

TEST_F(MockLlmH2Test, GarbageIsGoawayProtocolError) {
  H2Client client(port());
  const int32_t id =
      client.submit("POST", "/v1/chat/completions",
                    {{"x-mock-garbage", "1"}, {"x-mock-request-id", "junk"}}, kChatStream);
  EXPECT_FALSE(client.run([] { return false; }, std::chrono::seconds(5)));
  EXPECT_TRUE(client.eof());
  ASSERT_TRUE(client.goaway());
  EXPECT_EQ(client.goaway()->error_code, static_cast<uint32_t>(NGHTTP2_PROTOCOL_ERROR));
  EXPECT_EQ(client.stream(id).status, 0);
  const LedgerEntry e = waitFinished("junk");
  EXPECT_FALSE(e.completed);
  EXPECT_EQ(e.headers_sent_us, 0);
}

TEST_F(MockLlmH2Test, StatusRetryAfterAndQuotaHeadersCarryOver) {
  H2Client client(port());
  const int32_t id = client.submit("POST", "/v1/chat/completions",
                                   {{"x-mock-status", "429"},
                                    {"x-mock-retry-after", "2"},
                                    {"x-mock-quota", "5/60000"},
                                    {"x-mock-quota-style", "ietf"}},
                                   kChatStream);
  ASSERT_TRUE(client.runUntilClosed({id}));
  const H2Stream& s = client.stream(id);
  EXPECT_EQ(s.status, 429);
  EXPECT_EQ(s.header("retry-after"), "2");  // names are lower-case on HTTP/2
  EXPECT_EQ(s.header("ratelimit-policy"), "\"default\";q=5;w=60");
  EXPECT_EQ(json::parse(s.body)["error"]["code"], "rate_limit_exceeded");
}

// --- flow control ---------------------------------------------------------------------------

TEST_F(MockLlmH2Test, FlowControlHoldsTokensUntilTheClientReads) {
  constexpr uint32_t kWindow = 1024;
  H2Client client(port(), windowedClient(kWindow));
  const int32_t id =
      client.submit("POST", "/v1/chat/completions",
                    {{"x-mock-tokens", "200"}, {"x-mock-request-id", "windowed"}}, kChatStream);
  // The mock may send exactly one window's worth, then must wait.
  ASSERT_TRUE(client.run([&] { return client.stream(id).body.size() >= kWindow; }));
  client.run([] { return false; }, std::chrono::milliseconds(300));
  EXPECT_EQ(client.stream(id).body.size(), kWindow);
  const auto held = server_->ledger().find("windowed");
  ASSERT_EQ(held.size(), 1u);
  EXPECT_FALSE(held[0].completed);
  EXPECT_LT(held[0].tokens_emitted, 200);  // tokens behind the window were not handed over

  // Reading opens the window; the stream then completes.
  ASSERT_TRUE(client.run([&] {
    client.consumeAll(id);
    return client.stream(id).closed;
  }));
  EXPECT_EQ(chatText(client.stream(id).body).text, fullText(200));
  const LedgerEntry e = waitEntry("windowed", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_EQ(e.tokens_emitted, 200);
}

TEST_F(MockLlmH2Test, LargeUntimedStreamsShareTheConnection) {
  // Thousands of untimed tokens per stream exceed every buffer on the way:
  // the players pause and resume on drains without losing or reordering bytes.
  H2Client client(port());
  std::vector<int32_t> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(client.submit("POST", "/v1/chat/completions",
                                {{"x-mock-tokens", "5000"}, {"x-mock-request-id", "big"}},
                                kChatStream));
  }
  ASSERT_TRUE(client.runUntilClosed(ids, std::chrono::seconds(30)));
  for (const int32_t id : ids) {
    EXPECT_EQ(chatText(client.stream(id).body).text, fullText(5000)) << id;
  }
  const auto all = waitLedger([](const std::vector<LedgerEntry>& all) {
    return all.size() == 4 &&
           std::all_of(all.begin(), all.end(), [](const LedgerEntry& e) { return e.completed; });
  });
  for (const LedgerEntry& e : all) EXPECT_EQ(e.tokens_emitted, 5000);
}

// --- real clients ---------------------------------------------------------------------------

TEST_F(MockLlmH2Test, CurlHttp2PriorKnowledge) {
  if (runCommand("curl --version").find("HTTP2") == std::string::npos) {
    GTEST_SKIP() << "curl without HTTP/2";
  }
  const std::string out = runCommand(
      "curl -sS --http2-prior-knowledge -H 'x-mock-tokens: 4' -H 'x-mock-request-id: curl' "
      "-H 'content-type: application/json' -d '" +
      kChatStream + "' -w '\\nversion=%{http_version} status=%{http_code}' http://127.0.0.1:" +
      std::to_string(port()) + "/v1/chat/completions");
  EXPECT_NE(out.find("version=2 status=200"), std::string::npos) << out;
  EXPECT_EQ(chatText(out).text, fullText(4)) << out;
  const LedgerEntry e = waitEntry("curl", [](const LedgerEntry& e) { return e.completed; });
  EXPECT_EQ(e.protocol, "h2");
  EXPECT_EQ(e.tokens_emitted, 4);
}

TEST_F(MockLlmH2Test, NghttpMultiplexesOneConnection) {
  if (!haveCommand("nghttp")) GTEST_SKIP() << "nghttp (Debian nghttp2-client) is not installed";
  const std::string body_file = ::testing::TempDir() + "/mock-llm-h2-body.json";
  std::ofstream(body_file) << kChatStream;
  // -m 10: the same request ten times, concurrently on one connection (h2c prior knowledge).
  const std::string out = runCommand(
      "nghttp -m 10 -H 'x-mock-tokens: 3' -H 'x-mock-token-interval-ms: 5' "
      "-H 'x-mock-request-id: nghttp' -d " +
      body_file + " http://127.0.0.1:" + std::to_string(port()) + "/v1/chat/completions");
  size_t done_events = 0;
  for (size_t pos = out.find("data: [DONE]"); pos != std::string::npos;
       pos = out.find("data: [DONE]", pos + 1)) {
    ++done_events;
  }
  EXPECT_EQ(done_events, 10u) << out;
  const auto all = waitLedger([](const std::vector<LedgerEntry>& all) {
    return all.size() == 10 &&
           std::all_of(all.begin(), all.end(), [](const LedgerEntry& e) { return e.completed; });
  });
  std::set<uint64_t> connections;
  std::set<int32_t> streams;
  for (const LedgerEntry& e : all) {
    connections.insert(e.connection_id);
    streams.insert(e.stream_id);
    EXPECT_EQ(e.protocol, "h2");
    EXPECT_EQ(e.tokens_emitted, 3);
  }
  EXPECT_EQ(connections.size(), 1u);
  EXPECT_EQ(streams.size(), 10u);
}

}  // namespace
}  // namespace mockllm
