#include "filters/spend/usage_meter.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "common/http_headers.h"
#include "common/json_fields.h"

namespace sluice {

namespace {

using nlohmann::json;

// Model names longer than this are treated as unknown rather than stored.
constexpr size_t kMaxModelBytes = 512;

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// `s` equals the lower-case `lower` when its ASCII letters are lower-cased
// (no copy: a Content-Type longer than 15 bytes cost an allocation per answer).
bool equalsLowerAscii(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != lower[i]) return false;
  }
  return true;
}

// Never throws: a parse error yields a discarded value.
json parseJson(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

const json* objectField(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? &*it : nullptr;
}

const json* arrayField(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it != obj.end() && it->is_array() ? &*it : nullptr;
}

std::string_view stringField(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return {};
  return it->get_ref<const std::string&>();
}

std::optional<uint64_t> countField(const json& obj, const char* key) {
  if (!obj.is_object()) return std::nullopt;
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    return v >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(v)) : std::nullopt;
  }
  if (it->is_number_float()) {
    const double v = it->get<double>();
    return v >= 0 && v < 1e15 ? std::optional<uint64_t>(static_cast<uint64_t>(v)) : std::nullopt;
  }
  return std::nullopt;
}

struct UsageCounts {
  std::optional<uint64_t> input;
  std::optional<uint64_t> output;
};

// The counts a `usage` object may hold, by index into kUsageKeys.
enum UsageField : size_t {
  kPromptTokens,
  kInputTokens,
  kCacheCreationInputTokens,
  kCacheReadInputTokens,
  kCompletionTokens,
  kOutputTokens,
};
constexpr std::string_view kUsageKeys[] = {
    "prompt_tokens",           "input_tokens",      "cache_creation_input_tokens",
    "cache_read_input_tokens", "completion_tokens", "output_tokens"};
constexpr size_t kUsageKeyCount = std::size(kUsageKeys);
static_assert(kOutputTokens + 1 == kUsageKeyCount);

// One reader for every provider's `usage` object: OpenAI chat names the counts
// prompt/completion_tokens, Responses and Anthropic input/output_tokens, and
// Anthropic reports prompt-cache tokens separately from input_tokens (OpenAI's
// cached_tokens are a detail already inside the input count). `count(field)`
// reads kUsageKeys[field].
template <typename CountOf>
UsageCounts combineUsage(const CountOf& count) {
  UsageCounts counts;
  counts.input = count(kPromptTokens);
  if (!counts.input) counts.input = count(kInputTokens);
  if (counts.input) {
    *counts.input += count(kCacheCreationInputTokens).value_or(0);
    *counts.input += count(kCacheReadInputTokens).value_or(0);
  }
  counts.output = count(kCompletionTokens);
  if (!counts.output) counts.output = count(kOutputTokens);
  return counts;
}

UsageCounts readUsage(const json& usage) {
  // (The names are literals: data() is their NUL-terminated text.)
  return combineUsage(
      [&](UsageField field) { return countField(usage, kUsageKeys[field].data()); });
}

// The raw text of a `usage` member. Providers write it small and plain (flat
// counts, a `*_details` object of counts): then it is read without a DOM,
// with exactly the result a full parse gives (json_fields.h); anything else
// is parsed. nullopt when it is not an object.
// How deep a plain `usage` may nest.
constexpr int kPlainUsageDepth = 3;

// readUsageText() once its text was read as a plain object (`plain`, with
// `values` the counts of kUsageKeys) or not: the combined counts, or the DOM's
// read of a `usage` that is not plain.
std::optional<UsageCounts> usageFromText(std::string_view text, bool plain,
                                         const std::optional<uint64_t>* values) {
  if (text.empty() || text.front() != '{') return std::nullopt;
  if (!plain) {
    const json usage = parseJson(text);
    if (!usage.is_object()) return std::nullopt;
    return readUsage(usage);
  }
  return combineUsage([&](UsageField field) { return values[field]; });
}

std::optional<UsageCounts> readUsageText(std::string_view text) {
  if (text.empty() || text.front() != '{') return std::nullopt;
  std::optional<uint64_t> values[kUsageKeyCount];
  // One pass that both vouches for the object (isPlainObject(text, 3)) and
  // reads the counts (readPlainObject(): no member scan, no second pass over
  // the nested objects; PROFILE.md, seventh round). An object that is not
  // plain goes to the DOM.
  const bool plain = readPlainObject(text, kPlainUsageDepth, kUsageKeys, kUsageKeyCount, values);
  return usageFromText(text, plain, values);
}

// The decoded characters of a JSON string value (quotes included in `text`),
// without a DOM when it needs no unescaping; nullopt when it is not a string.
std::optional<std::string> readStringText(std::string_view text) {
  if (text.empty() || text.front() != '"') return std::nullopt;
  if (const auto plain = plainString(text)) return std::string(*plain);
  json value = parseJson(text);
  if (!value.is_string()) return std::nullopt;
  return std::move(value.get_ref<std::string&>());
}

bool nonEmptyString(const json& obj, const char* key) { return !stringField(obj, key).empty(); }

// An OpenAI chat `choices[].delta` that carries generated output.
bool chatDeltaHasOutput(const json& delta) {
  if (nonEmptyString(delta, "content") || nonEmptyString(delta, "refusal") ||
      nonEmptyString(delta, "reasoning_content") || nonEmptyString(delta, "reasoning")) {
    return true;
  }
  const json* tool_calls = arrayField(delta, "tool_calls");
  return (tool_calls && !tool_calls->empty()) || objectField(delta, "function_call");
}

// How many choices of a chat chunk's `choices` carry output in their delta
// (with n > 1, each choice's delta is a token of its own).
uint64_t domChoicesWithOutput(const json& choices) {
  uint64_t with_output = 0;
  if (!choices.is_array()) return 0;
  for (const json& choice : choices) {
    const json* delta = objectField(choice, "delta");
    if (delta && chatDeltaHasOutput(*delta)) ++with_output;
  }
  return with_output;
}

// Bytes of generated text in a non-streaming body, for the estimate when it has
// no `usage`: chat/completions choices, Responses output items, Anthropic content.
uint64_t generatedTextBytes(const json& doc) {
  uint64_t bytes = 0;
  auto add = [&](const json& obj, const char* key) { bytes += stringField(obj, key).size(); };
  if (const json* choices = arrayField(doc, "choices")) {
    for (const json& choice : *choices) {
      add(choice, "text");
      if (const json* message = objectField(choice, "message")) {
        add(*message, "content");
        add(*message, "refusal");
        add(*message, "reasoning_content");
        if (const json* calls = arrayField(*message, "tool_calls")) {
          for (const json& call : *calls) {
            if (const json* fn = objectField(call, "function")) add(*fn, "arguments");
          }
        }
      }
    }
  }
  if (const json* output = arrayField(doc, "output")) {
    for (const json& item : *output) {
      add(item, "arguments");
      if (const json* parts = arrayField(item, "content")) {
        for (const json& part : *parts) add(part, "text");
      }
    }
  }
  if (const json* content = arrayField(doc, "content")) {
    for (const json& block : *content) {
      add(block, "text");
      add(block, "thinking");
      if (const json* input = objectField(block, "input")) {
        bytes += input->dump(-1, ' ', false, json::error_handler_t::replace).size();
      }
    }
  }
  return bytes;
}

// Index one past the '}' closing the object that opens at `open`, or npos.
size_t matchObjectEnd(std::string_view s, size_t open) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// The last `"usage": {...}` object in the tail of an oversized JSON body.
json trailingUsageObject(std::string_view tail) {
  static constexpr std::string_view kKey = "\"usage\"";
  size_t pos = tail.rfind(kKey);
  while (pos != std::string_view::npos) {
    size_t p = pos + kKey.size();
    while (p < tail.size() &&
           (tail[p] == ' ' || tail[p] == '\n' || tail[p] == '\r' || tail[p] == '\t')) {
      ++p;
    }
    if (p < tail.size() && tail[p] == ':') {
      ++p;
      while (p < tail.size() &&
             (tail[p] == ' ' || tail[p] == '\n' || tail[p] == '\r' || tail[p] == '\t')) {
        ++p;
      }
      if (p < tail.size() && tail[p] == '{') {
        const size_t end = matchObjectEnd(tail, p);
        if (end != std::string_view::npos) {
          json usage = parseJson(tail.substr(p, end - p));
          if (usage.is_object()) return usage;
        }
      }
    }
    if (pos == 0) break;
    pos = tail.rfind(kKey, pos - 1);
  }
  return json();
}

// Stops at the request body's top-level "model" string without building a DOM
// (bodies can carry megabytes of base64 images after it).
class ModelFinder final : public nlohmann::json_sax<json> {
 public:
  std::string model;

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool string(string_t& value) override {
    if (want_value_) {
      if (value.size() <= kMaxModelBytes) model = value;
      return false;  // found: stop parsing
    }
    return true;
  }
  bool binary(binary_t&) override { return scalar(); }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t& name) override {
    want_value_ = depth_ == 1 && name == "model";
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool scalar() {
    if (want_value_) return false;  // "model" is not a string: give up
    return true;
  }
  bool open() {
    if (want_value_) return false;
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }

  int depth_ = 0;
  bool want_value_ = false;
};

}  // namespace

ApiKind apiKindForPath(std::string_view path) {
  // (A loop: find_first_of() looks each byte up in its set with a call.)
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '?' || path[i] == '#') {
      path = path.substr(0, i);
      break;
    }
  }
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  if (endsWith(path, "/chat/completions")) return ApiKind::OpenAiChat;
  if (endsWith(path, "/responses")) return ApiKind::OpenAiResponses;
  if (endsWith(path, "/v1/messages")) return ApiKind::AnthropicMessages;
  return ApiKind::Generic;
}

std::string_view toString(ApiKind kind) {
  switch (kind) {
    case ApiKind::OpenAiChat:
      return "openai_chat";
    case ApiKind::OpenAiResponses:
      return "openai_responses";
    case ApiKind::AnthropicMessages:
      return "anthropic_messages";
    case ApiKind::Generic:
      return "generic";
  }
  return "generic";
}

MeteredRequest MeteredRequest::fromRequest(std::string_view path, std::string_view body) {
  return fromBody(apiKindForPath(path), body);
}

MeteredRequest MeteredRequest::fromBody(ApiKind kind, std::string_view body) {
  MeteredRequest request;
  request.kind = kind;
  request.input_token_estimate = (static_cast<uint64_t>(body.size()) + 3) / 4;
  // Locate the top-level "model" without lexing the conversation around it;
  // only a body the scan cannot vouch for goes through the SAX parser.
  std::string_view model_text;
  const bool scanned = scanTopLevelMembers(body, [&](std::string_view key, std::string_view value) {
    if (key != "model") return true;
    model_text = value;
    return false;  // the first one, as the SAX finder stops at it
  });
  if (scanned) {
    // A plain string (printable ASCII, no escapes) is its own decoding: no
    // DOM (five allocations and a lexer per request, PROFILE.md sixth round).
    if (const auto plain = plainString(model_text)) {
      if (plain->size() <= kMaxModelBytes) request.model = std::string(*plain);
    } else if (!model_text.empty() && model_text.front() == '"' &&
               model_text.size() <= 6 * kMaxModelBytes + 2) {
      const json model = parseJson(model_text);
      if (model.is_string() && model.get_ref<const std::string&>().size() <= kMaxModelBytes) {
        request.model = model.get<std::string>();
      }
    }
    return request;
  }
  ModelFinder finder;
  json::sax_parse(body.begin(), body.end(), &finder);
  request.model = std::move(finder.model);
  return request;
}

UsageMeter::UsageMeter(ApiKind kind, std::string_view request_body)
    : UsageMeter(MeteredRequest::fromBody(kind, request_body)) {}

UsageMeter::UsageMeter(MeteredRequest request) : request_(std::move(request)) {}

void UsageMeter::onResponseHeaders(int status, std::string_view content_type) {
  if (format_ != BodyFormat::Unknown) return;
  billable_ = status >= 200 && status < 300;
  const std::string_view mime = trimOws(content_type.substr(0, content_type.find(';')));
  if (!billable_) {
    format_ = BodyFormat::Other;
  } else if (equalsLowerAscii(mime, "text/event-stream")) {
    format_ = BodyFormat::Sse;
    sse_.emplace([this](const SseEvent& event) { onSseEvent(event); }, kMaxSseEventBytes);
  } else if (equalsLowerAscii(mime, "application/json") ||
             (mime.size() >= 5 && equalsLowerAscii(mime.substr(mime.size() - 5), "+json"))) {
    format_ = BodyFormat::Json;
  } else {
    format_ = BodyFormat::Other;
  }
}

void UsageMeter::onResponseData(const char* data, size_t len) {
  if (complete_ || len == 0) return;
  body_bytes_ += len;
  if (format_ == BodyFormat::Sse) {
    sse_->feed(data, len);
  } else if (format_ == BodyFormat::Json) {
    bufferJson(data, len);
  }
}

void UsageMeter::onResponseEnd() {
  if (complete_) return;
  complete_ = true;
  if (format_ == BodyFormat::Sse) {
    sse_->finish();
  } else if (format_ == BodyFormat::Json) {
    finishJson();
  }
}

void UsageMeter::onBytesDelivered(uint64_t body_bytes) {
  if (body_bytes <= bytes_delivered_) return;
  bytes_delivered_ = body_bytes;
  deltas_delivered_ += pending_.popThrough(bytes_delivered_);
}

const std::string& UsageMeter::model() const {
  return request_.model.empty() ? response_model_ : request_.model;
}

uint64_t UsageMeter::inputTokens() const {
  if (!billable_) return 0;
  if (input_reported_) return reported_input_;
  // An unknown endpoint is only assumed to bill input once it streams like an LLM.
  if (request_.kind == ApiKind::Generic && format_ != BodyFormat::Sse) return 0;
  return request_.input_token_estimate;
}

uint64_t UsageMeter::outputTokens() const {
  if (!billable_) return 0;
  if (output_reported_) return reported_output_;
  return std::max({deltas_, partial_output_, text_output_estimate_});
}

uint64_t UsageMeter::eventsSkipped() const { return sse_ ? sse_->eventsSkipped() : 0; }

uint64_t UsageMeter::deliveredOutputTokens() const {
  if (!billable_) return 0;
  const uint64_t total = outputTokens();
  if (deltas_ == 0) return deliveredAll() ? total : 0;
  if (deltas_delivered_ >= deltas_) return total;
  const long double share = static_cast<long double>(total) *
                            static_cast<long double>(deltas_delivered_) /
                            static_cast<long double>(deltas_);
  return std::min(total, static_cast<uint64_t>(std::llround(share)));
}

bool UsageMeter::anyOutputDelivered() const {
  return billable_ && (deltas_delivered_ > 0 || deliveredAll());
}

AttemptTokens UsageMeter::tokenCounts() const {
  AttemptTokens tokens;
  tokens.input_tokens = inputTokens();
  tokens.output_tokens = outputTokens();
  tokens.delivered_output_tokens = deliveredOutputTokens();
  tokens.output_delivered = anyOutputDelivered();
  return tokens;
}

void UsageMeter::onSseEvent(const SseEvent& event) {
  if (event.oversized) {
    // Too big to parse; a huge event is almost certainly generated content.
    // A named event only counts if its name is a delta type.
    const bool unnamed = event.type.empty() || event.type == "message";
    const bool delta_type =
        request_.kind == ApiKind::OpenAiResponses     ? endsWith(event.type, ".delta")
        : request_.kind == ApiKind::AnthropicMessages ? event.type == "content_block_delta"
                                                      : true;
    if (unnamed || delta_type) recordDeltas(event.end_offset, 1);
    return;
  }
  switch (request_.kind) {
    case ApiKind::OpenAiChat:
      onChatEvent(event);
      break;
    case ApiKind::OpenAiResponses:
      onResponsesEvent(event);
      break;
    case ApiKind::AnthropicMessages:
      onAnthropicEvent(event);
      break;
    case ApiKind::Generic:
      onGenericEvent(event);
      break;
  }
}

void UsageMeter::onChatEvent(const SseEvent& event) {
  if (stream_done_) return;
  if (trimOws(event.data) == "[DONE]") {
    stream_done_ = true;
    return;
  }
  // Per chunk, decode only what is used: `choices` (the deltas), `usage` when
  // it is an object, and `model` until one is known. Skipping the rest (ids,
  // fingerprints, nulls) without lexing it cut the streaming path's cost per
  // chunk by more than half (PROFILE.md); `choices` is read as the scan
  // passes it, and the members before it are not scanned again while they
  // repeat. A chunk the scan cannot vouch for is parsed whole, as before.
  if (const std::optional<ChatChunkMembers> members = chat_scanner_.scan(event.data)) {
    if (response_model_.empty()) {
      if (const auto model = readStringText(members->model)) noteResponseModel(*model);
    }
    if (const auto counts = readUsageText(members->usage)) report(counts->input, counts->output);
    if (members->choices_with_output) {
      if (*members->choices_with_output > 0) {
        recordDeltas(event.end_offset, *members->choices_with_output);
      }
    } else if (!members->choices.empty() && members->choices.front() == '[') {
      const uint64_t with_output = domChoicesWithOutput(parseJson(members->choices));
      if (with_output > 0) recordDeltas(event.end_offset, with_output);
    }
    return;
  }
  const json whole = parseJson(event.data);
  if (!whole.is_object()) return;
  noteResponseModel(stringField(whole, "model"));
  if (const json* usage = objectField(whole, "usage")) {
    const UsageCounts counts = readUsage(*usage);
    report(counts.input, counts.output);
  }
  if (const json* choices = arrayField(whole, "choices")) {
    const uint64_t with_output = domChoicesWithOutput(*choices);
    if (with_output > 0) recordDeltas(event.end_offset, with_output);
  }
}

void UsageMeter::onResponsesEvent(const SseEvent& event) {
  // OpenAI names each event; fall back to the JSON `type` when a server doesn't.
  json doc;
  bool parsed = false;
  std::string_view type = event.type;
  if (type == "message") {
    doc = parseJson(event.data);
    parsed = true;
    type = stringField(doc, "type");
  }
  // output_text, refusal, function_call_arguments, reasoning_* ... are all output.
  if (endsWith(type, ".delta")) {
    recordDeltas(event.end_offset, 1);
    return;
  }
  if (type != "response.completed" && type != "response.incomplete" && type != "response.failed" &&
      type != "response.created" && type != "response.in_progress") {
    return;
  }
  if (!parsed) doc = parseJson(event.data);
  const json* response = objectField(doc, "response");
  if (response == nullptr) return;
  noteResponseModel(stringField(*response, "model"));
  if (const json* usage = objectField(*response, "usage")) {
    const UsageCounts counts = readUsage(*usage);
    report(counts.input, counts.output);
  }
}

void UsageMeter::onAnthropicEvent(const SseEvent& event) {
  json doc;
  bool parsed = false;
  std::string_view type = event.type;
  if (type == "message") {
    doc = parseJson(event.data);
    parsed = true;
    type = stringField(doc, "type");
  }
  if (type == "content_block_delta") {
    recordDeltas(event.end_offset, 1);
    return;
  }
  if (type != "message_start" && type != "message_delta") return;
  if (!parsed) doc = parseJson(event.data);

  if (type == "message_start") {
    const json* message = objectField(doc, "message");
    if (message == nullptr) return;
    noteResponseModel(stringField(*message, "model"));
    if (const json* usage = objectField(*message, "usage")) {
      const UsageCounts counts = readUsage(*usage);
      report(counts.input, std::nullopt);
      // The output count so far (usually 1): a floor for the estimate, not final.
      if (counts.output) partial_output_ = *counts.output;
    }
    return;
  }
  // message_delta: usage.output_tokens is cumulative for the message: replace.
  if (const json* usage = objectField(doc, "usage")) {
    // Newer API versions repeat the (cumulative) input counts here too.
    const UsageCounts counts = readUsage(*usage);
    report(counts.input, counts.output);
  }
}

void UsageMeter::onGenericEvent(const SseEvent& event) {
  if (trimOws(event.data) == "[DONE]") return;
  // An event carrying a usage object (top level, or nested as Responses and
  // Anthropic do) reports counts instead of content. The substring test keeps
  // ordinary content events from being parsed.
  if (event.data.find("\"usage\"") != std::string_view::npos) {
    const json doc = parseJson(event.data);
    const json* usage = objectField(doc, "usage");
    if (usage == nullptr) {
      if (const json* response = objectField(doc, "response"))
        usage = objectField(*response, "usage");
    }
    if (usage == nullptr) {
      if (const json* message = objectField(doc, "message")) usage = objectField(*message, "usage");
    }
    if (usage != nullptr) {
      const UsageCounts counts = readUsage(*usage);
      report(counts.input, counts.output);
      return;
    }
  }
  recordDeltas(event.end_offset, 1);
}

void UsageMeter::bufferJson(const char* data, size_t len) {
  if (!json_overflowed_) {
    if (json_body_.size() + len <= kMaxJsonBodyBytes) {
      json_body_.append(data, len);
      return;
    }
    // Too big to parse whole: from now on keep only a tail for a trailing `usage`.
    json_overflowed_ = true;
    if (json_body_.size() > kJsonTailBytes) json_body_.erase(0, json_body_.size() - kJsonTailBytes);
    json_body_.shrink_to_fit();
  }
  if (len >= kJsonTailBytes) {
    json_body_.assign(data + len - kJsonTailBytes, kJsonTailBytes);
    return;
  }
  json_body_.append(data, len);
  if (json_body_.size() > 2 * kJsonTailBytes) {
    json_body_.erase(0, json_body_.size() - kJsonTailBytes);
  }
}

void UsageMeter::finishJson() {
  std::optional<UsageCounts> counts;
  AnswerMembers members;  // the last `model` and `usage`, as in a full parse
  std::optional<uint64_t> usage_values[kUsageKeyCount];
  bool scanned = false;
  if (json_overflowed_) {
    const json usage = trailingUsageObject(json_body_);
    if (usage.is_object()) counts = readUsage(usage);
  } else if ((scanned = scanAnswerMembers(json_body_, kPlainUsageDepth, kUsageKeys, kUsageKeyCount,
                                          usage_values, members)) &&
             (counts = usageFromText(members.usage, members.usage_plain, usage_values))) {
    // The provider reported usage: decode only it and the model; the
    // generated text is needed only for an estimate when usage is missing.
    // (`usage` was read as the scan passed it: readUsageText() of its text.)
    // The answer's model is only ever used when the request named none (model()).
    if (request_.model.empty()) {
      if (const auto model = readStringText(members.model)) noteResponseModel(*model);
    }
  } else if (scanned && members.usage.empty() && request_.kind == ApiKind::Generic) {
    // Not an LLM API and no usage: nothing to estimate from, the model is all
    // there is to read. A JSON API that is not an LLM's (a tool's, an echo)
    // costs a scan, not a parse (~145,000 instructions for a 1.5 KiB answer).
    if (request_.model.empty()) {
      if (const auto model = readStringText(members.model)) noteResponseModel(*model);
    }
  } else {
    const json doc = parseJson(json_body_);
    if (doc.is_object()) {
      noteResponseModel(stringField(doc, "model"));
      if (const json* usage = objectField(doc, "usage")) {
        counts = readUsage(*usage);
      } else if (request_.kind != ApiKind::Generic) {
        text_output_estimate_ = (generatedTextBytes(doc) + 3) / 4;
      }
    }
  }
  std::string().swap(json_body_);
  if (counts) report(counts->input, counts->output);
}

void UsageMeter::recordDeltas(uint64_t end_offset, uint64_t count) {
  deltas_ += count;
  if (end_offset <= bytes_delivered_) {
    deltas_delivered_ += count;
    return;
  }
  if (pending_.size() >= kMaxPendingDeltaEntries && !pending_.endsAt(end_offset)) {
    coalescePending();
  }
  pending_.add(end_offset, count);
}

void UsageMeter::coalescePending() {
  // Keep the newest quarter exact: a client's cut falls near the end of what
  // was sent (at most sluice's own buffer behind it, fewer deltas than that
  // quarter holds for any LLM stream). Merge neighbours in the older part while
  // a merged entry stays within coalesce_span_ deltas, doubling the span only
  // when that part would not shrink by half: older entries stay even in size,
  // and every call frees cap·3/8 entries. A merged entry counts as delivered
  // only when its later offset is, so delivery is undercounted, never inflated.
  const std::vector<PendingDeltas> all = pending_.records();
  const size_t older = all.size() - all.size() / 4;
  std::vector<PendingDeltas> merged;
  for (;; coalesce_span_ *= 2) {
    merged.clear();
    for (size_t i = 0; i < older; ++i) {
      if (!merged.empty() && merged.back().count + all[i].count <= coalesce_span_) {
        merged.back().count += all[i].count;
        merged.back().end_offset = all[i].end_offset;
      } else {
        merged.push_back(all[i]);
      }
    }
    if (merged.size() <= older / 2) break;
  }
  for (size_t i = older; i < all.size(); ++i) merged.push_back(all[i]);
  pending_.assign(merged);
}

void UsageMeter::report(std::optional<uint64_t> input, std::optional<uint64_t> output) {
  if (input) {
    reported_input_ = *input;
    input_reported_ = true;
  }
  if (output) {
    reported_output_ = *output;
    output_reported_ = true;
  }
}

void UsageMeter::noteResponseModel(std::string_view model) {
  if (response_model_.empty() && !model.empty() && model.size() <= kMaxModelBytes) {
    response_model_.assign(model);
  }
}

}  // namespace sluice
