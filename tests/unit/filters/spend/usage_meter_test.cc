#include "filters/spend/usage_meter.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "filters/spend/spend_split.h"
#include "tests/unit/filters/spend/provider_streams.h"

namespace sluice {
namespace {

using spend_fixtures::BuiltStream;

constexpr const char* kSse = "text/event-stream; charset=utf-8";
constexpr const char* kJson = "application/json";

const std::string kChatRequest =
    R"({"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}],)"
    R"("stream":true,"stream_options":{"include_usage":true}})";
const std::string kAnthropicRequest =
    R"({"model":"claude-sonnet-4-20250514","max_tokens":1024,"stream":true,)"
    R"("messages":[{"role":"user","content":"Hello, Claude"}]})";
const std::string kResponsesRequest = R"({"model":"gpt-4.1","input":"Say hi","stream":true})";

uint64_t estimateOf(const std::string& body) { return (body.size() + 3) / 4; }

/** Feeds headers and `body` (in `slice`-byte pieces; 0 = whole), optionally ending it. */
void feed(UsageMeter& meter, int status, const std::string& content_type, const std::string& body,
          bool end = true, size_t slice = 0) {
  meter.onResponseHeaders(status, content_type);
  if (slice == 0) slice = body.size() == 0 ? 1 : body.size();
  for (size_t pos = 0; pos < body.size(); pos += slice) {
    meter.onResponseData(body.data() + pos, std::min(slice, body.size() - pos));
  }
  if (end) meter.onResponseEnd();
}

const std::vector<std::string> kSevenPieces = {"Hello", "!", " How", " can", " I", " help", "?"};

// ---- request side --------------------------------------------------------------

struct PathCase {
  std::string path;
  ApiKind kind;
};

class UsageMeterPathTest : public ::testing::TestWithParam<PathCase> {};

TEST_P(UsageMeterPathTest, DetectsApiKind) {
  EXPECT_EQ(apiKindForPath(GetParam().path), GetParam().kind) << GetParam().path;
}

INSTANTIATE_TEST_SUITE_P(
    Paths, UsageMeterPathTest,
    ::testing::Values(PathCase{"/v1/chat/completions", ApiKind::OpenAiChat},
                      PathCase{"/v1/chat/completions?trace=1", ApiKind::OpenAiChat},
                      PathCase{"/v1/chat/completions/", ApiKind::OpenAiChat},
                      PathCase{"/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21",
                               ApiKind::OpenAiChat},
                      PathCase{"/v1/responses", ApiKind::OpenAiResponses},
                      PathCase{"/openai/v1/responses?api-version=preview",
                               ApiKind::OpenAiResponses},
                      PathCase{"/v1/responses/resp_123", ApiKind::Generic},
                      PathCase{"/v1/messages", ApiKind::AnthropicMessages},
                      PathCase{"/anthropic/v1/messages?beta=true", ApiKind::AnthropicMessages},
                      PathCase{"/v1/messages/count_tokens", ApiKind::Generic},
                      PathCase{"/v1/threads/thread_abc/messages", ApiKind::Generic},
                      PathCase{"/v1/embeddings", ApiKind::Generic},
                      PathCase{"/v1/completions", ApiKind::Generic},
                      PathCase{"/", ApiKind::Generic}, PathCase{"", ApiKind::Generic},
                      PathCase{"/v1/messages#frag", ApiKind::AnthropicMessages},
                      PathCase{"/v1/chat/completions#a?b", ApiKind::OpenAiChat},
                      PathCase{"/v1/responses/?x#y", ApiKind::OpenAiResponses},
                      PathCase{"?/v1/messages", ApiKind::Generic}));

// The Content-Type is compared without case and without copying it lower-cased
//: what is read as JSON, as SSE, and as neither.
TEST(UsageMeterTest, ContentTypesAreReadWithoutCase) {
  const std::string body = R"({"usage":{"prompt_tokens":3,"completion_tokens":4}})";
  for (const auto& [type, json] :
       std::vector<std::pair<std::string, bool>>{{"application/json", true},
                                                 {"APPLICATION/JSON", true},
                                                 {" Application/Json ; charset=utf-8", true},
                                                 {"application/vnd.api+JSON", true},
                                                 {"+json", true},
                                                 {"application/jsonx", false},
                                                 {"application/json5", false},
                                                 {"json", false},
                                                 {"text/plain", false},
                                                 {"", false}}) {
    UsageMeter meter(ApiKind::OpenAiChat, "{}");
    meter.onResponseHeaders(200, type);
    meter.onResponseData(body);
    meter.onResponseEnd();
    EXPECT_EQ(meter.outputReported(), json) << type;
  }
  for (const char* type : {"text/event-stream", "Text/Event-Stream; charset=utf-8"}) {
    UsageMeter meter(ApiKind::OpenAiChat, "{}");
    meter.onResponseHeaders(200, type);
    meter.onResponseData("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
    meter.onResponseEnd();
    EXPECT_EQ(meter.deltasSeen(), 1u) << type;
  }
}

struct RequestCase {
  const char* name;
  std::string body;
  std::string model;
};

class UsageMeterRequestTest : public ::testing::TestWithParam<RequestCase> {};

TEST_P(UsageMeterRequestTest, ExtractsModelAndEstimatesInput) {
  const RequestCase& c = GetParam();
  const MeteredRequest r = MeteredRequest::fromRequest("/v1/chat/completions", c.body);
  EXPECT_EQ(r.kind, ApiKind::OpenAiChat);
  EXPECT_EQ(r.model, c.model);
  EXPECT_EQ(r.input_token_estimate, estimateOf(c.body));
}

INSTANTIATE_TEST_SUITE_P(
    Bodies, UsageMeterRequestTest,
    ::testing::Values(
        RequestCase{"plain", kChatRequest, "gpt-4o-mini"},
        RequestCase{"model_last_nested_decoy",
                    R"({"messages":[{"role":"user","content":"hi","model":"nested"}],)"
                    R"("metadata":{"model":"meta"},"model":"claude-3-5-haiku-latest"})",
                    "claude-3-5-haiku-latest"},
        RequestCase{"only_nested", R"({"metadata":{"model":"x"}})", ""},
        RequestCase{"not_a_string", R"({"model":42,"messages":[]})", ""},
        RequestCase{"truncated_after_model", R"({"model":"gpt-4o","messages":[{"ro)", "gpt-4o"},
        RequestCase{"not_json", "model=gpt-4o", ""}, RequestCase{"empty", "", ""},
        RequestCase{"five_bytes_round_up", "12345", ""}),
    [](const ::testing::TestParamInfo<RequestCase>& info) { return std::string(info.param.name); });

// ---- OpenAI chat SSE ------------------------------------------------------------

TEST(UsageMeterTest, ChatStreamWithUsage) {
  const BuiltStream s = spend_fixtures::openAiChatStream(kSevenPieces, true, 19, 10);
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  feed(m, 200, kSse, s.body);
  EXPECT_EQ(m.model(), "gpt-4o-mini");
  EXPECT_EQ(m.deltasSeen(), 7u);
  EXPECT_TRUE(m.inputReported());
  EXPECT_TRUE(m.outputReported());
  EXPECT_EQ(m.inputTokens(), 19u);
  EXPECT_EQ(m.outputTokens(), 10u);
  EXPECT_EQ(m.bodyBytesSeen(), s.body.size());
}

TEST(UsageMeterTest, ChatStreamWithoutUsageEstimates) {
  const BuiltStream s = spend_fixtures::openAiChatStream(kSevenPieces, false);
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  feed(m, 200, kSse, s.body);
  EXPECT_EQ(m.deltasSeen(), 7u);
  EXPECT_FALSE(m.inputReported());
  EXPECT_FALSE(m.outputReported());
  EXPECT_EQ(m.inputTokens(), estimateOf(kChatRequest));
  EXPECT_EQ(m.outputTokens(), 7u);  // one token per content delta
}

TEST(UsageMeterTest, ChatStreamSplitAtEveryByteGivesTheSameCounts) {
  const BuiltStream s = spend_fixtures::openAiChatStream(kSevenPieces, true, 19, 10, "\r\n");
  for (size_t cut = 0; cut <= s.body.size(); ++cut) {
    UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
    m.onResponseHeaders(200, kSse);
    m.onResponseData(s.body.data(), cut);
    m.onResponseData(s.body.data() + cut, s.body.size() - cut);
    m.onResponseEnd();
    ASSERT_EQ(m.deltasSeen(), 7u) << "cut " << cut;
    ASSERT_EQ(m.inputTokens(), 19u) << "cut " << cut;
    ASSERT_EQ(m.outputTokens(), 10u) << "cut " << cut;
  }
}

TEST(UsageMeterTest, ChatToolCallDeltasCount) {
  const std::string head =
      R"(data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":)";
  const std::string tail = R"(,"logprobs":null,"finish_reason":null}]})"
                           "\n\n";
  const std::string body =
      head +
      R"({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null})" +
      tail + head + R"({"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]})" + tail + head +
      R"({"tool_calls":[{"index":0,"function":{"arguments":"location"}}]})" + tail + head +
      R"({"tool_calls":[{"index":0,"function":{"arguments":"\":\"Paris, France\"}"}}]})" + tail +
      R"(data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]})"
      "\n\n"
      "data: [DONE]\n\n";
  UsageMeter m(ApiKind::OpenAiChat, R"({"model":"gpt-4o","stream":true})");
  feed(m, 200, kSse, body);
  EXPECT_EQ(m.deltasSeen(), 4u);
  EXPECT_EQ(m.outputTokens(), 4u);
}

TEST(UsageMeterTest, ChatMultipleChoicesCountEachAndIgnoresAfterDone) {
  const std::string body =
      R"(data: {"object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"A"}},{"index":1,"delta":{"content":"B"}}]})"
      "\n\n"
      R"(data: {"object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":1,"delta":{"content":"C"}}]})"
      "\n\ndata: [DONE]\n\n"
      R"(data: {"object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"late"}}]})"
      "\n\n";
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  feed(m, 200, kSse, body);
  EXPECT_EQ(m.deltasSeen(), 3u);
}

// The chunk's `choices` are read without a DOM when the text is verified JSON
// (PROFILE.md, SSE per chunk): the count must be exactly what nlohmann's DOM
// gives, duplicate keys (last wins), empty values, escaped keys and invalid
// text (no deltas) included.
uint64_t domChoicesWithOutput(const std::string& choices) {
  const auto doc = nlohmann::json::parse(choices, nullptr, false);
  if (!doc.is_array()) return 0;
  uint64_t n = 0;
  for (const auto& choice : doc) {
    if (!choice.is_object() || !choice.contains("delta") || !choice["delta"].is_object()) continue;
    const auto& delta = choice["delta"];
    bool out = false;
    for (const char* key : {"content", "refusal", "reasoning_content", "reasoning"}) {
      if (delta.contains(key) && delta[key].is_string() && !delta[key].get<std::string>().empty())
        out = true;
    }
    if (delta.contains("tool_calls") && delta["tool_calls"].is_array() &&
        !delta["tool_calls"].empty())
      out = true;
    if (delta.contains("function_call") && delta["function_call"].is_object()) out = true;
    if (out) ++n;
  }
  return n;
}

uint64_t meteredChoicesWithOutput(const std::string& choices) {
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  feed(m, 200, kSse, R"(data: {"object":"chat.completion.chunk","choices":)" + choices + "}\n\n");
  return m.deltasSeen();
}

TEST(UsageMeterTest, ChatChoicesCountedWithoutADomMatchTheDom) {
  for (
      const std::string choices : {
          R"([{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}])",
          R"([{"delta":{"content":""}},{"delta":{"content":null}},{"delta":{}}])",
          R"([{"delta":{"content":"a","content":""}},{"delta":{"content":"","content":"b"}}])",
          R"([{"delta":{"content":"a"},"delta":null},{"delta":null,"delta":{"refusal":"no"}}])",
          R"([{"delta":{"tool_calls":[]}},{"delta":{"tool_calls":[ ]}},{"delta":{"tool_calls":[{}]}}])",
          R"([{"delta":{"function_call":{}}},{"delta":{"function_call":"x"}},{"delta":"content"}])",
          R"([{"delta":{"reasoning":"r"}},{"delta":{"reasoning_content":"\u00e9"}},1,null,"x"])",
          R"([{"d\u0065lta":{"content":"escaped key"}},{"delta":{"c\u006fntent":"x"}}])",
          R"([{"delta":{"content":"\ud800"}}])",                      // invalid: no deltas
          "[{\"delta\":{\"content\":\"\xff\"}}]",                     // invalid UTF-8: no deltas
          R"([{"delta":{"content":"x"},"logprobs":{"p":-1.5e-3}}])",  // a float: the library
          R"([])",
      }) {
    EXPECT_EQ(meteredChoicesWithOutput(choices), domChoicesWithOutput(choices)) << choices;
  }
}

TEST(UsageMeterTest, ChatChoicesCountedWithoutADomMatchTheDomOnRandomChunks) {
  static const std::vector<std::string> kKeys = {"content",   "refusal",      "reasoning_content",
                                                 "reasoning", "tool_calls",   "function_call",
                                                 "role",      "c\\u006fntent"};
  static const std::vector<std::string> kValues = {
      R"("")",      R"("x")", R"("\n")", "\"\xc3\xa9\"", "\"\xc3\"",      R"("\uDE00")",
      "null",       "true",   "[]",      "[ ]",          "[1]",           "{}",
      R"({"a":1})", "0",      "1.5",     "-3",           R"("assistant")"};
  std::mt19937 rng(18);
  for (int round = 0; round < 3000; ++round) {
    std::string choices = "[";
    const size_t n = rng() % 3;
    for (size_t c = 0; c < n; ++c) {
      if (c > 0) choices += ",";
      choices += R"({"index":)" + std::to_string(c);
      const size_t deltas = 1 + rng() % 2;  // sometimes a duplicate `delta`
      for (size_t d = 0; d < deltas; ++d) {
        if (rng() % 6 == 0) {
          choices += R"(,"delta":null)";
          continue;
        }
        choices += R"(,"delta":{)";
        const size_t members = rng() % 4;
        for (size_t k = 0; k < members; ++k) {
          if (k > 0) choices += ",";
          choices += "\"" + kKeys[rng() % kKeys.size()] + "\":" + kValues[rng() % kValues.size()];
        }
        choices += "}";
      }
      choices += R"(,"finish_reason":null})";
    }
    choices += "]";
    ASSERT_EQ(meteredChoicesWithOutput(choices), domChoicesWithOutput(choices)) << choices;
  }
}

TEST(UsageMeterTest, ResponseModelIsTheFallbackWhenTheRequestNamesNone) {
  // Azure deployments carry the model in the path, not the body.
  const BuiltStream s = spend_fixtures::openAiChatStream(kSevenPieces, false);
  UsageMeter m(ApiKind::OpenAiChat, R"({"messages":[],"stream":true})");
  EXPECT_EQ(m.model(), "");
  feed(m, 200, kSse, s.body);
  EXPECT_EQ(m.model(), "gpt-4o-mini-2024-07-18");
}

// ---- Responses SSE --------------------------------------------------------------

TEST(UsageMeterTest, ResponsesStreamCompletedCarriesUsage) {
  const BuiltStream s = spend_fixtures::responsesStream({"Hi", " there", "!"}, true, 37, 11);
  UsageMeter m(ApiKind::OpenAiResponses, kResponsesRequest);
  feed(m, 200, kSse, s.body);
  EXPECT_EQ(m.deltasSeen(), 3u);
  EXPECT_TRUE(m.outputReported());
  EXPECT_EQ(m.inputTokens(), 37u);
  EXPECT_EQ(m.outputTokens(), 11u);
}

TEST(UsageMeterTest, ResponsesStreamWithoutCompletedEstimates) {
  const BuiltStream s = spend_fixtures::responsesStream({"Hi", " there", "!"}, false);
  UsageMeter m(ApiKind::OpenAiResponses, kResponsesRequest);
  feed(m, 200, kSse, s.body);
  EXPECT_FALSE(m.outputReported());
  EXPECT_EQ(m.outputTokens(), 3u);
  EXPECT_EQ(m.inputTokens(), estimateOf(kResponsesRequest));
}

// Servers that omit `event:` lines: the JSON `type` decides.
std::string withoutEventLines(const std::string& body) {
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    if (nl == std::string::npos) nl = body.size() - 1;
    const std::string line = body.substr(pos, nl - pos + 1);
    if (line.rfind("event:", 0) != 0) out += line;
    pos = nl + 1;
  }
  return out;
}

TEST(UsageMeterTest, NamedEventsFallBackToJsonType) {
  const BuiltStream r = spend_fixtures::responsesStream({"a", "b"}, true, 5, 2);
  UsageMeter responses(ApiKind::OpenAiResponses, kResponsesRequest);
  feed(responses, 200, kSse, withoutEventLines(r.body));
  EXPECT_EQ(responses.deltasSeen(), 2u);
  EXPECT_EQ(responses.outputTokens(), 2u);
  EXPECT_EQ(responses.inputTokens(), 5u);

  const BuiltStream a = spend_fixtures::anthropicStream({"x", "y", "z"}, 10, 0, 0, 1, {7});
  UsageMeter anthropic(ApiKind::AnthropicMessages, kAnthropicRequest);
  feed(anthropic, 200, kSse, withoutEventLines(a.body));
  EXPECT_EQ(anthropic.deltasSeen(), 3u);
  EXPECT_EQ(anthropic.inputTokens(), 10u);
  EXPECT_EQ(anthropic.outputTokens(), 7u);
}

// ---- Anthropic SSE --------------------------------------------------------------

TEST(UsageMeterTest, AnthropicStreamInputIncludesCacheAndOutputIsCumulative) {
  // Two message_delta events with running totals 40 then 89: the answer is 89, not 129.
  const BuiltStream s = spend_fixtures::anthropicStream({"Okay", ",", " here", " it", " is"}, 472,
                                                        10, 20, 2, {40, 89});
  UsageMeter m(ApiKind::AnthropicMessages, kAnthropicRequest);
  feed(m, 200, kSse, s.body);
  EXPECT_EQ(m.model(), "claude-sonnet-4-20250514");
  EXPECT_EQ(m.deltasSeen(), 5u);
  EXPECT_TRUE(m.inputReported());
  EXPECT_TRUE(m.outputReported());
  EXPECT_EQ(m.inputTokens(), 502u);
  EXPECT_EQ(m.outputTokens(), 89u);
}

TEST(UsageMeterTest, AnthropicBeforeMessageDeltaEstimatesWithStartCountAsFloor) {
  const BuiltStream s = spend_fixtures::anthropicStream({"Hi", "!", " Sure"}, 25, 0, 0, 2, {15});
  struct Case {
    size_t received;
    uint64_t output;
  };
  // Up to the first delta: max(start output 2, 1 delta) = 2; after three deltas: 3.
  for (const Case c : {Case{s.delta_ends[0], 2}, Case{s.delta_ends[2], 3}}) {
    UsageMeter m(ApiKind::AnthropicMessages, kAnthropicRequest);
    feed(m, 200, kSse, s.body.substr(0, c.received), /*end=*/false);
    EXPECT_TRUE(m.inputReported());
    EXPECT_EQ(m.inputTokens(), 25u);
    EXPECT_FALSE(m.outputReported());
    EXPECT_EQ(m.outputTokens(), c.output) << c.received;
  }
}

TEST(UsageMeterTest, AnthropicSplitAtEveryByteGivesTheSameCounts) {
  const BuiltStream s = spend_fixtures::anthropicStream({"a", "b", "c"}, 100, 5, 6, 1, {3, 9});
  for (size_t cut = 0; cut <= s.body.size(); ++cut) {
    UsageMeter m(ApiKind::AnthropicMessages, kAnthropicRequest);
    m.onResponseHeaders(200, kSse);
    m.onResponseData(s.body.data(), cut);
    m.onResponseData(s.body.data() + cut, s.body.size() - cut);
    ASSERT_EQ(m.deltasSeen(), 3u) << cut;
    ASSERT_EQ(m.inputTokens(), 111u) << cut;
    ASSERT_EQ(m.outputTokens(), 9u) << cut;
  }
}

// ---- generic --------------------------------------------------------------------

TEST(UsageMeterTest, GenericStreamCountsDataEventsAndTakesUsage) {
  // A legacy /v1/completions stream; the word "usage" inside content is not usage.
  const std::string body =
      R"(data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":"The","index":0}],"model":"gpt-3.5-turbo-instruct"})"
      "\n\n"
      R"(data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":" \"usage\"","index":0}],"model":"gpt-3.5-turbo-instruct"})"
      "\n\n: keep-alive\n\n"
      R"(data: {"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}})"
      "\n\ndata: [DONE]\n\n";
  UsageMeter m(ApiKind::Generic,
               R"({"model":"gpt-3.5-turbo-instruct","prompt":"Say","stream":true})");
  EXPECT_EQ(m.inputTokens(), 0u);  // unknown endpoint: no estimate until it streams
  feed(m, 200, kSse, body);
  EXPECT_EQ(m.deltasSeen(), 2u);
  EXPECT_EQ(m.inputTokens(), 5u);
  EXPECT_EQ(m.outputTokens(), 3u);
}

TEST(UsageMeterTest, GenericStreamWithoutUsageEstimates) {
  const std::string request = R"({"model":"m","prompt":"abcdefgh"})";
  UsageMeter m(ApiKind::Generic, request);
  feed(m, 200, kSse, "data: one\n\ndata: two\n\nevent: x\ndata: three\n\n");
  EXPECT_EQ(m.deltasSeen(), 3u);
  EXPECT_EQ(m.outputTokens(), 3u);
  EXPECT_EQ(m.inputTokens(), estimateOf(request));
}

TEST(UsageMeterTest, GenericJsonOnlyCountsReportedUsage) {
  UsageMeter embeddings(ApiKind::Generic, R"({"model":"text-embedding-3-small","input":"hi"})");
  feed(embeddings, 200, kJson,
       R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023,-0.0093]}],)"
       R"("model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}})");
  EXPECT_TRUE(embeddings.inputReported());
  EXPECT_EQ(embeddings.inputTokens(), 8u);
  EXPECT_EQ(embeddings.outputTokens(), 0u);

  UsageMeter count_tokens(ApiKind::Generic, kAnthropicRequest);
  feed(count_tokens, 200, kJson, R"({"input_tokens":14})");
  EXPECT_EQ(count_tokens.inputTokens(), 0u);
  EXPECT_EQ(count_tokens.outputTokens(), 0u);
}

// A JSON API that is not an LLM's (a tool's, an echo): no usage, nothing to
// estimate from; the answer's model is still read when the request had none.
TEST(UsageMeterTest, GenericJsonWithoutUsageReadsOnlyTheModel) {
  UsageMeter tool(ApiKind::Generic, R"({"jsonrpc":"2.0","id":1,"method":"tools/call"})");
  feed(tool, 200, kJson,
       R"({"jsonrpc":"2.0","id":1,"model":"answer-model","result":{"content":[{"type":"text",)"
       R"("text":"a long answer with \"usage\" in it"}]}})");
  EXPECT_EQ(tool.inputTokens(), 0u);
  EXPECT_EQ(tool.outputTokens(), 0u);
  EXPECT_FALSE(tool.inputReported());
  EXPECT_EQ(tool.model(), "answer-model");

  UsageMeter named(ApiKind::Generic, R"({"model":"request-model"})");
  feed(named, 200, kJson, R"({"model":"answer-model","data":[1,2,3]})");
  EXPECT_EQ(named.model(), "request-model");
  EXPECT_EQ(named.outputTokens(), 0u);
}

// ---- non-streaming JSON -----------------------------------------------------------

struct JsonCase {
  const char* name;
  ApiKind kind;
  std::string request;
  std::string content_type;
  std::string body;
  uint64_t input;
  uint64_t output;
  bool input_reported;
  bool output_reported;
};

class UsageMeterJsonTest : public ::testing::TestWithParam<JsonCase> {};

TEST_P(UsageMeterJsonTest, ParsesUsageAtTheEnd) {
  const JsonCase& c = GetParam();
  for (size_t slice : {size_t{0}, size_t{1}, size_t{13}}) {
    UsageMeter m(c.kind, c.request);
    feed(m, 200, c.content_type, c.body, /*end=*/false, slice);
    EXPECT_FALSE(m.outputReported());  // nothing until the body is complete
    m.onResponseEnd();
    EXPECT_EQ(m.inputTokens(), c.input) << "slice " << slice;
    EXPECT_EQ(m.outputTokens(), c.output) << "slice " << slice;
    EXPECT_EQ(m.inputReported(), c.input_reported);
    EXPECT_EQ(m.outputReported(), c.output_reported);
    EXPECT_EQ(m.deltasSeen(), 0u);
  }
}

const std::string kChatJsonRequest =
    R"({"model":"gpt-4.1","messages":[{"role":"user","content":"Hello!"}]})";

INSTANTIATE_TEST_SUITE_P(
    Providers, UsageMeterJsonTest,
    ::testing::Values(
        JsonCase{
            "openai_chat", ApiKind::OpenAiChat, kChatJsonRequest, "application/json; charset=utf-8",
            R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion","created":1741569952,)"
            R"("model":"gpt-4.1-2025-04-14","choices":[{"index":0,"message":{"role":"assistant",)"
            R"("content":"Hello! How can I assist you today?","refusal":null,"annotations":[]},)"
            R"("logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,)"
            R"("total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},)"
            R"("completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,)"
            R"("accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default"})",
            19, 10, true, true},
        JsonCase{
            "openai_chat_no_usage_estimates_from_text", ApiKind::OpenAiChat, kChatJsonRequest,
            kJson,
            R"({"object":"chat.completion","model":"local","choices":[{"index":0,"message":)"
            R"({"role":"assistant","content":"Hello! How can I assist you today?"},"finish_reason":"stop"}]})",
            estimateOf(kChatJsonRequest), 9 /* ceil(34 / 4) */, false, false},
        JsonCase{
            "openai_responses", ApiKind::OpenAiResponses, kResponsesRequest, kJson,
            R"({"id":"resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41","object":"response",)"
            R"("created_at":1741476777,"status":"completed","model":"gpt-4.1-2025-04-14","output":[{"type":"message",)"
            R"("id":"msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41","status":"completed","role":"assistant",)"
            R"("content":[{"type":"output_text","text":"The image depicts a scenic landscape.","annotations":[]}]}],)"
            R"("usage":{"input_tokens":328,"input_tokens_details":{"cached_tokens":0},"output_tokens":52,)"
            R"("output_tokens_details":{"reasoning_tokens":0},"total_tokens":380}})",
            328, 52, true, true},
        JsonCase{
            "anthropic_with_cache", ApiKind::AnthropicMessages, kAnthropicRequest, kJson,
            R"({"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant",)"
            R"("model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"Hi! My name is Claude."}],)"
            R"("stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,)"
            R"("cache_creation_input_tokens":2051,"cache_read_input_tokens":7,"output_tokens":503}})",
            4153, 503, true, true},
        JsonCase{
            "anthropic_no_usage_tool_use", ApiKind::AnthropicMessages, kAnthropicRequest, kJson,
            R"({"type":"message","role":"assistant","content":[{"type":"text","text":"12345678"},)"
            R"({"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris"}}]})",
            estimateOf(kAnthropicRequest), 6 /* ceil((8 + 16) / 4) */, false, false},
        JsonCase{"structured_json_suffix", ApiKind::OpenAiChat, kChatJsonRequest,
                 "application/vnd.api+json",
                 R"({"usage":{"prompt_tokens":3,"completion_tokens":4}})", 3, 4, true, true},
        JsonCase{"unparseable", ApiKind::OpenAiChat, kChatJsonRequest, kJson, R"({"usage":{"promp)",
                 estimateOf(kChatJsonRequest), 0, false, false},
        // `usage` that is not plain (json_fields.h) is decoded by the library:
        // same answers either way.
        JsonCase{
            "usage_not_plain_float_null_array", ApiKind::OpenAiChat, kChatJsonRequest, kJson,
            R"({"usage":{"prompt_tokens":null,"input_tokens":5.0,"completion_tokens":2,"x":[1]}})",
            5, 2, true, true},
        JsonCase{"usage_duplicate_key_last_wins", ApiKind::OpenAiChat, kChatJsonRequest, kJson,
                 R"({"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens":7}})", 7, 2,
                 true, true},
        JsonCase{"usage_with_a_leading_zero_is_not_json", ApiKind::OpenAiChat, kChatJsonRequest,
                 kJson, R"({"usage":{"prompt_tokens":012,"completion_tokens":2}})",
                 estimateOf(kChatJsonRequest), 0, false, false},
        JsonCase{"usage_escaped_model", ApiKind::Generic, "", kJson,
                 R"({"model":"gpt-\u0034o","usage":{"input_tokens":3,"output_tokens":4}})", 3, 4,
                 true, true}),
    [](const ::testing::TestParamInfo<JsonCase>& info) { return std::string(info.param.name); });

TEST(UsageMeterTest, OversizedJsonStillFindsTrailingUsage) {
  // gpt-image-1 puts a multi-megabyte base64 image before `usage`.
  const std::string body =
      R"({"created":1713833628,"data":[{"b64_json":")" + std::string(5 * 1024 * 1024, 'A') +
      R"("}],"usage":{"total_tokens":4360,"input_tokens":50,"output_tokens":4310,)"
      R"("input_tokens_details":{"text_tokens":50,"image_tokens":0}}})";
  UsageMeter m(ApiKind::Generic, R"({"model":"gpt-image-1","prompt":"a cat"})");
  feed(m, 200, kJson, body, true, 65536 + 17);
  EXPECT_TRUE(m.inputReported());
  EXPECT_TRUE(m.outputReported());
  EXPECT_EQ(m.inputTokens(), 50u);
  EXPECT_EQ(m.outputTokens(), 4310u);
}

TEST(UsageMeterTest, ErrorResponsesAreNotBilled) {
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  EXPECT_EQ(m.inputTokens(), estimateOf(kChatRequest));  // before headers: may be billed
  feed(
      m, 429, kJson,
      R"({"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"},)"
      R"("usage":{"prompt_tokens":5,"completion_tokens":5}})");
  EXPECT_FALSE(m.billable());
  EXPECT_EQ(m.inputTokens(), 0u);
  EXPECT_EQ(m.outputTokens(), 0u);
  m.onBytesDelivered(1000);
  const AttemptTokens t = m.tokenCounts();
  EXPECT_EQ(t.input_tokens, 0u);
  EXPECT_EQ(t.output_tokens, 0u);
  EXPECT_FALSE(t.output_delivered);
}

TEST(UsageMeterTest, GenericBeforeHeadersAssumesNothing) {
  UsageMeter m(ApiKind::Generic, R"({"model":"x","input":"hello"})");
  EXPECT_EQ(m.inputTokens(), 0u);
  EXPECT_EQ(m.outputTokens(), 0u);
}

// ---- delivered vs leaked ------------------------------------------------------------

struct CancelCase {
  const char* name;
  // Offsets are resolved against the 7-piece chat stream's delta ends by a lambda.
  size_t (*received)(const BuiltStream&);
  size_t (*delivered)(const BuiltStream&);
  uint64_t deltas_seen;
  uint64_t deltas_delivered;
};

class UsageMeterCancelTest : public ::testing::TestWithParam<CancelCase> {};

// The upstream is torn down after `received` bytes (no usage ever arrives) and
// the client had `delivered` bytes when it left.
TEST_P(UsageMeterCancelTest, DeliveredIsDeltasInDeliveredEvents) {
  const CancelCase& c = GetParam();
  const BuiltStream s = spend_fixtures::openAiChatStream(kSevenPieces, false);
  const size_t received = c.received(s);
  const size_t delivered = c.delivered(s);
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  m.onResponseHeaders(200, kSse);
  // Interleave as the proxy would: data in, then the client drains it.
  for (size_t pos = 0; pos < received; pos += 50) {
    const size_t n = std::min<size_t>(50, received - pos);
    m.onResponseData(s.body.data() + pos, n);
    m.onBytesDelivered(std::min(pos + n, delivered));
  }
  EXPECT_EQ(m.deltasSeen(), c.deltas_seen);
  EXPECT_EQ(m.deltasDelivered(), c.deltas_delivered);
  EXPECT_EQ(m.outputTokens(), c.deltas_seen);
  EXPECT_EQ(m.deliveredOutputTokens(), c.deltas_delivered);
  EXPECT_EQ(m.anyOutputDelivered(), c.deltas_delivered > 0);

  const SpendSplit split =
      splitSpend(m.tokenCounts(), AttemptDisposition::Cancelled, ModelPrice{"gpt-4o*", 2.5, 10});
  EXPECT_EQ(split.delivered_output_tokens, c.deltas_delivered);
  EXPECT_EQ(split.leaked_output_tokens, c.deltas_seen - c.deltas_delivered);
  EXPECT_EQ(split.leaked_input_tokens, c.deltas_delivered == 0 ? estimateOf(kChatRequest) : 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, UsageMeterCancelTest,
    ::testing::Values(CancelCase{"nothing_delivered",
                                 [](const BuiltStream& s) { return s.delta_ends[3]; },
                                 [](const BuiltStream&) -> size_t { return 0; }, 4, 0},
                      CancelCase{"cut_inside_first_delta_event",
                                 [](const BuiltStream& s) { return s.delta_ends[3]; },
                                 [](const BuiltStream& s) { return s.delta_ends[0] - 1; }, 4, 0},
                      CancelCase{"cut_exactly_after_first_delta",
                                 [](const BuiltStream& s) { return s.delta_ends[3]; },
                                 [](const BuiltStream& s) { return s.delta_ends[0]; }, 4, 1},
                      CancelCase{"cut_inside_fourth_delta_event",
                                 [](const BuiltStream& s) { return s.delta_ends[4] + 20; },
                                 [](const BuiltStream& s) { return s.delta_ends[2] + 30; }, 5, 3},
                      CancelCase{"upstream_cut_inside_event_everything_received_delivered",
                                 [](const BuiltStream& s) { return s.delta_ends[5] + 40; },
                                 [](const BuiltStream& s) { return s.delta_ends[5] + 40; }, 6, 6},
                      CancelCase{"whole_stream", [](const BuiltStream& s) { return s.body.size(); },
                                 [](const BuiltStream& s) { return s.body.size(); }, 7, 7}),
    [](const ::testing::TestParamInfo<CancelCase>& info) { return std::string(info.param.name); });

TEST(UsageMeterTest, UsageThatRacedTheCancelIsScaledByDeliveredShare) {
  // The final usage chunk (14 tokens over 7 deltas) arrived, but the client left
  // after 4 deltas: delivered = round(14 * 4/7) = 8, leaked = 6.
  const BuiltStream s = spend_fixtures::openAiChatStream(kSevenPieces, true, 19, 14);
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  feed(m, 200, kSse, s.body);
  m.onBytesDelivered(s.delta_ends[3] + 5);
  EXPECT_EQ(m.outputTokens(), 14u);
  EXPECT_EQ(m.deltasDelivered(), 4u);
  EXPECT_EQ(m.deliveredOutputTokens(), 8u);
  // Everything delivered: all 14 tokens, not the 7 deltas.
  m.onBytesDelivered(s.body.size());
  EXPECT_EQ(m.deliveredOutputTokens(), 14u);
  // ...and delivering every delta but not the usage chunk is the same.
  UsageMeter n(ApiKind::OpenAiChat, kChatRequest);
  feed(n, 200, kSse, s.body);
  n.onBytesDelivered(s.delta_ends.back());
  EXPECT_EQ(n.deliveredOutputTokens(), 14u);
}

TEST(UsageMeterTest, AnthropicCancelMidStream) {
  const BuiltStream s = spend_fixtures::anthropicStream({"One", " two", " three", " four", " five"},
                                                        472, 10, 20, 2, {89});
  UsageMeter m(ApiKind::AnthropicMessages, kAnthropicRequest);
  feed(m, 200, kSse, s.body.substr(0, s.delta_ends[2]), /*end=*/false);  // torn down here
  m.onBytesDelivered(s.delta_ends[0] + 3);
  EXPECT_EQ(m.inputTokens(), 502u);
  EXPECT_EQ(m.outputTokens(), 3u);  // max(2 at start, 3 deltas)
  EXPECT_EQ(m.deliveredOutputTokens(), 1u);
  const SpendSplit split =
      splitSpend(m.tokenCounts(), AttemptDisposition::Cancelled, ModelPrice{"claude-*", 3.0, 15.0});
  EXPECT_EQ(split.delivered_input_tokens, 502u);
  EXPECT_EQ(split.delivered_output_tokens, 1u);
  EXPECT_EQ(split.leaked_output_tokens, 2u);
  EXPECT_DOUBLE_EQ(split.leaked_usd, 2 * 15.0 / 1e6);
}

TEST(UsageMeterTest, DeliveryReportedAheadOfData) {
  const BuiltStream s = spend_fixtures::openAiChatStream(kSevenPieces, false);
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  m.onResponseHeaders(200, kSse);
  m.onBytesDelivered(s.delta_ends[1]);
  m.onBytesDelivered(10);  // going backwards is ignored
  m.onResponseData(s.body);
  EXPECT_EQ(m.bodyBytesDelivered(), s.delta_ends[1]);
  EXPECT_EQ(m.deltasDelivered(), 2u);

  // One byte short of an event's end, reported ahead: that event is not delivered.
  UsageMeter short_by_one(ApiKind::OpenAiChat, kChatRequest);
  short_by_one.onResponseHeaders(200, kSse);
  short_by_one.onBytesDelivered(s.delta_ends[2] - 1);
  short_by_one.onResponseData(s.body);
  EXPECT_EQ(short_by_one.deltasDelivered(), 2u);
}

TEST(UsageMeterTest, JsonIsDeliveredAllOrNothing) {
  const std::string body =
      R"({"object":"chat.completion","choices":[{"message":{"content":"hi"}}],)"
      R"("usage":{"prompt_tokens":30,"completion_tokens":12}})";
  UsageMeter partial(ApiKind::OpenAiChat, kChatJsonRequest);
  feed(partial, 200, kJson, body);
  partial.onBytesDelivered(body.size() - 1);
  EXPECT_EQ(partial.deliveredOutputTokens(), 0u);
  EXPECT_FALSE(partial.anyOutputDelivered());
  const SpendSplit lost =
      splitSpend(partial.tokenCounts(), AttemptDisposition::Cancelled, ModelPrice{"x", 1, 1});
  EXPECT_EQ(lost.leaked_input_tokens, 30u);
  EXPECT_EQ(lost.leaked_output_tokens, 12u);

  UsageMeter whole(ApiKind::OpenAiChat, kChatJsonRequest);
  feed(whole, 200, kJson, body);
  whole.onBytesDelivered(body.size());
  EXPECT_TRUE(whole.deliveredAll());
  EXPECT_EQ(whole.deliveredOutputTokens(), 12u);
  EXPECT_TRUE(whole.anyOutputDelivered());
}

TEST(UsageMeterTest, FullyDeliveredResponseWithNoOutputKeepsInputDelivered) {
  const std::string body =
      R"({"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}})";
  UsageMeter m(ApiKind::Generic, R"({"model":"text-embedding-3-small","input":"hi"})");
  feed(m, 200, kJson, body);
  m.onBytesDelivered(body.size());
  const SpendSplit split =
      splitSpend(m.tokenCounts(), AttemptDisposition::Completed, ModelPrice{"text-*", 0.02, 0});
  EXPECT_EQ(split.delivered_input_tokens, 8u);
  EXPECT_EQ(split.leaked_input_tokens, 0u);
}

TEST(UsageMeterTest, PendingDeltaListIsBoundedAndOnlyUndercounts) {
  // 10000 deltas with no delivery report until the end: the pending list stays
  // under its cap by coalescing, full delivery still counts every delta, and a
  // cut anywhere never over-counts (and undercounts by only a few).
  std::string body;
  for (int i = 0; i < 10000; ++i) body += "data: x\n\n";  // 9 bytes each
  UsageMeter all(ApiKind::Generic, "{}");
  feed(all, 200, kSse, body, true, 4096);
  EXPECT_EQ(all.deltasSeen(), 10000u);
  EXPECT_LE(all.pendingDeltaEntries(), UsageMeter::kMaxPendingDeltaEntries);
  all.onBytesDelivered(body.size());
  EXPECT_EQ(all.deltasDelivered(), 10000u);
  EXPECT_EQ(all.pendingDeltaEntries(), 0u);

  for (uint64_t k : {1u, 777u, 3001u, 4097u, 5000u, 8191u, 9999u}) {
    UsageMeter cut(ApiKind::Generic, "{}");
    feed(cut, 200, kSse, body, false, 4096);
    cut.onBytesDelivered(k * 9 + 4);  // inside event k+1
    EXPECT_LE(cut.deltasDelivered(), k) << k;
    EXPECT_GE(cut.deltasDelivered() + 16, k) << k;
  }

  // Reporting as bytes drain keeps nothing pending at all.
  UsageMeter streaming(ApiKind::Generic, "{}");
  streaming.onResponseHeaders(200, kSse);
  for (size_t pos = 0; pos < body.size(); pos += 900) {
    streaming.onResponseData(body.data() + pos, std::min<size_t>(900, body.size() - pos));
    streaming.onBytesDelivered(std::min<size_t>(pos + 900, body.size()));
    ASSERT_EQ(streaming.pendingDeltaEntries(), 0u);
  }
  EXPECT_EQ(streaming.deltasDelivered(), 10000u);
}

TEST(UsageMeterTest, ACutNearTheEndIsExactWithoutInterimReports) {
  // sluice's spend filter reports delivery once, when the attempt ends, and a
  // client's cut lies at most sluice's own buffer behind the end: among the
  // newest quarter of the capped list, which coalescing leaves exact wherever
  // the last coalescing happened.
  constexpr size_t kExact = UsageMeter::kMaxPendingDeltaEntries / 4;
  std::string body;
  for (int i = 0; i < 12000; ++i) body += "data: x\n\n";  // 9 bytes each
  for (size_t n = 10000; n < 12000; n += 13) {
    UsageMeter m(ApiKind::Generic, "{}");
    feed(m, 200, kSse, body.substr(0, n * 9), false, 4096);
    ASSERT_LE(m.pendingDeltaEntries(), UsageMeter::kMaxPendingDeltaEntries);
    for (size_t back : {kExact, size_t{500}, size_t{3}, size_t{2}, size_t{1}}) {
      m.onBytesDelivered((n - back) * 9 + 4);  // inside the event after the cut
      ASSERT_EQ(m.deltasDelivered(), n - back) << n << " deltas, cut " << back << " from the end";
    }
  }
}

TEST(UsageMeterTest, OversizedEventCountsAsOneDelta) {
  const std::string huge(2 * 1024 * 1024, 'z');
  const std::string body = R"(data: {"choices":[{"index":0,"delta":{"content":"a"}}]})"
                           "\n\n"
                           R"(data: {"choices":[{"index":0,"delta":{"content":")" +
                           huge + R"("}}]})" +
                           "\n\n"
                           R"(data: {"choices":[{"index":0,"delta":{"content":"b"}}]})"
                           "\n\ndata: [DONE]\n\n";
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  feed(m, 200, kSse, body, true, 8192);
  EXPECT_EQ(m.eventsSkipped(), 1u);
  EXPECT_EQ(m.deltasSeen(), 3u);
}

TEST(UsageMeterTest, IgnoresDataAfterEndAndRepeatedHeaders) {
  const BuiltStream s = spend_fixtures::openAiChatStream({"a", "b"}, false);
  UsageMeter m(ApiKind::OpenAiChat, kChatRequest);
  feed(m, 200, kSse, s.body);
  m.onResponseHeaders(500, kJson);
  m.onResponseData(s.body);
  EXPECT_TRUE(m.billable());
  EXPECT_EQ(m.deltasSeen(), 2u);
  EXPECT_EQ(m.bodyBytesSeen(), s.body.size());
  EXPECT_TRUE(m.responseComplete());
}

// ---- the plain fast paths agree with the DOM ---------------------------

// A request's `model` that is a plain string is taken as it is (no
// DOM); anything else is decoded by the library. Random models of every
// kind must come out as nlohmann reads them (one `model` member: the scan
// takes the first, a DOM the last).
TEST(UsageMeterTest, PlainModelStringsMatchTheLibraryOnRandomModels) {
  std::mt19937 rng(88);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> kPieces = {
      "gpt-4o",   "a",    " ",    "\\\"", "\\\\",    "\\u0041", "\\n",           "\t",
      "\xc3\xa9", "\x7f", "\x01", "\xff", "claude-", "/",       "\\ud83d\\ude00"};
  for (int round = 0; round < 3000; ++round) {
    std::string model;
    const size_t pieces = pick(8) == 0 ? 200 : pick(6);
    for (size_t k = 0; k < pieces; ++k) model += kPieces[pick(kPieces.size())];
    const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"model":")" + model +
                             R"(","stream":false})";
    std::string want;
    const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc["model"].is_string() &&
        doc["model"].get_ref<const std::string&>().size() <= 512) {
      want = doc["model"].get<std::string>();
    }
    EXPECT_EQ(MeteredRequest::fromBody(ApiKind::OpenAiChat, body).model, want) << body;
  }
}

// `usage` read in one pass (vouched for and counted together)
// must give what the library gives. The same body with a member whose key is
// escaped put first in `usage` ("\u0078": never counted) forces the DOM path:
// both meters must agree on every random usage object, plain or not.
TEST(UsageMeterTest, UsageReadWithoutADomMatchesTheDomOnRandomUsage) {
  std::mt19937 rng(808);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> kKeys = {"prompt_tokens",
                                          "input_tokens",
                                          "cache_creation_input_tokens",
                                          "cache_read_input_tokens",
                                          "completion_tokens",
                                          "output_tokens",
                                          "total_tokens",
                                          "prompt_tokens_details"};
  const std::vector<std::string> kScalars = {"0",
                                             "19",
                                             "18446744073709551615",
                                             "18446744073709551616",
                                             "012",
                                             "-3",
                                             "5.0",
                                             "1e2",
                                             "null",
                                             "true",
                                             "false",
                                             "\"7\"",
                                             "[1]",
                                             "\"\\u0037\""};
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    if (depth > 0 && pick(5) == 0) {
      std::string obj = "{";
      for (size_t n = pick(3); n > 0; --n) {
        if (obj.size() > 1) obj += ",";
        obj += "\"" + kKeys[pick(kKeys.size())] + "\":" + value(depth - 1);
      }
      return obj + "}";
    }
    return kScalars[pick(kScalars.size())];
  };
  for (int round = 0; round < 3000; ++round) {
    std::string members;
    for (size_t n = pick(7); n > 0; --n) {
      if (!members.empty()) members += pick(4) == 0 ? " , " : ",";
      members += "\"" + kKeys[pick(kKeys.size())] + "\":" + (pick(4) == 0 ? " " : "") + value(4);
    }
    const auto body = [&](bool force_dom) {
      std::string usage = "{";
      if (force_dom) usage += members.empty() ? R"("\u0078":[])" : R"("\u0078":[],)";
      return R"({"id":"c","model":"gpt-4o","choices":[],"usage":)" + usage + members + "}}";
    };
    UsageMeter fast(ApiKind::OpenAiChat, kChatJsonRequest);
    UsageMeter dom(ApiKind::OpenAiChat, kChatJsonRequest);
    feed(fast, 200, kJson, body(false));
    feed(dom, 200, kJson, body(true));
    ASSERT_EQ(fast.inputReported(), dom.inputReported()) << body(false);
    ASSERT_EQ(fast.outputReported(), dom.outputReported()) << body(false);
    ASSERT_EQ(fast.inputTokens(), dom.inputTokens()) << body(false);
    ASSERT_EQ(fast.outputTokens(), dom.outputTokens()) << body(false);
  }
}

}  // namespace
}  // namespace sluice
