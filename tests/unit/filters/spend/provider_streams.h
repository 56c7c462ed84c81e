#pragma once

// Response bodies shaped exactly like the providers' documented streams
// (OpenAI chat completions with stream_options.include_usage, the OpenAI
// Responses API, Anthropic Messages), built piece by piece so a test knows the
// byte offset at which each content-delta event ends.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sluice::spend_fixtures {

/** A streamed body and where each content-delta event ends (offset after its blank line). */
struct BuiltStream {
  std::string body;
  std::vector<size_t> delta_ends;
};

inline std::string jsonString(const std::string& s) { return nlohmann::json(s).dump(); }

/**
 * An OpenAI chat completions stream: a role chunk, one chunk per piece, a
 * finish chunk, then (with usage) the usage-only chunk, then `data: [DONE]`.
 * Set `eol` to "\r\n" to exercise CRLF.
 */
inline BuiltStream openAiChatStream(const std::vector<std::string>& pieces, bool with_usage,
                                    uint64_t prompt_tokens = 19, uint64_t completion_tokens = 10,
                                    const std::string& eol = "\n") {
  const std::string head =
      R"({"id":"chatcmpl-A9x2mZrQ7","object":"chat.completion.chunk","created":1726000000,)"
      R"("model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_483d39d857",)";
  const std::string tail = with_usage ? R"(,"usage":null})" : "}";
  BuiltStream out;
  auto event = [&](const std::string& json) { out.body += "data: " + json + eol + eol; };
  event(head +
        R"("choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},)"
        R"("logprobs":null,"finish_reason":null}])" +
        tail);
  for (const std::string& piece : pieces) {
    event(head + R"("choices":[{"index":0,"delta":{"content":)" + jsonString(piece) +
          R"(},"logprobs":null,"finish_reason":null}])" + tail);
    out.delta_ends.push_back(out.body.size());
  }
  event(head + R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}])" +
        tail);
  if (with_usage) {
    event(head + R"("choices":[],"usage":{"prompt_tokens":)" + std::to_string(prompt_tokens) +
          R"(,"completion_tokens":)" + std::to_string(completion_tokens) + R"(,"total_tokens":)" +
          std::to_string(prompt_tokens + completion_tokens) +
          R"(,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},)"
          R"("completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,)"
          R"("accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}})");
  }
  out.body += "data: [DONE]" + eol + eol;
  return out;
}

/**
 * An Anthropic Messages stream: message_start (usage with cache fields), a text
 * block with one content_block_delta per piece, ping, then one message_delta per
 * entry of `cumulative_outputs` (each a running total), then message_stop.
 */
inline BuiltStream anthropicStream(const std::vector<std::string>& pieces, uint64_t input_tokens,
                                   uint64_t cache_creation, uint64_t cache_read,
                                   uint64_t start_output,
                                   const std::vector<uint64_t>& cumulative_outputs) {
  BuiltStream out;
  auto event = [&](const std::string& name, const std::string& json) {
    out.body += "event: " + name + "\ndata: " + json + "\n\n";
  };
  event(
      "message_start",
      R"({"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message",)"
      R"("role":"assistant","content":[],"model":"claude-sonnet-4-20250514","stop_reason":null,)"
      R"("stop_sequence":null,"usage":{"input_tokens":)" +
          std::to_string(input_tokens) + R"(,"cache_creation_input_tokens":)" +
          std::to_string(cache_creation) + R"(,"cache_read_input_tokens":)" +
          std::to_string(cache_read) + R"(,"output_tokens":)" + std::to_string(start_output) +
          R"(,"service_tier":"standard"}}})");
  event("content_block_start",
        R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})");
  event("ping", R"({"type": "ping"})");
  for (const std::string& piece : pieces) {
    event("content_block_delta",
          R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":)" +
              jsonString(piece) + "}}");
    out.delta_ends.push_back(out.body.size());
  }
  event("content_block_stop", R"({"type":"content_block_stop","index":0})");
  for (uint64_t cumulative : cumulative_outputs) {
    event("message_delta",
          R"({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},)"
          R"("usage":{"output_tokens":)" +
              std::to_string(cumulative) + "}}");
  }
  event("message_stop", R"({"type":"message_stop"})");
  return out;
}

/**
 * An OpenAI Responses API stream: response.created, output item / content
 * part added, one response.output_text.delta per piece, the done events, and
 * (with usage) response.completed carrying response.usage.
 */
inline BuiltStream responsesStream(const std::vector<std::string>& pieces, bool with_completed,
                                   uint64_t input_tokens = 37, uint64_t output_tokens = 11) {
  BuiltStream out;
  int seq = 0;
  auto event = [&](const std::string& name, const std::string& fields) {
    out.body += "event: " + name + "\ndata: {\"type\":\"" + name +
                "\",\"sequence_number\":" + std::to_string(seq++) + "," + fields + "}\n\n";
  };
  const std::string response_head =
      R"("response":{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response",)"
      R"("created_at":1741476542,"model":"gpt-4.1-2025-04-14",)";
  event("response.created", response_head + R"("status":"in_progress","output":[],"usage":null})");
  event("response.in_progress",
        response_head + R"("status":"in_progress","output":[],"usage":null})");
  event("response.output_item.added",
        R"("output_index":0,"item":{"id":"msg_67ccd2bf17f0819081ff3bb2cf6508e6","type":"message",)"
        R"("status":"in_progress","role":"assistant","content":[]})");
  event("response.content_part.added",
        R"("item_id":"msg_67ccd2bf17f0819081ff3bb2cf6508e6","output_index":0,"content_index":0,)"
        R"("part":{"type":"output_text","text":"","annotations":[]})");
  std::string text;
  for (const std::string& piece : pieces) {
    event("response.output_text.delta",
          R"("item_id":"msg_67ccd2bf17f0819081ff3bb2cf6508e6","output_index":0,"content_index":0,)"
          R"("delta":)" +
              jsonString(piece));
    out.delta_ends.push_back(out.body.size());
    text += piece;
  }
  event("response.output_text.done",
        R"("item_id":"msg_67ccd2bf17f0819081ff3bb2cf6508e6","output_index":0,"content_index":0,)"
        R"("text":)" +
            jsonString(text));
  if (with_completed) {
    event("response.completed",
          response_head +
              R"("status":"completed","output":[{"id":"msg_67ccd2bf17f0819081ff3bb2cf6508e6",)"
              R"("type":"message","status":"completed","role":"assistant","content":[{"type":)"
              R"("output_text","text":)" +
              jsonString(text) + R"(,"annotations":[]}]}],"usage":{"input_tokens":)" +
              std::to_string(input_tokens) +
              R"(,"input_tokens_details":{"cached_tokens":0},"output_tokens":)" +
              std::to_string(output_tokens) +
              R"(,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":)" +
              std::to_string(input_tokens + output_tokens) + "}}");
  }
  return out;
}

}  // namespace sluice::spend_fixtures
