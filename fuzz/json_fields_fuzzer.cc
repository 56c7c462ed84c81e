// scanTopLevelMembers (common/json_fields.h): the hand-written scan that
// finds `model`, `max_tokens`, `usage` in client request bodies and provider
// response bodies without a full parse. Differential against nlohmann::json:
// whenever the library accepts the input as an object whose keys need no
// unescaping, the scan must accept it too and report exactly the library's
// members, each value text parsing to the library's value. Whatever the
// input, every reported value (and every key not written with escapes) lies
// inside the input and the scan stops when asked to. The plain readers (plainString, plainUnsigned,
// isPlainObject) must agree with the library whenever they accept, and
// isVerifiedJson never accepts what the library rejects; chatChoicesWithOutput
// agrees with a DOM count; scanChatChunk returns exactly what the member scan
// plus chatChoicesWithOutput on the last `choices` give (the passes it fuses),
// and ChatChunkScanner what scanChatChunk gives, chunk after chunk;
// scanAnswerMembers what the member scan plus readPlainObject on the last
// `usage` give.
// Seeds: fuzz/corpus/json_fields/ (real request and response bodies).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/json_fields.h"

namespace {

bool inside(std::string_view outer, std::string_view inner) {
  return inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  std::multimap<std::string, std::string_view> seen;
  const bool scanned =
      sluice::scanTopLevelMembers(text, [&](std::string_view key, std::string_view value) {
        // A key is a view of the input, unless it was written with escapes
        // (then the scan decoded it into its own buffer).
        const bool key_ok = inside(text, key) || text.find('\\') != std::string_view::npos;
        if (!key_ok || !inside(text, value) || value.empty()) std::abort();
        seen.emplace(std::string(key), value);
        return true;
      });

  // scanChatChunk: the same views (the same bytes) and count as the two passes.
  {
    std::string_view model, usage, choices;
    const bool two_pass =
        sluice::scanTopLevelMembers(text, [&](std::string_view key, std::string_view value) {
          if (key == "model") model = value;
          if (key == "usage") usage = value;
          if (key == "choices") choices = value;
          return true;
        });
    const std::optional<sluice::ChatChunkMembers> fused = sluice::scanChatChunk(text);
    if (fused.has_value() != two_pass) std::abort();
    const auto same = [](std::string_view a, std::string_view b) {
      return a.data() == b.data() && a.size() == b.size();
    };
    if (fused && (!same(fused->model, model) || !same(fused->usage, usage) ||
                  !same(fused->choices, choices) ||
                  fused->choices_with_output !=
                      (choices.empty() ? std::nullopt : sluice::chatChoicesWithOutput(choices)))) {
      std::abort();
    }
    // ChatChunkScanner: the input split at its first newline into two chunks
    // of one stream (then the second again): each read as scanChatChunk reads it.
    const size_t newline = text.find('\n');
    if (newline != std::string_view::npos) {
      const std::string first(text.substr(0, newline));
      const std::string second(text.substr(newline + 1));
      sluice::ChatChunkScanner scanner;
      for (const std::string* chunk : {&first, &second, &second}) {
        const std::optional<sluice::ChatChunkMembers> got = scanner.scan(*chunk);
        const std::optional<sluice::ChatChunkMembers> want = sluice::scanChatChunk(*chunk);
        if (got.has_value() != want.has_value()) std::abort();
        if (got && (!same(got->model, want->model) || !same(got->usage, want->usage) ||
                    !same(got->choices, want->choices) ||
                    got->choices_with_output != want->choices_with_output)) {
          std::abort();
        }
      }
    }
  }

  // scanAnswerMembers: the same verdict and views as the member scan, and
  // `usage` read as readPlainObject() reads the last one's text (the passes
  // it fuses).
  {
    std::string_view model, usage;
    const bool two_pass =
        sluice::scanTopLevelMembers(text, [&](std::string_view key, std::string_view value) {
          if (key == "model") model = value;
          if (key == "usage") usage = value;
          return true;
        });
    static constexpr std::string_view kKeys[] = {"prompt_tokens", "completion_tokens", "a"};
    std::optional<uint64_t> want[3];
    std::optional<uint64_t> got[3] = {7, 7, 7};
    const bool plain = sluice::readPlainObject(usage, 3, kKeys, 3, want);
    sluice::AnswerMembers fused;
    if (sluice::scanAnswerMembers(text, 3, kKeys, 3, got, fused) != two_pass) std::abort();
    const auto same = [](std::string_view a, std::string_view b) {
      return a.data() == b.data() && a.size() == b.size();
    };
    if (two_pass &&
        (!same(fused.model, model) || !same(fused.usage, usage) || fused.usage_plain != plain ||
         (plain && (got[0] != want[0] || got[1] != want[1] || got[2] != want[2])))) {
      std::abort();
    }
  }

  // Stopping early is honoured: the callback is not called again.
  size_t calls = 0;
  sluice::scanTopLevelMembers(text, [&](std::string_view, std::string_view) {
    if (++calls > 1) std::abort();
    return false;
  });

  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);

  // The plain readers never accept what the library would read differently.
  if (const auto s = sluice::plainString(text)) {
    if (j.is_discarded() || !j.is_string() || j.get_ref<const std::string&>() != *s) std::abort();
  }
  if (const auto u = sluice::plainUnsigned(text)) {
    if (j.is_discarded() || !j.is_number_integer() || j != nlohmann::json(*u)) std::abort();
  }
  // isVerifiedJson vouches only for what the library parses without error,
  // and chatChoicesWithOutput counts exactly what the library's DOM shows.
  if (sluice::isVerifiedJson(text) && j.is_discarded()) std::abort();
  if (const auto counted = sluice::chatChoicesWithOutput(text)) {
    if (j.is_discarded() || !j.is_array()) std::abort();
    uint64_t want = 0;
    for (const auto& choice : j) {
      if (!choice.is_object()) continue;
      const auto delta = choice.find("delta");
      if (delta == choice.end() || !delta->is_object()) continue;
      bool output = false;
      for (const char* key : {"content", "refusal", "reasoning_content", "reasoning"}) {
        const auto v = delta->find(key);
        if (v != delta->end() && v->is_string() && !v->get_ref<const std::string&>().empty())
          output = true;
      }
      const auto calls = delta->find("tool_calls");
      if (calls != delta->end() && calls->is_array() && !calls->empty()) output = true;
      const auto fn = delta->find("function_call");
      if (fn != delta->end() && fn->is_object()) output = true;
      if (output) ++want;
    }
    if (*counted != want) std::abort();
  }
  if (sluice::isPlainObject(text, 3)) {
    if (j.is_discarded() || !j.is_object() || !scanned) std::abort();
    for (const auto& [key, value_text] : seen) {
      if (seen.count(key) != 1) continue;
      const nlohmann::json& v = j.at(key);
      if (const auto s = sluice::plainString(value_text)) {
        if (!v.is_string() || v.get_ref<const std::string&>() != *s) std::abort();
      } else if (const auto u = sluice::plainUnsigned(value_text)) {
        if (v != nlohmann::json(*u)) std::abort();
      } else if (!sluice::isPlainObject(value_text, 2) && value_text != "true" &&
                 value_text != "false" && value_text != "null") {
        std::abort();
      }
    }
  }
  if (j.is_discarded() || !j.is_object()) return 0;
  bool escaped_key = false;
  for (const auto& [key, value] : j.items()) {
    if (nlohmann::json(key).dump().find('\\') != std::string::npos) escaped_key = true;
  }
  // A key whose raw text has an escape (even one decoding to a plain
  // character) makes the scan decline; the caller then parses fully.
  if (!scanned) {
    if (escaped_key || text.find('\\') != std::string_view::npos) return 0;
    // nlohmann's lexer takes a NUL byte for the end of the input (` {}\n\0 `
    // parses); the scan does not, and declining is the safe side.
    if (text.find('\0') != std::string_view::npos) return 0;
    std::abort();  // valid JSON object, plain keys, and the scan gave up
  }
  // Duplicate keys: the library keeps one of them; compare only unique ones.
  for (const auto& [key, value_text] : seen) {
    if (seen.count(key) != 1) continue;
    const auto it = j.find(key);
    if (it == j.end()) std::abort();
    const nlohmann::json v = nlohmann::json::parse(value_text, nullptr, false);
    if (v.is_discarded() || v != *it) std::abort();
  }
  if (!escaped_key && seen.size() < j.size()) std::abort();
  return 0;
}
