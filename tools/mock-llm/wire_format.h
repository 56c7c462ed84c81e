#pragma once

// The providers' wire formats, byte for byte where it matters: OpenAI Chat
// Completions, OpenAI Responses and Anthropic Messages, each as one JSON body
// and as a server-sent-event stream. Pure functions of a Generation, so the
// same request always yields the same tokens, ids and usage.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mockllm {

/** Which provider API a request speaks. */
enum class Api { kChatCompletions, kResponses, kMessages };

/** Everything that determines one generated answer. */
struct Generation {
  Api api = Api::kChatCompletions;
  std::string id;              // the ledger id; provider ids are derived from it
  std::string model;           // echoed from the request (or a per-API default)
  int64_t created = 0;         // unix seconds
  int64_t input_tokens = 0;    // ceil(request body bytes / 4)
  int64_t output_tokens = 0;   // content tokens to emit
  bool truncated = false;      // output was cut by the request's max tokens
  bool include_usage = false;  // chat SSE: stream_options.include_usage
};

/** Token i's text: `"tok<i> "`. */
std::string tokenText(int64_t index);

/** The concatenation of the first `count` tokens. */
std::string fullText(int64_t count);

/** JSON string literal for `s` (quotes included); invalid UTF-8 is replaced, never thrown. */
std::string jsonQuote(std::string_view s);

/** The non-streaming response body (always carries usage). */
std::string nonStreamingBody(const Generation& gen);

/** One SSE event (or a group written together) and whether it carries the final usage. */
struct SsePiece {
  std::string text;
  bool carries_usage = false;
};

/**
 * Produces one generation as server-sent events: a prologue before the first
 * token, one event per token, and an epilogue with the stop reason and usage.
 * Stateful (the Responses API numbers its events), one instance per response.
 */
class SseStream {
 public:
  virtual ~SseStream() = default;
  /** Events before the first content token (may be empty). */
  virtual std::vector<SsePiece> prologue() = 0;
  /** The event carrying content token `index`. */
  virtual std::string token(int64_t index) = 0;
  /** Events after the last token: stop reason, usage, terminator. */
  virtual std::vector<SsePiece> epilogue() = 0;
};

using SseStreamPtr = std::unique_ptr<SseStream>;

/** The SSE encoder for `gen.api`. */
SseStreamPtr makeSseStream(const Generation& gen);

/** Error body families: OpenAI's `{"error":{...}}` or Anthropic's `{"type":"error",...}`. */
enum class ErrorFlavor { kOpenAi, kAnthropic };

/** An error response body and its content type. */
struct ErrorBody {
  std::string content_type;
  std::string body;
};

/**
 * The error body for `status`: the provider's JSON shape, or with `problem`
 * an RFC 9457 `application/problem+json` body whose `is_retriable` is present
 * only when `retriable` is set.
 */
ErrorBody makeErrorBody(ErrorFlavor flavor, int status, std::string_view message, bool problem,
                        std::optional<bool> retriable);

/** `GET /v1/models`: a small OpenAI model list. */
std::string modelsBody();

/** The standard reason phrase for an HTTP status ("Unknown" when not known). */
std::string_view reasonPhrase(int status);

}  // namespace mockllm
