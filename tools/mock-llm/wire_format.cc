#include "tools/mock-llm/wire_format.h"

#include <nlohmann/json.hpp>

namespace mockllm {

namespace {

// ordered_json keeps keys in the order the providers send them.
using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sseData(const Json& j) { return "data: " + dump(j) + "\n\n"; }

std::string sseEvent(std::string_view name, const Json& j) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += dump(j);
  out += "\n\n";
  return out;
}

Json chatUsage(const Generation& g) {
  return Json{{"prompt_tokens", g.input_tokens},
              {"completion_tokens", g.output_tokens},
              {"total_tokens", g.input_tokens + g.output_tokens},
              {"prompt_tokens_details", {{"cached_tokens", 0}}},
              {"completion_tokens_details", {{"reasoning_tokens", 0}}}};
}

Json responsesUsage(const Generation& g) {
  return Json{{"input_tokens", g.input_tokens},
              {"input_tokens_details", {{"cached_tokens", 0}}},
              {"output_tokens", g.output_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", g.input_tokens + g.output_tokens}};
}

Json chatCompletion(const Generation& g) {
  return Json{
      {"id", "chatcmpl-" + g.id},
      {"object", "chat.completion"},
      {"created", g.created},
      {"model", g.model},
      {"choices",
       Json::array({Json{
           {"index", 0},
           {"message",
            {{"role", "assistant"}, {"content", fullText(g.output_tokens)}, {"refusal", nullptr}}},
           {"logprobs", nullptr},
           {"finish_reason", g.truncated ? "length" : "stop"}}})},
      {"usage", chatUsage(g)},
      {"system_fingerprint", "fp_mock"},
  };
}

Json responsesMessageItem(const Generation& g, bool done) {
  Json content = Json::array();
  if (done) {
    content.push_back(Json{{"type", "output_text"},
                           {"text", fullText(g.output_tokens)},
                           {"annotations", Json::array()}});
  }
  return Json{{"id", "msg_" + g.id},
              {"type", "message"},
              {"status", done ? (g.truncated ? "incomplete" : "completed") : "in_progress"},
              {"role", "assistant"},
              {"content", std::move(content)}};
}

Json responsesObject(const Generation& g, bool done) {
  Json incomplete = nullptr;
  if (done && g.truncated) incomplete = Json{{"reason", "max_output_tokens"}};
  Json output = Json::array();
  if (done) output.push_back(responsesMessageItem(g, true));
  return Json{{"id", "resp_" + g.id},
              {"object", "response"},
              {"created_at", g.created},
              {"status", done ? (g.truncated ? "incomplete" : "completed") : "in_progress"},
              {"error", nullptr},
              {"incomplete_details", std::move(incomplete)},
              {"model", g.model},
              {"output", std::move(output)},
              {"usage", done ? responsesUsage(g) : Json(nullptr)}};
}

Json anthropicMessage(const Generation& g) {
  return Json{
      {"id", "msg_" + g.id},
      {"type", "message"},
      {"role", "assistant"},
      {"model", g.model},
      {"content", Json::array({Json{{"type", "text"}, {"text", fullText(g.output_tokens)}}})},
      {"stop_reason", g.truncated ? "max_tokens" : "end_turn"},
      {"stop_sequence", nullptr},
      {"usage", {{"input_tokens", g.input_tokens}, {"output_tokens", g.output_tokens}}}};
}

// --- OpenAI Chat Completions: `data: {chunk}` ... `data: [DONE]` -------------
class ChatStream final : public SseStream {
 public:
  explicit ChatStream(const Generation& g) : g_(g) {
    // Token chunks are hot: build their fixed parts once.
    head_ = "data: {\"id\":" + jsonQuote("chatcmpl-" + g.id) +
            ",\"object\":\"chat.completion.chunk\",\"created\":" + std::to_string(g.created) +
            ",\"model\":" + jsonQuote(g.model) +
            ",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{";
    tail_ = "},\"logprobs\":null,\"finish_reason\":null}]";
    if (g.include_usage) tail_ += ",\"usage\":null";
    tail_ += "}\n\n";
  }

  std::vector<SsePiece> prologue() override {
    if (g_.output_tokens > 0) return {};
    // No content at all: the role still arrives in a chunk of its own.
    return {SsePiece{head_ + "\"role\":\"assistant\",\"content\":\"\"" + tail_, false}};
  }

  std::string token(int64_t index) override {
    std::string out = head_;
    if (index == 0) out += "\"role\":\"assistant\",";
    out += "\"content\":\"";
    out += tokenText(index);
    out += "\"";
    out += tail_;
    return out;
  }

  std::vector<SsePiece> epilogue() override {
    std::vector<SsePiece> out;
    Json finish = base();
    finish["choices"] = Json::array({Json{{"index", 0},
                                          {"delta", Json::object()},
                                          {"logprobs", nullptr},
                                          {"finish_reason", g_.truncated ? "length" : "stop"}}});
    if (g_.include_usage) finish["usage"] = nullptr;
    out.push_back({sseData(finish), false});
    if (g_.include_usage) {
      Json usage = base();
      usage["choices"] = Json::array();
      usage["usage"] = chatUsage(g_);
      out.push_back({sseData(usage), true});
    }
    out.push_back({"data: [DONE]\n\n", false});
    return out;
  }

 private:
  Json base() const {
    return Json{{"id", "chatcmpl-" + g_.id},
                {"object", "chat.completion.chunk"},
                {"created", g_.created},
                {"model", g_.model},
                {"system_fingerprint", "fp_mock"}};
  }

  Generation g_;
  std::string head_;
  std::string tail_;
};

// --- OpenAI Responses: typed `event:` / `data:` pairs -------------------------
class ResponsesStream final : public SseStream {
 public:
  explicit ResponsesStream(const Generation& g) : g_(g) {
    token_head_ =
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
        "\"item_id\":" +
        jsonQuote("msg_" + g.id) + ",\"output_index\":0,\"content_index\":0,\"delta\":\"";
  }

  std::vector<SsePiece> prologue() override {
    std::vector<SsePiece> out;
    out.push_back({event("response.created", {{"response", responsesObject(g_, false)}}), false});
    out.push_back(
        {event("response.in_progress", {{"response", responsesObject(g_, false)}}), false});
    out.push_back({event("response.output_item.added",
                         {{"output_index", 0}, {"item", responsesMessageItem(g_, false)}}),
                   false});
    out.push_back(
        {event("response.content_part.added",
               {{"item_id", "msg_" + g_.id},
                {"output_index", 0},
                {"content_index", 0},
                {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}}),
         false});
    return out;
  }

  std::string token(int64_t index) override {
    std::string out = token_head_;
    out += tokenText(index);
    out += "\",\"logprobs\":[],\"sequence_number\":";
    out += std::to_string(seq_++);
    out += "}\n\n";
    return out;
  }

  std::vector<SsePiece> epilogue() override {
    const std::string text = fullText(g_.output_tokens);
    std::vector<SsePiece> out;
    out.push_back({event("response.output_text.done", {{"item_id", "msg_" + g_.id},
                                                       {"output_index", 0},
                                                       {"content_index", 0},
                                                       {"text", text},
                                                       {"logprobs", Json::array()}}),
                   false});
    out.push_back(
        {event(
             "response.content_part.done",
             {{"item_id", "msg_" + g_.id},
              {"output_index", 0},
              {"content_index", 0},
              {"part", {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}}}}),
         false});
    out.push_back({event("response.output_item.done",
                         {{"output_index", 0}, {"item", responsesMessageItem(g_, true)}}),
                   false});
    out.push_back({event("response.completed", {{"response", responsesObject(g_, true)}}), true});
    return out;
  }

 private:
  // `{"type": name, ...fields, "sequence_number": n}` as `event: name\ndata: ...`.
  std::string event(std::string_view name, Json fields) {
    Json j{{"type", name}};
    for (auto& [k, v] : fields.items()) j[k] = std::move(v);
    j["sequence_number"] = seq_++;
    return sseEvent(name, j);
  }

  Generation g_;
  std::string token_head_;
  int64_t seq_ = 0;
};

// --- Anthropic Messages --------------------------------------------------------
class MessagesStream final : public SseStream {
 public:
  explicit MessagesStream(const Generation& g) : g_(g) {}

  std::vector<SsePiece> prologue() override {
    Json message{{"id", "msg_" + g_.id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", g_.model},
                 {"content", Json::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage", {{"input_tokens", g_.input_tokens}, {"output_tokens", 1}}}};
    std::vector<SsePiece> out;
    out.push_back(
        {sseEvent("message_start", Json{{"type", "message_start"}, {"message", message}}), false});
    out.push_back(
        {sseEvent("content_block_start", Json{{"type", "content_block_start"},
                                              {"index", 0},
                                              {"content_block", {{"type", "text"}, {"text", ""}}}}),
         false});
    out.push_back({"event: ping\ndata: {\"type\": \"ping\"}\n\n", false});
    return out;
  }

  std::string token(int64_t index) override {
    std::string out =
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
        "\"delta\":{\"type\":\"text_delta\",\"text\":\"";
    out += tokenText(index);
    out += "\"}}\n\n";
    return out;
  }

  std::vector<SsePiece> epilogue() override {
    std::vector<SsePiece> out;
    out.push_back(
        {sseEvent("content_block_stop", Json{{"type", "content_block_stop"}, {"index", 0}}),
         false});
    out.push_back(
        {sseEvent("message_delta", Json{{"type", "message_delta"},
                                        {"delta",
                                         {{"stop_reason", g_.truncated ? "max_tokens" : "end_turn"},
                                          {"stop_sequence", nullptr}}},
                                        {"usage", {{"output_tokens", g_.output_tokens}}}}),
         true});
    out.push_back({sseEvent("message_stop", Json{{"type", "message_stop"}}), false});
    return out;
  }

 private:
  Generation g_;
};

std::string openAiErrorType(int status) {
  if (status == 429) return "requests";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

std::string anthropicErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

std::string tokenText(int64_t index) { return "tok" + std::to_string(index) + " "; }

std::string fullText(int64_t count) {
  std::string out;
  out.reserve(static_cast<size_t>(count) * 7);
  for (int64_t i = 0; i < count; ++i) out += tokenText(i);
  return out;
}

std::string jsonQuote(std::string_view s) { return dump(Json(std::string(s))); }

std::string nonStreamingBody(const Generation& g) {
  switch (g.api) {
    case Api::kChatCompletions:
      return dump(chatCompletion(g));
    case Api::kResponses:
      return dump(responsesObject(g, true));
    case Api::kMessages:
      return dump(anthropicMessage(g));
  }
  return "{}";
}

SseStreamPtr makeSseStream(const Generation& g) {
  switch (g.api) {
    case Api::kChatCompletions:
      return std::make_unique<ChatStream>(g);
    case Api::kResponses:
      return std::make_unique<ResponsesStream>(g);
    case Api::kMessages:
      return std::make_unique<MessagesStream>(g);
  }
  return nullptr;
}

ErrorBody makeErrorBody(ErrorFlavor flavor, int status, std::string_view message, bool problem,
                        std::optional<bool> retriable) {
  if (problem) {
    Json j{{"type", "about:blank"},
           {"title", std::string(reasonPhrase(status))},
           {"status", status},
           {"detail", std::string(message)}};
    if (retriable) j["is_retriable"] = *retriable;
    return {"application/problem+json", dump(j)};
  }
  if (flavor == ErrorFlavor::kAnthropic) {
    return {"application/json",
            dump(Json{{"type", "error"},
                      {"error", {{"type", anthropicErrorType(status)}, {"message", message}}}})};
  }
  Json code = nullptr;
  if (status == 429) code = "rate_limit_exceeded";
  return {"application/json", dump(Json{{"error",
                                         {{"message", message},
                                          {"type", openAiErrorType(status)},
                                          {"param", nullptr},
                                          {"code", std::move(code)}}}})};
}

std::string modelsBody() {
  Json data = Json::array();
  const std::pair<const char*, const char*> models[] = {
      {"gpt-4o", "system"},
      {"gpt-4o-mini", "system"},
      {"o3-mini", "system"},
      {"text-embedding-3-small", "system"},
  };
  for (const auto& [id, owner] : models) {
    data.push_back(
        Json{{"id", id}, {"object", "model"}, {"created", 1715367049}, {"owned_by", owner}});
  }
  return dump(Json{{"object", "list"}, {"data", std::move(data)}});
}

std::string_view reasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 402:
      return "Payment Required";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 425:
      return "Too Early";
    case 429:
      return "Too Many Requests";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 529:
      return "Site Overloaded";
    default:
      return "Unknown";
  }
}

}  // namespace mockllm
