// Tests for the MCP tools filter's pure parts (filters/tools/): the JSON-RPC
// reader, the per-upstream annotation table, the tool policy, and the filter
// itself against a fake Exchange.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "filters/tools/jsonrpc.h"
#include "filters/tools/tool_annotations.h"
#include "filters/tools/tool_policy.h"
#include "filters/tools/tools_filter.h"
#include "tests/unit/filters/fake_filter_callbacks.h"

namespace sluice {
namespace {

using config::ToolRetry;
using config::ToolRule;
using config::ToolsConfig;
using Status = JsonRpcRequest::Status;

// --- readJsonRpcRequest ---------------------------------------------------------

TEST(JsonRpcRequestTest, ReadsMethodIdAndTool) {
  const auto r = readJsonRpcRequest(
      R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_docs","arguments":{}}})");
  EXPECT_EQ(r.status, Status::Ok);
  EXPECT_EQ(r.method, "tools/call");
  EXPECT_EQ(r.id, "7");
  EXPECT_EQ(r.tool, "search_docs");
  EXPECT_FALSE(r.isNotification());
}

TEST(JsonRpcRequestTest, StringIdKeepsItsQuotes) {
  const auto r = readJsonRpcRequest(R"({"jsonrpc":"2.0","id":"a\"b","method":"tools/list"})");
  EXPECT_EQ(r.status, Status::Ok);
  EXPECT_EQ(r.id, R"("a\"b")");
  EXPECT_EQ(r.tool, "");
}

TEST(JsonRpcRequestTest, NotificationHasNoId) {
  const auto r = readJsonRpcRequest(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  EXPECT_EQ(r.status, Status::Ok);
  EXPECT_TRUE(r.isNotification());
  EXPECT_EQ(r.method, "notifications/initialized");
}

// MCP clients POST their answers to the server's requests (sampling,
// elicitation): a response passes, with no id sluice would answer to.
TEST(JsonRpcRequestTest, AClientsResponseToTheServerPasses) {
  const auto sampled = readJsonRpcRequest(
      R"({"jsonrpc":"2.0","id":0,"result":{"role":"assistant","content":{"type":"text","text":"yo"},"model":"m"}})");
  EXPECT_EQ(sampled.status, Status::Ok);
  EXPECT_TRUE(sampled.is_response);
  EXPECT_FALSE(sampled.isNotification());
  EXPECT_EQ(sampled.method, "");
  EXPECT_EQ(sampled.id, std::nullopt);
  const auto declined = readJsonRpcRequest(
      R"({"jsonrpc":"2.0","id":"e-1","error":{"code":-1,"message":"User declined"}})");
  EXPECT_EQ(declined.status, Status::Ok);
  EXPECT_TRUE(declined.is_response);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700}})").status,
            Status::Ok);
  // Not a response: both, no id, a null id for a result, another version.
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","id":1,"result":{},"error":{}})").status,
            Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","result":{}})").status, Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","id":null,"result":{}})").status,
            Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"1.0","id":1,"result":{}})").status,
            Status::InvalidRequest);
  // A request that also carries `result` is a request.
  const auto odd = readJsonRpcRequest(R"({"jsonrpc":"2.0","id":2,"method":"ping","result":{}})");
  EXPECT_EQ(odd.status, Status::Ok);
  EXPECT_FALSE(odd.is_response);
  EXPECT_EQ(odd.method, "ping");
}

TEST(JsonRpcRequestTest, NotJsonIsAParseError) {
  EXPECT_EQ(readJsonRpcRequest("{\"jsonrpc\":").status, Status::ParseError);
  EXPECT_EQ(readJsonRpcRequest("").status, Status::ParseError);
  EXPECT_EQ(readJsonRpcRequest("hello").status, Status::ParseError);
}

TEST(JsonRpcRequestTest, InvalidRequests) {
  // A batch: not in current MCP.
  EXPECT_EQ(readJsonRpcRequest(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])").status,
            Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest("42").status, Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"id":1,"method":"ping"})").status, Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"1.0","id":1,"method":"ping"})").status,
            Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","id":1})").status, Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","id":null,"method":"ping"})").status,
            Status::InvalidRequest);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","id":{},"method":"ping"})").status,
            Status::InvalidRequest);
  const auto no_name =
      readJsonRpcRequest(R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}})");
  EXPECT_EQ(no_name.status, Status::InvalidRequest);
  EXPECT_EQ(no_name.id, "3");  // answered to its id
}

// The envelope is read without decoding the arguments; what it reads is what
// a full parse reads, for every spelling the fast reading hands over.
TEST(JsonRpcRequestTest, ReadsTheEnvelopeAsTheFullParseDoes) {
  const std::string big_argument(64 * 1024, 'x');
  const auto r = readJsonRpcRequest(
      R"({"params":{"arguments":{"sql":"select \"a\" from t","blob":")" + big_argument +
      R"("},"name":"execute_sql"},"method":"tools/call","id":"call-1","jsonrpc":"2.0"})");
  EXPECT_EQ(r.status, Status::Ok);
  EXPECT_EQ(r.method, "tools/call");
  EXPECT_EQ(r.id, R"("call-1")");
  EXPECT_EQ(r.tool, "execute_sql");
  // An escaped tool name, a negative id, whitespace: the full parse decides.
  const auto escaped = readJsonRpcRequest(
      R"( { "jsonrpc" : "2.0", "id" : -4, "method" : "tools/call", "params" : { "name" : "drop\u005ftable" } } )");
  EXPECT_EQ(escaped.status, Status::Ok);
  EXPECT_EQ(escaped.id, "-4");
  EXPECT_EQ(escaped.tool, "drop_table");
  // The last of a repeated member, as the full parse (and JavaScript) keep it.
  EXPECT_EQ(
      readJsonRpcRequest(
          R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_docs","name":"drop_table"}})")
          .tool,
      "drop_table");
  // Broken framing anywhere is still a parse error.
  EXPECT_EQ(
      readJsonRpcRequest(
          R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":"b}})")
          .status,
      Status::ParseError);
  EXPECT_EQ(readJsonRpcRequest(R"({"jsonrpc":"2.0","id":1,"method":"ping"} trailing)").status,
            Status::ParseError);
}

// --- ToolAnnotationTable ------------------------------------------------------------

constexpr const char* kToolsList = R"({"jsonrpc":"2.0","id":2,"result":{"tools":[
  {"name":"search","inputSchema":{},"annotations":{"readOnlyHint":true}},
  {"name":"upsert","annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":true}},
  {"name":"drop_table","annotations":{"destructiveHint":true,"idempotentHint":true}},
  {"name":"plain"}]}})";

TEST(ToolAnnotationTableTest, LearnsFromAJsonAnswer) {
  ToolAnnotationTable table;
  EXPECT_EQ(table.learnFromToolsList(kToolsList, false), 4u);
  EXPECT_EQ(table.lookup("search"), (ToolHints{true, std::nullopt, std::nullopt}));
  EXPECT_EQ(table.lookup("upsert"), (ToolHints{false, false, true}));
  EXPECT_EQ(table.lookup("plain"), ToolHints{});
  EXPECT_EQ(table.lookup("unknown"), std::nullopt);
}

TEST(ToolAnnotationTableTest, LearnsFromAnEventStream) {
  ToolAnnotationTable table;
  const std::string body =
      "event: message\r\nid: 1\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":"
      "[{\"name\":\"a\",\"annotations\":{\"readOnlyHint\":true}}]}}\r\n\r\n"
      ": a comment\n\nevent: message\ndata: "
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}\n\n";
  EXPECT_EQ(table.learnFromToolsList(body, true), 1u);
  EXPECT_EQ(table.lookup("a"), (ToolHints{true, std::nullopt, std::nullopt}));
}

TEST(ToolAnnotationTableTest, NonAnswersTeachNothing) {
  ToolAnnotationTable table;
  EXPECT_EQ(table.learnFromToolsList("not json", false), 0u);
  EXPECT_EQ(table.learnFromToolsList(R"({"jsonrpc":"2.0","id":1,"error":{"code":1}})", false), 0u);
  EXPECT_EQ(table.size(), 0u);
}

TEST(ToolAnnotationTableTest, BoundedForgetsTheOldestFirst) {
  ToolAnnotationTable table(2);
  table.learn("a", ToolHints{true, {}, {}});
  table.learn("b", ToolHints{true, {}, {}});
  table.learn("a", ToolHints{false, {}, {}});  // relearned: replaced, not added
  EXPECT_EQ(table.size(), 2u);
  table.learn("c", ToolHints{true, {}, {}});
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.lookup("a"), std::nullopt);
  EXPECT_TRUE(table.lookup("b"));
  EXPECT_TRUE(table.lookup("c"));
  EXPECT_EQ(ToolAnnotationTable::kMaxTools, 4096u);
}

TEST(ToolAnnotationTableTest, WorkersLearnAndLookUpAtOnce) {
  // Every worker shares an upstream's table (run under TSan to check the lock).
  ToolAnnotationTable table(64);
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&table, w] {
      for (int i = 0; i < 500; ++i) {
        const std::string name = "tool_" + std::to_string((i * 7 + w) % 100);
        table.learn(name, ToolHints{i % 2 == 0, std::nullopt, std::nullopt});
        (void)table.lookup(name);
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(table.size(), 64u);
}

TEST(ToolHintsTest, WhatMakesAResendSafe) {
  EXPECT_TRUE(hintsMakeResendSafe({true, std::nullopt, std::nullopt}));
  EXPECT_TRUE(hintsMakeResendSafe({true, true, std::nullopt}));  // read-only wins
  EXPECT_TRUE(hintsMakeResendSafe({false, false, true}));
  EXPECT_TRUE(hintsMakeResendSafe({std::nullopt, std::nullopt, true}));
  EXPECT_FALSE(hintsMakeResendSafe({false, true, true}));  // destructive
  EXPECT_FALSE(hintsMakeResendSafe({}));
  EXPECT_FALSE(hintsMakeResendSafe({false, false, false}));
}

// --- ToolPolicy ---------------------------------------------------------------------

ToolsConfig sampleConfig() {
  ToolsConfig c;
  c.tools.push_back(ToolRule{"execute_sql", std::chrono::seconds(30), ToolRetry::Never});
  c.tools.push_back(ToolRule{"search_*", std::chrono::seconds(10), ToolRetry::Safe});
  c.tools.push_back(ToolRule{"search_all", std::nullopt, ToolRetry::Never});  // shadowed
  c.tools.push_back(ToolRule{"lookup_?", std::nullopt, std::nullopt});
  c.tool_retry = ToolRetry::Annotations;
  return c;
}

TEST(ToolPolicyTest, FirstMatchWinsAndLabelsAreThePatterns) {
  const ToolsConfig c = sampleConfig();
  const ToolPolicy policy(c);
  EXPECT_EQ(policy.match("execute_sql").label, "execute_sql");
  EXPECT_EQ(policy.match("search_all").label, "search_*");
  EXPECT_EQ(policy.match("search_all").index, 1u);
  EXPECT_EQ(policy.match("lookup_x").label, "lookup_?");
  EXPECT_EQ(policy.match("lookup_xy").label, "other");
  EXPECT_EQ(policy.match("lookup_xy").index, 4u);
  EXPECT_EQ(policy.match("lookup_xy").rule, nullptr);
  EXPECT_EQ(policy.labelCount(), 5u);
  EXPECT_EQ(policy.label(4), "other");
}

TEST(ToolPolicyTest, RetryModeFromTheEntryElseTheRoute) {
  const ToolsConfig c = sampleConfig();
  const ToolPolicy policy(c);
  EXPECT_EQ(policy.retryFor(policy.match("execute_sql")), ToolRetry::Never);
  EXPECT_EQ(policy.retryFor(policy.match("search_x")), ToolRetry::Safe);
  EXPECT_EQ(policy.retryFor(policy.match("lookup_x")), ToolRetry::Annotations);
  EXPECT_EQ(policy.retryFor(policy.match("other_tool")), ToolRetry::Annotations);
}

TEST(ToolPolicyTest, MaySendAgainTable) {
  const ToolHints read_only{true, std::nullopt, std::nullopt};
  const ToolHints destructive{false, true, std::nullopt};
  EXPECT_FALSE(maySendAgain(ToolRetry::Never, read_only));
  EXPECT_TRUE(maySendAgain(ToolRetry::Safe, std::nullopt));
  EXPECT_TRUE(maySendAgain(ToolRetry::Safe, destructive));  // the operator vouches
  EXPECT_TRUE(maySendAgain(ToolRetry::Annotations, read_only));
  EXPECT_FALSE(maySendAgain(ToolRetry::Annotations, destructive));
  EXPECT_FALSE(maySendAgain(ToolRetry::Annotations, std::nullopt));  // unknown: never
}

// --- ToolsFilter -------------------------------------------------------------------

class ToolsFilterTest : public ::testing::Test {
 protected:
  ToolsFilterTest() : config_(sampleConfig()), route_(config_, metrics_, "tools"), cb_(clock_) {
    table_ = std::make_shared<ToolAnnotationTable>();
    route_.addUpstream("tool-server", table_);
    cb_.destination_value.upstream = "tool-server";
    filter_.setCallbacks(cb_);
  }

  double counter(const std::string& tool, const std::string& outcome) {
    return metrics_.tool_calls.Add({{"route", "tools"}, {"tool", tool}, {"outcome", outcome}})
        .Value();
  }

  ToolsConfig config_;
  Metrics metrics_;
  ToolRoute route_;
  ManualClock clock_;
  test::FakeFilterCallbacks cb_;
  std::shared_ptr<ToolAnnotationTable> table_;
  ToolsFilter filter_{route_};
  RequestHead upstream_request_;
};

std::string call(const std::string& tool) {
  return R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":")" + tool + R"("}})";
}

TEST_F(ToolsFilterTest, RecordsTheCallForTheExchange) {
  EXPECT_EQ(filter_.decodeComplete(call("search_docs")), FilterStatus::Continue);
  EXPECT_EQ(cb_.jsonrpc_method, "tools/call");
  EXPECT_EQ(cb_.jsonrpc_id, "1");
  EXPECT_EQ(cb_.jsonrpc_tool, "search_docs");
  EXPECT_TRUE(cb_.local_replies.empty());
}

TEST_F(ToolsFilterTest, NotJsonRpcIsAnsweredWithTheJsonRpcProblems) {
  EXPECT_EQ(filter_.decodeComplete("nope"), FilterStatus::StopIteration);
  ASSERT_EQ(cb_.local_replies.size(), 1u);
  EXPECT_EQ(cb_.local_replies[0].slug, "jsonrpc-parse-error");
  EXPECT_EQ(cb_.local_replies[0].status, 400);

  ToolsFilter batch(route_);
  batch.setCallbacks(cb_);
  EXPECT_EQ(batch.decodeComplete(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])"),
            FilterStatus::StopIteration);
  ASSERT_EQ(cb_.local_replies.size(), 2u);
  EXPECT_EQ(cb_.local_replies[1].slug, "jsonrpc-invalid-request");
}

TEST_F(ToolsFilterTest, AToolBudgetLowersTheDeadlineNeverRaisesIt) {
  cb_.setDeadline(cb_.startTime() + std::chrono::seconds(120));
  filter_.decodeComplete(call("search_docs"));  // budget 10s
  EXPECT_EQ(cb_.deadline(), cb_.startTime() + std::chrono::seconds(10));

  test::FakeFilterCallbacks tight(clock_);
  tight.setDeadline(tight.startTime() + std::chrono::seconds(2));  // the request's (or run's) 2s
  ToolsFilter f(route_);
  f.setCallbacks(tight);
  f.decodeComplete(call("search_docs"));
  EXPECT_EQ(tight.deadline(), tight.startTime() + std::chrono::seconds(2));
}

TEST_F(ToolsFilterTest, NonToolMethodsKeepTheRoutePolicy) {
  filter_.decodeComplete(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  filter_.beforeAttempt(upstream_request_, cb_.attemptContext());
  EXPECT_EQ(cb_.sent_resendable, std::nullopt);
  EXPECT_EQ(cb_.deadline(), MonotonicTime::max());
}

TEST_F(ToolsFilterTest, ResendableByConfig) {
  filter_.decodeComplete(call("execute_sql"));
  filter_.beforeAttempt(upstream_request_, cb_.attemptContext());
  EXPECT_EQ(cb_.sent_resendable, false);

  test::FakeFilterCallbacks cb2(clock_);
  cb2.destination_value.upstream = "tool-server";
  ToolsFilter f(route_);
  f.setCallbacks(cb2);
  f.decodeComplete(call("search_docs"));
  f.beforeAttempt(upstream_request_, cb2.attemptContext());
  EXPECT_EQ(cb2.sent_resendable, true);
}

TEST_F(ToolsFilterTest, ResendableByAnnotationsLearnedFromToolsList) {
  // Unknown: never once sent.
  filter_.decodeComplete(call("search"));  // "other": tool_retry annotations
  filter_.beforeAttempt(upstream_request_, cb_.attemptContext());
  EXPECT_EQ(cb_.sent_resendable, false);

  // A tools/list answer passes through.
  test::FakeFilterCallbacks list_cb(clock_);
  list_cb.destination_value.upstream = "tool-server";
  ToolsFilter list(route_);
  list.setCallbacks(list_cb);
  list.decodeComplete(R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})");
  list.beforeAttempt(upstream_request_, list_cb.attemptContext());
  ResponseHead head;
  head.status = 200;
  head.headers.add("content-type", "application/json");
  list.encodeHeaders(head, false);
  const std::string body = kToolsList;
  list.encodeData(body.data(), 10, false);
  list.encodeData(body.data() + 10, body.size() - 10, false);
  list.encodeData(nullptr, 0, true);
  EXPECT_EQ(table_->size(), 4u);

  filter_.beforeAttempt(upstream_request_, cb_.attemptContext());  // the next attempt asks again
  EXPECT_EQ(cb_.sent_resendable, true);

  test::FakeFilterCallbacks cb3(clock_);
  cb3.destination_value.upstream = "tool-server";
  ToolsFilter drop(route_);
  drop.setCallbacks(cb3);
  drop.decodeComplete(call("drop_table"));
  drop.beforeAttempt(upstream_request_, cb3.attemptContext());
  EXPECT_EQ(cb3.sent_resendable, false);

  // Another upstream (not in the route's chain) knows nothing.
  cb_.destination_value.upstream = "elsewhere";
  filter_.beforeAttempt(upstream_request_, cb_.attemptContext());
  EXPECT_EQ(cb_.sent_resendable, false);
}

TEST_F(ToolsFilterTest, CountsEachCallByPatternAndOutcome) {
  filter_.decodeComplete(call("search_docs"));
  ResponseHead ok;
  ok.status = 200;
  filter_.encodeHeaders(ok, false);
  clock_.advance(std::chrono::milliseconds(250));
  filter_.onDestroy();
  EXPECT_EQ(counter("search_*", "ok"), 1);
  const auto& h = metrics_.tool_call_duration.Add({{"route", "tools"}, {"tool", "search_*"}},
                                                  Metrics::durationBuckets());
  EXPECT_EQ(h.Collect().histogram.sample_count, 1u);
  EXPECT_DOUBLE_EQ(h.Collect().histogram.sample_sum, 0.25);

  test::FakeFilterCallbacks cb2(clock_);
  ToolsFilter f(route_);
  f.setCallbacks(cb2);
  f.decodeComplete(call("mystery"));
  cb2.cancel_reason = CancelReason::BudgetExhausted;
  Problem p = makeProblem(problems::kBudgetExhausted, "out", CancelReason::BudgetExhausted);
  f.encodeLocalReply(p);
  f.onDestroy();
  EXPECT_EQ(counter("other", "budget_exhausted"), 1);

  // Not a tools/call: not counted.
  ToolsFilter g(route_);
  g.setCallbacks(cb2);
  g.decodeComplete(R"({"jsonrpc":"2.0","id":1,"method":"ping"})");
  g.onDestroy();
  EXPECT_EQ(counter("other", "budget_exhausted"), 1);
}

TEST_F(ToolsFilterTest, AToolErrorAndAJsonRpcErrorFromTheServerAreNotOk) {
  const auto answer = [&](const std::string& content_type, const std::string& body) {
    test::FakeFilterCallbacks cb(clock_);
    ToolsFilter f(route_);
    f.setCallbacks(cb);
    f.decodeComplete(call("search_docs"));
    ResponseHead head;
    head.status = 200;
    head.headers.add("content-type", content_type);
    f.encodeHeaders(head, false);
    f.encodeData(body.data(), body.size() / 2, false);
    f.encodeData(body.data() + body.size() / 2, body.size() - body.size() / 2, false);
    f.encodeData(nullptr, 0, true);
    f.onDestroy();
  };
  answer("application/json", R"({"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}})");
  EXPECT_EQ(counter("search_*", "tool_error"), 1);
  answer("text/event-stream",
         "event: message\ndata: "
         R"({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool"}})"
         "\n\n");
  EXPECT_EQ(counter("search_*", "jsonrpc_error"), 1);
  answer("text/event-stream",
         "event: message\ndata: "
         R"({"jsonrpc":"2.0","id":1,"result":{"content":[]}})"
         "\n\n");
  EXPECT_EQ(counter("search_*", "ok"), 1);
}

// DNS rebinding: a page on attacker.example re-resolved to 127.0.0.1 sends
// `Host: attacker.example` (and its Origin); sluice, in front of the server,
// refuses what it does not know, before reading the body.
TEST(ToolsFilterHostTest, RefusesAHostOrOriginItDoesNotKnow) {
  const std::vector<std::string> allowed = {"sluice"};
  const auto refused = [&](std::vector<std::pair<std::string, std::string>> headers) {
    RequestHead head;
    head.method = "POST";
    for (auto& [k, v] : headers) head.headers.add(k, v);
    return ToolsFilter::refuseHost(head, allowed).has_value();
  };
  EXPECT_FALSE(refused({{"host", "127.0.0.1:8080"}}));
  EXPECT_FALSE(refused({{"host", "localhost:8080"}, {"origin", "http://localhost:6274"}}));
  EXPECT_FALSE(refused({{"host", "[::1]:8080"}}));
  EXPECT_FALSE(refused({{"host", "10.1.2.3"}}));
  EXPECT_FALSE(refused({{"host", "Sluice:8080"}, {"origin", "https://sluice"}}));
  EXPECT_FALSE(refused({}));  // HTTP/1.0 without Host: nothing a browser sends
  EXPECT_TRUE(refused({{"host", "evil.example.com"}}));
  EXPECT_TRUE(refused({{"host", "127.0.0.1:8080"}, {"origin", "http://evil.example.com"}}));
  EXPECT_TRUE(refused({{"host", "127.0.0.1:8080"}, {"origin", "null"}}));
  EXPECT_TRUE(refused({{"host", "localhost.evil.example.com"}}));
  EXPECT_TRUE(refused({{"host", "a:b:c"}}));

  ToolsConfig config;
  Metrics metrics;
  ToolRoute route(config, metrics, "tools");
  ManualClock clock;
  test::FakeFilterCallbacks cb(clock);
  ToolsFilter filter(route);
  filter.setCallbacks(cb);
  RequestHead head;
  head.method = "POST";
  head.headers.add("host", "evil.example.com:8080");
  head.headers.add("origin", "http://evil.example.com:8080");
  EXPECT_EQ(filter.decodeHeaders(head), FilterStatus::StopIteration);
  ASSERT_EQ(cb.local_replies.size(), 1u);
  EXPECT_EQ(cb.local_replies[0].slug, problems::kHostNotAllowed.slug);
  EXPECT_EQ(cb.local_replies[0].status, 403);
}

TEST(ToolsFilterOutcomeTest, Labels) {
  const auto label = [](int status, ToolAnswer answer = ToolAnswer::Unknown,
                        std::optional<std::string> slug = std::nullopt,
                        std::optional<CancelReason> reason = std::nullopt) {
    return ToolsFilter::outcomeLabel(status, answer, slug, reason);
  };
  EXPECT_EQ(label(200), "ok");
  EXPECT_EQ(label(200, ToolAnswer::Result), "ok");
  EXPECT_EQ(label(200, ToolAnswer::ToolError), "tool_error");
  EXPECT_EQ(label(200, ToolAnswer::JsonRpcError), "jsonrpc_error");
  EXPECT_EQ(label(404), "http_4xx");
  EXPECT_EQ(label(503, ToolAnswer::JsonRpcError), "http_5xx");
  EXPECT_EQ(label(0, ToolAnswer::Unknown, std::string("upstream-connect-error")),
            "upstream_connect_error");
  EXPECT_EQ(label(200, ToolAnswer::Result, std::nullopt, CancelReason::ClientDisconnect),
            "client_disconnect");
}

TEST(ToolAnswerTest, ClassifiesTheServersResponse) {
  EXPECT_EQ(classifyToolAnswer(R"({"jsonrpc":"2.0","id":1,"result":{"content":[]}})"),
            ToolAnswer::Result);
  EXPECT_EQ(
      classifyToolAnswer(
          R"({"result":{"content":[{"type":"text","text":"no"}],"isError":true},"jsonrpc":"2.0","id":"a"})"),
      ToolAnswer::ToolError);
  EXPECT_EQ(classifyToolAnswer(R"({"jsonrpc":"2.0","id":1,"result":{"isError":false}})"),
            ToolAnswer::Result);
  // An isError nested deeper (in the tool's own content) is not the result's.
  EXPECT_EQ(
      classifyToolAnswer(
          R"({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","isError":true}]}})"),
      ToolAnswer::Result);
  EXPECT_EQ(classifyToolAnswer(
                R"({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool"}})"),
            ToolAnswer::JsonRpcError);
  // The server's notifications and requests on the stream are not the answer.
  EXPECT_EQ(
      classifyToolAnswer(R"({"jsonrpc":"2.0","method":"notifications/progress","params":{}})"),
      ToolAnswer::Unknown);
  EXPECT_EQ(classifyToolAnswer("not json"), ToolAnswer::Unknown);
  EXPECT_EQ(classifyToolAnswer(""), ToolAnswer::Unknown);
}

TEST(ToolAnswerTest, ReadsAJsonAnswerSplitAnywhere) {
  const std::string body = R"({"jsonrpc":"2.0","id":3,"result":{"content":[],"isError":true}})"
                           "\n";
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    ToolAnswerReader reader(/*event_stream=*/false);
    reader.feed(body.data(), cut);
    reader.feed(body.data() + cut, body.size() - cut);
    EXPECT_EQ(reader.answer(), ToolAnswer::Unknown) << "read before the body ended";
    reader.finish();
    EXPECT_EQ(reader.answer(), ToolAnswer::ToolError) << "cut at " << cut;
  }
}

TEST(ToolAnswerTest, ReadsTheResponseEventOfAStreamPastItsNotifications) {
  const std::string stream =
      "event: message\n"
      R"(data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}})"
      "\n\n"
      "event: message\n"
      R"(data: {"jsonrpc":"2.0","id":9,"error":{"code":-32603,"message":"boom"}})"
      "\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    ToolAnswerReader reader(/*event_stream=*/true);
    reader.feed(stream.data(), cut);
    reader.feed(stream.data() + cut, stream.size() - cut);
    reader.finish();
    EXPECT_EQ(reader.answer(), ToolAnswer::JsonRpcError) << "cut at " << cut;
  }
}

TEST(ToolAnswerTest, AnAnswerTooLargeToReadIsUnknown) {
  std::string body = R"({"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[{"text":")";
  body.append(ToolAnswerReader::kMaxMessageBytes, 'x');
  body += R"("}]}})";
  ToolAnswerReader reader(/*event_stream=*/false);
  for (size_t at = 0; at < body.size(); at += 4096) {
    reader.feed(body.data() + at, std::min<size_t>(4096, body.size() - at));
  }
  reader.finish();
  EXPECT_EQ(reader.answer(), ToolAnswer::Unknown);
}

}  // namespace
}  // namespace sluice
