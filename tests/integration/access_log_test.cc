// The access log and request identity (docs/design.md §7) on the
// real binary against mock-llm: one JSON line per finished request with
// every field right (tokens and spend from the spend meter, cancel_reason
// matching sluice_cancellations_total), x-request-id kept / generated /
// returned / sent upstream, traceparent passed through or started, secrets
// never in the log, the file reopened on SIGHUP (logrotate), /exchanges
// showing the request id, and operational logs as JSON lines on stderr.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kChatBody[] =
    R"({"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]})";
constexpr char kSecret[] = "sk-secret-never-logged";

const char* kFields[] = {"ts",
                         "request_id",
                         "trace_id",
                         "route",
                         "upstream",
                         "endpoint",
                         "method",
                         "path",
                         "protocol",
                         "status",
                         "attempts",
                         "retry_causes",
                         "fallbacks",
                         "duration_ms",
                         "ttfb_ms",
                         "cancel_reason",
                         "model",
                         "input_tokens",
                         "output_tokens",
                         "spend_usd",
                         "leaked_usd",
                         "bytes_in",
                         "bytes_out",
                         "run_id",
                         "parent_run_id",
                         "jsonrpc_method",
                         "tool"};

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<nlohmann::json> jsonLines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a JSON line: " << line;
    }
  }
  return out;
}

size_t lineCount(const std::string& path) {
  const std::string text = readAll(path);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

bool isUuid(const std::string& s) {
  static const std::regex kUuid(
      "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  return std::regex_match(s, kUuid);
}

class AccessLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-access-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    log_path_ = dir_ + "/access.log";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string config(const std::string& access_log) const {
    return substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
access_log: ${ACCESS_LOG}
upstreams:
  - name: mock
    url: ${MOCK_URL}
  - name: dead
    url: http://127.0.0.1:1
    circuit_breaker: {consecutive_failures: 1, cooldown: 60s, max_cooldown: 60s}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
    retry: {attempts: 2, backoff: {base: 0s, max: 0s}}
  - name: dead
    match: {path_prefix: /dead}
    upstream: dead
    retry: {attempts: 1}
pricing:
  - {model: "gpt-4o*", input: 2.50, output: 10.00}
)",
                      {{"MOCK_URL", mock_.url()}, {"ACCESS_LOG", access_log}});
  }

  std::string fileConfig() const { return config("{path: " + log_path_ + ", format: json}"); }

  /** The log's lines by request id, once `n` lines are there. */
  std::map<std::string, nlohmann::json> linesById(size_t n) {
    EXPECT_TRUE(waitUntil([&] { return lineCount(log_path_) >= n; })) << readAll(log_path_);
    std::map<std::string, nlohmann::json> out;
    for (auto& j : jsonLines(readAll(log_path_))) out[j.value("request_id", "")] = j;
    return out;
  }

  MockLlm mock_;
  std::string dir_;
  std::string log_path_;
};

TEST_F(AccessLogTest, OneLinePerRequestWithEveryFieldRight) {
  SluiceProcess sluice(fileConfig());
  ASSERT_TRUE(sluice.running());

  // 1. The client's id and trace are kept, sent upstream and the id returned.
  const TestResponse kept =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions?api_key=" + std::string(kSecret),
                  {{"content-type", "application/json"},
                   {"authorization", std::string("Bearer ") + kSecret},
                   {"x-request-id", "client-id-1"},
                   {"traceparent", kTraceparent},
                   {"x-mock-request-id", "m1"}},
                  kChatBody);
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(kept.headers.get("x-request-id"), "client-id-1");
  EXPECT_EQ(kept.headers.get("x-sluice-upstream-request-id"), "m1");  // the provider's own id
  const nlohmann::json m1 = mock_.entry("m1");
  EXPECT_EQ(m1["request_headers"]["x-request-id"], "client-id-1");
  EXPECT_EQ(m1["request_headers"]["traceparent"], kTraceparent);

  // 2. Neither sent: both generated; the id is returned and sent upstream.
  const TestResponse generated =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                  {{"content-type", "application/json"}, {"x-mock-request-id", "m2"}}, kChatBody);
  ASSERT_EQ(generated.status, 200);
  const std::string generated_id(generated.headers.get("x-request-id").value_or(""));
  EXPECT_TRUE(isUuid(generated_id)) << generated_id;
  const nlohmann::json m2 = mock_.entry("m2");
  EXPECT_EQ(m2["request_headers"]["x-request-id"], generated_id);
  const std::string started = m2["request_headers"].value("traceparent", "");
  ASSERT_EQ(started.size(), 55u) << started;
  EXPECT_EQ(started.substr(0, 3), "00-");

  // 3. A malformed id and traceparent are replaced.
  const TestResponse replaced = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                            {{"content-type", "application/json"},
                                             {"x-request-id", "not a valid id"},
                                             {"traceparent", "00-not-a-trace"},
                                             {"x-mock-request-id", "m3"}},
                                            kChatBody);
  ASSERT_EQ(replaced.status, 200);
  const std::string replaced_id(replaced.headers.get("x-request-id").value_or(""));
  EXPECT_TRUE(isUuid(replaced_id)) << replaced_id;
  EXPECT_EQ(mock_.entry("m3")["request_headers"]["x-request-id"], replaced_id);
  EXPECT_NE(mock_.entry("m3")["request_headers"]["traceparent"], "00-not-a-trace");

  // 4. A retried request: one line, two attempts, the cause.
  const TestResponse retried = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                           {{"content-type", "application/json"},
                                            {"x-request-id", "retried-1"},
                                            {"x-mock-status", "503"},
                                            {"x-mock-fail-times", "1"},
                                            {"x-mock-fail-key", "access-log-retry"}},
                                           kChatBody);
  ASSERT_EQ(retried.status, 200) << retried.body;

  // 5. Budget exhausted while the upstream stalls: sluice answers 504.
  const TestResponse budget = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                          {{"content-type", "application/json"},
                                           {"x-request-id", "budget-1"},
                                           {"x-budget-ms", "200"},
                                           {"x-mock-stall-before-headers-ms", "-1"}},
                                          kChatBody);
  ASSERT_EQ(budget.status, 504);

  // 6. The client leaves mid-stream.
  {
    TestConnection stream(sluice.port());
    stream.sendRequest("POST", "/v1/chat/completions",
                       {{"content-type", "application/json"},
                        {"x-request-id", "gone-1"},
                        {"x-mock-tokens", "5"},
                        {"x-mock-stall-after-tokens", "1"},
                        {"x-mock-stall-ms", "-1"}},
                       R"({"model":"gpt-4o-mini","stream":true,"messages":[]})");
    stream.readUntil(
        [](const TestResponse& r) { return r.body.find("tok0") != std::string::npos; });
    stream.close();
  }

  // 7. No route.
  const TestResponse none =
      httpRequest(sluice.port(), "GET", "/nowhere", {{"x-request-id", "none-1"}});
  ASSERT_EQ(none.status, 404);
  EXPECT_EQ(none.headers.get("x-request-id"), "none-1");

  // One line per request: 7 requests, 7 lines (the retry's two attempts are one request).
  ASSERT_TRUE(waitUntil([&] { return sluice.metric("sluice_active_requests") == 0; }));
  auto lines = linesById(7);
  EXPECT_EQ(lineCount(log_path_), 7u);
  EXPECT_EQ(sluice.metric("sluice_requests_total"), 7);
  EXPECT_EQ(lines.size(), 7u) << "distinct request ids";

  const std::string text = readAll(log_path_);
  EXPECT_EQ(text.find(kSecret), std::string::npos) << "a secret reached the access log";
  EXPECT_EQ(text.find("Bearer"), std::string::npos);
  for (const auto& [id, line] : lines) {
    for (const char* f : kFields) EXPECT_TRUE(line.contains(f)) << id << " lacks " << f;
    EXPECT_EQ(line.size(), std::size(kFields)) << line.dump();
    EXPECT_EQ(line["fallbacks"], 0);
    EXPECT_EQ(line["protocol"], "HTTP/1.1");
    EXPECT_EQ(line["trace_id"].get<std::string>().size(), 32u);
    EXPECT_GE(line["duration_ms"].get<double>(), 0);
  }

  const nlohmann::json& ok = lines["client-id-1"];
  EXPECT_EQ(ok["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(ok["route"], "chat");
  EXPECT_EQ(ok["upstream"], "mock");
  EXPECT_EQ(ok["endpoint"], "127.0.0.1:" + std::to_string(mock_.port()));
  EXPECT_EQ(ok["method"], "POST");
  EXPECT_EQ(ok["path"], "/v1/chat/completions") << "no query string";
  EXPECT_EQ(ok["status"], 200);
  EXPECT_EQ(ok["attempts"], 1);
  EXPECT_EQ(ok["retry_causes"], nlohmann::json::array());
  EXPECT_TRUE(ok["cancel_reason"].is_null());
  EXPECT_GT(ok["ttfb_ms"].get<double>(), 0);
  EXPECT_LE(ok["ttfb_ms"].get<double>(), ok["duration_ms"].get<double>());
  EXPECT_EQ(ok["model"], "gpt-4o-mini");
  EXPECT_EQ(ok["input_tokens"], m1["input_tokens"]);
  EXPECT_EQ(ok["output_tokens"], 10);
  const double expected_usd = (m1["input_tokens"].get<double>() * 2.5 + 10 * 10.0) / 1e6;
  EXPECT_NEAR(ok["spend_usd"].get<double>(), expected_usd, 1e-12);
  EXPECT_EQ(ok["leaked_usd"], 0);
  EXPECT_EQ(ok["bytes_in"], std::string(kChatBody).size());
  EXPECT_EQ(ok["bytes_out"], kept.body.size());
  // ts: RFC 3339 UTC with milliseconds.
  EXPECT_TRUE(std::regex_match(ok["ts"].get<std::string>(),
                               std::regex(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$)")))
      << ok["ts"];

  const nlohmann::json& gen = lines[generated_id];
  EXPECT_EQ(gen["trace_id"], started.substr(3, 32)) << "the started trace's id is logged";
  EXPECT_EQ(lines.count(replaced_id), 1u);

  const nlohmann::json& retry = lines["retried-1"];
  EXPECT_EQ(retry["status"], 200);
  EXPECT_EQ(retry["attempts"], 2);
  EXPECT_EQ(retry["retry_causes"], nlohmann::json::parse(R"(["503"])"));
  EXPECT_EQ(sluice.metric("sluice_retries_total", {{"cause", "503"}}), 1);

  // cancel_reason matches sluice_cancellations_total, line for line.
  const nlohmann::json& exhausted = lines["budget-1"];
  EXPECT_EQ(exhausted["status"], 504);
  EXPECT_EQ(exhausted["cancel_reason"], "budget_exhausted");
  EXPECT_FALSE(exhausted["ttfb_ms"].is_null()) << "sluice's own 504 is a first byte too";
  EXPECT_EQ(exhausted["bytes_out"], budget.body.size());
  const nlohmann::json& gone = lines["gone-1"];
  EXPECT_EQ(gone["cancel_reason"], "client_disconnect");
  EXPECT_EQ(gone["status"], 499) << "as sluice_requests_total counts a client that left";
  EXPECT_GT(gone["bytes_out"].get<int>(), 0) << "the stream had started";
  EXPECT_GE(gone["output_tokens"].get<int>(), 1);
  std::map<std::string, int> reasons;
  for (const auto& [id, line] : lines) {
    if (!line["cancel_reason"].is_null()) ++reasons[line["cancel_reason"].get<std::string>()];
  }
  EXPECT_EQ(reasons.size(), 2u);
  for (const auto& [reason, n] : reasons) {
    EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", reason}}), n)
        << reason;
  }
  EXPECT_EQ(sluice.metric("sluice_cancellations_total"), 2);

  const nlohmann::json& unrouted = lines["none-1"];
  EXPECT_EQ(unrouted["route"], "none");
  EXPECT_EQ(unrouted["upstream"], "none");
  EXPECT_TRUE(unrouted["endpoint"].is_null());
  EXPECT_EQ(unrouted["status"], 404);
  EXPECT_EQ(unrouted["attempts"], 0);
  EXPECT_TRUE(unrouted["model"].is_null());
  EXPECT_EQ(sluice.metric("sluice_access_log_dropped_total"), 0);
}

TEST_F(AccessLogTest, LogsTheUpstreamAndEndpointThatAnsweredAndTheFallbacks) {
  MockLlm backup;
  SluiceProcess sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
access_log: {path: ${LOG}, format: json}
upstreams:
  - name: dead
    endpoints: [{name: gone, url: "http://127.0.0.1:1"}]
  - name: backup
    endpoints: [{name: spare, url: "${BACKUP}"}]
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: dead
    fallback: [{upstream: backup, model: gpt-4o-backup}]
    retry: {attempts: 3, backoff: {base: 0s, max: 0s}}
)",
                                  {{"LOG", log_path_}, {"BACKUP", backup.url()}}));
  ASSERT_TRUE(sluice.running());
  const TestResponse r =
      httpRequest(sluice.port(), "POST", "/v1/chat/completions", {{"x-request-id", "spilled"}},
                  R"({"model":"gpt-4o","messages":[]})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto lines = linesById(1);
  ASSERT_EQ(lines.count("spilled"), 1u);
  const nlohmann::json& line = lines["spilled"];
  EXPECT_EQ(line["upstream"], "backup");
  EXPECT_EQ(line["endpoint"], "spare");
  EXPECT_EQ(line["fallbacks"], 1);
  EXPECT_EQ(line["attempts"], 2);
  EXPECT_EQ(line["model"], "gpt-4o-backup") << "priced as the model actually used";
}

// x-sluice-attempts and `attempts` count attempts handed to an upstream
// connection, nothing else: a retry the open circuit refused is not one, and
// a request refused before any attempt says 0 (and sends no header). The
// refused request's model is still known from its body, and sluice's own
// error carries the id the Anthropic SDK reads (`request-id`).
TEST_F(AccessLogTest, AttemptsCountOnlyWhatWasSentAndARefusalNamesItsModel) {
  SluiceProcess sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
access_log: {path: ${LOG}, format: json}
upstreams:
  - name: flaky
    url: ${MOCK_URL}
    circuit_breaker: {consecutive_failures: 1, cooldown: 60s, max_cooldown: 60s}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: flaky
    retry: {attempts: 2, backoff: {base: 0s, max: 0s}}
)",
                                  {{"LOG", log_path_}, {"MOCK_URL", mock_.url()}}));
  ASSERT_TRUE(sluice.running());
  // The 503 trips the circuit; the retry is refused by it before it is sent.
  const TestResponse tripped = httpRequest(
      sluice.port(), "POST", "/v1/chat/completions",
      {{"x-request-id", "tripped"}, {"x-mock-status", "503"}, {"x-mock-request-id", "t1"}},
      kChatBody);
  EXPECT_EQ(tripped.status, 503) << tripped.body;
  EXPECT_EQ(tripped.headers.get("x-sluice-attempts").value_or(""), "1") << "one attempt was sent";
  EXPECT_EQ(mock_.ledger("t1").size(), 1u);
  // The circuit is open: nothing is sent at all.
  const TestResponse refused = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                           {{"x-request-id", "refused"}}, kChatBody);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("circuit-open"), std::string::npos) << refused.body;
  EXPECT_FALSE(refused.headers.get("x-sluice-attempts").has_value())
      << "no attempt, no x-sluice-attempts";
  EXPECT_EQ(refused.headers.get("request-id"), "refused") << "the Anthropic SDK's err.requestID";
  EXPECT_EQ(refused.headers.get("x-request-id"), "refused");

  auto lines = linesById(2);
  const nlohmann::json& t = lines["tripped"];
  EXPECT_EQ(t["attempts"], 1) << t.dump();
  EXPECT_EQ(t["retry_causes"], nlohmann::json::parse(R"(["503"])")) << t.dump();
  EXPECT_EQ(t["cancel_reason"], "circuit_open");
  EXPECT_EQ(t["model"], "gpt-4o-mini");
  const nlohmann::json& r = lines["refused"];
  EXPECT_EQ(r["attempts"], 0) << r.dump();
  EXPECT_EQ(r["retry_causes"], nlohmann::json::array());
  EXPECT_EQ(r["cancel_reason"], "circuit_open");
  EXPECT_EQ(r["model"], "gpt-4o-mini") << "the body's model, though nothing was sent";
  EXPECT_EQ(r["input_tokens"], 0);
  EXPECT_EQ(r["spend_usd"], 0);
  EXPECT_EQ(sluice.metric("sluice_upstream_attempts_total"), 1);
}

// A spill-over after an attempt is logged by sluice_retries_total's cause
// ("503"), not by the attempt-result label sluice_fallbacks_total uses.
TEST_F(AccessLogTest, RetryCausesOfAFallbackUseTheRetriesVocabulary) {
  // Both upstreams are the one mock: its fail-times counter is shared.
  SluiceProcess sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
access_log: {path: ${LOG}, format: json}
upstreams:
  - name: primary
    url: ${MOCK_URL}
  - name: backup
    url: ${MOCK_URL}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: primary
    fallback: [{upstream: backup}]
    retry: {attempts: 3, backoff: {base: 0s, max: 0s}}
)",
                                  {{"LOG", log_path_}, {"MOCK_URL", mock_.url()}}));
  ASSERT_TRUE(sluice.running());
  const TestResponse r = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                     {{"x-request-id", "fell-back"},
                                      {"x-mock-status", "503"},
                                      {"x-mock-fail-times", "1"},
                                      {"x-mock-fail-key", "access-log-fallback"}},
                                     kChatBody);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.get("x-sluice-upstream"), "backup");
  auto lines = linesById(1);
  const nlohmann::json& line = lines["fell-back"];
  EXPECT_EQ(line["fallbacks"], 1);
  EXPECT_EQ(line["attempts"], 2);
  EXPECT_EQ(line["retry_causes"], nlohmann::json::parse(R"(["503"])")) << line.dump();
  EXPECT_EQ(sluice.metric("sluice_fallbacks_total", {{"cause", "http_5xx"}}), 1);
}

// A stream the upstream breaks mid-body (HTTP/1.1: the connection closes
// inside the chunked body; HTTP/2: RST_STREAM) reached the client as a 200
// and is counted so, but it is no clean success: cancel_reason
// `upstream_reset` in the log and sluice_cancellations_total, and any spend
// it leaked attributed to it.
TEST_F(AccessLogTest, AStreamTheUpstreamBrokeIsLoggedAsCut) {
  for (const char* http2 : {"off", "on"}) {
    SCOPED_TRACE(std::string("upstream http2: ") + http2);
    std::filesystem::remove(log_path_);
    SluiceProcess sluice(
        substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
access_log: {path: ${LOG}, format: json}
upstreams:
  - name: mock
    url: ${MOCK_URL}
    http2: ${HTTP2}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
    retry: {attempts: 1}
pricing:
  - {model: "gpt-4o*", input: 2.50, output: 10.00}
)",
                   {{"LOG", log_path_}, {"MOCK_URL", mock_.url()}, {"HTTP2", http2}}));
    ASSERT_TRUE(sluice.running());
    TestConnection conn(sluice.port());
    conn.sendRequest("POST", "/v1/chat/completions",
                     // Tokens 30 ms apart: the reset never shares a read with the first
                     // tokens (that case is a 502 before anything was sent, tested in
                     // http2_upstream_test).
                     {{"x-request-id", "cut"},
                      {"x-mock-tokens", "50"},
                      {"x-mock-token-interval-ms", "30"},
                      {"x-mock-reset-after-tokens", "3"}},
                     R"({"model":"gpt-4o-mini","stream":true,"messages":[]})");
    const TestResponse r = conn.readResponse();
    EXPECT_EQ(r.status, 200);
    EXPECT_FALSE(r.complete);
    auto lines = linesById(1);
    const nlohmann::json& line = lines["cut"];
    EXPECT_EQ(line["status"], 200) << line.dump();
    EXPECT_EQ(line["cancel_reason"], "upstream_reset") << line.dump();
    EXPECT_GE(line["output_tokens"].get<int>(), 3);
    EXPECT_EQ(sluice.metric("sluice_requests_total", {{"code", "200"}}), 1)
        << "the client saw a 200";
    EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "upstream_reset"}}),
              1);
    EXPECT_EQ(sluice.metric("sluice_cancellations_total"), 1);
    const double leaked = sluice.metric("sluice_spend_usd_total", {{"disposition", "leaked"}});
    EXPECT_NEAR(line["leaked_usd"].get<double>(), leaked, 1e-12);
    EXPECT_NEAR(
        sluice.metric("sluice_leaked_spend_usd_total", {{"cancel_reason", "upstream_reset"}}),
        leaked, 1e-12);
  }
}

TEST_F(AccessLogTest, TimeToFirstByteIsMeasuredFromTheRequestHead) {
  SluiceProcess sluice(fileConfig());
  ASSERT_TRUE(sluice.running());
  const TestResponse slow = httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                                        {{"content-type", "application/json"},
                                         {"x-request-id", "slow-1"},
                                         {"x-mock-stall-before-headers-ms", "300"}},
                                        kChatBody);
  ASSERT_EQ(slow.status, 200);
  auto lines = linesById(1);
  EXPECT_GE(lines["slow-1"]["ttfb_ms"].get<double>(), 300);
  // The histogram got that one observation, above 0.25 s.
  EXPECT_EQ(sluice.metric("sluice_time_to_first_byte_seconds_count", {{"route", "chat"}}), 1);
  EXPECT_EQ(sluice.metric("sluice_time_to_first_byte_seconds_bucket",
                          {{"route", "chat"}, {"le", "0.25"}}),
            0);
  EXPECT_EQ(
      sluice.metric("sluice_time_to_first_byte_seconds_bucket", {{"route", "chat"}, {"le", "600"}}),
      1);
}

TEST_F(AccessLogTest, SighupReopensTheFileForLogrotate) {
  SluiceProcess sluice(fileConfig());
  ASSERT_TRUE(sluice.running());
  ASSERT_EQ(
      httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                  {{"content-type", "application/json"}, {"x-request-id", "before"}}, kChatBody)
          .status,
      200);
  ASSERT_TRUE(waitUntil([&] { return lineCount(log_path_) == 1; }));

  // logrotate's default scheme: move the file, then SIGHUP.
  const std::string rotated = log_path_ + ".1";
  std::filesystem::rename(log_path_, rotated);
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1;
  }));
  ASSERT_EQ(
      httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                  {{"content-type", "application/json"}, {"x-request-id", "after"}}, kChatBody)
          .status,
      200);
  ASSERT_TRUE(waitUntil([&] { return lineCount(log_path_) == 1; }))
      << "no new file at " << log_path_;
  EXPECT_EQ(jsonLines(readAll(log_path_)).at(0)["request_id"], "after");
  const auto old_lines = jsonLines(readAll(rotated));
  ASSERT_EQ(old_lines.size(), 1u);
  EXPECT_EQ(old_lines[0]["request_id"], "before");

  // A reload that fails to parse still reopens (logrotate does not check the config).
  std::filesystem::rename(log_path_, log_path_ + ".2");
  sluice.writeConfig("listen: [this is not valid");
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 1;
  }));
  ASSERT_EQ(
      httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                  {{"content-type", "application/json"}, {"x-request-id", "after-2"}}, kChatBody)
          .status,
      200);
  ASSERT_TRUE(waitUntil([&] { return lineCount(log_path_) == 1; }));
  EXPECT_EQ(jsonLines(readAll(log_path_)).at(0)["request_id"], "after-2");
}

TEST_F(AccessLogTest, OffByDefaultAndSwitchedOnByAReload) {
  SluiceProcess sluice(config("{path: off}"));
  ASSERT_TRUE(sluice.running());
  ASSERT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                        {{"content-type", "application/json"}}, kChatBody)
                .status,
            200);
  EXPECT_FALSE(std::filesystem::exists(log_path_));

  sluice.writeConfig(fileConfig());
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == 1;
  }));
  ASSERT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                        {{"content-type", "application/json"}, {"x-request-id", "on"}}, kChatBody)
                .status,
            200);
  auto lines = linesById(1);
  EXPECT_EQ(lines.count("on"), 1u);

  // A file sluice cannot open rejects the reload, with the reason, and logging goes on.
  sluice.writeConfig(config("{path: " + dir_ + "/missing-dir/access.log}"));
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 1;
  }));
  // The operational log is written by its own thread: wait for the line.
  EXPECT_TRUE(waitUntil([&] {
    return sluice.stderrText().find("cannot open " + dir_ + "/missing-dir/access.log") !=
           std::string::npos;
  })) << sluice.stderrText();
  ASSERT_EQ(
      httpRequest(sluice.port(), "POST", "/v1/chat/completions",
                  {{"content-type", "application/json"}, {"x-request-id", "still"}}, kChatBody)
          .status,
      200);
  lines = linesById(2);
  EXPECT_EQ(lines.count("still"), 1u);
}

TEST_F(AccessLogTest, ExchangesShowTheRequestId) {
  SluiceProcess sluice(config("{path: off}"));
  ASSERT_TRUE(sluice.running());
  TestConnection stream(sluice.port());
  stream.sendRequest("POST", "/v1/chat/completions",
                     {{"content-type", "application/json"},
                      {"x-request-id", "in-flight-1"},
                      {"x-mock-tokens", "5"},
                      {"x-mock-stall-after-tokens", "1"},
                      {"x-mock-stall-ms", "-1"}},
                     R"({"model":"gpt-4o-mini","stream":true,"messages":[]})");
  stream.readUntil([](const TestResponse& r) { return r.body.find("tok0") != std::string::npos; });
  const nlohmann::json exchanges = nlohmann::json::parse(sluice.adminGet("/exchanges"));
  ASSERT_EQ(exchanges["exchanges"].size(), 1u) << exchanges.dump();
  EXPECT_EQ(exchanges["exchanges"][0]["request_id"], "in-flight-1");
}

TEST_F(AccessLogTest, OperationalLogsAreJsonLinesWithALevel) {
  SluiceProcess sluice(fileConfig());
  ASSERT_TRUE(sluice.running());
  // A dead upstream trips its circuit (consecutive_failures: 1): logged as a warning.
  EXPECT_EQ(httpRequest(sluice.port(), "GET", "/dead").status, 502);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.stderrText().find("\"event\":\"circuit_transition\"") != std::string::npos;
  })) << sluice.stderrText();
  sluice.writeConfig("listen: [broken");
  sluice.signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] {
    return sluice.metric("sluice_config_reloads_total", {{"result", "rejected"}}) == 1;
  }));
  EXPECT_EQ(sluice.stop(), 0);

  std::map<std::string, nlohmann::json> by_event;
  const auto lines = jsonLines(sluice.stderrText());
  ASSERT_FALSE(lines.empty());
  for (const auto& line : lines) {
    EXPECT_TRUE(line.contains("ts") && line.contains("level") && line.contains("msg"))
        << line.dump();
    if (line.contains("event")) by_event[line["event"]] = line;
  }
  EXPECT_EQ(by_event["start"]["level"], "info");
  EXPECT_FALSE(by_event["start"].value("version", "").empty());
  EXPECT_FALSE(by_event["start"].value("commit", "").empty());
  EXPECT_EQ(by_event["listening"]["address"], "127.0.0.1:" + std::to_string(sluice.port()));
  EXPECT_EQ(by_event["circuit_transition"]["level"], "warn");
  EXPECT_EQ(by_event["circuit_transition"]["upstream"], "dead");
  EXPECT_EQ(by_event["circuit_transition"]["from"], "closed");
  EXPECT_EQ(by_event["circuit_transition"]["to"], "open");
  EXPECT_EQ(by_event["reload_rejected"]["level"], "warn");
  EXPECT_NE(by_event["reload_rejected"].value("reason", "").find(sluice.configPath() + ":1:"),
            std::string::npos)
      << by_event["reload_rejected"].dump();
  EXPECT_EQ(by_event["drain_start"]["level"], "info");
  EXPECT_EQ(by_event["drained"]["cancelled"], 0);
  EXPECT_EQ(by_event.count("stop"), 1u);
}

}  // namespace
}  // namespace sluice::test
