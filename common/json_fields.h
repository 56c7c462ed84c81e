#pragma once

// Finding a few top-level members of a JSON object without lexing all of it.
//
// The spend meter and the throttle need two or three top-level fields of
// request and response bodies (`model`, `usage`, `max_tokens`), and bodies
// are mostly long strings (conversation history, generated text). A full
// nlohmann parse costs ~90-100 instructions per byte, which made JSON the
// largest per-request cost of the proxy (bench/results/PROFILE.md). This
// scan only locates members: strings are skipped with memchr (honouring
// backslash escapes) and nesting is counted. It decodes no value — callers
// hand the value's bytes to nlohmann::json, so values are still decoded by
// the library — but it decodes a key written with escapes, as the upstream's
// parser will (`{"mod\u0065l": ...}` is `model`). It validates only the
// top-level shape; anything it cannot vouch for (not an object, an invalid
// escape in a key, broken framing) makes it return false, and callers fall
// back to a full parse.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace sluice {

/**
 * A borrowed `bool(std::string_view key, std::string_view value)` callable:
 * scanTopLevelMembers()'s visitor. Unlike a std::function it never allocates
 * (a lambda capturing three references did, once per streamed chunk:
 * PROFILE.md); it refers to the caller's callable, which outlives the call.
 */
class MemberVisitor {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, MemberVisitor>>>
  MemberVisitor(F&& f)  // implicit: callers pass a lambda
      : callable_(const_cast<void*>(static_cast<const void*>(&f))),
        call_(&invoke<std::remove_reference_t<F>>) {}

  bool operator()(std::string_view key, std::string_view value) const {
    return call_(callable_, key, value);
  }

 private:
  template <typename F>
  static bool invoke(void* callable, std::string_view key, std::string_view value) {
    return (*static_cast<F*>(callable))(key, value);
  }

  void* callable_;
  bool (*call_)(void*, std::string_view, std::string_view);
};

/**
 * Calls `on_member(key, value_text)` for each top-level member of the JSON
 * object `text`, in document order; `value_text` is the raw JSON of the value
 * (a string value includes its quotes), `key` the key decoded (escapes
 * resolved; the view lasts for the call). `on_member` returns false to stop
 * early. Returns false — and the caller should parse `text` fully — when
 * `text` is not an object, a top-level key has an escape a JSON parser
 * refuses, or the framing is broken before the scan stopped.
 */
bool scanTopLevelMembers(std::string_view text, MemberVisitor on_member);

/**
 * `text` with the value of its top-level member `key` replaced by the JSON
 * string `value` (every occurrence, should the key repeat, however the key
 * is spelled: `"mod\u0065l"` is `model`), everything else
 * byte for byte as it was: a fallback's `model` rewrite (docs/design.md §5), which
 * keeps `stream` and every other member as the client sent them. `value`
 * must need no escaping (the config refuses quotes, backslashes and control
 * characters). nullopt when `text` is not an object the scan vouches for, or
 * has no such member: the body then goes unchanged.
 */
std::optional<std::string> withTopLevelString(std::string_view text, std::string_view key,
                                              std::string_view value);

// Reading small values without a JSON library. `usage` objects and `model`
// strings are tiny and plain, yet a DOM parse of each cost ~11,000
// instructions per request (PROFILE.md). These accept only text whose meaning
// needs no decoding, so what they return is what a full parse returns; for
// anything else they say no and the caller decodes with nlohmann::json.

/**
 * The characters of a JSON string value (`value_text` includes its quotes)
 * when it is printable ASCII without escapes; nullopt otherwise.
 */
std::optional<std::string_view> plainString(std::string_view value_text);

/**
 * A JSON number that is a non-negative integer written plainly (digits, no
 * leading zero, sign, fraction or exponent) and fits in 64 bits; nullopt
 * otherwise.
 */
std::optional<uint64_t> plainUnsigned(std::string_view value_text);

/**
 * True when `value_text` is a JSON object, nested at most `depth` objects
 * deep (1 = flat), whose keys are plain strings and whose other values are
 * plain strings, plain non-negative integers, true, false or null: then it is
 * valid JSON and scanTopLevelMembers() with plainString() / plainUnsigned()
 * read exactly what a full parse would.
 */
bool isPlainObject(std::string_view value_text, int depth);

/**
 * isPlainObject(value_text, depth) in one pass over the text that also reads
 * top-level counts: returns exactly what isPlainObject() returns, and when
 * true, sets counts[k] to plainUnsigned() of the value of the LAST top-level
 * member named keys[k] (nullopt when that value is not a plain integer;
 * untouched when there is no such member). The `usage` object's reader: the
 * member scan, a plainString() per key and an isPlainObject() per nested
 * object cost ~35 instructions per byte of it (PROFILE.md, seventh round).
 */
bool readPlainObject(std::string_view value_text, int depth, const std::string_view* keys,
                     size_t key_count, std::optional<uint64_t>* counts);

/** What scanAnswerMembers() found: the raw value text of the last `model` and `usage`. */
struct AnswerMembers {
  std::string_view model;  // "" if absent
  std::string_view usage;  // "" if absent
  /**
   * readPlainObject(usage, usage_depth, ...) of the last `usage` (false when
   * there is none); when true, `counts` hold what it read.
   */
  bool usage_plain = false;
};

/**
 * scanTopLevelMembers() over a whole answer collecting AnswerMembers, with
 * the `usage` object read by readPlainObject() as the scan passes it (each
 * `usage` resets `counts` to nullopt first): one walk over it instead of one
 * to find its end and another to read it (PROFILE.md, eighth round).
 * Returns exactly what that scan returns, and `out` and `counts` are what
 * the scan's last `model` and `usage` and readPlainObject() on that `usage`
 * give.
 */
bool scanAnswerMembers(std::string_view text, int usage_depth, const std::string_view* keys,
                       size_t key_count, std::optional<uint64_t>* counts, AnswerMembers& out);

/**
 * True when `text` is one JSON value (surrounding whitespace allowed) that
 * nlohmann::json parses without error, checked here without a library:
 * structure, string escapes (surrogate pairs included), UTF-8 as the library
 * demands it (RFC 3629: no overlongs, surrogates or code points past
 * U+10FFFF), control characters, literals. It declines — returns false, and
 * the caller parses with nlohmann — what it does not decide itself: numbers
 * with a fraction or exponent or more than 18 digits (the library rejects
 * out-of-range floats), nesting deeper than `max_depth`. True therefore
 * means valid; false means "ask the library". The check behind
 * chatChoicesWithOutput() (~5-10 instructions per byte against nlohmann's
 * ~100 plus an allocation per node).
 */
bool isVerifiedJson(std::string_view text, int max_depth = 32);

/**
 * How many choices of an OpenAI chat chunk's `choices` array carry output in
 * their `delta` — a non-empty `content`, `refusal`, `reasoning_content` or
 * `reasoning` string, a non-empty `tool_calls` array, or a `function_call`
 * object — exactly as nlohmann's DOM of the same text reads it (duplicate
 * keys: the last wins; invalid JSON: the caller's fallback decides). One
 * pass that verifies as isVerifiedJson() does and reads the members as it
 * goes (the per-chunk cost of a stream: PROFILE.md). nullopt when the text
 * is not verified or a choice or delta key is written with an escape: then
 * decode it with nlohmann.
 */
std::optional<uint64_t> chatChoicesWithOutput(std::string_view choices_text);

/** What metering an OpenAI chat chunk reads from its top-level members. */
struct ChatChunkMembers {
  /** The raw value text of the last `model`, `usage` and `choices` ("" if absent). */
  std::string_view model;
  std::string_view usage;
  std::string_view choices;
  /**
   * chatChoicesWithOutput(choices) when `choices` is an array it vouched for;
   * nullopt otherwise (then decode `choices` with nlohmann).
   */
  std::optional<uint64_t> choices_with_output;
};

/**
 * scanTopLevelMembers() over a chat chunk collecting ChatChunkMembers, with
 * the `choices` array verified and read as the scan passes it: one walk
 * over it instead of one to find its end and another to read it (the
 * per-chunk cost of a stream: PROFILE.md). Exactly what that scan plus
 * chatChoicesWithOutput() on the last `choices` give; nullopt when the scan
 * declines (the caller parses the chunk whole).
 */
std::optional<ChatChunkMembers> scanChatChunk(std::string_view text);

/**
 * scanChatChunk() over the chunks of one stream, skipping what repeats. A
 * provider starts every chunk of a stream with the same members (`id`,
 * `object`, `created`, `model`, `system_fingerprint`) before `choices`; when
 * a chunk begins with the same bytes as the last one scanned in full, up to
 * and including the first byte of its first `choices` value, the scan
 * resumes there with what those members held: the scan up to that point
 * reads only those bytes, so the result is exactly scanChatChunk()'s.
 *
 * Past the prefix, the chunks of a stream usually differ only in the text
 * of one delta's `content` string. When the last chunk scanned had such a
 * string, non-empty and of printable ASCII only (no quote, no backslash),
 * the scanner keeps the chunk's shape: its bytes up to and including that
 * string's opening quote, and from its closing quote to the end. A chunk
 * with the same bytes before and after, and between them a non-empty run
 * of such characters, is read without a walk: every step of the scan
 * passes those bytes the same way whatever the run holds (the Verifier's
 * string loop skips them; a string longer than its quotes is output either
 * way), so the result is the shape's, its views moved by the difference in
 * length.
 */
class ChatChunkScanner {
 public:
  /** Prefixes and shapes longer than this are not kept (memory per stream). */
  static constexpr size_t kMaxPrefixBytes = 1024;
  static_assert(kMaxPrefixBytes <= UINT16_MAX);

  std::optional<ChatChunkMembers> scan(std::string_view text);

 private:
  /** Where a value lies in the prefix; `size` 0: no such member. */
  struct Span {  // (within the prefix's kMaxPrefixBytes: 16 bits)
    uint16_t at = 0;
    uint16_t size = 0;
  };
  /**
   * Where a value of the shape lies: its begin and end, each counted from
   * the chunk's start (before the content string) or back from its end
   * (after it); `present` false: no such member.
   */
  struct ShapeSpan {  // (offsets within known_'s kMaxPrefixBytes: 16 bits)
    uint16_t begin = 0;
    uint16_t end = 0;
    bool begin_from_end = false;
    bool end_from_end = false;
    bool present = false;
  };

  std::optional<ChatChunkMembers> scanInFull(std::string_view text);
  void keepShape(std::string_view text, const ChatChunkMembers& members, size_t content_begin,
                 size_t content_end);

  // The prefix: the bytes up to the first `choices` value, its first byte
  // included, are known_[0, prefix_size_). With a shape (head_size_ > 0)
  // known_ holds the shape's head (which starts with the prefix) and then
  // its tail; without one, the prefix only.
  std::string known_;
  Span model_;  // the members before the first `choices`
  Span usage_;
  std::optional<uint64_t> shape_with_output_;
  ShapeSpan shape_model_;
  ShapeSpan shape_usage_;
  ShapeSpan shape_choices_;
  uint16_t prefix_size_ = 0;
  uint16_t head_size_ = 0;  // the shape's bytes up to its content string's opening quote, included
};

}  // namespace sluice
